"""Outside audit 65k: a review decision sends its event where the job's row names when the
decision commits, not where it named when the command read the job.

README "Webhooks": a re-submit sets the webhook of each job of the batch it lists, an ended
or paused one too, and the job's events not yet delivered go there. A decision reads its
jobs, then decides them in one transaction (``Ledger.decide_reviews``); the delivery row it
wrote took the webhook from the job as read. A re-submit that moved the receiver between
the two (on PostgreSQL, the approval waits for the re-submit's lock while it rewrites the
webhooks: exactly that moment) had its moved receiver miss the decision: the
``job.succeeded`` (or ``job.rejected``) went to the URL the manifest no longer names, or,
for a webhook the re-submit added, no event was written at all."""

from __future__ import annotations

import base64
import signal

from conftest import frozen_at, manifest

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()
OLD = "http://127.0.0.1:9/old-hooks"
NEW = "http://127.0.0.1:9/new-hooks"


def _paused(afc, webhook: dict | None) -> dict:
    data = manifest([{"key": "frame", "prompt": "a style frame", "review": True}])
    if webhook is not None:
        data["webhook"] = webhook
    afc.write_manifest(data)
    afc.env["AFC_HOOK_SECRET"] = SECRET
    first = afc("submit", "manifest.yaml")
    assert afc.rows("SELECT status FROM jobs") == [("awaiting_review",)], first.stderr
    return data


def _decide_beside_resubmit(afc, data: dict, *decision: str) -> None:
    """The decision frozen between its read of the job and its transaction, while a
    re-submit moves the batch's webhook to NEW; then let it go on."""
    deciding = afc.popen(*decision, env={"AFC_STALL_POINT": "review_decide"})
    try:
        frozen_at(deciding)
        data["webhook"] = {"url": NEW, "secret_env": "AFC_HOOK_SECRET", "timeout_s": 1.0}
        afc.write_manifest(data, "moved.yaml")
        again = afc("submit", "moved.yaml", "--no-run")
        assert again.returncode == 0, again.stderr
        deciding.send_signal(signal.SIGCONT)
        assert deciding.wait(timeout=60) == 0, deciding.stderr.read()
    finally:
        if deciding.poll() is None:
            deciding.kill()
            deciding.wait()


def test_an_approval_sends_its_event_to_the_receiver_a_resubmit_moved_it_to(afc):
    data = _paused(afc, {"url": OLD, "secret_env": "AFC_HOOK_SECRET", "timeout_s": 1.0})
    _decide_beside_resubmit(afc, data, "review", "approve", "frame", "--by", "ana")
    rows = dict(afc.rows("SELECT event, url FROM deliveries"))
    # the pending pause event moved with the re-submit; the decision's must go there too
    assert rows == {"job.awaiting_review": NEW, "job.succeeded": NEW}


def test_a_rejection_sends_its_event_to_a_webhook_a_resubmit_added(afc):
    data = _paused(afc, None)
    _decide_beside_resubmit(
        afc, data, "review", "reject", "frame", "--by", "ana", "--reason", "off-model"
    )
    assert afc.rows("SELECT status FROM jobs") == [("rejected",)]
    assert afc.rows("SELECT event, url FROM deliveries") == [("job.rejected", NEW)]
