"""Savings counted once: each job's avoided render counts the first time it is avoided, however
often a finished batch is replayed afterwards (cron every five minutes)."""

from __future__ import annotations

from conftest import jobs, manifest


def avoided(afc, *args):
    total = afc.json("costs", "report", *args)["total"]
    return total["avoided_renders"], total["avoided_cost"], total["avoided_unpriced"]


def test_three_replays_leave_the_avoided_counts_unchanged(afc):
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml").returncode == 0
    assert avoided(afc) == (0, "0.000000", 0)
    assert afc("submit", "manifest.yaml").returncode == 0
    first = avoided(afc)
    assert first == (2, "0.100000", 0)
    for _ in range(3):
        assert afc("submit", "manifest.yaml").returncode == 0
        assert avoided(afc) == first
    assert afc.rows("SELECT COUNT(*) FROM avoided") == [(2,)], "no row per replay"
    by_batch = afc.json("costs", "report", "--by", "batch")["rows"]
    assert (by_batch[0]["avoided_renders"], by_batch[0]["avoided_cost"]) == (2, "0.100000")


def test_outputs_found_by_a_fresh_ledger_count_once_through_its_replays(afc):
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml").returncode == 0
    for _ in range(3):  # a fresh ledger finds both outputs, then replays them
        assert afc("submit", "manifest.yaml", "--ledger", "fresh.db").returncode == 0
    assert avoided(afc, "--ledger", "fresh.db") == (2, "0.100000", 0)


def test_a_ledger_holding_a_row_per_replay_is_counted_once(afc):
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc("submit", "manifest.yaml").returncode == 0
    # what an older afc wrote: one more row per job and replay
    import sqlite3

    conn = sqlite3.connect(afc.cwd / "afc.db")
    with conn:
        for _ in range(2):
            conn.execute(
                "INSERT INTO avoided (job_id, batch, at, reason, provider, model, cost_micros,"
                " cost_source) SELECT job_id, batch, at + 1, reason, provider, model,"
                " cost_micros, cost_source FROM avoided WHERE id IN"
                " (SELECT MIN(id) FROM avoided GROUP BY job_id)"
            )
    conn.close()
    assert afc.rows("SELECT COUNT(*) FROM avoided") == [(6,)]
    assert avoided(afc) == (2, "0.100000", 0)
    assert afc.json("costs", "report", "--since", "2999-01-01")["rows"] == []
