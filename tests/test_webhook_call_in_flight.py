"""A job cancelled with its call in flight (a live run's, which records the answer and its
cost later): its ``job.cancelled`` event counted that call in ``unpriced_attempts``, where
README and ``afc status`` count a call in flight as not known yet, not as one of unknown cost
(found by outside audit 42c). The event now says what status said at that moment."""

from __future__ import annotations

import json

from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest


def test_a_cancelled_jobs_call_in_flight_is_not_an_unpriced_attempt(afc):
    data = manifest(jobs(1))
    data["webhook"] = {"url": "http://127.0.0.1:9/hook", "secret_env": "AFC_HOOK_SECRET"}
    path = afc.write_manifest(data)
    ledger = Ledger(afc.cwd / "afc.db")
    try:
        m = load_manifest(path)
        ledger.admit(m, "file:///tmp/x", RateCards())
        job = ledger.claim(m.jobs[0].job_id, 60)
        ledger.start_attempt(job, 0, "local", "m1", None, durable=False)
        assert ledger.cancel(ledger.job(job["id"]), "by a person") is True
        (delivery,) = ledger.deliveries()
        sent = json.loads(delivery["envelope"])["data"]
    finally:
        ledger.close()
    assert sent["status"] == "cancelled"
    # not known yet: null, not 0; and not an attempt of unknown cost
    assert sent["cost"] is None and sent["unpriced_attempts"] == 0, sent
    (shown,) = afc.json("status", "--all")["jobs"]
    assert (shown["cost"], shown["unpriced_attempts"]) == (sent["cost"], 0), shown
