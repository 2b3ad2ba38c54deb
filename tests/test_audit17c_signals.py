"""Interruptions, found by an outside audit: what a first and a second signal mean through the
real ``afc`` command, whatever the run is doing when they come."""

from __future__ import annotations

import base64
import signal
import socket
import subprocess
import threading

import pytest
from conftest import jobs, manifest, wait_for
from test_interruptions import wait_line


def test_a_second_signal_ends_a_run_whose_s3_upload_stalls(afc, s3):  # noqa: F811
    """A run stopped while its S3 uploads stalled (a slow link, a store that holds the
    request): the second signal said 'abandoning 2 job(s) still in flight', and the process
    went on waiting for the uploads' threads, asyncio's pool being joined at the run's end and
    again at the interpreter's exit: up to the client's read timeout of 120 s a try, longer for
    a big output trickling up, the exit 130 never came. Now the abandoned uploads hold nothing:
    exit 130 at once, the paid renders recorded, their jobs left at store for 'afc resume',
    which stores them without paying again."""
    afc.write_manifest(manifest(jobs(2)))
    stalled, release = threading.Event(), threading.Event()
    take = s3.plan.take

    def stall(method, path):
        if method == "PUT" and "/b1/" in path and not release.is_set():
            stalled.set()
            release.wait(60)
        return take(method, path)

    s3.plan.take = stall
    proc = afc.popen("submit", "manifest.yaml", "--storage", s3.url, "--grace", "60")
    try:
        assert stalled.wait(30), "no upload began"
        # both renders paid and spooled before the signals (under load the second could still
        # be in its call, and an abandoned call is rightly recorded unknown)
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'succeeded'", 2)
        proc.send_signal(signal.SIGTERM)
        wait_line(proc, "stopping")
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            code = None
        err = proc.stderr.read() if code is not None else ""
    finally:
        release.set()
        if proc.poll() is None:
            proc.wait(timeout=60)
    assert code == 130, "the abandoned uploads held the exit"
    assert "a second signal: abandoning" in err and "Traceback" not in err, err
    assert afc.rows("SELECT status, cost_micros FROM attempts") == [("succeeded", 50_000)] * 2
    assert set(afc.rows("SELECT status FROM jobs")) == {("queued",)}
    resumed = afc("resume", "--storage", s3.url)
    assert resumed.returncode == 0, resumed.stderr
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(2,)], "a render paid twice"
    assert set(afc.rows("SELECT status FROM jobs")) == {("succeeded",)}


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_sigterm_to_webhooks_deliver_exits_130_and_the_events_go_out_later(afc, sigint):
    """'afc webhooks deliver' run from cron and stopped by its timeout (SIGTERM) while a
    receiver held the request died by the signal (exit -15, 143 in a shell), a code README's
    table does not have; Ctrl-C said 'every job stays resumable (run afc resume)', advice for
    another command. Now both are an interruption: exit 130, the command to run again named,
    every event still pending for the next delivery."""
    receiver = socket.socket()  # accepts and never answers: a receiver that hangs
    receiver.bind(("127.0.0.1", 0))
    receiver.listen(16)
    receiver.settimeout(30)
    port = receiver.getsockname()[1]
    data = manifest(
        jobs(2),
        # the longest timeout: a loaded machine's stall never ends a held POST before its signal
        webhook={
            "url": f"http://127.0.0.1:{port}/hook",
            "secret_env": "WH_SECRET",
            "timeout_s": 120,
        },
    )
    afc.write_manifest(data)
    env = {"WH_SECRET": "whsec_" + base64.b64encode(b"0123456789abcdef").decode()}
    held = []
    try:
        assert afc("submit", "manifest.yaml", "--no-run", env=env).returncode == 0
        # the jobs end with no receiver answering: their events wait in the outbox
        run = afc.popen("resume", env=env)
        held.append(receiver.accept()[0])
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=30) == 130
        # any connection the stopped run left in the listen queue is its own, not the
        # delivery's below (accepting it there sent the signal before the POST was under way)
        receiver.setblocking(False)
        while True:
            try:
                held.append(receiver.accept()[0])
            except BlockingIOError:
                break
        receiver.settimeout(30)
        # a shell starts a background job ('afc webhooks deliver &', nohup) with SIGINT
        # ignored: SIGTERM, made a SIGINT for asyncio, then did nothing, and the delivery
        # held by its receiver went on until the POST's timeout (fresh-clone runs started in
        # the background failed here; webhooks.run_stoppable)
        proc = subprocess.Popen(
            afc.command("webhooks", "deliver"),
            cwd=afc.cwd,
            env={**afc.env, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
            if sigint == "ignored"
            else None,
        )
        held.append(receiver.accept()[0])  # the delivery is under way
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        err = proc.stderr.read()
        assert code == 130, (err, afc.rows("SELECT status, attempts, last_error FROM deliveries"))
        assert "run this again" in err and "afc webhooks deliver" in err, err
        assert "Traceback" not in err
    finally:
        for conn in held:
            conn.close()
        receiver.close()
    assert afc.rows("SELECT status, COUNT(*) FROM deliveries GROUP BY 1") == [("pending", 2)]
