"""Outside audit 44a: the provider adapters at the wire (tests/fakeproviders.py)."""

from __future__ import annotations

import pytest
from test_audit24b_chains import _fal_then_openai
from test_providers import attempts_of, run


@pytest.mark.parametrize("provider", ["replicate", "fal"])
def test_a_request_whose_polls_lost_the_key_is_polled_by_its_retry_not_paid_again(
    afc, fake, provider, ledger_url
):
    """A job-style request whose polls the provider refused (401: the key revoked, or
    rotated, mid-render) renders on at the provider and is billed. The job fails ``auth``,
    as it should; but the attempt was ended ``failed``, so 'afc retry' once a working key
    was in place submitted (and paid for) a new request, while the first one's result sat
    at the provider, fetchable by its recorded id for nothing."""
    afc.env["AFC_LEDGER"] = ledger_url
    jobs = run(afc, provider, ["poll-401"], expect=1)
    assert jobs["j0"]["error"]["class"] == "auth"
    [attempt] = attempts_of(afc, "j0")
    assert attempt["cost"] is None and attempt["provider_request_id"]
    fake.key_restored.set()  # a working key in place
    assert afc("retry", "j0").returncode == 0
    assert afc("resume").returncode == 0
    assert fake.counts[f"{provider}_submit"] == 1, "the recorded request was polled"
    [attempt] = attempts_of(afc, "j0")
    assert (attempt["number"], attempt["status"]) == (1, "succeeded")


@pytest.mark.parametrize("said", [200, 409])
def test_a_fal_cancel_answered_already_completed_is_read_whatever_its_status(afc, fake, said):
    """fal answers a cancel of a request that completed before it came (rendered, billed,
    its result kept) with ``{"status": "ALREADY_COMPLETED"}``; its documentation lists that
    among the statuses of the cancel's one answer, not as an error. afc read it only on a
    400: on a 200 it took the answer for a request stopped, recorded the attempt
    window_expired at an unknown cost and fell back to the next model, a second provider
    paid for the one output (on a 409, the same, saying the cancel failed). The body says
    what fal did, whatever status carries it."""
    afc.write_manifest(_fal_then_openai(f"done-at-cancel cancel-says-{said} shot"))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    assert len(fake.cancels) == 1, "the window passed: the request was asked to stop"
    assert fake.counts["openai"] + fake.counts["openai_edits"] == 0, "a second provider paid"
    [attempt] = afc.json("show", "shot")["attempts"]
    assert (attempt["provider"], attempt["status"]) == ("fal", "succeeded")
    assert attempt["cost"] == "0.025000"
