"""Outside audit 31d: the Replicate adapter against Replicate's wire facts (its prediction
lifecycle, its cancel answering with the prediction). Through the real ``afc`` command
against the fake Replicate server (tests/fakeproviders.py)."""

from __future__ import annotations

from test_providers import attempts_of, run


def test_a_prediction_its_cancel_finds_succeeded_is_kept_not_paid_for_again(afc, fake):
    """A prediction whose polls never answered a status afc can read (a proxy's page, a body
    cut short) is asked to stop after UNREADABLE_POLLS of them. Replicate answers a cancel with
    the prediction; one that had succeeded meanwhile cannot be cancelled and comes back
    ``succeeded``, its output and its predict_time in that answer. afc threw that answer away:
    the attempt failed 'server' at a cost unknown, and the next attempt submitted, and paid
    for, a second prediction for the output the first had made. The cancel's answer is now read
    as the prediction's last poll: its output is fetched and stored, at its cost."""
    jobs = run(afc, "replicate", ["garbled-forever done-at-cancel"], expect=0, attempts=2)
    assert jobs["j0"]["status"] == "succeeded"
    assert fake.counts["replicate_submit"] == 1, "paid once"
    [attempt] = attempts_of(afc, "j0")
    assert fake.cancels == [attempt["provider_request_id"]]
    assert attempt["status"] == "succeeded"
    assert attempt["cost"] is not None and attempt["usage"]["seconds"] == 3.2


def test_a_prediction_its_cancel_finds_refused_is_a_refusal_at_its_cost(afc, fake):
    """The same cancel's answer for a prediction that had failed meanwhile, flagged (E005):
    afc called it a 'server' failure of unknown cost, so a chain whose fallback_on names
    refusal never reached the model meant for what this one refuses, and its seconds went
    unpriced. It is the refusal the answer says, at its seconds."""
    jobs = run(afc, "replicate", ["garbled-forever flagged-at-cancel"], expect=1, attempts=1)
    assert jobs["j0"]["error"]["class"] == "refusal"
    [attempt] = attempts_of(afc, "j0")
    assert fake.cancels == [attempt["provider_request_id"]]
    assert attempt["error_class"] == "refusal" and "E005" in attempt["error"]
    assert attempt["cost"] == "0.001800" and attempt["usage"] == {"seconds": 1.5}
