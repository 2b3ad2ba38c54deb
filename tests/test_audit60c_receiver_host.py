"""A receiver is the server a webhook URL reaches (its scheme, host and port), not the URL:
jobs whose webhooks name one receiver by URLs of their own (a callback per shot,
``.../hooks/<key>``) are one receiver's events. Skipped for the pass when it is down, slow or
asks to be spared, its Retry-After kept, three fast 5xx in a row counted, one request at a
time: as for one URL (outside audit 60c). Each URL of it posted on its own, a receiver that
hung got every event's POST at once (eight at a time), each spending one of its tries, and
one answering 429 with Retry-After: 60 got one POST per job from the same run. A 410 Gone
still disables the URL it answered for, not the receiver's other URLs."""

from __future__ import annotations

import sqlite3

import pytest
from conftest import jobs, manifest
from receiver import Receiver
from test_webhooks import SECRET, due_now

from afc_cli.webhooks import FAST_FAILURES_PER_PASS, receiver_of

N = 6


@pytest.fixture
def receiver():
    r = Receiver().start()
    yield r
    r.stop()


def per_job_hooks(afc, receiver, timeout_s: float = 2.0, other=None) -> None:
    """A batch of N jobs, each with its webhook at a URL of its own on ``receiver`` (every
    other one on ``other``'s, when given)."""
    afc.env["AFC_HOOK_SECRET"] = SECRET
    data = manifest(jobs(N))
    for i, job in enumerate(data["jobs"]):
        at = other if other is not None and i % 2 else receiver
        job["webhook"] = {
            "url": f"{at.url}/{job['key']}",
            "secret_env": "AFC_HOOK_SECRET",
            "timeout_s": timeout_s,
        }
    afc.write_manifest(data)


def tries(afc) -> list[int]:
    return sorted(d["attempts"] for d in afc.json("webhooks", "list")["deliveries"])


def backlog(afc, receiver) -> None:
    """N events pending and due, none tried: the batch ran while the receiver was skipped."""
    receiver.default = (503, 0.0, {"Retry-After": "600"})
    per_job_hooks(afc, receiver, timeout_s=1.0)
    assert afc("submit", "manifest.yaml").returncode == 0
    with sqlite3.connect(afc.cwd / "afc.db") as conn:  # the run's one try forgotten
        conn.execute("UPDATE deliveries SET attempts = 0")
    conn.close()
    due_now(afc)
    receiver.received.clear()


def test_a_receivers_urls_are_one_receiver():
    assert receiver_of("http://127.0.0.1:8080/hooks/a") == receiver_of(
        "http://127.0.0.1:8080/hooks/b?x=1"
    )
    assert receiver_of("https://Hooks.Example.com/a") == receiver_of(
        "https://hooks.example.com:443/b"
    )
    assert receiver_of("http://h:8080/a") != receiver_of("http://h:8081/a")
    assert receiver_of("http://h/a") != receiver_of("https://h/a")


def test_a_429_with_retry_after_spares_every_url_of_the_receiver(afc, receiver):
    """The run posts one event into the 429 and holds the others until its Retry-After has
    run out: they keep their tries. Before: one POST per job, N tries spent."""
    receiver.default = (429, 0.0, {"Retry-After": "60"})
    per_job_hooks(afc, receiver)
    assert afc("submit", "manifest.yaml").returncode == 0
    assert len(receiver.received) == 1
    assert tries(afc) == [0] * (N - 1) + [1]


def test_a_receiver_that_hangs_gets_one_post_a_pass(afc, receiver):
    backlog(afc, receiver)
    receiver.default = (200, 3.0, {})  # no answer within the webhooks' timeout_s (1 s)
    assert afc("webhooks", "deliver").returncode == 0
    assert len(receiver.received) == 1, "one POST, then the receiver is skipped for the pass"
    assert tries(afc) == [0] * (N - 1) + [1]


def test_a_receiver_failing_every_event_at_once_gets_a_few(afc, receiver):
    backlog(afc, receiver)
    receiver.default = (500, 0.0, {})
    assert afc("webhooks", "deliver").returncode == 0
    assert len(receiver.received) == FAST_FAILURES_PER_PASS


def test_another_receiver_is_not_held_back(afc, receiver):
    """Half the jobs' URLs on a receiver that hangs, half on another that answers: the other
    gets every one of its events in the run."""
    up = Receiver().start()
    try:
        receiver.default = (200, 3.0, {})
        per_job_hooks(afc, receiver, timeout_s=1.0, other=up)
        assert afc("submit", "manifest.yaml").returncode == 0
        assert len(up.received) == N // 2
        assert len(receiver.received) == 1
    finally:
        up.stop()


def test_a_410_disables_the_url_it_answered_for_only(afc, receiver):
    receiver.script = [(410, 0.0, {})]
    per_job_hooks(afc, receiver)
    assert afc("submit", "manifest.yaml", "--concurrency", "1").returncode == 0
    listed = afc.json("webhooks", "list")["deliveries"]
    assert sorted(d["status"] for d in listed) == ["dead"] + ["delivered"] * (N - 1)
    assert len(receiver.received) == N
