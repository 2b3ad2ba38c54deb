"""Found by an outside audit that walked README's commands as a new user does."""

from __future__ import annotations

import base64
import json
import signal
import sqlite3
import subprocess

import pytest
from conftest import frozen_at, jobs, manifest, wait_for

SECRET = "whsec_" + base64.b64encode(b"afc audit secret, 32 bytes long!").decode()


def test_json_webhooks_is_null_when_every_event_arrived(afc):
    """README: a run's ``--json`` has ``"webhooks": {"pending", "dead"}``, ``null`` when every
    event arrived. It was ``{"pending": 0, "dead": 0}`` on every run, webhooks or none, so a
    script that alerts on a non-null field alerted on every run."""
    afc.write_manifest(manifest(jobs(2)))
    assert afc.json("submit", "manifest.yaml")["webhooks"] is None
    assert afc.json("submit", "manifest.yaml")["webhooks"] is None  # a replay
    assert afc.json("resume")["webhooks"] is None


def test_deliver_and_replay_say_when_a_webhook_secret_is_missing(afc):
    """'afc webhooks deliver' where the manifest's secret variable is not set printed
    '0 delivered, 0 retrying, 0 dead, 1 skipped' and exited 0 (cron saw nothing wrong, the
    events never went out), and 'afc webhooks replay ID' re-queued the event, sent nothing
    and exited 0 the same way: why was only in 'afc webhooks list'."""
    from receiver import Receiver

    receiver = Receiver(default=(400, 0.0, {})).start()  # the events end dead
    try:
        afc.env["AFC_HOOK_SECRET"] = SECRET
        data = manifest(jobs(2))
        data["webhook"] = {"url": receiver.url, "secret_env": "AFC_HOOK_SECRET", "timeout_s": 2}
        afc.write_manifest(data)
        assert afc("submit", "manifest.yaml").returncode == 0
        dead = afc.json("webhooks", "list", "--dead")["deliveries"]
        assert len(dead) == 2 and len(receiver.received) == 2
        receiver.default = (500, 0.0, {"Retry-After": "0"})
        del afc.env["AFC_HOOK_SECRET"]

        replay = afc("webhooks", "replay", dead[0]["id"][:8])
        assert replay.returncode == 2, replay.stderr
        assert "AFC_HOOK_SECRET" in replay.stderr and "not set" in replay.stderr
        assert [d["id"] for d in afc.json("webhooks", "list", "--dead")["deliveries"]] == [
            d["id"] for d in dead
        ]  # nothing re-queued

        conn = sqlite3.connect(afc.cwd / "afc.db")
        with conn:  # the events due again, as a later cron pass finds them
            conn.execute(
                "UPDATE deliveries SET status = 'pending', next_attempt_at = 0,"
                " lease_owner = NULL, lease_expires = NULL"
            )
        conn.close()
        for args in (("webhooks", "deliver"), ("webhooks", "deliver", "-q", "--json")):
            result = afc(*args)
            assert result.returncode == 0, result.stderr  # pending, not dead: nothing lost
            assert "AFC_HOOK_SECRET is not set in the environment" in result.stderr, args
            assert "afc webhooks deliver" in result.stderr
        assert len(receiver.received) == 2  # nothing was sent unsigned
    finally:
        receiver.stop()


def test_a_run_that_left_every_job_to_another_process_says_it_ran_none(afc):
    """An overlapping submit (cron, a second terminal) whose jobs another afc process held
    said 'afc: 1 run here; of 1 job(s): 1 running' right after 'this run left it alone'."""
    afc.write_manifest(manifest(jobs(1)))
    frozen = afc.popen("submit", "manifest.yaml", env={"AFC_STALL_POINT": "after_attempt_row"})
    try:
        frozen_at(frozen)
        second = afc("submit", "manifest.yaml")
    finally:
        frozen.send_signal(signal.SIGCONT)
    frozen.communicate(timeout=60)
    assert second.returncode == 1, second.stderr  # another process runs them: not all stored
    assert "left it alone" in second.stderr
    assert "afc: 0 run here; of 1 job(s): 1 running" in second.stderr, second.stderr
    assert afc("resume").returncode == 0
    assert "afc: 0 run here; of 1 job(s): 1 succeeded" in afc("submit", "manifest.yaml").stderr


@pytest.mark.parametrize("provider", ["replicate", "fal"])
def test_cancel_says_when_the_provider_was_not_told_to_stop(afc, fake, provider):
    """README: 'afc cancel of a job rendering on Replicate or fal also cancels the prediction
    or request there'. Run where the provider's key is not set (another shell, an operator's
    laptop), it asked nothing, said 'b1/j: cancelled' and exited 0: the request rendered on,
    billed, and the person took it as stopped. The job is cancelled all the same; the request
    left running is now named on stderr and in --json."""
    model = {"replicate": "black-forest-labs/flux-1.1-pro", "fal": "fal-ai/flux/dev"}[provider]
    key_env = {"replicate": "REPLICATE_API_TOKEN", "fal": "FAL_KEY"}[provider]
    data = manifest([{"key": "j", "prompt": "hold"}])
    data["defaults"]["chain"] = [{"provider": provider, "model": model}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml")
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL", 1)
        env = {k: v for k, v in afc.env.items() if k != key_env}
        result = subprocess.run(
            afc.command("cancel", "j", "--json"),
            cwd=afc.cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        proc.send_signal(signal.SIGTERM)  # it polls the request on: nothing stopped it
        proc.wait(timeout=30)
    assert result.returncode == 0, result.stderr
    assert fake.cancels == []  # nothing could be asked without the key
    [request] = afc.rows("SELECT provider_request_id FROM attempts")
    out = json.loads(result.stdout)
    assert out["cancelled"] == [{"key": "j", "batch": "b1"}]
    [left] = out["not_stopped_at_provider"]
    assert (left["key"], left["provider"], left["request"]) == ("j", provider, request[0])
    assert key_env in left["why"]
    assert f"request {request[0]}" in result.stderr and "billed" in result.stderr
    assert afc.rows("SELECT status FROM jobs") == [("cancelled",)]


def test_cancel_reached_the_provider_says_nothing_more(afc, fake):
    data = manifest([{"key": "j", "prompt": "hold"}])
    data["defaults"]["chain"] = [
        {"provider": "replicate", "model": "black-forest-labs/flux-1.1-pro"}
    ]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml")
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL", 1)
        result = afc("cancel", "j", "--json")
    finally:
        assert proc.wait(timeout=30) == 1  # its poll saw the prediction canceled
    assert result.returncode == 0 and "warning" not in result.stderr, result.stderr
    assert json.loads(result.stdout)["not_stopped_at_provider"] == []
    assert len(fake.cancels) == 1


@pytest.mark.parametrize(
    ("status", "body", "why"),
    [
        (202, {"status": "CANCELLATION_REQUESTED"}, None),
        (400, {"status": "ALREADY_COMPLETED"}, "completed"),  # it renders no more: priced
        (404, {"status": "NOT_FOUND"}, "HTTP 404"),
        (401, {"detail": "Unauthorized"}, "HTTP 401"),
    ],
)
def test_fal_cancel_says_whether_the_request_renders_on(monkeypatch, status, body, why):
    import asyncio

    import httpx

    from afc_cli.providers.fal import FalProvider

    monkeypatch.setenv("FAL_KEY", "fal-test-key-0123456789")
    provider = FalProvider()
    provider._client = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda request: httpx.Response(status, json=body))
    )

    async def cancel():
        try:
            return await provider.cancel_answer("r-1", "fal-ai/flux/dev")
        finally:
            await provider._client.aclose()

    assert asyncio.run(cancel()) == why


def test_a_worker_without_the_webhook_secret_runs_nothing_as_resume(afc):
    """'afc resume' refuses (exit 2) to run jobs whose webhook secret is not set; 'afc
    worker', which README says runs them as 'afc resume' does, ran them and left their
    events pending for ever (every later drain skips a row without its secret), saying
    nothing. It now refuses at the claim as for a missing API key: exit 2 naming the
    variable, the jobs given back to a worker that has it."""
    afc.env["AFC_HOOK_SECRET"] = SECRET
    data = manifest(jobs(2))
    data["webhook"] = {"url": "http://127.0.0.1:9/hooks", "secret_env": "AFC_HOOK_SECRET"}
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    del afc.env["AFC_HOOK_SECRET"]
    assert afc("resume").returncode == 2
    worker = afc("worker", "--until-idle", "--poll", "0.1")
    assert worker.returncode == 2, worker.stderr
    assert "AFC_HOOK_SECRET" in worker.stderr
    assert afc.rows("SELECT status, lease_owner FROM jobs") == [("queued", None)] * 2
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(0,)]
    afc.env["AFC_HOOK_SECRET"] = SECRET
    assert afc("worker", "--until-idle", "--poll", "0.1").returncode == 0
    assert afc.rows("SELECT DISTINCT status FROM jobs") == [("succeeded",)]


def test_show_does_not_give_an_unstored_output_as_stored(afc):
    """A job rendered and spooled whose store failed (an S3 outage: the job waits at store)
    was shown by 'afc show' as 'output s3://...' with its SHA-256, as a stored job is; the
    object was not there."""
    import boto3
    from moto.server import ThreadedMotoServer
    from s3fake import Fault, FaultPlan, make_proxy

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    plan = FaultPlan()
    proxy = make_proxy(server.get_host_and_port(), plan)
    try:
        host, port = proxy.server_address[:2]
        afc.env.update(
            {
                "AWS_ENDPOINT_URL_S3": f"http://{host}:{port}",
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_REGION": "us-east-1",
            }
        )
        for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
            afc.env.pop(name, None)
        boto3.client(
            "s3",
            endpoint_url=f"http://{host}:{port}",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        ).create_bucket(Bucket="renders")
        afc.write_manifest(manifest(jobs(1)))
        plan.add(Fault("PUT", r"/films/", "slowdown", -1))
        result = afc("submit", "manifest.yaml", "--storage", "s3://renders/films")
        assert result.returncode == 1, result.stderr
        assert afc.rows("SELECT status, step FROM jobs") == [("waiting", "store")]
        shown = afc("show", "shot-001").stdout.splitlines()
        [output] = [line for line in shown if line.startswith("output ")]
        assert "not stored yet" in output, shown
        plan.clear()
        assert afc("resume").returncode == 0
        shown = afc("show", "shot-001").stdout.splitlines()
        [output] = [line for line in shown if line.startswith("output ")]
        assert output.split() == ["output", "s3://renders/films/b1/shot-001.png"], output
    finally:
        proxy.shutdown()
        server.stop()


def test_plan_does_not_say_a_need_that_has_not_run_ended_badly(afc):
    """A job whose need's need failed was planned as 'fails c: needs b, which ended badly'
    though b had never run: b fails in the same run, for its own need."""
    data = manifest([{"key": "a", "prompt": "a", "params": {"fail": ["invalid"]}}])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 1
    data["jobs"] += [
        {"key": "b", "prompt": "b", "needs": ["a"]},
        {"key": "c", "prompt": "c", "needs": ["b"]},
    ]
    afc.write_manifest(data)
    said = afc("plan", "manifest.yaml").stdout
    assert "fails b: needs a, which ended badly" in said, said
    assert "fails c: needs b, which fails too" in said, said


def test_a_providers_terminal_escapes_never_reach_the_terminal(afc):
    """A provider's (or a proxy's) error text is printed by every run's stderr, 'afc status'
    and 'afc show': one holding ESC sequences ('\\x1b[2J' clears the screen, '\\x1b]0;...'
    sets the terminal's title, others rewrite the lines above: a failure hidden) reached the
    terminal raw. It is now kept and shown with those characters escaped, visible."""
    import threading
    from http.server import BaseHTTPRequestHandler

    from fakeproviders import BackloggedServer

    evil = "bad \x1b[2J\x1b]0;owned\x07 \x1b[31mRED\x1b[0m \x9b1m"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps({"error": {"message": evil, "type": "x", "code": None}}).encode()
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = BackloggedServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        afc.env.update(
            {
                "OPENAI_API_KEY": "sk-test-openai-0123456789",
                "OPENAI_BASE_URL": f"http://127.0.0.1:{server.server_address[1]}/v1",
            }
        )
        data = manifest(jobs(1))
        data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1"}]
        afc.write_manifest(data)
        run = afc("submit", "manifest.yaml")
    finally:
        server.shutdown()
    assert run.returncode == 1, run.stderr
    said = [run.stderr, afc("status").stdout, afc("show", "shot-001").stdout]
    for text in said:
        assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text, text
    assert "\\x1b[2J" in run.stderr and "RED" in said[1]


def test_an_escape_decoded_with_a_secret_is_still_made_visible(monkeypatch):
    """The scrub keeps a text decoded when only its decoded form shows a secret (a key with
    some of its characters percent-encoded): an ESC percent-encoded beside it came out raw
    if the text was made printable before it was scrubbed."""
    from afc_cli.providers.base import ProviderError
    from afc_cli.secrets import reset

    key = "sk-test-openai-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    reset()
    try:
        encoded = "".join(f"%{ord(c):02x}" if i % 6 == 5 else c for i, c in enumerate(key))
        message = ProviderError("invalid", f"echo {encoded} %1b[2J").message
    finally:
        reset()
    assert key not in message and "\x1b" not in message, message
    assert "<redacted>" in message and "\\x1b[2J" in message, message


def test_show_names_a_late_result_stored_after_a_cancel(afc, fake):
    """A call that answered after 'afc cancel' is stored under the job's output key as its
    own (README: a later 'afc retry' finds it); 'afc show' said 'output  none stored' above
    the event 'late_result_stored' naming the file."""
    data = manifest([{"key": "j", "prompt": "slow-2s please"}])
    data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1", "attempts": 1}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml")
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts", 1)
        assert afc("cancel", "j").returncode == 0
    finally:
        proc.wait(timeout=60)
    assert afc.rows("SELECT kind FROM events WHERE kind = 'late_result_stored'")
    shown = afc("show", "j").stdout.splitlines()
    [output] = [line for line in shown if line.startswith("output ")]
    assert "none stored" not in output and "b1/j.png" in output and "late result" in output


def test_cancel_of_a_batch_with_nothing_left_says_so(afc):
    """'afc cancel --batch B --yes' on a batch whose jobs had all ended printed nothing at
    all (exit 0), where 'afc retry --batch B --failed' says 'no job to retry'."""
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml").returncode == 0
    result = afc("cancel", "--batch", "b1", "--yes")
    assert result.returncode == 0
    assert "no unfinished job to cancel in batch b1" in result.stderr, result.stderr


def test_a_person_who_declines_is_not_told_to_pass_yes_without_a_terminal(afc):
    """Answering 'n' to 'cancel these 2 jobs? [y/N]' on a terminal was refused as
    'not confirmed (pass --yes to confirm without a terminal)': the person was at one."""
    import os
    import pty
    import time

    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        afc.command("cancel", "--batch", "b1"),
        cwd=afc.cwd,
        env=afc.env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    said = b""
    deadline = time.time() + 60
    while b"[y/N]" not in said and time.time() < deadline:
        said += os.read(master, 4096)
    os.write(master, b"n\n")
    try:
        while True:
            chunk = os.read(master, 4096)
            if not chunk:
                break
            said += chunk
    except OSError:  # the child closed the terminal
        pass
    assert proc.wait(timeout=60) == 2
    os.close(master)
    text = said.decode(errors="replace")
    assert "declined; nothing was changed" in text, text
    assert "without a terminal" not in text, text
    assert afc.rows("SELECT DISTINCT status FROM jobs") == [("queued",)]
