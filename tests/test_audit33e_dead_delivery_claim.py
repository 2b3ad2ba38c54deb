"""Outside audit 33e: webhook deliveries claimed by an afc process that was then killed
(SIGKILL) on this host, through real ``afc`` child processes and a real receiver."""

from __future__ import annotations

import base64
import json
import signal
import threading
import time

from conftest import jobs, manifest
from receiver import Receiver

SECRET = {"WH_SECRET": "whsec_" + base64.b64encode(b"0123456789abcdef").decode()}


def _killed_while_posting(afc, n: int = 2) -> Receiver:
    """``afc submit`` of ``n`` jobs whose receiver holds every POST; SIGKILLed once it has
    received the first, with its other events claimed and pending."""
    receiver = Receiver(default=(200, 0.0, {}), gate=threading.Event()).start()
    afc.write_manifest(manifest(jobs(n), webhook={"url": receiver.url, "secret_env": "WH_SECRET"}))
    afc.env.update(SECRET)
    proc = afc.popen("submit", "manifest.yaml")
    deadline = time.time() + 60
    while not receiver.received and time.time() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.02)
    assert receiver.received
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    receiver.gate.set()  # the receiver answers from now on
    return receiver


def test_deliver_posts_at_once_the_events_a_killed_process_on_this_host_had_claimed(afc):
    """Found by outside audit 33e: after a SIGKILL of an afc process while it delivered
    webhooks, 'afc webhooks deliver' printed '0 delivered, 0 retrying, 0 dead, 0 skipped' and
    exited 0 while those events stayed pending for the dead process's lease (timeout_s plus
    120 s), where a job it held is taken over at once (owner.owner_is_dead). A claim whose
    owner on this host is known dead is now taken at once, as a job's lease: posted again
    (at least once), with the same webhook-id."""
    receiver = _killed_while_posting(afc)
    held = afc.rows("SELECT id FROM deliveries WHERE status = 'pending'")
    assert len(held) == 2  # one cut off mid-POST, one claimed and waiting its turn
    run = afc("webhooks", "deliver", "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["delivered"] == 2, run.stdout
    assert afc.rows("SELECT DISTINCT status FROM deliveries") == [("delivered",)]
    ids = [r.headers["webhook-id"] for r in receiver.received]
    assert sorted(set(ids)) == sorted(row[0] for row in held)
    assert len(ids) == 3  # the one cut off is posted again (at least once), same id
    receiver.stop()


def test_an_idle_worker_of_this_host_posts_the_events_a_killed_process_had_claimed(afc):
    """An idle 'afc worker' drains only when a delivery is due and free to claim
    (``Ledger.deliveries_due``): a killed process's claims on this host count as free."""
    receiver = _killed_while_posting(afc)
    run = afc("worker", "--until-idle", "--poll", "0.2")
    assert run.returncode == 0, run.stderr
    assert afc.rows("SELECT DISTINCT status FROM deliveries") == [("delivered",)]
    assert len(receiver.received) == 3
    receiver.stop()


def test_a_live_process_keeps_the_events_it_claimed(afc):
    """The takeover is of a dead owner's claims only: while the afc that claimed them lives
    (its POST held by the receiver), 'afc webhooks deliver' posts none of them again. It said
    only '0 delivered, 0 retrying, 0 dead, 0 skipped' (--json: all zeros), as if nothing
    waited; it now says how many due events another process's claim holds, and until when
    (``held``, ``held_until``), as it does for a claim of another host's, perhaps dead,
    process, which only its lease's end frees."""
    receiver = Receiver(default=(200, 0.0, {}), gate=threading.Event()).start()
    afc.write_manifest(manifest(jobs(2), webhook={"url": receiver.url, "secret_env": "WH_SECRET"}))
    afc.env.update(SECRET)
    proc = afc.popen("submit", "manifest.yaml")
    try:
        deadline = time.time() + 60
        while not receiver.received and time.time() < deadline:
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.02)
        run = afc("webhooks", "deliver", "--json")
        assert run.returncode == 0, run.stderr
        said = json.loads(run.stdout)
        assert said["delivered"] == 0 and said["held"] == 2, run.stdout
        until = said["held_until"]
        assert until and until.endswith("Z"), run.stdout
        assert len(receiver.received) == 1
        # not only zeros: how many wait for another process's claim, and until when
        text = afc("webhooks", "deliver")
        assert text.returncode == 0, text.stderr
        assert "0 delivered, 0 retrying, 0 dead, 0 skipped" in text.stderr, text.stderr
        assert "2 due webhook events are held by another afc process's claim until" in (
            text.stderr
        ), text.stderr
        assert len(receiver.received) == 1
    finally:
        receiver.gate.set()
        assert proc.wait(timeout=60) == 0
    assert afc.rows("SELECT DISTINCT status FROM deliveries") == [("delivered",)]
    assert len(receiver.received) == 2
    receiver.stop()


def test_on_postgresql_deliver_posts_at_once_what_a_killed_process_had_claimed(afc, pg_url):
    afc.env["AFC_LEDGER"] = pg_url
    receiver = _killed_while_posting(afc)
    # from another host, which cannot tell whether that process died: its claims' lease
    # decides; said so (how many, until when), not all zeros
    elsewhere = afc("webhooks", "deliver", "--json", env={"AFC_HOST_ID": "another-host"})
    assert elsewhere.returncode == 0, elsewhere.stderr
    said = json.loads(elsewhere.stdout)
    assert (said["delivered"], said["held"]) == (0, 2), elsewhere.stdout
    assert said["held_until"] is not None, elsewhere.stdout
    assert "2 due webhook events are held by another afc process's claim" in elsewhere.stderr
    assert len(receiver.received) == 1
    run = afc("webhooks", "deliver", "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["delivered"] == 2, run.stdout
    listed = json.loads(afc("webhooks", "list", "--json").stdout)["deliveries"]
    assert {row["status"] for row in listed} == {"delivered"}
    assert len({r.headers["webhook-id"] for r in receiver.received}) == 2
    assert len(receiver.received) == 3
    receiver.stop()
