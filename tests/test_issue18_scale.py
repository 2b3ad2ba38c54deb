"""The pictures at a studio's scale: what a 10,000-job ledger costs the contact sheet, read as
SQLite's own count of the work a query does (its virtual machine's steps), never as a time."""

from __future__ import annotations

import re
import sqlite3
import time

import httpx
import pytest
from browser import Served
from conftest import jobs, manifest

from afc_cli.ledger import Ledger


def steps(book: Ledger, read=None, **query) -> tuple[int, list[dict]]:
    """The rows ``read()`` returns (the sheet's rows for ``query`` by default) and the
    virtual-machine steps SQLite took to read them, in hundreds."""
    counted = [0]

    def tick() -> int:
        counted[0] += 1
        return 0

    book.db.conn.set_progress_handler(tick, 100)
    try:
        rows = read() if read is not None else book.sheet_rows(**query)
    finally:
        book.db.conn.set_progress_handler(None, 0)
    return counted[0], rows


def replays(path, n: int) -> None:
    """``n`` rows of ``avoided`` for the ledger's jobs, as ``afc submit`` of the same manifest
    again writes one replay row per job each time."""
    conn = sqlite3.connect(path)
    with conn:
        ids = [row[0] for row in conn.execute("SELECT id FROM jobs")]
        conn.executemany(
            "INSERT INTO avoided (job_id, batch, at, reason, provider, model, cost_micros,"
            " cost_source) VALUES (?, 'b1', ?, 'replay', 'local', 'm1', 50000, 'rate_card')",
            [(ids[i % len(ids)], time.time()) for i in range(n)],
        )
    conn.close()


@pytest.fixture
def forty(afc):
    afc.write_manifest(manifest(jobs(40, size="16x16")))
    assert afc("submit", "manifest.yaml").returncode == 0
    return afc


def test_the_sheet_reads_the_replays_once_not_once_a_job(forty):
    # the model of a found stored output was a subquery of avoided per job, which has no
    # index on job_id: every job read the whole table. A 10,000-job ledger whose manifest had
    # been submitted again (7,000 replay rows) took 4.5 s a page of afc serve and as long for
    # the report; a studio's ledger of a few resubmits, minutes
    path = forty.cwd / "afc.db"
    book = Ledger(str(path), create=False)
    try:
        before, rows = steps(book)
    finally:
        book.close()
    replays(path, 4000)
    book = Ledger(str(path), create=False)
    try:
        after, again = steps(book)
    finally:
        book.close()
    assert [r["key"] for r in again] == [r["key"] for r in rows]
    # one read of 4,000 rows is tens of thousands of steps; one per job (40 x 4,000), over a
    # million
    assert after - before < 2000, (before, after)


def test_a_page_of_the_sheet_reads_the_attempts_of_its_own_jobs_only(forty):
    # a page was every job of the scope with its attempts read, sorted, then cut to 120: the
    # last page of 10,000 jobs read all of them
    book = Ledger(str(forty.cwd / "afc.db"), create=False)
    try:
        whole, rows = steps(book)
        paged, page = steps(book, limit=5, offset=30)
    finally:
        book.close()
    assert [r["key"] for r in page] == [r["key"] for r in rows[30:35]]
    assert paged * 4 < whole, (paged, whole)


def test_both_engines_page_the_sheet_and_name_the_model_of_a_found_output(afc, ledger_url):
    afc.env["AFC_LEDGER"] = ledger_url
    afc.write_manifest(manifest(jobs(9, size="16x16")))
    assert afc("submit", "manifest.yaml").returncode == 0
    book = Ledger(ledger_url, create=False)
    try:
        found = book.jobs_by_key("shot-004")[0]
        # a ledger rebuilt over the same storage finds the output stored: the model it names
        # is the latest such row's
        book.record_avoided(found, "stored", "local", "m0", None, None)
        book.record_avoided(found, "stored", "local", "m9", None, None)
        book.record_avoided(found, "replay", "local", "m7", None, None)
        whole = book.sheet_rows()
        page = book.sheet_rows(limit=4, offset=2)
        one = book.sheet_rows(job_id=found["id"])
    finally:
        book.close()
    assert [r["key"] for r in page] == [r["key"] for r in whole[2:6]]
    assert [r["key"] for r in page] == ["shot-003", "shot-004", "shot-005", "shot-006"]
    assert {r["key"]: r["found"] for r in page} == {
        "shot-003": None,
        "shot-004": "local/m9",
        "shot-005": None,
        "shot-006": None,
    }
    assert one[0]["found"] == "local/m9"


def failing(afc) -> None:
    """Five failures of two causes (three refused as invalid, two as auth) and one picture."""
    listed = jobs(6, size="16x16")
    for job, cause in zip(listed, ["invalid", "auth", "invalid", "auth", "invalid"], strict=False):
        job["params"] = {**job["params"], "fail": [cause]}
    afc.write_manifest(manifest(listed))
    assert afc("submit", "manifest.yaml").returncode == 1


def cause_rows(html: str) -> list[tuple[int, str, str]]:
    table = html.split('<table class="causes">', 1)[1].split("</table>", 1)[0]
    return [
        (int(count), cause, keys)
        for count, cause, keys in re.findall(
            r'<tr data-count="(\d+)"><td class="num">\d+</td><td class="cause">([^<]*)</td>\s*'
            r"<td>([^<]*)</td></tr>",
            table,
        )
    ]


EXPECTED = [
    (3, "invalid", "shot-001, shot-003, shot-005"),
    (2, "auth", "shot-002, shot-004"),
]


def test_the_failures_are_grouped_by_cause_the_commonest_first(afc):
    # 1,000 failures of three causes were 1,000 lines of the same three messages: the cause of
    # most of them is now one line with its count, in the report and on afc serve
    failing(afc)
    assert afc("report", "--html", "report.html").returncode == 0
    pages = [(afc.cwd / "report.html").read_text(encoding="utf-8")]
    served = Served(afc)
    try:
        pages.append(httpx.get(f"{served.url}failures").text)
    finally:
        served.stop()
    for html in pages:
        rows = cause_rows(html)
        assert [(count, keys) for count, _, keys in rows] == [
            (count, keys) for count, _, keys in EXPECTED
        ]
        for (_, cause, _), (_, word, _) in zip(rows, EXPECTED, strict=True):
            assert f"injected {word} on attempt 1" in cause
        assert html.count('<tr data-key="shot-') == 5  # and each failure still listed


def test_the_failures_page_lists_a_page_of_failures_and_counts_every_cause(afc):
    # a night's 10,000 failures were one table of 10,000 rows on afc serve's failures page;
    # it lists them a page at a time, as the contact sheet and the review queue do, while its
    # causes still count every failure
    from afc_cli.web.server import PAGE

    listed = jobs(PAGE + 3, size="16x16")
    for index, job in enumerate(listed):
        job["params"] = {**job["params"], "fail": ["invalid" if index % 3 else "auth"]}
    afc.write_manifest(manifest(listed))
    assert afc("submit", "manifest.yaml").returncode == 1
    served = Served(afc)
    try:
        first = httpx.get(f"{served.url}failures").text
        last = httpx.get(f"{served.url}failures", params={"page": "2"}).text
    finally:
        served.stop()
    listed_keys = re.compile(r'<tr data-key="([^"]+)">')
    assert len(listed_keys.findall(first)) == PAGE and len(listed_keys.findall(last)) == 3
    assert set(listed_keys.findall(first)).isdisjoint(listed_keys.findall(last))
    assert f"{PAGE + 3} failed or dead-lettered jobs, {PAGE} on this page" in first
    assert 'href="?page=2"' in first
    for html in (first, last):
        assert [count for count, _, _ in cause_rows(html)] == [82, 41]


def test_a_cause_of_many_failures_names_a_few_keys_and_counts_the_rest():
    from afc_cli.web.sheet import CAUSE_KEYS, causes

    failures = [{"key": f"k{i}", "error": "E: same", "waiting": None} for i in range(40)]
    failures.append({"key": "odd", "error": None, "waiting": None})
    grouped = causes(failures)
    assert [(g["cause"], g["count"]) for g in grouped] == [
        ("E: same", 40),
        ("(no cause recorded)", 1),
    ]
    assert grouped[0]["keys"] == [f"k{i}" for i in range(CAUSE_KEYS)]


def test_outputs_read_the_stored_models_once_not_once_a_job(afc):
    """``afc outputs`` named the model of an output a fresh ledger found in storage (no
    attempt of its own made it) by a subquery of ``avoided`` per job: every such job read the
    whole table, and 5,000 outputs found took 3 s (growing with the square of their number).
    The work now grows with the jobs, not with jobs x rows; the models are the same."""
    afc.write_manifest(manifest(jobs(40, size="16x16")))
    assert afc("submit", "manifest.yaml").returncode == 0
    for name in ("afc.db", "afc.db-wal", "afc.db-shm"):
        (afc.cwd / name).unlink(missing_ok=True)
    assert afc("submit", "manifest.yaml").returncode == 0  # every output found stored
    book = Ledger(afc.cwd / "afc.db")
    try:
        alone, before = steps(book, book.output_rows)
        assert {row["model"] for row in before} == {"local/m1"} and len(before) == 40
        replays(afc.cwd / "afc.db", 4000)
        with_replays, after = steps(book, book.output_rows)
        assert [row["model"] for row in after] == [row["model"] for row in before]
        # one read of the 4,000 rows for all 40 jobs (measured: 42 -> 164 hundred steps),
        # where a read per job was 40 x 4,000 (107 -> 6,588 before)
        assert with_replays - alone < 400, (alone, with_replays)
    finally:
        book.close()
