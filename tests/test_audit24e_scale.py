"""Outside audit 24e, big inputs at scale: a ledger that has grown over months (hundreds of
thousands of finished jobs in old batches) must not make the commands that look for the work
left (afc resume from cron, afc worker's polls, afc status) read every job it holds. Measured
as SQLite's own count of the work a query does (its virtual machine's steps), never a time."""

from __future__ import annotations

import sqlite3
from functools import partial
from pathlib import Path

from conftest import Afc, jobs, manifest

from afc_cli.ledger import Ledger


def counted(book: Ledger, read) -> tuple[int, object]:
    """What ``read()`` returns and the virtual-machine steps SQLite took, in hundreds."""
    ticks = [0]

    def tick() -> int:
        ticks[0] += 1
        return 0

    book.db.conn.set_progress_handler(tick, 100)
    try:
        result = read()
    finally:
        book.db.conn.set_progress_handler(None, 0)
    return ticks[0], result


def grown(root: Path, old: int) -> Afc:
    """A ledger of months: batch b1's three jobs rendered, ``old`` finished jobs of an older
    batch (copies of b1's rows, as a run leaves them, written by SQL), and batch b2's two jobs
    admitted with --no-run, queued."""
    root.mkdir()
    afc = Afc(root)
    afc.write_manifest(manifest(jobs(3, size="16x16")))
    assert afc("submit", "manifest.yaml").returncode == 0
    conn = sqlite3.connect(root / "afc.db")
    with conn:
        conn.execute(
            "INSERT INTO batches SELECT 'old', storage, rates_json, manifest_path, created_at,"
            " updated_at, limits_json, storage_endpoint, storage_mark, storage_mark_host"
            " FROM batches WHERE name = 'b1'"
        )
        columns = [row[1] for row in conn.execute("PRAGMA table_info(jobs)")]
        changed = {
            "id": "? || id",
            "batch": "'old'",
            "key": "? || key",
            "seq": "? * 10 + seq",
            "output_key": "'old/' || ? || key",
        }
        picked = ", ".join(changed.get(c, c) for c in columns)
        for n in range(old // 3):
            conn.execute(
                f"INSERT INTO jobs ({', '.join(columns)}) SELECT {picked} FROM jobs"
                " WHERE batch = 'b1'",
                (f"o{n}-", f"o{n}-", n, f"o{n}-"),
            )
    conn.close()
    afc.write_manifest(manifest(jobs(2, size="16x16"), batch="b2"), "later.yaml")
    assert afc("submit", "later.yaml", "--no-run").returncode == 0
    return afc


def test_the_work_left_in_every_batch_is_found_without_reading_every_job(tmp_path):
    # with no --batch ('afc resume' from cron, 'afc worker' polling), the runnable jobs were
    # found by reading every job row of the ledger (no condition on the index's first
    # column, batch): on a ledger of 410,000 finished jobs each poll of a worker took 6 s and
    # a resume with nothing to do 9 s
    found = {}
    for old in (150, 3000):
        afc = grown(tmp_path / f"old{old}", old)
        book = Ledger(str(afc.cwd / "afc.db"), create=False)
        try:
            runnable = counted(book, book.runnable_job_ids)
            settled = counted(book, book.settle_ready_blocked)
            webhooks = counted(book, book.has_webhooks)
            blocked = counted(book, partial(book.blocked_job_ids, runnable[1]))
            claimed = counted(book, partial(book.claim_runnable, 8, 300))
        finally:
            book.close()
        found[old] = (runnable, settled, webhooks, blocked, claimed)
    small, big = found[150], found[3000]
    assert len(big[0][1]) == 2 and big[1][1] == 0 and big[2][1] is False and big[3][1] == []
    assert sorted(job["key"] for job in big[4][1]) == ["shot-001", "shot-002"]
    for (few, _), (many, _) in zip(small, big, strict=True):
        # a row's look-up is about nine hundred steps: 2,850 more rows read, over 250
        assert many - few < 50, (small, big)


def steps_of(afc: Afc, monkeypatch, call) -> tuple[int, object]:
    """What ``call()`` returns, run in-process in ``afc``'s folder, and the virtual-machine
    steps (in hundreds) its ledger connections took, less the page check before a run
    writes (``quick_check`` reads every page of the file by design)."""
    from afc_cli import ledger_file
    from afc_cli.ledger import sqlite as sqlite_ledger

    ticks = [0]

    def tick() -> int:
        ticks[0] += 1
        return 0

    opened = sqlite_ledger.Connection.__init__

    def counting(self, conn: sqlite3.Connection) -> None:
        opened(self, conn)
        conn.set_progress_handler(tick, 100)

    with monkeypatch.context() as patched:
        patched.setattr(sqlite_ledger.Connection, "__init__", counting)
        patched.setattr(ledger_file, "check_pages", lambda conn, path: None)
        patched.chdir(afc.cwd)
        result = call()
    return ticks[0], result


def resume_steps(afc: Afc, monkeypatch) -> tuple[int, object]:
    """An in-process 'afc resume' of every batch, and its steps (``steps_of``)."""
    from afc_cli import run

    return steps_of(
        afc,
        monkeypatch,
        partial(
            run.resume, ledger_path=str(afc.cwd / "afc.db"), batch=None, storage=None, concurrency=4
        ),
    )


def test_a_resume_reads_the_jobs_it_ran_and_those_stuck_not_every_job(tmp_path, monkeypatch):
    # after its run, 'afc resume' read every job of the ledger, each with its cost and
    # attempts (subqueries of attempts), to pick out the jobs it ran and the failed or dead
    # ones: a cron'd resume of a ledger of 410,000 finished jobs with nothing to do took 9 s
    # and 500 MB, every time
    found = {}
    for old in (150, 3000):
        afc = grown(tmp_path / f"old{old}", old)
        conn = sqlite3.connect(afc.cwd / "afc.db")
        with conn:  # one old job failed, waiting for a person
            conn.execute(
                "UPDATE jobs SET status = 'failed', error_code = 'CHAIN_FAILED'"
                " WHERE batch = 'old' AND key = 'o7-shot-002'"
            )
        conn.close()
        found[old] = resume_steps(afc, monkeypatch)
    (few, _), (many, big) = found[150], found[3000]
    assert [(r["batch"], r["key"], r["status"]) for r in big.jobs] == [
        ("b2", "shot-001", "succeeded"),
        ("b2", "shot-002", "succeeded"),
    ]
    assert [(r["batch"], r["key"], r["status"]) for r in big.stuck] == [
        ("old", "o7-shot-002", "failed")
    ]
    assert big.exit_code == 1
    assert many - few < 50, (few, many)


def status_steps(afc: Afc, monkeypatch, *args: str) -> tuple[int, str]:
    """'afc status ARGS' in-process on a pipe: its steps (``steps_of``), and what it printed
    (stdout, then stderr)."""
    from typer.testing import CliRunner

    from afc_cli.cli import app

    ticks, result = steps_of(afc, monkeypatch, partial(CliRunner().invoke, app, ["status", *args]))
    assert result.exit_code == 0, result.output
    return ticks, result.stdout + result.stderr


def test_status_reads_the_jobs_it_lists_and_counts_the_others(tmp_path, monkeypatch):
    # afc status (and --status failed) read every job of the ledger, each with its cost, to
    # list the few that need attention and count the rest: on a ledger of 410,000 finished
    # jobs, 7 s and 650 MB to say that none failed
    found = {}
    for old in (150, 3000):
        afc = grown(tmp_path / f"old{old}", old)
        conn = sqlite3.connect(afc.cwd / "afc.db")
        with conn:  # one old job failed, waiting for a person
            conn.execute(
                "UPDATE jobs SET status = 'failed', error_code = 'CHAIN_FAILED',"
                " error_message = 'server: boom' WHERE batch = 'old' AND key = 'o7-shot-002'"
            )
        conn.close()
        found[old] = [
            status_steps(afc, monkeypatch, *args) for args in ((), ("--status", "failed"))
        ]
    for (few, _), (many, shown) in zip(found[150], found[3000], strict=True):
        # the counts take about 9 steps a job in the (batch, status) index (2,850 more jobs:
        # some 260 hundreds); each job's row read with its cost took about 95 (2,700)
        assert many - few < 600, (few, many)
        assert "old\to7-shot-002\tfailed" in shown and "CHAIN_FAILED: server: boom" in shown
        assert "3005 jobs: 3002 succeeded, 1 failed, 2 queued" in shown
        assert [line for line in shown.splitlines() if "\t" in line][1:] == [
            line for line in shown.splitlines() if "o7-shot-002" in line
        ]  # the header and the failed job alone
    attention = found[3000][0][1]
    assert "not listed: 3002 succeeded, 2 queued (afc status --all lists every job)" in attention
    everything = status_steps(afc, monkeypatch, "--all")[1]
    assert everything.count("\tsucceeded\t") == 3002 and everything.count("\tqueued\t") == 2


def test_a_job_named_by_its_key_alone_is_looked_up_not_searched_for(tmp_path):
    # 'afc show KEY' (and cancel, retry, review approve KEY) without --batch looked the key up
    # by key alone, the second column of the (batch, key) index: every job row of the ledger
    # was read (410,000 jobs: 2.5 s for one job)
    found = {}
    for old in (150, 3000):
        afc = grown(tmp_path / f"old{old}", old)
        book = Ledger(str(afc.cwd / "afc.db"), create=False)
        try:
            found[old] = [
                counted(book, partial(book.jobs_by_key, key)) for key in ("shot-002", "nope")
            ]
        finally:
            book.close()
        assert found[old][1][1] == []
    for (few, _), (many, _) in zip(found[150], found[3000], strict=True):
        assert many - few < 20, (few, many)
    jobs_of_key = found[3000][0][1]
    assert [(job["batch"], job["key"]) for job in jobs_of_key] == [
        ("b1", "shot-002"),
        ("b2", "shot-002"),
    ]
    result = afc("show", "shot-002")
    assert result.returncode == 2 and "several batches (b1, b2)" in result.stderr
    result = afc("show", "o7-shot-002")
    assert result.returncode == 0 and "old/o7-shot-002" in result.stdout


def test_the_review_queue_is_looked_up_not_searched_for(tmp_path):
    # 'afc review list' (and afc serve's review page) with no --batch found the jobs awaiting
    # review by status alone: every job row of the ledger was read for them
    found = {}
    for old in (150, 3000):
        afc = grown(tmp_path / f"old{old}", old)
        conn = sqlite3.connect(afc.cwd / "afc.db")
        with conn:  # one old job awaits a person's review
            conn.execute(
                "UPDATE jobs SET status = 'awaiting_review', review = 1, review_at = 5"
                " WHERE batch = 'old' AND key = 'o7-shot-002'"
            )
        conn.close()
        book = Ledger(str(afc.cwd / "afc.db"), create=False)
        try:
            found[old] = counted(book, book.review_rows)
        finally:
            book.close()
    (few, _), (many, rows) = found[150], found[3000]
    assert many - few < 20, (few, many)
    assert [(row["batch"], row["key"]) for row in rows] == [("old", "o7-shot-002")]
    result = afc("review", "list")
    assert result.returncode == 0 and "o7-shot-002" in result.stdout


def _bound(model, name: str, kind: str) -> int:
    """The bound pydantic holds on ``model.name``: ``max_length`` or ``le``."""
    for rule in model.model_fields[name].metadata:
        value = getattr(rule, kind, None)
        if value is not None:
            return int(value)
    raise AssertionError(f"{model.__name__}.{name} has no {kind}")


def test_the_readme_states_the_limits_a_manifest_is_refused_for(afc):
    # a key or batch name over 200 characters, a chain's attempts over 100 and a webhook's
    # timeout_s over 120 were refused (exit 2) with nothing in README's list of limits to say
    # so: a studio naming keys after long file names met the first at submit time
    from afc_cli.manifest import ChainEntry, JobSpec, ManifestModel, Webhook

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    limits = " ".join(readme.split("Limits, refused the same way:", 1)[1].split("\n\n")[0].split())
    key, batch = _bound(JobSpec, "key", "max_length"), _bound(ManifestModel, "batch", "max_length")
    assert key == batch
    assert f"keys and batch names over {key} characters" in limits
    assert f"`attempts` over {_bound(ChainEntry, 'attempts', 'le')}" in limits
    assert f"`timeout_s` over {_bound(Webhook, 'timeout_s', 'le')} seconds" in limits
    afc.write_manifest(manifest([{"key": "k" * (key + 1), "prompt": "p"}]))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 2 and f"at most {key} characters" in result.stderr
    assert not (afc.cwd / "afc.db").exists()


def test_both_engines_find_the_work_left_and_the_jobs_to_show_alike(afc, ledger_url):
    # the look-ups of this file's fixes ('batch IN (SELECT name FROM batches)', statuses and
    # ids named) answer alike on SQLite and PostgreSQL
    afc.env["AFC_LEDGER"] = ledger_url
    listed = jobs(3, size="16x16")
    listed[1]["params"] = {**listed[1]["params"], "fail": ["invalid"]}
    listed[2]["review"] = True
    afc.write_manifest(manifest(listed))
    assert afc("submit", "manifest.yaml").returncode == 1
    later = jobs(2, size="16x16")
    later[1]["needs"] = ["shot-001"]
    afc.write_manifest(manifest(later, batch="b2"), "later.yaml")
    assert afc("submit", "later.yaml", "--no-run").returncode == 0
    book = Ledger(ledger_url, create=False)
    try:
        counts = sorted(book.status_counts())
        failed = [(r["batch"], r["key"]) for r in book.status_rows(None, ("failed", "dead"))]
        ids = [job["id"] for job in book.jobs_by_key("shot-001")]
        of_ids = [(r["batch"], r["key"], r["status"]) for r in book.status_rows_of(ids[::-1])]
        review = [(r["batch"], r["key"]) for r in book.review_rows()]
        of_batch = [r["key"] for r in book.batch_jobs("b1", ("failed", "awaiting_review"))]
        runnable = book.runnable_job_ids()
        blocked = book.blocked_job_ids(runnable)
        webhooks = book.has_webhooks()
        settled = book.settle_ready_blocked()
        claimed = sorted(job["key"] for job in book.claim_runnable(8, 300))
    finally:
        book.close()
    assert counts == [
        ("b1", "awaiting_review", 1),
        ("b1", "failed", 1),
        ("b1", "succeeded", 1),
        ("b2", "blocked", 1),
        ("b2", "queued", 1),
    ]
    assert failed == [("b1", "shot-002")]
    assert of_ids == [("b2", "shot-001", "queued"), ("b1", "shot-001", "succeeded")]
    assert review == [("b1", "shot-003")]
    assert of_batch == ["shot-002", "shot-003"]
    assert len(runnable) == 2 and len(blocked) == 1 and webhooks is False
    assert settled == 0 and claimed == ["shot-001"]


def test_the_failures_page_looks_the_failed_jobs_up(tmp_path):
    # afc serve's failures page with no --batch found the failed and dead
    # jobs by status alone: every job row of the ledger was read at each page load
    from afc_cli.web.sheet import FAILED

    found = {}
    for old in (150, 3000):
        afc = grown(tmp_path / f"old{old}", old)
        conn = sqlite3.connect(afc.cwd / "afc.db")
        with conn:  # one old job failed
            conn.execute(
                "UPDATE jobs SET status = 'failed', error_code = 'CHAIN_FAILED'"
                " WHERE batch = 'old' AND key = 'o7-shot-002'"
            )
        conn.close()
        book = Ledger(str(afc.cwd / "afc.db"), create=False)
        try:
            found[old] = counted(book, partial(book.sheet_rows, statuses=FAILED))
        finally:
            book.close()
    (few, _), (many, rows) = found[150], found[3000]
    assert many - few < 20, (few, many)
    assert [(row["batch"], row["key"]) for row in rows] == [("old", "o7-shot-002")]


def test_a_batch_is_cancelled_or_retried_reading_the_jobs_it_changes(tmp_path, monkeypatch):
    # 'afc retry --batch B --failed' and 'afc cancel --batch B' read every job of the batch
    # whole (its request, a prompt of up to 32,000 characters, too) to keep those of a few
    # statuses: 3,000 jobs of 32,000-character prompts took 124 MB to retry none
    from afc_cli import ops

    def yes(what: str, jobs: list) -> bool:
        return True

    found = {}
    for old in (150, 3000):
        afc = grown(tmp_path / f"old{old}", old)
        conn = sqlite3.connect(afc.cwd / "afc.db")
        with conn:  # one old job failed, one still queued
            conn.execute(
                "UPDATE jobs SET status = 'failed', error_code = 'CHAIN_FAILED'"
                " WHERE batch = 'old' AND key = 'o7-shot-002'"
            )
            conn.execute(
                "UPDATE jobs SET status = 'queued' WHERE batch = 'old' AND key = 'o9-shot-001'"
            )
        conn.close()
        path = str(afc.cwd / "afc.db")
        found[old] = (
            steps_of(afc, monkeypatch, partial(ops.retry, path, [], "old", ["failed"])),
            steps_of(afc, monkeypatch, partial(ops.cancel, path, [], "old", confirm=yes)),
        )
    for (few, _), (many, _) in zip(found[150], found[3000], strict=True):
        assert many - few < 50, (few, many)
    retried, cancelled = found[3000][0][1], found[3000][1][1]
    assert [job["key"] for job in retried["retried"]] == ["o7-shot-002"]
    # the retried job is queued again, so the batch's cancel takes it with the queued one
    assert [job["key"] for job in cancelled["cancelled"]] == ["o7-shot-002", "o9-shot-001"]
