"""Outside audit 25a (interruptions of the commands that write): 'afc cancel' cut off between
a job's cancel (committed) and its request to the provider to stop the job's render, then run
again as its message says, through real ``afc`` child processes and real signals."""

from __future__ import annotations

import json
import signal
import socket
import time

import pytest
from conftest import manifest, wait_for

MODEL = "black-forest-labs/flux-1.1-pro"
RATES = [{"provider": "replicate", "model": MODEL, "per_second": "0.0012"}]


def _rendering(afc, keys: list[str]) -> dict[str, str]:
    """Jobs whose Replicate predictions render on after a stopped submit: key -> request id."""
    data = manifest([{"key": key, "prompt": f"hold {key}"} for key in keys], rates=RATES)
    data["defaults"]["chain"] = [{"provider": "replicate", "model": MODEL}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml")
    sql = "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL"
    wait_for(afc, sql, len(keys))
    proc.send_signal(signal.SIGTERM)  # the predictions are left to the next run, by id
    assert proc.wait(timeout=60) == 130, proc.stderr.read()
    return dict(
        afc.rows(
            "SELECT j.key, a.provider_request_id FROM attempts a JOIN jobs j ON j.id = a.job_id"
        )
    )


def _cut_off(afc, sig: int, *args: str) -> str:
    """Run 'afc cancel ARGS' against a Replicate that takes the cancel's connection and never
    answers, and stop it with ``sig`` while it waits there: its stderr."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(8)
    hole.settimeout(30)
    url = f"http://127.0.0.1:{hole.getsockname()[1]}/v1"
    proc = afc.popen("cancel", *args, env={"REPLICATE_BASE_URL": url})
    try:
        conn, _ = hole.accept()  # the cancel's job is cancelled in the ledger: committed first
        time.sleep(0.2)
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 130
        conn.close()
    finally:
        hole.close()
        if proc.poll() is None:
            proc.kill()
    return proc.stderr.read()


@pytest.mark.parametrize("sig", [signal.SIGINT])
def test_a_cancel_cut_off_before_it_stopped_the_render_stops_it_when_run_again(afc, fake, sig):
    """Found by outside audit 25a: 'afc cancel KEY' interrupted (Ctrl-C, or SIGTERM: it died
    with -15 and said nothing) while it asked Replicate to stop the job's prediction said to
    cancel again; but the job was cancelled, so the next 'afc cancel KEY' said 'already
    cancelled, left as it is' and never asked: the prediction rendered on, billed, and a
    cancelled job's request is never polled, so its cost stayed unknown for good."""
    requests = _rendering(afc, ["j0"])
    err = _cut_off(afc, sig, "j0")
    assert "interrupted" in err and "cancel those again" in err, err
    assert afc.rows("SELECT status FROM jobs") == [("cancelled",)]
    assert fake.cancels == []  # the provider never heard of it
    again = afc("cancel", "j0")
    assert again.returncode == 0, again.stderr
    assert "already cancelled" in again.stderr
    assert f"asked replicate to stop request {requests['j0']}" in again.stderr, again.stderr
    assert fake.cancels == [requests["j0"]]
    assert fake.predictions[requests["j0"]]["status"] == "canceled"
    # asked once: a third cancel has nothing left to ask for
    third = afc.json("cancel", "j0")
    assert third["stopped_at_provider"] == [] and fake.cancels == [requests["j0"]], third
    assert fake.counts["replicate_submit"] == 1


def test_a_batch_cancel_cut_off_asks_for_the_render_it_left_when_run_again(afc, fake):
    requests = _rendering(afc, ["j0", "j1"])
    err = _cut_off(afc, signal.SIGINT, "--batch", "b1", "--yes")
    assert "cancel those again" in err, err
    # both jobs are cancelled before any provider is asked (outside audit 26a); neither
    # request was stopped
    assert afc.rows("SELECT key, status FROM jobs ORDER BY key") == [
        ("j0", "cancelled"),
        ("j1", "cancelled"),
    ]
    again = afc("cancel", "--batch", "b1", "--yes", "--json")
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    assert result["cancelled"] == []
    stopped = [(item["key"], item["request"]) for item in result["stopped_at_provider"]]
    assert sorted(stopped) == sorted(requests.items())
    assert sorted(fake.cancels) == sorted(requests.values())
    assert afc.rows("SELECT status FROM jobs") == [("cancelled",), ("cancelled",)]


def test_a_job_whose_cut_off_cancel_never_stopped_its_render_polls_it_when_retried(afc, fake):
    """Found by outside audit 25a: after a cancel cut off before it asked Replicate to stop
    the job's prediction, 'afc retry KEY' (rather than the cancel again) put the job back
    past that attempt, as for any cancelled job (whose request the cancel asked the provider
    to stop): the next run paid for a new prediction while the first, never stopped, rendered
    on, billed and never polled. A request no cancel asked the provider about is polled."""
    requests = _rendering(afc, ["j0"])
    _cut_off(afc, signal.SIGINT, "j0")
    retried = afc("retry", "j0")
    assert retried.returncode == 0, retried.stderr
    fake.released.set()
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert fake.counts["replicate_submit"] == 1, "the render was paid for again"
    assert afc.rows("SELECT number, status, cost_micros, provider_request_id FROM attempts") == [
        (1, "succeeded", 3840, requests["j0"])
    ]
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
