"""Outside audit 43c: an unknown ``--batch`` on a ledger of months.

Every command refuses a ``--batch`` the ledger does not know, listing the batches it knows.
A ledger a cron fed a batch an hour knew 1,001 of them (``bench/big_ledger.py``): the refusal
was one line of 9,945 characters, the oldest batches first, the one a person mistyped lost in
it. It now names them as a key's refusal names the batches it is in (``several_batches``):
every one up to eight, else the eight newest and how many older, with the names nearest the
one typed said apart."""

from __future__ import annotations

import sqlite3

from conftest import jobs, manifest


def test_an_unknown_batch_of_a_ledger_of_many_batches_is_one_readable_line(afc):
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    conn = sqlite3.connect(afc.cwd / "afc.db")
    with conn:
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300) "
            "INSERT INTO batches (name, storage, rates_json, created_at, updated_at)"
            " SELECT 'night-' || n.i, storage, rates_json, created_at + n.i, updated_at"
            " FROM batches, n WHERE name = 'b1'"
        )
    conn.close()
    for args in (["status"], ["outputs"], ["costs", "report"], ["cancel", "--yes"]):
        refused = afc(*args, "--batch", "nigth-42")
        assert refused.returncode == 2, args
        line = refused.stderr.strip()
        assert "\n" not in line and len(line) < 400, (args, len(line))
        assert "known batches: night-300, night-299," in line
        assert "newest first, and 293 older" in line
        assert "nearest to it: night-42" in line
    # a ledger of a few batches still names every one, oldest first, as before
    afc.write_manifest(manifest(jobs(1), batch="teaser"))
    small = afc.cwd / "small"
    small.mkdir()
    (small / "manifest.yaml").write_text((afc.cwd / "manifest.yaml").read_text())
    assert afc("submit", "small/manifest.yaml", "--ledger", "small/afc.db").returncode == 0
    refused = afc("status", "--batch", "nope", "--ledger", "small/afc.db")
    assert refused.returncode == 2 and "known batches: teaser\n" in refused.stderr + "\n"
    assert "nearest" not in refused.stderr
