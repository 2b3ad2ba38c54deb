"""``afc ledger copy``: a SQLite ledger into PostgreSQL and back, history included; a replay
against the copy renders nothing."""

from __future__ import annotations

import shutil
import signal
import sqlite3
import time
from pathlib import Path

from conftest import jobs, manifest, wait_for


def _figures(afc, ledger: str) -> dict:
    env = {"AFC_LEDGER": ledger}
    status = afc.json("status", "--all", env=env)
    report = afc.json("costs", "report", "--by", "model", env=env)
    shown = {key: afc.json("show", key, env=env) for key in ("shot-001", "shot-002")}
    return {
        "jobs": sorted((j["key"], j["status"], j["attempts"]) for j in status["jobs"]),
        "costs": report["total"],
        "attempts": {k: [a["status"] for a in s["attempts"]] for k, s in shown.items()},
        "events": {k: [e["kind"] for e in s["events"]] for k, s in shown.items()},
    }


def test_copy_to_postgresql_and_back_keeps_history_and_a_replay_renders_nothing(afc, pg_url):
    log = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(log)}
    data = manifest(jobs(4))
    data["jobs"][1]["params"] = {"fail": ["server"]}  # a failed attempt, then a success
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", env=env).returncode == 0
    assert afc("submit", "manifest.yaml", env=env).returncode == 0  # a replay: avoided renders
    before = _figures(afc, "afc.db")
    calls = log.read_text()

    copied = afc.json("ledger", "copy", "afc.db", pg_url)
    assert copied["rows"]["jobs"] == 4 and copied["rows"]["attempts"] == 5
    assert "afc@" in copied["destination"]
    assert _figures(afc, pg_url) == before

    # a replay against the copy renders nothing; a new job gets ids after the copied ones
    data["jobs"].append({"key": "shot-005", "prompt": "a new one"})
    afc.write_manifest(data)
    replay = afc.json("submit", "manifest.yaml", env={**env, "AFC_LEDGER": pg_url})
    assert replay["exit_code"] == 0 and replay["admitted"]["new"] == 1
    new_calls = log.read_text()[len(calls) :].splitlines()
    assert len(new_calls) == 1, "only the new job was rendered"

    back = afc.cwd / "back.db"
    afc.json("ledger", "copy", pg_url, f"sqlite:///{back}")
    assert _figures(afc, str(back)) == _figures(afc, pg_url)


def test_copy_refuses_a_destination_that_holds_batches_and_writes_nothing(afc, pg_url):
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--ledger", pg_url).returncode == 0
    assert afc("submit", "manifest.yaml").returncode == 0
    refused = afc("ledger", "copy", "afc.db", pg_url)
    assert refused.returncode == 2
    assert "already holds batches" in refused.stderr
    assert afc.json("status", "--all", env={"AFC_LEDGER": pg_url})["jobs"][0]["attempts"] == 1
    missing = afc("ledger", "copy", "nothing-here.db", pg_url)
    assert missing.returncode == 2 and "no ledger at" in missing.stderr


def test_every_table_of_the_schema_is_copied(tmp_path):
    """A new table must be added to the copy, or a copy would silently drop its rows."""
    import sqlite3

    from afc_cli.ledger import Ledger
    from afc_cli.ledger.copy import DERIVED, IDENTITY_TABLES, NOT_COPIED, TABLES

    Ledger(tmp_path / "a.db").close()
    conn = sqlite3.connect(tmp_path / "a.db")
    try:
        tables = {
            name: sql
            for name, sql in conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite_%' AND name != '_sqlite_migrations'"
            )
        }
    finally:
        conn.close()
    assert set(TABLES) | set(NOT_COPIED) | set(DERIVED) == set(tables)
    assert len(TABLES) + len(NOT_COPIED) + len(DERIVED) == len(tables)
    with_ids = {name for name, sql in tables.items() if "id INTEGER PRIMARY KEY" in sql}
    assert set(IDENTITY_TABLES) == with_ids


def test_a_copy_keeps_needs_and_review_decisions_and_the_next_decision_follows(afc, pg_url):
    from test_issue17_review import style_manifest

    style_manifest(afc, extra_jobs=[{"key": "alt", "prompt": "alt frame", "review": True}])
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc("review", "approve", "style", "--by", "ana").returncode == 0
    assert afc("resume").returncode == 0  # the shots and the title render
    afc.json("ledger", "copy", "afc.db", pg_url)
    env = {"AFC_LEDGER": pg_url}
    title = afc.json("show", "title", env=env)
    assert [n["key"] for n in title["needs"]] == ["shot-1", "shot-2"]
    style = afc.json("show", "style", env=env)
    assert [(d["decision"], d["by"]) for d in style["decisions"]] == [("approved", "ana")]
    # a decision on the copy gets an id after the copied ones
    decided = afc("review", "reject", "alt", "--reason", "off model", env=env)
    assert decided.returncode == 0, decided.stderr
    assert afc.json("show", "alt", env=env)["job"]["status"] == "rejected"


def test_copy_refuses_a_source_a_live_run_holds_and_creates_nothing(afc):
    afc.write_manifest(manifest(jobs(1)))
    release = afc.cwd / "release"  # the run holds its job until this file exists
    run = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(release)})
    try:
        wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE lease_owner IS NOT NULL", 1, timeout=60)
        refused = afc("ledger", "copy", "afc.db", "copy.db")
        assert refused.returncode == 2, refused.stderr
        assert "held by a live run" in refused.stderr and "b1/shot-001" in refused.stderr
        assert not (afc.cwd / "copy.db").exists(), "the destination was not even created"
    finally:
        release.touch()
        assert run.wait(timeout=60) == 0
    copied = afc.json("ledger", "copy", "afc.db", "copy.db")
    assert copied["rows"]["jobs"] == 1


def test_copy_refuses_a_source_whose_live_run_is_in_a_call_for_a_cancelled_job(afc):
    """A cancel ends the job's lease and leaves its call to the live run, which records the
    answer and its cost when it comes. The copy looked only at leases: it went on, and the
    copy kept the paid attempt 'started', its cost unknown (the source then had 0.05 USD)."""
    afc.write_manifest(manifest(jobs(1)))
    release = afc.cwd / "release"
    run = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(release)})
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1, timeout=60)
        assert afc("cancel", "shot-001").returncode == 0
        assert afc.rows("SELECT status, lease_owner FROM jobs") == [("cancelled", None)]
        refused = afc("ledger", "copy", "afc.db", "copy.db")
        assert refused.returncode == 2, refused.stderr
        assert "in a call of a live run" in refused.stderr and "b1/shot-001" in refused.stderr
        assert not (afc.cwd / "copy.db").exists(), "the destination was not even created"
    finally:
        release.touch()
        run.wait(timeout=60)
    copied = afc.json("ledger", "copy", "afc.db", "copy.db")
    assert copied["rows"]["attempts"] == 1
    report = afc.json("costs", "report", env={"AFC_LEDGER": "copy.db"})["total"]
    assert (report["priced"], report["unknown_attempts"]) == ("0.050000", 0)


def test_copy_takes_a_job_leased_to_another_host_with_its_lease(afc):
    """A job waiting for storage, leased to the host whose spool holds its output, has no run
    writing it: the copy is not refused, and the lease travels with the job."""
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    with sqlite3.connect(afc.cwd / "afc.db") as db:
        db.execute(
            "UPDATE jobs SET status = 'waiting', lease_owner = 'render-2:0:0', lease_expires = 9e18"
        )
    db.close()
    copied = afc("ledger", "copy", "afc.db", "copy.db")
    assert copied.returncode == 0, copied.stderr
    with sqlite3.connect(afc.cwd / "copy.db") as db:
        assert db.execute("SELECT lease_owner FROM jobs").fetchall() == [("render-2:0:0",)]
    db.close()


def _move_spool(spool: Path, into: Path) -> None:
    """What the copy's output tells a person to do: the source's spool files into the spool
    the copy's runs read."""
    into.mkdir(parents=True, exist_ok=True)
    for path in spool.iterdir():
        shutil.move(path, into / path.name)


def test_a_copy_back_to_sqlite_names_the_spool_its_runs_read_and_the_render_is_not_paid_again(
    afc, pg_url
):
    """A PostgreSQL ledger's run killed with a paid render in its spool (``./afc-spool``),
    copied to SQLite: that ledger's runs read ``back.db-spool``, not ``AFC_SPOOL_DIR``. The
    copy said to move the file to AFC_SPOOL_DIR, and a resume of the copy with AFC_SPOOL_DIR
    pointed there paid for the render again."""
    log = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(log)}
    afc.write_manifest(manifest(jobs(1)))
    crash = {**env, "AFC_CRASH_POINT": "after_spool"}
    died = afc("submit", "manifest.yaml", "--ledger", pg_url, env=crash)
    assert died.returncode == -signal.SIGKILL
    calls = log.read_text()

    copied = afc.json(
        "ledger", "copy", pg_url, f"sqlite:///{afc.cwd / 'other.db'}", "--keep-source"
    )
    assert copied["spooled_files"] == 1
    assert copied["spool"] == str(afc.cwd / "afc-spool")
    assert copied["destination_spool"] == str(afc.cwd / "other.db-spool")
    back = afc.cwd / "back.db"
    said = afc("ledger", "copy", pg_url, str(back))
    assert said.returncode == 0, said.stderr
    assert f"1 file waits in {afc.cwd / 'afc-spool'}: " in said.stdout, said.stdout
    assert f"move them into {afc.cwd / 'back.db-spool'} so" in said.stdout, said.stdout
    assert "AFC_SPOOL_DIR" not in said.stdout, said.stdout

    _move_spool(afc.cwd / "afc-spool", afc.cwd / "back.db-spool")
    resumed = afc("resume", "--ledger", str(back), env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert log.read_text() == calls, "the spooled render was stored, not rendered again"
    attempts = afc.json("show", "shot-001", env={"AFC_LEDGER": str(back)})["attempts"]
    assert [a["status"] for a in attempts] == ["succeeded"]


def test_a_copy_to_postgresql_names_the_spool_of_this_hosts_runs(afc, pg_url):
    afc.write_manifest(manifest(jobs(1)))
    died = afc("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_spool"})
    assert died.returncode == -signal.SIGKILL
    said = afc("ledger", "copy", "afc.db", pg_url, env={"AFC_SPOOL_DIR": "spool-here"})
    assert said.returncode == 0, said.stderr
    assert f"1 file waits in {afc.cwd / 'afc.db-spool'}: " in said.stdout, said.stdout
    assert f"move them into {afc.cwd / 'spool-here'} (AFC_SPOOL_DIR" in said.stdout, said.stdout


def test_a_copy_counts_the_request_ids_kept_in_the_spool_and_the_request_is_polled(
    afc, pg_url, fake
):
    """A Replicate prediction accepted (paid) as the PostgreSQL ledger's connection was lost
    has its id kept in the spool (``<job id>.request``, ``Spool.note_request``), not in the
    ledger. The copy counted only ``.spool`` files: it said nothing of it, and a resume of
    the copy submitted the job again, a second paid prediction."""
    from test_postgres_connection_lost import _connection_lost_at_submit
    from test_postgres_e2e import PgAfc

    _connection_lost_at_submit(PgAfc(afc.cwd, pg_url), fake, "long-shot", "hold", "--grace", "1")
    kept = [p for p in (afc.cwd / "afc-spool").iterdir() if p.name != ".afc-ledger"]
    assert [p.suffix for p in kept] == [".request"]

    back = afc.cwd / "back.db"
    said = afc("ledger", "copy", pg_url, str(back), "--keep-source")
    assert said.returncode == 0, said.stderr
    # outside audit 18: not "1 files wait"
    assert f"1 file waits in {afc.cwd / 'afc-spool'}: " in said.stdout, said.stdout
    assert f"move them into {afc.cwd / 'back.db-spool'} so" in said.stdout, said.stdout
    copied = afc.json("ledger", "copy", pg_url, str(afc.cwd / "other.db"))
    assert copied["spooled_files"] == 1

    _move_spool(afc.cwd / "afc-spool", afc.cwd / "back.db-spool")
    fake.released.set()
    resumed = afc("resume", "--ledger", str(back))
    assert resumed.returncode == 0, resumed.stderr
    assert fake.counts["replicate_submit"] == 1, "polled by its kept id, not paid again"
    shown = afc.json("show", "long-shot", env={"AFC_LEDGER": str(back)})
    assert shown["job"]["status"] == "succeeded"


def test_a_moved_ledger_runs_nothing_and_its_history_still_reads(afc, pg_url):
    """A ledger moved into PostgreSQL: a cron line or a worker left on the old SQLite file ran
    its unfinished jobs there too, each paid for in both ledgers. It now refuses every run and
    every change (exit 2, the destination named), its history still reads, and the
    destination runs each job once."""
    log = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(log)}
    afc.write_manifest(manifest(jobs(3)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    said = afc("ledger", "copy", "afc.db", pg_url)
    assert said.returncode == 0, said.stderr
    assert "afc.db is marked moved: it runs and changes nothing from now on" in said.stdout, (
        said.stdout
    )

    for command in (
        ["resume"],
        ["submit", "manifest.yaml"],
        ["submit", "manifest.yaml", "--no-run"],
        ["plan", "manifest.yaml"],  # says what the submit would do: refuse
        ["worker", "--until-idle"],
        ["cancel", "shot-001"],
        ["webhooks", "deliver"],
    ):
        refused = afc(*command, env=env)
        assert refused.returncode == 2, (command, refused.stderr)
        assert "was moved to postgresql://" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
    assert not log.exists(), "nothing was rendered from the moved ledger"
    listed = afc.json("status", "--all")
    assert [job["status"] for job in listed["jobs"]] == ["queued"] * 3  # its history reads
    assert listed["moved_to"].startswith("postgresql://")
    told = afc("status")
    assert told.returncode == 0 and "this ledger was moved to postgresql://" in told.stderr
    stats = afc("queue", "stats")  # an alert on it watches the wrong ledger: said
    assert stats.returncode == 0 and "its backlog is there" in stats.stderr, stats.stderr

    assert afc("resume", "--ledger", pg_url, env=env).returncode == 0
    assert sorted(line.split()[0] for line in log.read_text().splitlines()) == sorted(
        afc.rows("SELECT id FROM jobs")[i][0] for i in range(3)
    )
    assert afc("ledger", "copy", "afc.db", str(afc.cwd / "again.db")).returncode == 2


def test_a_copy_that_keeps_its_source_leaves_it_able_to_run(afc, tmp_path):
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    copied = afc.json("ledger", "copy", "afc.db", str(tmp_path / "backup.db"), "--keep-source")
    assert copied["source_moved"] is False
    assert afc("resume").returncode == 0
    assert afc.rows("SELECT DISTINCT status FROM jobs") == [("succeeded",)]


def test_a_worker_idle_on_a_moved_postgresql_ledger_stops_and_claims_nothing(afc, pg_url):
    """A worker idle on the PostgreSQL ledger (it held no lease, so nothing refused the copy)
    while the ledger is moved back to SQLite: it stops at its next round (exit 2), and the
    source's unfinished jobs are leased for good to no process, so even a claim that was
    already on its way takes none of them."""
    from afc_cli.ledger import Ledger
    from afc_cli.owner import MOVED_OWNER

    log = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(log), "AFC_LEDGER": pg_url}
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", env=env).returncode == 0  # batch b1, done
    worker = afc.popen("worker", "--batch", "b1", "--poll", "0.05", env=env)
    try:
        later = manifest([{"key": "later", "prompt": "p"}], batch="b2")
        afc.write_manifest(later, name="later.yaml")
        assert afc("submit", "later.yaml", "--no-run", env=env).returncode == 0
        back = afc.cwd / "back.db"
        assert afc("ledger", "copy", pg_url, str(back)).returncode == 0
        code = worker.wait(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    stderr = worker.stderr.read()
    assert code == 2 and f"was moved to {back}" in stderr, stderr
    source = Ledger(pg_url, create=False)
    try:
        [job] = [row for row in source.batch_jobs("b2")]
        assert (job["status"], job["lease_owner"]) == ("queued", MOVED_OWNER)
        assert source.claim_runnable(10, 60) == []
        assert source.claim(job["id"], 60) is None
    finally:
        source.close()
    assert len(log.read_text().splitlines()) == 1  # b1's job; b2's runs in the copy only
    assert (
        afc("resume", "--ledger", str(back), env={"AFC_LOCAL_CALL_LOG": str(log)}).returncode == 0
    )
    assert len(log.read_text().splitlines()) == 2


def test_a_postgresql_source_is_read_a_chunk_at_a_time(pg_url):
    """psycopg's ordinary cursor fetches a whole result before its first row: a copy from
    PostgreSQL held each table (millions of events) in memory at once. It reads through a
    server-side cursor, a chunk at a time."""
    from afc_cli.ledger import Ledger

    ledger = Ledger(pg_url)
    try:
        with ledger.tx():
            total = ledger.db.raw.execute("SELECT COUNT(*) FROM pg_class").fetchone()[0]
            chunks = ledger.chunks("SELECT relname FROM pg_class", 7)
            first = next(chunks)
            held = ledger.db.raw.execute("SELECT name FROM pg_cursors").fetchall()
            rest = [row for chunk in chunks for row in chunk]
    finally:
        ledger.close()
    assert len(first) == 7 and ("afc_chunks",) in held
    assert len(first) + len(rest) == total


def test_a_moved_ledger_still_reads_once_a_newer_afc_must_migrate_it(afc, ledger_url):
    """A moved ledger's unfinished jobs are leased for good to MOVED_OWNER, a lease no process
    holds. The migration's look for live older runs (ledger_file.check_no_live_runs) took it
    for one: the next afc that brings a migration refused to open the moved ledger at all,
    its history included, until the year 285 billion. Here the pending migration is m009
    taken back (its column and its bookkeeping), as a newer afc's would be."""
    afc.write_manifest(manifest(jobs(2)))
    env = {"AFC_LEDGER": ledger_url}
    assert afc("submit", "manifest.yaml", "--no-run", env=env).returncode == 0
    moved = afc("ledger", "copy", ledger_url, str(afc.cwd / "moved.db"))
    assert moved.returncode == 0, moved.stderr
    pending = "m009_lease_mono"
    if ledger_url.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(ledger_url) as conn:
            conn.execute("ALTER TABLE jobs DROP COLUMN lease_mono")
            conn.execute(f"DELETE FROM afc_migrations WHERE name = '{pending}'")
    else:
        conn = sqlite3.connect(ledger_url)
        try:
            conn.execute("ALTER TABLE jobs DROP COLUMN lease_mono")
            conn.execute(f"DELETE FROM _sqlite_migrations WHERE name = '{pending}'")
            conn.execute("PRAGMA user_version = 9")
            conn.commit()
        finally:
            conn.close()

    listed = afc("status", "--all", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert "Traceback" not in listed.stderr
    assert "this ledger was moved to" in listed.stderr, listed.stderr
    refused = afc("resume", env=env)
    assert refused.returncode == 2 and "was moved to" in refused.stderr, refused.stderr


def _copy_held_until_waited_on(start, pg_url: str, back: Path, monkeypatch) -> tuple:
    """Copy the PostgreSQL ledger ``pg_url`` into ``back`` with the real copy, in this
    process, held just before it marks the source until the process ``start()`` starts waits
    on its lock on the jobs table (``pg_locks``); that process's exit code and stderr."""
    import psycopg

    from afc_cli.ledger import copy as copy_mod

    started = []
    mark = copy_mod._mark_moved

    def mark_once_waited_on(src, dst):
        started.append(start())
        deadline = time.monotonic() + 30  # a copy that took no lock: nothing waits on it
        with psycopg.connect(pg_url, autocommit=True) as look:
            waiting = 0
            while not waiting and started[0].poll() is None and time.monotonic() < deadline:
                waiting = look.execute(
                    "SELECT COUNT(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
                    " WHERE c.relname = 'jobs' AND NOT l.granted"
                ).fetchone()[0]
        assert waiting, "the process never waited on the copy's lock"
        mark(src, dst)

    monkeypatch.setattr(copy_mod, "_mark_moved", mark_once_waited_on)
    try:
        copy_mod.copy_ledger(pg_url, str(back))
        code = started[0].wait(timeout=60)
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return code, started[0].stderr.read()


def test_a_claim_waiting_on_the_copys_lock_takes_nothing_once_the_source_is_moved(
    afc, pg_url, monkeypatch
):
    """A worker's claim that reached the jobs table while the copy held it (its first round
    passed ``refuse_moved`` before the copy committed) waits; once the copy committed the
    move it finds every unfinished job leased to MOVED_OWNER and takes none, and its next
    round stops (exit 2). The copy is the real one, in this process, held just before it
    marks the source until the worker's claim waits on its lock."""
    import psycopg
    from test_audit_web import SECRET

    log = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(log), "AFC_LEDGER": pg_url, "AFC_HOOK_SECRET": SECRET}
    data = manifest(jobs(2))
    # a delivery due in the source's outbox (shot-002 cancelled), to a port nothing answers:
    # the worker whose claim came back empty drained it there, then the destination again
    data["webhook"] = {"url": "http://127.0.0.1:9/hooks", "secret_env": "AFC_HOOK_SECRET"}
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--no-run", env=env).returncode == 0
    assert afc("cancel", "shot-002", env=env).returncode == 0
    back = afc.cwd / "back.db"
    code, stderr = _copy_held_until_waited_on(
        lambda: afc.popen("worker", "--poll", "0.05", env=env), pg_url, back, monkeypatch
    )
    assert code == 2 and f"was moved to {back}" in stderr, stderr
    assert not log.exists(), "nothing was rendered from the moved ledger"
    with psycopg.connect(pg_url) as look:
        sent = look.execute("SELECT COALESCE(SUM(attempts), 0) FROM deliveries").fetchone()[0]
    assert sent == 0, "the moved ledger's outbox is the destination's to send"
    after = {"AFC_LOCAL_CALL_LOG": str(log), "AFC_HOOK_SECRET": SECRET}
    assert afc("resume", "--ledger", str(back), env=after).returncode == 0
    assert len(log.read_text().splitlines()) == 1  # shot-001; shot-002 was cancelled


def test_a_copy_does_not_wait_for_good_behind_a_frozen_write_and_stall_every_run(afc, pg_url):
    """The copy's EXCLUSIVE lock on the PostgreSQL source's jobs table waits for every
    transaction that wrote a job. One that never ends (a run frozen in a write, its host cut
    off while the server keeps its session; a psql session left open) kept the copy waiting
    with no word, and every other run's claim and write of a job queued behind the copy's
    request: the whole ledger stalled. The copy gives up after COPY_LOCK_WAIT_S (exit 2,
    nothing marked), and the other runs go on."""
    import psycopg

    from afc_cli.ledger.postgres import COPY_LOCK_WAIT_S

    afc.write_manifest(manifest(jobs(2)))
    env = {"AFC_LEDGER": pg_url}
    assert afc("submit", "manifest.yaml", "--no-run", env=env).returncode == 0
    with psycopg.connect(pg_url) as frozen:  # a transaction that wrote a job, left open
        frozen.execute("UPDATE jobs SET updated_at = updated_at WHERE key = 'shot-001'")
        copy = afc(
            "ledger", "copy", pg_url, str(afc.cwd / "back.db"), timeout=COPY_LOCK_WAIT_S + 60
        )
        assert copy.returncode == 2, copy.stderr
        assert "Traceback" not in copy.stderr
        assert "nothing was written" in copy.stderr and "password" not in copy.stderr
        cancelled = afc("cancel", "shot-002", env=env, timeout=60)  # not stalled behind it
        assert cancelled.returncode == 0, cancelled.stderr
        frozen.rollback()
    listed = afc.json("status", "--all", env=env)
    assert "moved_to" not in listed
    assert afc("resume", env=env).returncode == 0  # the source still runs: nothing was moved


def test_two_copies_of_one_source_at_once_move_it_once(afc, pg_url, monkeypatch):
    """A second copy of the PostgreSQL source started while the first holds its jobs table
    waits for it, then finds the source moved and writes nothing: both went through (each
    destination able to run the ledger's work, ``ledger_moves`` naming one), the look for a
    move being made before the copy's transaction only."""

    env = {"AFC_LEDGER": pg_url}
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", env=env).returncode == 0
    back = afc.cwd / "back.db"
    code, stderr = _copy_held_until_waited_on(
        lambda: afc.popen("ledger", "copy", pg_url, str(afc.cwd / "other.db")),
        pg_url,
        back,
        monkeypatch,
    )
    assert code == 2 and f"was moved to {back} already" in stderr, stderr
    assert not (afc.cwd / "other.db").exists() or not afc.json(
        "status", "--all", env={"AFC_LEDGER": str(afc.cwd / "other.db")}
    ).get("jobs")


def test_a_source_that_cannot_be_marked_after_the_copy_is_said_so(afc, tmp_path, monkeypatch):
    """The destination commits first, then the source is marked moved: a failure between the
    two left a whole copy and an unmarked source that still runs, and the copy ended in an
    error that did not say the copy was made (a copy again: 'already holds batches')."""
    import sqlite3

    import pytest

    from afc_cli.errors import LedgerError
    from afc_cli.ledger import Ledger
    from afc_cli.ledger import copy as copy_mod

    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0

    def fails(src, dst):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(copy_mod, "_mark_moved", fails)
    back = tmp_path / "back.db"
    with pytest.raises(LedgerError) as raised:
        copy_mod.copy_ledger(str(afc.cwd / "afc.db"), str(back))
    message = raised.value.message
    assert f"was copied into {back}, but could not be marked moved" in message, message
    assert "disk I/O error" in message and "paid for in both" in message
    copy = Ledger(back, create=False)
    try:
        assert len(copy.batch_jobs("b1")) == 2
    finally:
        copy.close()
    assert afc.rows("SELECT COUNT(*) FROM ledger_moves") == [(0,)]
