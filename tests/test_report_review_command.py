"""A report's picture of a job awaiting review says the command that decides on that output.

The review section said "Decide with afc review approve KEY": a decision taken from a report
mailed in the morning decided by key alone, so a job cancelled (or rejected), retried and
rendered again since was approved on the strength of the picture the report showed, which is
no longer its output. Each card now gives ``afc review approve KEY --batch B --sha256 HEX``
with the SHA-256 of the output the report shows: a job rendered again since is refused."""

from __future__ import annotations

import html
import re
import sqlite3

from conftest import jobs, manifest


def test_each_card_awaiting_review_gives_its_decision_with_the_outputs_sha256(afc):
    data = manifest(jobs(2, size="96x64"))
    data["defaults"]["review"] = True
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    listed = {row["key"]: row["sha256"] for row in afc.json("review", "list")["awaiting_review"]}
    result = afc("report", "--html", "r.html")
    assert result.returncode == 0, result.stderr
    page = html.unescape((afc.cwd / "r.html").read_text())
    said = dict(re.findall(r"afc review approve (\S+) --batch b1 --sha256 ([0-9a-f]{64})", page))
    assert said == listed
    # the command as the report gives it decides that output, and only that one
    conn = sqlite3.connect(afc.cwd / "afc.db")
    with conn:  # shot-002 rendered again since the report (another output, awaiting review)
        conn.execute("UPDATE jobs SET output_sha256 = ? WHERE key = 'shot-002'", ("ab" * 32,))
    conn.close()
    for key, sha in said.items():
        done = afc("review", "approve", key, "--batch", "b1", "--sha256", sha)
        assert done.returncode == (0 if key == "shot-001" else 2), done.stderr
    assert afc.rows("SELECT key, status FROM jobs ORDER BY key") == [
        ("shot-001", "succeeded"),
        ("shot-002", "awaiting_review"),
    ]


def test_a_card_not_awaiting_review_gives_no_command(afc):
    afc.write_manifest(manifest(jobs(1, size="96x64")))
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc("report", "--html", "r.html").returncode == 0
    text = (afc.cwd / "r.html").read_text()
    i = text.find("afc review approve shot-001")
    assert i < 0, text[i - 300 : i + 100]
