"""A run that claims a retried job whose earlier call another run left ``started`` (audit
54a, mutation audit). ``Ledger.claim``'s first path (a free job simply taken) marks such a
call ``unknown``, as a takeover does; without that mark no test failed. The call a person's
cancel had left to its run (live then) stayed ``started`` after that run was gone, a call in
flight for good: under a provider ``concurrency`` limit of 1 it filled the limit, and the
retried job's new attempt was refused as busy at every look, the job never rendered.
Runs on SQLite and PostgreSQL."""

from __future__ import annotations

from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest


def test_a_retried_jobs_new_run_marks_the_left_call_unknown_and_is_not_held_by_it(afc, ledger_url):
    path = afc.write_manifest(manifest(jobs(1)))
    ledger = Ledger(ledger_url)
    (spec,) = load_manifest(path).jobs
    ledger.admit(load_manifest(path), "file:///tmp/x", RateCards())
    other = Ledger(ledger_url)
    other.owner = "host-b:4242:1"  # another host's run, live when the job is cancelled
    try:
        job = other.claim(spec.job_id, 60)
        assert other.start_attempt(job, 0, "openai", "gpt-image-1", None, durable=False) == 1
        assert ledger.cancel(ledger.job(spec.job_id), "a person's cancel")
        (left,) = ledger.attempts(spec.job_id)
        assert left["status"] == "started"  # left to its live run, which records its answer
        ledger.retry(ledger.job(spec.job_id), "a person's retry")
        # host-b is gone; this process's run takes the retried job
        mine = ledger.claim(spec.job_id, 60)
        assert mine is not None
        (left,) = ledger.attempts(spec.job_id)
        assert (left["status"], left["error_class"]) == ("unknown", "interrupted")
        number = ledger.start_attempt(
            mine, 0, "openai", "gpt-image-1", None, durable=False, limit=(1, None)
        )
        assert number == 2
    finally:
        other.close()
        ledger.close()
