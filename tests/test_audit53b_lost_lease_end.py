"""A run's end of a job it no longer holds changes nothing (outside audit 53b, found by the
stateful model tests/test_audit53b_ledger_model.py).

``Ledger.finish`` only asked that the job was not terminal yet. A worker whose call was still
out when its lease passed to another worker, or when a person cancelled and retried the job,
got its call's answer back, found the chain over (``pipeline._chain_over``: a refusal that
stops the chain) and wrote the job ``failed``/``CHAIN_FAILED``: under the run that had taken
it over and was paying for its render, or over the person's retry, which was undone without a
word. Every other write of a run is fenced by its lease (``_update_job``, docs/ledger.md
invariant 4); so is its terminal write now."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest

REPORT = {"chain_index": 0, "provider": "local", "model": "m1"}


@pytest.fixture
def books(afc, ledger_url):
    """Two workers on hosts of their own (judged by their leases' expiry alone) and a person,
    on one ledger with one admitted job."""
    m = load_manifest(afc.write_manifest(manifest(jobs(1))))
    opened = {}
    for name, owner in (("a", "host-a:101:1"), ("b", "host-b:202:2"), ("person", "me:303:3")):
        opened[name] = Ledger(ledger_url)
        opened[name].owner = owner
    opened["person"].admit(m, "file:///tmp/x", RateCards())
    yield opened, m.jobs[0].job_id
    for book in opened.values():
        book.close()


def _call(book, job_id: str) -> tuple[dict, int]:
    """The worker claims the job, finds nothing stored and starts a paid attempt."""
    job = book.claim(job_id, 300)
    job["step"] = "render"
    number = book.start_attempt(job, 0, "local", "m1", None, durable=False)
    assert number is not None
    return job, number


def _refused(book, job: dict, number: int) -> bool:
    """The call's answer: a refusal that ends the chain (``pipeline._chain_over``)."""
    book.end_attempt(job, number, **REPORT, status="failed", error_class="invalid",
                     http_status=400, error_message="refused")  # fmt: skip
    return book.finish(job, "failed", step="render", outcome="failed", error_code="CHAIN_FAILED",
                       error_class="invalid", error_message="the chain is over")  # fmt: skip


def test_a_call_out_across_a_cancel_and_retry_does_not_fail_the_retried_job(books):
    opened, job_id = books
    a, person = opened["a"], opened["person"]
    job, number = _call(a, job_id)
    assert person.cancel(person.job(job_id), "stop")
    assert person.retry(person.job(job_id), "me") == [job_id]
    assert _refused(a, job, number) is False
    row = person.job(job_id)
    assert (row["status"], row["error_code"]) == ("queued", None), "the retry was undone"


def test_a_worker_that_lost_its_lease_does_not_fail_the_job_another_renders(books):
    opened, job_id = books
    a, b, person = opened["a"], opened["b"], opened["person"]
    job, number = _call(a, job_id)
    with person.tx():  # a stalls past its lease
        person.db.execute("UPDATE jobs SET lease_expires = 1 WHERE id = ?", (job_id,))
    _, taken = _call(b, job_id)  # b takes the job over and pays for a render of its own
    assert _refused(a, job, number) is False
    row = person.job(job_id)
    assert (row["status"], row["lease_owner"], row["attempts"]) == ("running", b.owner, taken)
