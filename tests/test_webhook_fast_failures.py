"""A receiver that answers a 5xx at once is up: afc goes on with its other events in the
pass, until FAST_FAILURES_PER_PASS such answers in a row (afc_cli/webhooks.py). One that is
down, slow or asks to be spared (502, 503, 504, 429, a Retry-After, a 5xx that took
FAST_ANSWER_S or more) is skipped for the rest of the pass
at its first failure, as before."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest
from receiver import Receiver
from test_webhooks import SECRET, due_now

from afc_cli.webhooks import FAST_ANSWER_S, FAST_FAILURES_PER_PASS


@pytest.fixture
def backlog(afc):
    """Six events pending and due: the batch ran while the receiver answered 503."""
    receiver = Receiver(default=(503, 0.0, {})).start()
    afc.env["AFC_HOOK_SECRET"] = SECRET
    data = manifest(jobs(6))
    data["webhook"] = {"url": receiver.url, "secret_env": "AFC_HOOK_SECRET", "timeout_s": 2}
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    statuses = {d["status"] for d in afc.json("webhooks", "list")["deliveries"]}
    assert statuses == {"pending"}
    due_now(afc)
    receiver.default = (200, 0.0, {})
    receiver.received.clear()
    yield receiver
    receiver.stop()


def test_one_event_failing_at_once_does_not_hold_back_the_others(afc, backlog):
    backlog.script = [(500, 0.0, {})]  # the first event posted fails, the receiver is up
    assert afc("webhooks", "deliver").returncode == 0
    assert [r.status for r in backlog.received] == [500, 200, 200, 200, 200, 200]
    listed = afc.json("webhooks", "list")["deliveries"]
    assert sorted(d["status"] for d in listed) == ["delivered"] * 5 + ["pending"]


def test_a_receiver_failing_every_event_gets_a_few_in_a_pass(afc, backlog):
    backlog.script = [(500, 0.0, {})] * 6
    assert afc("webhooks", "deliver").returncode == 0
    assert len(backlog.received) == FAST_FAILURES_PER_PASS == 3
    statuses = [d["status"] for d in afc.json("webhooks", "list")["deliveries"]]
    assert statuses == ["pending"] * 6


@pytest.mark.parametrize(
    "answer",
    [
        (503, 0.0, {}),
        (429, 0.0, {}),
        (500, 0.0, {"Retry-After": "1"}),
        # a gateway saying the receiver behind it is down (502) or slow (504)
        (502, 0.0, {}),
        (504, 0.0, {}),
        # a receiver that worked for a while and then failed: slow, not up and failing at
        # once; three of these a pass tripled the pass's wait on it
        (500, FAST_ANSWER_S + 0.3, {}),
    ],
)
def test_a_receiver_down_slow_or_asking_to_be_spared_is_skipped_at_once(afc, backlog, answer):
    backlog.script = [answer] * 6
    assert afc("webhooks", "deliver").returncode == 0
    assert len(backlog.received) == 1


def test_the_count_is_of_failures_in_a_row_not_in_the_pass(afc, backlog):
    """A receiver failing every other event is up: a 2xx between its 500s starts the count
    again, so none of its events waits for the next pass. Counted over the pass (the count
    not reset by a delivery), it was skipped at its third 500, its last event held back."""
    backlog.script = [(500, 0.0, {}), (200, 0.0, {})] * 3
    assert afc("webhooks", "deliver").returncode == 0
    assert [r.status for r in backlog.received] == [500, 200] * 3
    listed = afc.json("webhooks", "list")["deliveries"]
    assert sorted(d["status"] for d in listed) == ["delivered"] * 3 + ["pending"] * 3
