"""Outside audit 65d: ``afc status --json`` read its ``counts`` and its ``jobs`` at two moments.
The counts came from one query and the rows, streamed, from another; a run that committed
between the two (every few milliseconds while a batch renders) left the one document
disagreeing with itself. Sampled a dozen times during a 3,000-job local run, one document in
twelve said ``queued 1568, running 86, succeeded 1346`` in ``counts`` while its ``jobs``
held 1560 queued, 85 running and 1355 succeeded: a cron wrapper that checks ``counts`` and
then acts on the listed jobs acted on figures no moment of the ledger had. The counts and the
rows are now read in one read transaction (one snapshot of the ledger, on both engines)."""

from __future__ import annotations

from collections import Counter

from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.listing import status_view
from afc_cli.manifest import load_manifest


def _admitted(url: str, afc, n: int) -> list[str]:
    ledger = Ledger(url)
    try:
        m = load_manifest(afc.write_manifest(manifest(jobs(n))))
        ledger.admit(m, "file:///tmp/x", RateCards())
        return [job.job_id for job in m.jobs]
    finally:
        ledger.close()


def _finish(url: str, job_ids: list[str]) -> None:
    """What a run commits meanwhile: these jobs succeed, in another connection."""
    ledger = Ledger(url)
    try:
        with ledger.tx():
            for job_id in job_ids:
                ledger.db.execute(
                    "UPDATE jobs SET status = 'succeeded', step = 'done' WHERE id = ?", (job_id,)
                )
    finally:
        ledger.close()


def test_counts_and_jobs_are_one_moment(afc, ledger_url):
    ids = _admitted(ledger_url, afc, 5)
    # the document's counts are read; its rows stream as stdout takes them
    view = status_view(ledger_url, batch=None, everything=True, stream=True)
    _finish(ledger_url, ids[:2])  # a run's commit between the two
    listed = Counter(job["status"] for job in view["jobs"])
    assert dict(listed) == view["counts"], (dict(listed), view["counts"])
    assert view["counts"] == {"queued": 5}  # the moment the counts were read


def test_a_later_look_sees_the_commit(afc, ledger_url):
    """One moment per look, not a moment held: the next ``afc status`` sees the commit."""
    ids = _admitted(ledger_url, afc, 3)
    _finish(ledger_url, ids[:1])
    view = status_view(ledger_url, batch=None, everything=True, stream=True)
    listed = Counter(job["status"] for job in view["jobs"])
    assert dict(listed) == view["counts"] == {"queued": 2, "succeeded": 1}
