"""Outside audit 25a (interruptions of the commands that write): 'afc webhooks replay ID'
stopped while it posts the delivery it re-queued, then run again as its message says, through
real ``afc`` child processes, real signals and a receiver that holds the POST."""

from __future__ import annotations

import base64
import signal
import threading
import time

import pytest
from conftest import jobs, manifest
from receiver import Receiver

SECRET = {"WH_SECRET": "whsec_" + base64.b64encode(b"0123456789abcdef").decode()}


@pytest.fixture
def dead(afc):
    """A job's event dead at a receiver that refused it (400), and that receiver, which from
    now on answers 200 once the test lets it (``gate``)."""
    receiver = Receiver(default=(400, 0.0, {})).start()
    data = manifest(jobs(1), webhook={"url": receiver.url, "secret_env": "WH_SECRET"})
    afc.write_manifest(data)
    afc.env.update(SECRET)
    assert afc("submit", "manifest.yaml").returncode == 0
    [(delivery, status)] = afc.rows("SELECT id, status FROM deliveries")
    assert status == "dead"
    receiver.default = (200, 0.0, {})
    receiver.gate = threading.Event()
    yield delivery, receiver
    receiver.stop()


def _stopped_replay(afc, receiver, delivery: str, sig: int):
    proc = afc.popen("webhooks", "replay", delivery)
    deadline = time.time() + 30
    while len(receiver.received) < 2 and time.time() < deadline:  # the replay's POST is held
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.02)
    proc.send_signal(sig)
    proc.wait(timeout=30)
    return proc


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_replay_stopped_while_it_posts_sends_the_event_when_run_again(afc, dead, sig):
    """Found by outside audit 25a: 'afc webhooks replay ID' stopped (Ctrl-C, a cron timeout)
    while the receiver held its POST said 'interrupted; nothing is lost: run this again ...:
    afc webhooks replay ID'; run again, it refused (exit 2, 'delivery ... is pending; only
    dead or delivered ones are replayed'), since the stopped replay had re-queued the row."""
    delivery, receiver = dead
    proc = _stopped_replay(afc, receiver, delivery, sig)
    err = proc.stderr.read()
    assert proc.returncode == 130, err
    assert f"run this again (receivers dedupe on webhook-id): afc webhooks replay {delivery}" in err
    receiver.gate.set()
    again = afc("webhooks", "replay", delivery)
    assert again.returncode == 0, again.stderr
    assert "1 delivered" in again.stderr, again.stderr
    assert afc.rows("SELECT status FROM deliveries") == [("delivered",)]
    ids = {r.headers["webhook-id"] for r in receiver.received}
    assert ids == {delivery} and len(receiver.received) == 3  # refused, cut off, delivered


def test_a_replay_killed_while_it_posts_is_not_posted_again_by_a_replay_before_its_lease_ends(
    afc, dead
):
    """Killed (SIGKILL) while it posted, a replay's row keeps its lease (the receiver may
    still be answering that POST): a replay then changes nothing and says why, exit 2; the
    row goes out with 'afc webhooks deliver' once the lease has run out (README)."""
    delivery, receiver = dead
    proc = _stopped_replay(afc, receiver, delivery, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    [(leased,)] = afc.rows("SELECT lease_owner FROM deliveries")
    again = afc("webhooks", "replay", delivery)
    assert again.returncode == 2, again.stderr
    assert "being posted by another afc process" in again.stderr, again.stderr
    assert afc.rows("SELECT status, lease_owner FROM deliveries") == [("pending", leased)]
    assert len(receiver.received) == 2
