"""'afc cancel' of a batch asks the providers to stop its requests several at once.

A batch cancelled with hundreds of Replicate or fal requests rendering: each is billed until
the provider stops it, and afc asked for one stop at a time, each after the last's answer
(a new connection each): the last request of 500 was stopped minutes after the first, and
behind a provider that takes a cancel and answers slowly, hours. They are asked
``ops.CANCELS_AT_ONCE`` at a time, through one client, each answer recorded as before.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
import time

from conftest import manifest
from test_cancel_completed import _killed_while_rendering, _requests
from test_providers import FAST, MODELS, RATES

from afc_cli import ops


def _left_rendering(afc, provider: str, prompts: list[str]) -> list[str]:
    """A batch of jobs ``j0``... on ``provider``, one a prompt, whose run is killed once
    every job's request is submitted: their requests render on. Their ids."""
    chain = [{"provider": provider, "model": MODELS[provider], "backoff": FAST}]
    jobs = [{"key": f"j{i}", "prompt": prompt, "chain": chain} for i, prompt in enumerate(prompts)]
    afc.write_manifest(manifest(jobs, rates=RATES))
    return _killed_while_rendering(afc, len(prompts))


def test_a_batch_cancel_asks_for_its_requests_stops_at_once_and_records_each(afc, fake):
    requests = _left_rendering(afc, "fal", [f"hold slow-cancel {i}" for i in range(6)])
    cancelled = afc("cancel", "--batch", "b1", "--yes", "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    out = json.loads(cancelled.stdout)
    assert len(out["cancelled"]) == 6
    assert out["not_stopped_at_provider"] == [] and out["completed_at_provider"] == []
    assert sorted(fake.cancels) == sorted(requests)
    assert fake.cancels_at_once > 1, "each stop was asked only after the last one's answer"
    # each answer recorded on its own job, as one at a time did
    for job in out["cancelled"]:
        kinds = [e["kind"] for e in afc.json("show", job["key"])["events"]]
        assert kinds.count("provider_cancel_sent") == 1, kinds


def test_a_cancel_the_provider_throttles_is_asked_again_after_its_retry_after(afc, fake):
    """Replicate throttles an account's requests (429 'Request was throttled', a Retry-After):
    asked at once, a batch's cancels meet that limit sooner than one at a time did. A
    throttled cancel stopped nothing and was recorded as asked ('provider_cancel_failed',
    never asked again by a later cancel), the person told to stop each request with
    Replicate itself while they rendered on, billed. It is asked again once the provider's
    wait has passed, and the request stopped."""
    requests = _left_rendering(afc, "replicate", [f"hold cancel-refused-429 {i}" for i in range(3)])
    cancelled = afc("cancel", "--batch", "b1", "--yes", "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    out = json.loads(cancelled.stdout)
    assert out["not_stopped_at_provider"] == [], cancelled.stderr
    assert "may render on" not in cancelled.stderr
    for request in requests:
        assert fake.predictions[request]["status"] == "canceled"
        assert fake.cancels.count(request) == 2  # throttled once, then taken
    for job in out["cancelled"]:
        kinds = [e["kind"] for e in afc.json("show", job["key"])["events"]]
        assert kinds.count("provider_cancel_sent") == 1 and "provider_cancel_failed" not in kinds


def test_a_batch_cancel_names_the_requests_in_the_order_of_its_jobs(afc, fake):
    """Asked at once, the providers' answers come in any order: the cancel's lists
    (``--json``'s ``completed_at_provider``, its stderr lines) came in that order, so two
    cancels of the same batch named the same requests in another order each time, and a
    script comparing them (or pairing them with ``cancelled``) saw a change where there was
    none. They are in the batch's order, as when one was asked at a time; the ledger still
    records each answer as it comes."""
    _left_rendering(
        afc, "fal", ["done-at-cancel slow-cancel 0", "done-at-cancel 1", "done-at-cancel 2"]
    )
    cancelled = afc("cancel", "--batch", "b1", "--yes", "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    out = json.loads(cancelled.stdout)
    # j0's answer comes last (its cancel takes a moment to answer)
    assert [item["key"] for item in out["completed_at_provider"]] == ["j0", "j1", "j2"]
    said = [line.split(":")[1].strip() for line in cancelled.stderr.splitlines() if "b1/" in line]
    assert said == ["b1/j0", "b1/j1", "b1/j2"], cancelled.stderr


def test_an_answer_whose_record_fails_leaves_the_others_answers_recorded_as_they_came(afc, fake):
    """One answer's record failed (here the batch's rate cards could not be read to price a
    request fal said had completed; a ledger that refuses a write fails so too): the error
    left the stops asked beside it, their clients closed under them. Those still waiting for
    their answer were recorded 'provider_cancel_failed' (the closed client's error taken for
    the provider's answer), which no later cancel asks again, or not at all, with no warning
    naming them. Each answer is recorded, then the error is said."""
    _left_rendering(afc, "fal", ["done-at-cancel 0", "hold slow-cancel 1", "hold slow-cancel 2"])
    conn = sqlite3.connect(afc.cwd / "afc.db")
    with conn:
        conn.execute("UPDATE batches SET rates_json = '{'")
    conn.close()
    cancelled = afc("cancel", "--batch", "b1", "--yes", "--json")
    assert cancelled.returncode != 0  # the error is said
    for key in ("j1", "j2"):
        kinds = [e["kind"] for e in afc.json("show", key)["events"]]
        assert "provider_cancel_failed" not in kinds, (key, kinds)
        assert kinds.count("provider_cancel_sent") == 1, (key, kinds)


def test_a_ledger_held_busy_by_another_process_holds_back_no_stop(afc, fake):
    """Each answer's record was written inside the loop that asks the stops: on SQLite, a
    write lock another process held (a big batch's admission, a backup) blocked that loop up
    to the busy timeout (30 s) at the first answer, and the stops not yet asked waited with
    it, their requests rendering on, billed. Measured with 16 fal requests and the lock
    held 10 s: 8 stops asked, the other 8 only once it was let go (the cancel took 12 s for
    0.6 s of answers). Every stop is asked first, then the answers recorded, in the order
    they came (a killed cancel's unrecorded answers are asked again by the next cancel)."""
    count = ops.CANCELS_AT_ONCE + 1
    chain = [{"provider": "fal", "model": MODELS["fal"], "backoff": FAST}]
    jobs = [
        {"key": f"j{i}", "prompt": f"hold slow-cancel {i}", "chain": chain} for i in range(count)
    ]
    afc.write_manifest(manifest(jobs, rates=RATES))
    run = afc.popen("submit", "manifest.yaml", "--concurrency", str(count))
    try:
        requests = _requests(afc, count)
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
    asked: list[int] = []

    def hold_the_ledger() -> None:
        # once the first stop is asked (the job cancels committed), another process's write
        # lock, held until every stop has been asked (or 20 s, within the busy timeout)
        deadline = time.monotonic() + 60
        while not fake.cancels and time.monotonic() < deadline:
            time.sleep(0.005)
        conn = sqlite3.connect(afc.cwd / "afc.db", timeout=30, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        deadline = time.monotonic() + 20
        while len(fake.cancels) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        asked.append(len(fake.cancels))
        conn.execute("COMMIT")
        conn.close()

    holder = threading.Thread(target=hold_the_ledger)
    holder.start()
    cancelled = afc("cancel", "--batch", "b1", "--yes", "--json")
    holder.join()
    assert cancelled.returncode == 0, cancelled.stderr
    assert asked == [count], "stops waited for the ledger's lock"
    assert sorted(fake.cancels) == sorted(requests)
    for job in json.loads(cancelled.stdout)["cancelled"]:
        kinds = [e["kind"] for e in afc.json("show", job["key"])["events"]]
        assert kinds.count("provider_cancel_sent") == 1, kinds
