"""Outside audit 59c: the failures' causes, on afc serve's Failures page and in the HTML
report, group the failures of one cause however their messages name their own job.

``web.sheet.causes`` grouped failures by their exact text. Most of afc's messages name the
job they are about ("... restore it, then 'afc retry shot-0001'"), and a provider's own
names its request ("... include the request ID req_... in your message"), so one cause of
2,000 failures (the palette file every shot sends, deleted before the run) was 2,000 rows of
the causes table, each counting 1: a 628 KB page of which the 120 failures listed were a
tenth, and a report whose "causes" said nothing a reader could take in. Now a cause is its
text up to its job's key and its figures (as a run's summary groups its lines,
``progress.same_message``), shown as its first failure says it, and the table shows the
``CAUSE_ROWS`` commonest, counting the rest (each failure is still in the list below it)."""

from __future__ import annotations

import re
import struct
import zlib

import httpx
import pytest
from conftest import manifest

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def _png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
        + chunk(b"IEND", b"")
    )


def _cause_rows(page: str) -> list[int]:
    return [int(n) for n in re.findall(r'<tr data-count="(\d+)">', page)]


# keys that differ in letters, not only in figures
KEYS = ["harbour", "lighthouse", "quay", "gulls", "nets", "keeper", "boat", "tide"]


def test_one_cause_naming_each_job_is_one_row(afc):
    from browser import Served

    (afc.cwd / "palette.png").write_bytes(_png())
    data = manifest([{"key": key, "prompt": f"the {key}"} for key in KEYS])
    data["defaults"]["inputs"] = [{"path": "palette.png"}]
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    (afc.cwd / "palette.png").unlink()  # every job fails INPUT_UNAVAILABLE, naming itself
    assert afc("resume").returncode == 1
    said = {row[0] for row in afc.rows("SELECT error_message FROM jobs")}
    assert len(said) == len(KEYS)  # each message names its own job
    served = Served(afc)
    try:
        page = httpx.get(served.url + "failures").text
    finally:
        served.stop()
    assert _cause_rows(page) == [len(KEYS)], page
    report = afc("report", "--html", "report.html")
    assert report.returncode == 0, report.stderr
    assert _cause_rows((afc.cwd / "report.html").read_text()) == [len(KEYS)]


def test_the_causes_table_shows_the_commonest_and_counts_the_rest():
    from afc_cli.web.html import environment
    from afc_cli.web.sheet import CAUSE_ROWS, causes

    # each its own cause (a provider's message with its request id), and one of three jobs
    failures = [
        {"key": f"k{i}", "error": f"SERVER_ERROR: include the request ID req_{c}", "waiting": None}
        for i, c in enumerate("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    ]
    failures += [
        {"key": key, "error": f"AUTH: the key of {key} is refused", "waiting": None}
        for key in ("x", "y", "z")
    ]
    grouped = causes(failures)
    assert grouped[0]["count"] == 3 and grouped[0]["keys"] == ["x", "y", "z"]
    template = environment().from_string(
        '{% from "macros.html" import failures %}{{ failures(jobs, causes(jobs)) }}'
    )
    page = template.render(
        jobs=[
            {
                **job,
                "batch": "b1",
                "status": "failed",
                "model": None,
                "fallback": False,
                "attempts": 1,
                "cost": "0",
                "unpriced_attempts": 0,
            }
            for job in failures
        ]
    )
    rows = _cause_rows(page)
    assert rows[0] == 3 and len(rows) == CAUSE_ROWS, rows
    rest = len(failures) - sum(rows)
    assert f"and {len(grouped) - CAUSE_ROWS} more causes of {rest} failures" in page
