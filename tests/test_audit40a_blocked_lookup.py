"""Outside audit 40a: a run's look at which of its jobs are blocked (``Ledger._blocked_among``:
``blocked_job_ids``, ``parked_blocked``, ``ready_blocked``) reads those jobs, not every
blocked job of the ledger, when they are few.

``afc worker`` asks it at every claim (``run._fed``) about the jobs just claimed, which are
never blocked: it read every blocked job of every batch to find none. Beside 100,000 shots
blocked behind a style frame awaiting review that was 48 ms a claim on SQLite, 25 times the
claim itself, and a worker draining 3,000 instant jobs of another batch took 9.7 s instead of
7.4 s (``worker.Settle`` had kept the claims' other look at those jobs to 5 % of its time)."""

from __future__ import annotations

from conftest import manifest

from afc_cli.ledger import Ledger
from afc_cli.ledger.core import IN_CHUNK

SHOTS = 40


class _Counted:
    """A ledger connection that counts the rows its queries hand back."""

    def __init__(self, db):
        self.db, self.rows = db, 0

    def execute(self, *args, **kwargs):
        rows = self.db.execute(*args, **kwargs).fetchall()
        self.rows += len(rows)
        return _Rows(rows)

    def __getattr__(self, name):
        return getattr(self.db, name)


class _Rows(list):
    def fetchall(self):
        return list(self)


def _gated_and_plain(afc, ledger_url: str) -> None:
    afc.env["AFC_LEDGER"] = ledger_url
    gated = [{"key": "style", "prompt": "harbour", "review": True}]
    gated += [{"key": f"shot-{i}", "prompt": f"s{i}", "needs": ["style"]} for i in range(SHOTS)]
    afc.write_manifest(manifest(gated, batch="gated"), "gated.yaml")
    assert afc("submit", "gated.yaml").returncode == 0  # the style frame awaits review
    plain = [
        {"key": "p-1", "prompt": "a boat"},
        {"key": "p-2", "prompt": "a gull"},
        {"key": "after", "prompt": "after p-1", "needs": ["p-1"]},
    ]
    afc.write_manifest(manifest(plain, batch="plain"), "plain.yaml")
    assert afc("submit", "plain.yaml", "--no-run").returncode == 0


def test_a_few_jobs_are_looked_up_by_id_not_among_every_blocked_job(afc, ledger_url):
    _gated_and_plain(afc, ledger_url)
    ledger = Ledger(ledger_url)
    try:
        ids = dict(ledger.db.execute("SELECT key, id FROM jobs").fetchall())
        asked = [ids[key] for key in ("p-1", "p-2", "after", "shot-3", "shot-1")]
        counted = _Counted(ledger.db)
        ledger.db = counted
        # in the order asked: a run starts its ready jobs in its own order
        assert ledger.blocked_job_ids(asked) == [ids["after"], ids["shot-3"], ids["shot-1"]]
        assert ledger.parked_blocked(asked) == [ids["shot-3"], ids["shot-1"]]
        assert ledger.ready_blocked(asked) == []
        assert ledger.blocked_job_ids([ids["shot-1"], ids["shot-1"]]) == [ids["shot-1"]]
        # each look read at most the jobs it was asked about: it read all 41 blocked jobs
        assert counted.rows <= 3 + 2 + 1, counted.rows
        # a worker's claim: none of its jobs blocked, nothing read
        counted.rows = 0
        assert ledger.blocked_job_ids([ids["p-1"], ids["p-2"]]) == []
        assert counted.rows == 0, counted.rows
    finally:
        ledger.db = getattr(ledger.db, "db", ledger.db)
        ledger.close()


def test_many_jobs_are_found_among_the_blocked_ones_as_before(afc, ledger_url):
    """More than ``IN_CHUNK`` ids (a resume of a catalogue): one query over the blocked jobs,
    the same answers."""
    _gated_and_plain(afc, ledger_url)
    ledger = Ledger(ledger_url)
    try:
        ids = dict(ledger.db.execute("SELECT key, id FROM jobs").fetchall())
        shots = {ids[f"shot-{i}"] for i in range(SHOTS)}
        asked = list(ids.values()) + [f"no-such-job-{i}" for i in range(IN_CHUNK)]
        assert set(ledger.blocked_job_ids(asked)) == shots | {ids["after"]}
        assert set(ledger.parked_blocked(asked)) == shots
        assert ledger.ready_blocked(asked) == []
    finally:
        ledger.close()
