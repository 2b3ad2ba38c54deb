"""Outside audit 33c: fal's give-up path after UNREADABLE_POLLS status answers in a row with
no status afc can read. Through the real ``afc`` command against the fake fal server
(tests/fakeproviders.py: ``garbled-forever`` polls, ``result-unfinished`` results)."""

from __future__ import annotations

from test_providers import attempts_of, run


def test_a_request_given_up_on_whose_result_is_not_there_is_asked_to_stop(afc, fake):
    """fal has no result for a request still queued or running: it answers the result GET
    400 ("Request is still in progress"). afc asked for the result after giving up on the
    status and took that 400 for ``invalid``: the chain stopped, the job failed, and the
    request, never cancelled, could render on and be billed, recorded at a cost of nothing
    known either way as an input fault. It is now asked to stop (its cancel_url), and the
    attempt is a ``server`` failure at a cost unknown: the chain goes on (here, the model's
    next attempt)."""
    jobs = run(afc, "fal", ["garbled-forever result-unfinished"], expect=1, attempts=2)
    assert jobs["j0"]["error"]["class"] == "server", "not invalid: the chain went on"
    first, second = attempts_of(afc, "j0")
    for attempt in (first, second):
        assert (attempt["status"], attempt["error_class"]) == ("failed", "server")
        assert attempt["cost"] is None, "it may have rendered: its cost is unknown"
        assert "asked to stop" in attempt["error"]
    assert fake.counts["fal_submit"] == 2
    assert fake.cancels == [first["provider_request_id"], second["provider_request_id"]]


def test_a_request_given_up_on_that_completed_at_its_cancel_is_kept_not_paid_again(afc, fake):
    """One that completed (rendered, billed) between the result GET and the cancel: fal
    answers the cancel ALREADY_COMPLETED, as Replicate answers one with the succeeded
    prediction. Its result is fetched and stored at its cost, not paid for again."""
    jobs = run(
        afc, "fal", ["garbled-forever result-unfinished done-at-cancel"], expect=0, attempts=2
    )
    assert jobs["j0"]["status"] == "succeeded"
    assert fake.counts["fal_submit"] == 1, "paid once"
    [attempt] = attempts_of(afc, "j0")
    assert fake.cancels == [attempt["provider_request_id"]]
    assert attempt["status"] == "succeeded" and attempt["cost"] is not None


def given_up_twice(afc, fake, status_answer: str) -> None:
    """A job of two attempts whose status URL only ever answers ``status_answer``: each
    attempt given up on (a failed ``server`` attempt, cost unknown, its request asked to
    stop), the chain going on to the next, and the job failed."""
    jobs = run(afc, "fal", [f"{status_answer} result-unfinished"], expect=1, attempts=2)
    assert jobs["j0"]["error"]["class"] == "server"
    first, second = attempts_of(afc, "j0")
    for attempt in (first, second):
        assert (attempt["status"], attempt["error_class"]) == ("failed", "server")
        assert attempt["cost"] is None
        assert "asked to stop" in attempt["error"]
    assert fake.cancels == [first["provider_request_id"], second["provider_request_id"]]


def test_a_status_answered_202_without_a_status_is_given_up_on_not_polled_for_ever(afc, fake):
    """fal answers a queued request's status 202 with its JSON (``IN_QUEUE``); a 202 whose
    body is no JSON object (a proxy's "accepted" page) says nothing about the request. afc
    took every 202 for "still queued" and reset its count of unreadable answers: a status URL
    that only ever answered so was polled for ever, the job never ending. It is counted as
    an unreadable poll, as a 200's is, and given up on after UNREADABLE_POLLS: the request is
    asked to stop and the chain goes on."""
    given_up_twice(afc, fake, "garbled-202-forever")


def test_a_status_answered_202_saying_completed_is_completed(afc, fake):
    """fal answers a completed request's status 200; a gateway in front of it may answer
    every status 202, COMPLETED among them. afc took any 202 with a body for 'still queued'
    and polled a finished (billed) request until its window ended, or for ever without one.
    Its status is read: the result is fetched, nothing paid again."""
    jobs = run(afc, "fal", ["completed-202"], expect=0, attempts=1)
    assert jobs["j0"]["status"] == "succeeded"
    assert fake.counts["fal_submit"] == 1
    [attempt] = attempts_of(afc, "j0")
    assert attempt["status"] == "succeeded" and not fake.cancels


def test_a_status_answered_202_with_json_but_no_status_is_given_up_on(afc, fake):
    """A gateway in front of fal may answer every status 202 with JSON of its own
    (``{"message": "Accepted"}``): an object, but no word of the request. afc took any 202
    with a JSON object for "still queued" and reset its count of unreadable answers: with no
    ``window_s`` (the default) the request was polled for ever, the run never ending. It is
    an unreadable poll, as the same 202 without JSON is: given up on after UNREADABLE_POLLS,
    the result asked for, the request asked to stop and the chain going on."""
    given_up_twice(afc, fake, "accepted-json-forever")
