"""Outside audit 65e: an attempt window (``window_s``) that ends on a fal request whose cancel
fal does not take.

fal has no window of its own (Replicate is sent ``Cancel-After``): at the window's end afc asks
it to cancel the request. When fal failed that cancel (an error status, no answer), afc took
the request for stopped: the attempt was recorded ``window_expired`` at an unknown cost, its
message saying only "no result within the 1s attempt window", and the chain fell back to the
next model. The request rendered on at fal, completed and was billed, and no run ever asked
for its result: measured here, 2 renders paid (fal's lost, OpenAI's stored), one output. Now
such a request is read by its id within one more window, as one fal says completed is
(tests/test_audit24b_chains.py): its result is stored, 1 render paid, and the attempt says
the cancel was not taken. (One still rendering when that window ends is asked to stop again
and fails ``window_expired``, as before: never read a third time.)

The fake fal (tests/fakeproviders.py) answers a "cancel-refused" request's cancel with a 500,
and the request completes right after, as one nothing stopped does.
"""

from __future__ import annotations

from test_audit24b_chains import _fal_then_openai


def test_a_fal_request_whose_cancel_was_refused_is_read_by_its_id_not_paid_again(afc, fake):
    afc.write_manifest(_fal_then_openai("cancel-refused shot"))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    assert len(fake.cancels) == 1, "the window passed: the request was asked to stop"
    billed = [entry for entry in fake.log if entry[3]]
    assert fake.counts["fal_submit"] == 1
    assert fake.counts["openai"] + fake.counts["openai_edits"] == 0, (
        f"a second provider paid for the one output ({len(billed)} renders billed)"
    )
    [attempt] = afc.json("show", "shot")["attempts"]
    assert (attempt["provider"], attempt["status"]) == ("fal", "succeeded")
    assert attempt["cost"] == "0.025000"
    assert afc.json("costs", "report")["total"]["priced"] == "0.025000"
    assert (afc.outputs() / "b1" / "shot.png").read_bytes().startswith(b"\x89PNG")


def test_a_fal_request_whose_cancel_was_refused_is_read_once_more_never_again(afc, fake):
    """One that renders on past that second window too is asked to stop again and fails
    ``window_expired`` at a cost unknown, saying fal did not take the cancel; the next model
    renders (it is never read a third time: bounded, not polled for ever)."""
    afc.write_manifest(_fal_then_openai("cancel-refused held-on shot"))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    assert fake.counts["fal_submit"] == 1
    assert len(fake.cancels) == 2, "asked to stop at each window's end"
    first, second = afc.json("show", "shot")["attempts"]
    assert (first["provider"], first["status"], first["error_class"], first["cost"]) == (
        "fal",
        "failed",
        "window_expired",
        None,
    )
    assert "fal did not take the cancel (HTTP 500): it may render on, billed" in (
        first["error"]["message"] if isinstance(first.get("error"), dict) else str(first)
    ), first
    assert (second["provider"], second["status"]) == ("openai", "succeeded")


def test_a_fal_request_cancelled_at_its_window_is_not_read_again(afc, fake):
    """fal took the cancel (CANCELLATION_REQUESTED): window_expired, the next model renders."""
    afc.write_manifest(_fal_then_openai("hold shot"))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    assert fake.counts["fal_poll"] > 0
    first, second = afc.json("show", "shot")["attempts"]
    assert (first["provider"], first["error_class"], first["cost"]) == (
        "fal",
        "window_expired",
        None,
    )
    assert (second["provider"], second["status"]) == ("openai", "succeeded")


def test_a_fal_request_whose_cancel_fal_never_answers_is_read_by_its_id(afc, fake):
    """A cancel fal does not answer (its API hangs on it past afc's 10 s bound on a window's
    cancel, ``pipeline.CANCEL_WAIT_S``) was taken for stopped: the request, never stopped,
    completed and was billed, and the next model paid again (2 renders billed). Now fal's
    ``stop_left`` gives up on the answer first (``fal.STOP_ANSWER_S``) and the request is
    read by its id: its result stored, 1 render billed."""
    afc.write_manifest(_fal_then_openai("cancel-unanswered shot"))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    assert len(fake.cancels) == 1
    billed = [entry for entry in fake.log if entry[3]]
    assert fake.counts["openai"] + fake.counts["openai_edits"] == 0, (
        f"a second provider paid for the one output ({len(billed)} renders billed)"
    )
    [attempt] = afc.json("show", "shot")["attempts"]
    assert (attempt["provider"], attempt["status"], attempt["cost"]) == (
        "fal",
        "succeeded",
        "0.025000",
    )
