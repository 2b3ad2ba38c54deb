"""Outside audit 29d: the memory of ``afc status --json`` and ``afc outputs --json`` on a
ledger after months of use.

Both read every job of the scope into a list, built every row, encoded one JSON document and
scrubbed it whole: on a ledger of 100,100 jobs (``bench/big_ledger.py``) ``afc status --json``
peaked at 346 MiB and ``afc outputs --json`` at 463 MiB, growing with the jobs for nothing a
user needs (a studio's cron reads them every night). They now read the ledger a chunk at a
time (``Ledger._stream``: a server-side cursor on PostgreSQL) and write each row as it comes
(``jsonout.Streamed``), each row's text scrubbed on its own: the same bytes as before."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import sys
import tracemalloc
from pathlib import Path

from conftest import jobs, manifest

from afc_cli import jsonout, secrets
from afc_cli.ledger import Ledger
from afc_cli.secrets import scrub, scrub_data

SECRET = "s3cr3t-ledger-value-7777"  # an environment variable named *_TOKEN: scrubbed anywhere


def _document(jobs_: int) -> dict:
    rows = [
        {"key": f"shot-{i}", "error": {"message": f"echoed {SECRET} back"}, "n": i, "e": []}
        for i in range(jobs_)
    ]
    return {"jobs": rows, "counts": {"failed": jobs_}, "moved_to": None}


def test_a_streamed_document_is_the_whole_documents_bytes(monkeypatch, capsys):
    monkeypatch.setenv("AUDIT_SERVICE_TOKEN", SECRET)
    secrets.reset()  # read the environment again
    for document in (_document(3), _document(0), {"outputs": []}, {"outputs": [{"a": {}}]}):
        whole = scrub(json.dumps(scrub_data(document), indent=2), decode=False) + "\n"
        streamed = dict(document)
        first = next(iter(document))
        streamed[first] = jsonout.Streamed(iter(document[first]))
        jsonout.emit_json(streamed)
        out = capsys.readouterr().out
        assert out == whole
        assert SECRET not in out
    monkeypatch.undo()
    secrets.reset()


def _grow(db: Path, copies: int) -> None:
    """The ledger's batch ``b1`` copied ``copies`` times in SQL (``bench/big_ledger.py``)."""
    conn = sqlite3.connect(db)
    many = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
    with conn:
        conn.execute(
            many + "INSERT INTO batches (name, storage, rates_json, created_at, updated_at)"
            " SELECT 'b1-' || n.i, storage, rates_json, created_at, updated_at"
            " FROM batches, n WHERE name = 'b1'",
            (copies,),
        )
        for table, key in (("jobs", "id"), ("attempts", "job_id"), ("steps", "job_id")):
            names = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            names = [c for c in names if not (table == "attempts" and c == "id")]
            shifted = {key: f"t.{key} || '-' || n.i"}
            if table == "jobs":
                shifted |= {"batch": "'b1-' || n.i", "output_key": "'b1-' || n.i || t.key"}
            picked = ", ".join(shifted.get(c, f"t.{c}") for c in names)
            conn.execute(
                many + f"INSERT INTO {table} ({', '.join(names)}) SELECT {picked}"
                f" FROM {table} t, n WHERE t.{key} IN (SELECT id FROM jobs WHERE batch = 'b1')",
                (copies,),
            )
    conn.close()


class _Sink:
    """A stdout that keeps nothing: what is measured is what the command holds."""

    written = 0

    def write(self, text: str) -> int:
        self.written += len(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def _peak(monkeypatch, command, ledger: Path, **options) -> tuple[int, int]:
    """(peak bytes Python allocated, characters written) of the command run in-process, its
    stdout a pipe's (its counts line goes to stderr)."""
    sink = _Sink()
    monkeypatch.setattr(sys, "stdout", sink)
    monkeypatch.setattr(sys, "stderr", _Sink())
    tracemalloc.start()
    try:
        command(ledger=str(ledger), **options)
        return tracemalloc.get_traced_memory()[1], sink.written
    finally:
        tracemalloc.stop()
        monkeypatch.undo()


def test_listing_memory_does_not_grow_with_the_jobs(afc, monkeypatch):
    """tracemalloc peaks of the listings on 1,500 and 15,000 jobs: before, the larger
    ledger's peak was ten times the smaller's (every row held, then the whole text: 3 and
    30 MB for 1,000 and 10,000 jobs); streamed, both hold a chunk of the ledger's rows, a
    row's text and a bounded cache of scrubbed strings (``jsonout.SEEN_STRINGS``)."""
    from afc_cli import cli

    afc.write_manifest(manifest(jobs(100)))
    assert afc("submit", "manifest.yaml").returncode == 0
    small, big = afc.cwd / "small.db", afc.cwd / "big.db"
    for path, copies in ((small, 14), (big, 149)):
        path.write_bytes((afc.cwd / "afc.db").read_bytes())
        _grow(path, copies)
    for command, options in (
        (cli.status, {"json_out": True}),
        (cli.outputs, {"json_out": True}),
        (cli.status, {"everything": True}),  # afc status --all | grep ...
        (cli.outputs, {}),  # afc outputs | cut -f2
    ):
        _peak(monkeypatch, command, small, **options)  # its modules imported, not measured
        peak_small, wrote_small = _peak(monkeypatch, command, small, **options)
        peak_big, wrote_big = _peak(monkeypatch, command, big, **options)
        assert wrote_big > 9 * wrote_small  # the whole listing was written
        assert peak_big < 4 * peak_small, (command.__name__, options, peak_small, peak_big)


def test_report_memory_does_not_grow_with_the_jobs(afc):
    """``afc report --html`` (``write_report``) on 1,500 and 15,000 jobs: before, every card,
    its thumbnail and the whole text were held (516 MiB for 100,100 jobs)."""
    from afc_cli.web.html import write_report

    afc.write_manifest(manifest(jobs(100)))
    assert afc("submit", "manifest.yaml").returncode == 0
    peaks = []
    for copies in (14, 149):
        path = afc.cwd / f"copies-{copies}.db"
        path.write_bytes((afc.cwd / "afc.db").read_bytes())
        _grow(path, copies)
        write_report(str(path), str(afc.cwd / "warm.html"), batch=None, since=None)
        tracemalloc.start()
        try:
            made = write_report(str(path), str(afc.cwd / "r.html"), batch=None, since=None)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert made["jobs"] == 100 * (copies + 1) and made["pictures"] == 100
    assert peaks[1] < 4 * peaks[0], peaks


def _secret_in_errors(url: str) -> None:
    ledger = Ledger(url)
    try:
        with ledger.tx():
            ledger.db.execute(
                "UPDATE jobs SET error_message = ? WHERE status = 'failed'",
                (f"the gateway echoed the key {SECRET} back",),
            )
    finally:
        ledger.close()


def test_streamed_listings_scrub_and_are_the_same_bytes_on_both_engines(afc, pg_url):
    """1,205 jobs (two chunks and a piece), five failed with a secret in their error message,
    on SQLite and on PostgreSQL: the same bytes, the JSON's own layout, the secret scrubbed."""
    listed = jobs(1200) + [
        {"key": f"bad-{i}", "prompt": "no", "params": {"fail": ["invalid"]}} for i in range(5)
    ]
    afc.write_manifest(manifest(listed))
    sqlite_url = str(afc.cwd / "afc.db")
    for url in (pg_url, sqlite_url):
        # each pays for its renders (the second would find the first's outputs stored)
        shutil.rmtree(afc.outputs(), ignore_errors=True)
        assert afc("submit", "manifest.yaml", "-q", "--ledger", url).returncode == 1
        _secret_in_errors(url)
    env = {"AUDIT_SERVICE_TOKEN": SECRET}
    for args in (("status", "--json"), ("outputs", "--json"), ("status", "--json", "--all")):
        said = []
        for url in (sqlite_url, pg_url):
            result = afc(*args, "--ledger", url, env=env)
            assert result.returncode == 0, result.stderr
            said.append(result.stdout)
        assert said[0] == said[1], args
        assert said[0] == json.dumps(json.loads(said[0]), indent=2) + "\n"
        assert SECRET not in said[0]
    status = json.loads(said[0])
    assert len(status["jobs"]) == 1205
    failed = [job for job in status["jobs"] if job["status"] == "failed"]
    assert len(failed) == 5
    assert all("<redacted>" in job["error"]["message"] for job in failed)
    # on a pipe, --all and --status write their lines as they are read, scrubbed alike
    piped = [
        afc("status", "--all", "--ledger", url, env=env).stdout for url in (sqlite_url, pg_url)
    ]
    assert piped[0] == piped[1] and len(piped[0].splitlines()) == 1206
    failed_lines = [line for line in piped[0].splitlines() if "\tfailed\t" in line]
    assert len(failed_lines) == 5 and all("<redacted>" in line for line in failed_lines)
    assert SECRET not in piped[0]
    # afc report --html writes its contact sheet a page at a time: the same file, scrubbed
    reports = []
    for name, url in (("s.html", sqlite_url), ("p.html", pg_url)):
        assert afc("report", "--html", name, "--ledger", url, env=env).returncode == 0
        text = (afc.cwd / name).read_text(encoding="utf-8").replace(url, "the ledger")
        text = re.sub(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", "U", text)
        # the minute each was made in, which two reports a minute's turn apart differ by (the
        # whole suite met one: '13:48 UTC' against '13:47 UTC')
        reports.append(re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", "T", text))
    # but for the charts' random ids, the ledger's name and the time each was made
    assert reports[0] == reports[1]
    assert SECRET not in reports[0] and "&lt;redacted&gt;" in reports[0]
    assert reports[0].count('class="page sheet') == 7  # 1,205 cards, 200 a page
    # a batch that is not there is refused before anything is written
    result = afc("status", "--json", "--batch", "nope", "--ledger", sqlite_url)
    assert result.returncode == 2 and result.stdout == ""
    result = afc("outputs", "--json", "--batch", "nope", "--ledger", pg_url)
    assert result.returncode == 2 and result.stdout == ""
