"""An idle ``afc worker`` (no job to claim) starts a drain only for deliveries that are due: a
delivery waiting out its backoff costs an idle worker nothing at each poll. A drain held up by
its receiver holds back neither a new job nor the worker's stop."""

from __future__ import annotations

import base64
import signal
import sqlite3
import threading
import time

import pytest
from conftest import jobs, manifest, wait_for
from receiver import Receiver

from afc_cli import worker as worker_mod
from afc_cli.worker import work

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()


def test_an_idle_worker_drains_only_due_deliveries(afc, monkeypatch):
    afc.env["AFC_HOOK_SECRET"] = SECRET
    monkeypatch.setenv("AFC_HOOK_SECRET", SECRET)
    data = manifest(jobs(1))
    data["webhook"] = {"url": "http://127.0.0.1:9/down", "secret_env": "AFC_HOOK_SECRET"}
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    # the receiver was down: its delivery waits out a backoff (an hour here: full jitter
    # may draw a backoff short enough to be due by the time the worker looks)
    assert afc.rows("SELECT status, attempts FROM deliveries") == [("pending", 1)]
    with sqlite3.connect(afc.cwd / "afc.db") as conn:
        conn.execute("UPDATE deliveries SET next_attempt_at = ?", (time.time() + 3600,))

    drains: list[list] = []
    real = worker_mod.drain_while_idle

    def counted(*args, **kwargs):
        drains.append(real(*args, **kwargs))
        return drains[-1]

    monkeypatch.setattr(worker_mod, "drain_while_idle", counted)
    monkeypatch.chdir(afc.cwd)

    def idle_worker() -> None:
        result = work(
            ledger_path=str(afc.cwd / "afc.db"), concurrency=1, grace_s=0, until_idle=True
        )
        assert result.exit_code == 0

    idle_worker()
    assert drains == [], "nothing was due: no drain"
    assert afc.rows("SELECT attempts FROM deliveries") == [(1,)]

    with sqlite3.connect(afc.cwd / "afc.db") as conn:  # now it is due
        conn.execute("UPDATE deliveries SET next_attempt_at = 0")
    idle_worker()
    assert drains == [[]], "a due delivery: one drain, which claimed nothing"
    assert afc.rows("SELECT attempts FROM deliveries") == [(2,)]


def test_a_worker_reports_its_own_spend_and_the_shared_budget_apart(afc):
    """Workers of one budget share its run id: a second worker that started no attempt
    reported the first one's 0.10 as its own ``spent`` (summing cron's log lines counted it
    twice). ``spent`` is this worker's; the budget's figures are under ``budget``."""
    afc.write_manifest(manifest(jobs(2)))  # 0.05 USD a render
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    first = afc.json("worker", "--until-idle", "--max-spend", "0.10")
    assert (first["spent"], first["budget"]["priced"]) == ("0.100000", "0.100000")
    afc.write_manifest(manifest(jobs(2), batch="b2"), "m2.yaml")
    assert afc("submit", "m2.yaml", "--no-run").returncode == 0
    second = afc.json("worker", "--until-idle", "--max-spend", "0.10", expect=4)
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(2,)]  # the first worker's
    assert (second["spent"], second["unknown_cost_attempts"]) == ("0.000000", 0)
    assert second["budget"]["priced"] == "0.100000"
    line = afc("worker", "--until-idle", "--max-spend", "0.10").stderr
    assert "spent 0.000000 USD (priced)" in line, line
    assert "budget 'workers': 0.100000 of 0.100000 USD priced" in line, line
    # the jobs left waiting say whose spend stopped them: the budget's workers', not "this run"
    reasons = {r for (r,) in afc.rows("SELECT waiting_reason FROM jobs WHERE batch = 'b2'")}
    assert reasons == {
        "budget: the workers of budget workers have spent or reserved 0.100000 of 0.100000 "
        "USD; the next attempt is estimated at 0.050000"
    }, reasons


@pytest.fixture
def held(afc):
    """A receiver that holds every POST unanswered, and one event due for it now (its
    webhook's ``timeout_s`` 120 s); a started worker waits until its POST is held."""
    receiver = Receiver().start()
    receiver.gate = threading.Event()  # set by receiver.stop
    afc.env["AFC_HOOK_SECRET"] = SECRET
    data = manifest(jobs(1))
    data["webhook"] = {
        "url": "http://127.0.0.1:9/down",
        "secret_env": "AFC_HOOK_SECRET",
        "timeout_s": 120,
    }
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    with sqlite3.connect(afc.cwd / "afc.db") as conn:  # due now, at the held receiver
        conn.execute("UPDATE deliveries SET url = ?, next_attempt_at = 0", (receiver.url,))

    def worker(*args: str):
        proc = afc.popen("worker", *args)
        deadline = time.time() + 30
        while not receiver.received:  # the idle worker's POST is in flight, held
            assert proc.poll() is None and time.time() < deadline, proc.stderr
            time.sleep(0.02)
        return proc

    yield receiver, worker
    receiver.stop()


def test_an_idle_worker_draining_a_hung_receiver_still_takes_new_jobs(afc, held):
    """README ("Webhooks"): a broken receiver never slows a render. An idle worker drained its due
    events in a run loop of no jobs, which returned only when the receiver's POST timed out
    (up to the webhook's ``timeout_s``, at most 120 s): a job submitted meanwhile, another
    batch's too, waited that long before any worker took it. The drain now claims beside it
    every ``--poll`` seconds and gives way (its POST abandoned, the event posted again with
    the same id once its lease runs out) as soon as a claim finds work."""
    receiver, start = held
    worker = start("--poll", "0.2")
    try:
        afc.write_manifest(manifest(jobs(1), batch="b2"), "m2.yaml")
        assert afc("submit", "m2.yaml", "--no-run").returncode == 0
        wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE batch = 'b2' AND status = 'succeeded'", 1)
        assert not receiver.gate.is_set() and len(receiver.received) == 1
    finally:
        receiver.gate.set()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, worker.stderr.read()
    # the abandoned POST's event is still to be delivered (at least once, same id)
    assert afc.rows("SELECT status FROM deliveries") == [("pending",)]


def test_a_signal_stops_an_idle_worker_whose_receiver_holds_its_post(afc, held):
    """The idle drain wakes on the worker's stop at once (the signal's byte on ``Stop``'s
    pipe), not when the held POST times out (120 s)."""
    receiver, start = held
    worker = start("--poll", "60")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.stderr.read()
    assert not receiver.gate.is_set()  # still held: the worker did not wait it out
    assert afc.rows("SELECT status FROM deliveries") == [("pending",)]
