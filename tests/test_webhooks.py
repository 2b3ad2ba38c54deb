"""Webhooks end to end: a real receiver on 127.0.0.1, every delivery verified with the
``standardwebhooks`` reference library."""

from __future__ import annotations

import base64
import json
import os
import signal
import threading
import time

import pytest
from conftest import jobs, manifest, wait_for
from receiver import Receiver
from standardwebhooks.webhooks import Webhook

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()


@pytest.fixture
def receiver():
    r = Receiver().start()
    yield r
    r.stop()


@pytest.fixture
def hooked(afc, receiver):
    afc.env["AFC_HOOK_SECRET"] = SECRET

    def write(data, timeout_s=2.0, url=None):
        data["webhook"] = {
            "url": url or receiver.url,
            "secret_env": "AFC_HOOK_SECRET",
            "timeout_s": timeout_s,
        }
        afc.write_manifest(data)

    return write


def verified(receiver):
    wh = Webhook(SECRET)
    return [(r.headers["webhook-id"], wh.verify(r.body, r.headers)) for r in receiver.received]


def test_each_terminal_state_is_announced_signed(afc, receiver, hooked):
    data = manifest(
        [
            {"key": "ok", "prompt": "a"},
            {"key": "bad", "prompt": "b", "params": {"fail": ["auth"]}},
        ]
    )
    hooked(data)
    assert afc("submit", "manifest.yaml").returncode == 1
    events = {payload["data"]["key"]: (wid, payload) for wid, payload in verified(receiver)}
    assert set(events) == {"ok", "bad"}
    wid, ok = events["ok"]
    job_id = afc.rows("SELECT id FROM jobs WHERE key = 'ok'")[0][0]
    assert wid == f"{job_id}:job.succeeded"
    assert ok["type"] == "job.succeeded"
    assert ok["data"] == {
        "job_id": job_id,
        "key": "ok",
        "batch": "b1",
        "status": "succeeded",
        "output_key": "b1/ok.png",
        "cost": "0.050000",
        "unpriced_attempts": 0,
        "error": None,
    }
    assert ok["timestamp"].endswith("Z")
    _, bad = events["bad"]
    assert bad["type"] == "job.failed" and bad["data"]["error"]["class"] == "auth"
    listed = afc.json("webhooks", "list")["deliveries"]
    assert {d["status"] for d in listed} == {"delivered"}
    story = afc.json("show", "ok")
    assert [(h["id"], h["status"]) for h in story["webhooks"]] == [(wid, "delivered")]
    assert "delivered after 1 try" in afc("show", "ok").stdout  # outside audit 18: not "1 tries"
    # a replayed submit announces nothing again
    assert afc("submit", "manifest.yaml").returncode == 1
    assert len(receiver.received) == 2


def due_now(afc) -> None:
    """The pending deliveries due now, as a later cron pass finds them once their backoff is
    over."""
    import sqlite3

    with sqlite3.connect(afc.cwd / "afc.db") as conn:
        conn.execute("UPDATE deliveries SET next_attempt_at = 0 WHERE status = 'pending'")
    conn.close()


def test_500_then_200_delivers_twice_with_the_same_id(afc, receiver, hooked):
    receiver.script = [(500, 0, {"Retry-After": "0"})]
    hooked(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    assert len(receiver.received) == 1
    pending = afc.json("webhooks", "list")["deliveries"][0]
    assert pending["status"] == "pending" and pending["last_status"] == 500
    due_now(afc)  # its backoff over (a Retry-After: 0 is no shortcut)
    assert afc("webhooks", "deliver").returncode == 0
    assert len(receiver.received) == 2
    ids = [wid for wid, _ in verified(receiver)]
    assert ids[0] == ids[1]
    assert receiver.received[0].body == receiver.received[1].body
    assert afc.json("webhooks", "list")["deliveries"][0]["status"] == "delivered"


def test_410_disables_the_endpoint(afc, receiver, hooked):
    receiver.script = [(410, 0, {})]
    hooked(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--concurrency", "1").returncode == 0
    afc("webhooks", "deliver")
    assert len(receiver.received) == 1, "nothing is posted to a disabled endpoint"
    dead = afc.json("webhooks", "list", "--dead")["deliveries"]
    assert len(dead) == 2
    assert any("410" in d["last_error"] for d in dead)
    assert any("disabled" in d["last_error"] for d in dead)


def test_a_dead_delivery_can_be_replayed_and_arrives(afc, receiver, hooked):
    receiver.script = [(400, 0, {})]
    hooked(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    dead = afc.json("webhooks", "list", "--dead")["deliveries"]
    assert len(dead) == 1 and dead[0]["last_status"] == 400
    stored = afc.rows("SELECT envelope FROM deliveries")[0][0]
    result = afc("webhooks", "replay", dead[0]["id"])
    assert result.returncode == 0, result.stderr
    assert len(receiver.received) == 2
    assert receiver.received[1].body == stored.encode(), "the exact stored envelope"
    ids = [wid for wid, _ in verified(receiver)]
    assert ids == [dead[0]["id"]] * 2
    assert afc.json("webhooks", "list")["deliveries"][0]["status"] == "delivered"
    assert afc("webhooks", "replay", "nope").returncode == 2


def test_a_replay_sends_the_one_delivery_it_names(afc, receiver, hooked):
    """Found by outside audit 24a: 'afc webhooks replay ID' re-queued its row and then drained
    every due delivery, sending another receiver's pending events too, and its exit code
    could be theirs. It sends the row it names, alone; the others wait for 'afc webhooks
    deliver'."""
    receiver.script = [(400, 0, {}), (500, 0, {"Retry-After": "0"})]
    hooked(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--concurrency", "1").returncode == 0
    rows = {d["status"]: d for d in afc.json("webhooks", "list")["deliveries"]}
    assert set(rows) == {"dead", "pending"}, rows
    due_now(afc)  # the pending one is due as the replay runs
    result = afc("webhooks", "replay", rows["dead"]["id"])
    assert result.returncode == 0, result.stderr
    assert [wid for wid, _ in verified(receiver)][2:] == [rows["dead"]["id"]]
    after = {d["id"]: d["status"] for d in afc.json("webhooks", "list")["deliveries"]}
    assert after == {rows["dead"]["id"]: "delivered", rows["pending"]["id"]: "pending"}
    assert afc("webhooks", "deliver").returncode == 0
    assert [wid for wid, _ in verified(receiver)][3:] == [rows["pending"]["id"]]


def test_a_replay_on_a_moved_ledger_is_refused_and_changes_nothing(afc, receiver, hooked):
    """A moved ledger runs nothing, 'webhooks deliver' included (afc ledger copy): a replay
    there re-queued the dead delivery (and re-enabled its endpoint) before its delivery was
    refused, exit 2 with the row changed, left pending where nothing will ever send it. It is
    refused before anything is written, as the replay in the destination goes out."""
    receiver.script = [(400, 0, {})]
    hooked(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    [dead] = afc.json("webhooks", "list", "--dead")["deliveries"]
    assert afc("ledger", "copy", "afc.db", "moved.db").returncode == 0
    refused = afc("webhooks", "replay", dead["id"])
    assert refused.returncode == 2 and "was moved to" in refused.stderr, refused.stderr
    assert afc.rows("SELECT status FROM deliveries") == [("dead",)]
    assert len(receiver.received) == 1
    replayed = afc("webhooks", "replay", dead["id"], "--ledger", "moved.db")
    assert replayed.returncode == 0, replayed.stderr
    assert len(receiver.received) == 2


def test_a_broken_receiver_never_delays_renders(afc, receiver, hooked):
    """Renders never wait for a webhook receiver. A hung receiver holds every POST unanswered
    (well inside the delivery's timeout, so afc keeps waiting for it): the whole batch still
    renders before it answers anything, and the run then ends. A receiver that is down
    changes nothing either: every job renders, every delivery stays pending."""
    receiver.gate = threading.Event()
    hooked(manifest(jobs(12, latency_s=0.3)), timeout_s=60.0)
    run = afc.popen("submit", "manifest.yaml", "--concurrency", "2")
    try:
        # liveness bounds only (never a speed check): were renders waiting for the held POST,
        # none of them would end before its 60 s timeout
        assert _until(lambda: receiver.received, 45), "no delivery was ever posted"
        wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'", 12, timeout=45)
        assert afc.rows("SELECT COUNT(*) FROM deliveries WHERE status = 'delivered'") == [(0,)]
    finally:
        receiver.gate.set()
    assert run.wait(timeout=120) == 0, run.stderr.read()
    listed = afc.json("webhooks", "list")["deliveries"]
    assert len(listed) == 12 and {d["status"] for d in listed} == {"delivered"}

    for name in ("afc.db", "afc.db-wal", "afc.db-shm"):
        (afc.cwd / name).unlink(missing_ok=True)
    for path in sorted(afc.outputs().rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    hooked(manifest(jobs(8, latency_s=0.3)), timeout_s=1.0, url="http://127.0.0.1:9/down")
    assert afc("submit", "manifest.yaml", "--concurrency", "2").returncode == 0
    assert afc.rows("SELECT COUNT(*) FROM attempts WHERE status = 'succeeded'") == [(8,)]
    pending = afc.json("webhooks", "list")["deliveries"]
    assert len(pending) == 8 and {d["status"] for d in pending} == {"pending"}


def test_a_slow_receiver_delays_the_end_of_a_run_by_one_timeout_only(afc, receiver, hooked):
    """Found by an outside audit: a receiver slower than the delivery's timeout was posted
    to in the pass that ran as the batch ended, and again in the run's last pass: two
    timeouts (up to 240 s at the largest timeout_s), where the README promises one."""
    receiver.default = (200, 8.0, {})  # answers after the 3 s timeout, every time
    # three waves of renders: a pass posts while they run (its POST hangs past their end)
    hooked(manifest(jobs(6, latency_s=0.5)), timeout_s=3.0)
    assert afc("submit", "manifest.yaml", "--concurrency", "2").returncode == 0
    assert len(receiver.received) == 1, [r.body[:40] for r in receiver.received]
    assert {d["status"] for d in afc.json("webhooks", "list")["deliveries"]} == {"pending"}


def _until(check, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_sigkill_between_terminal_update_and_delivery(afc, receiver, hooked):
    hooked(manifest(jobs(1)))
    died = afc("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_terminal"})
    assert died.returncode == -signal.SIGKILL
    assert receiver.received == []
    assert afc("resume").returncode == 0
    assert [p["type"] for _, p in verified(receiver)] == ["job.succeeded"]
    assert afc.json("webhooks", "list")["deliveries"][0]["status"] == "delivered"


def test_two_drains_never_post_the_same_row(afc, receiver, hooked):
    hooked(manifest(jobs(6)), url="http://127.0.0.1:9/down")
    assert afc("submit", "manifest.yaml").returncode == 0
    # point the pending rows at the live receiver, which answers slowly
    with __import__("sqlite3").connect(afc.cwd / "afc.db") as conn:
        conn.execute("UPDATE deliveries SET url = ?, next_attempt_at = 0", (receiver.url,))
    receiver.default = (200, 0.3, {})
    first = afc.popen("webhooks", "deliver")
    second = afc.popen("webhooks", "deliver")
    assert first.wait(timeout=60) == 0 and second.wait(timeout=60) == 0
    ids = [r.headers["webhook-id"] for r in receiver.received]
    assert len(ids) == 6 and len(set(ids)) == 6


def test_no_secret_in_ledger_logs_or_json(afc, receiver, hooked):
    receiver.script = [(500, 0, {"Retry-After": "0"})]
    hooked(manifest(jobs(2)))
    outputs = []
    for args in (
        ("submit", "manifest.yaml", "-v"),
        ("submit", "manifest.yaml", "--json"),
        ("status", "--json"),
        ("show", "shot-001", "--json"),
        ("webhooks", "list", "--json", "-v"),
        ("webhooks", "deliver", "--json"),
    ):
        result = afc(*args)
        outputs.append(result.stdout + result.stderr)
    secret_bytes = SECRET.encode()
    raw = base64.b64decode(SECRET[len("whsec_") :])
    for text in outputs:
        assert SECRET not in text and SECRET[6:] not in text
    for name in os.listdir(afc.cwd):
        if name.startswith("afc.db"):
            path = afc.cwd / name
            if path.is_file():
                blob = path.read_bytes()
                assert (
                    secret_bytes not in blob and raw not in blob and SECRET[6:].encode() not in blob
                )


def test_a_password_in_a_webhook_url_is_in_no_table(afc, receiver, hooked):
    """Found by an outside audit: 'afc webhooks list' printed http://user:PASSWORD@... in
    its table (piped or on a terminal); --json and afc show scrubbed it."""
    url = receiver.url.replace("http://", "http://hookuser:Sup3rS3cretPw@")
    hooked(manifest(jobs(1)), url=url)
    assert afc("submit", "manifest.yaml").returncode == 0
    for args in (("webhooks", "list"), ("webhooks", "list", "--json"), ("show", "shot-001")):
        result = afc(*args)
        assert result.returncode == 0, result.stderr
        assert "Sup3rS3cretPw" not in result.stdout + result.stderr
        assert "<redacted>@127.0.0.1" in result.stdout + result.stderr


def test_webhook_is_validated_and_its_secret_required(afc, receiver):
    data = manifest(jobs(1))
    data["webhook"] = {"url": "ftp://x", "secret_env": "AFC_HOOK_SECRET"}
    afc.write_manifest(data)
    bad = afc("submit", "manifest.yaml")
    assert bad.returncode == 2 and "webhook.url" in bad.stderr
    data["webhook"] = {"url": receiver.url, "secret_env": "AFC_HOOK_SECRET", "secret": "x"}
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 2
    data["webhook"] = {"url": receiver.url, "secret_env": "AFC_HOOK_SECRET"}
    afc.write_manifest(data)
    missing = afc("submit", "manifest.yaml")
    assert missing.returncode == 2 and "AFC_HOOK_SECRET" in missing.stderr
    assert not (afc.cwd / "afc.db").exists()
    # the webhook is not part of the request: changing it is no conflict
    afc.env["AFC_HOOK_SECRET"] = SECRET
    assert afc("submit", "manifest.yaml").returncode == 0
    data["webhook"]["url"] = receiver.url + "/v2"
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0


def test_a_batch_s_pending_deliveries_never_block_another_batch(afc, receiver, hooked):
    """Found by an outside audit: with one batch's deliveries pending and its secret unset,
    'afc resume --batch other' (a batch with no webhook) was exit 2, nothing rendered."""
    receiver.script = [(500, 0, {"Retry-After": "0"})] * 50  # deliveries stay pending
    hooked(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc.rows("SELECT COUNT(*) FROM deliveries WHERE status = 'pending'") == [(1,)]
    del afc.env["AFC_HOOK_SECRET"]
    afc.write_manifest(manifest(jobs(1), batch="other"), "other.yaml")
    assert afc("submit", "other.yaml", "--no-run").returncode == 0
    result = afc("resume", "--batch", "other")
    assert result.returncode == 0, result.stderr
    assert afc.rows("SELECT status FROM jobs WHERE batch = 'other'") == [("succeeded",)]
    # and its own delivery waits, not lost, for a run that has the secret
    assert afc.rows("SELECT status FROM deliveries") == [("pending",)]
    afc.env["AFC_HOOK_SECRET"] = SECRET
    receiver.script = []
    due_now(afc)  # its backoff waited out
    assert afc("webhooks", "deliver").returncode == 0
    assert afc.rows("SELECT status FROM deliveries") == [("delivered",)]


def test_envelope_is_stable_json(afc, receiver, hooked):
    hooked(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    body = receiver.received[0].body
    assert json.loads(body)["data"]["key"] == "shot-001"


def test_a_permanent_redirect_is_dead_at_once_and_not_followed(afc, receiver, hooked):
    """A 301/308 was retried eight times, hours apart, for an answer that never changes."""
    elsewhere = Receiver().start()
    try:
        receiver.script = [(308, 0, {"Location": elsewhere.url})]
        hooked(manifest(jobs(1)))
        assert afc("submit", "manifest.yaml").returncode == 0
        afc("webhooks", "deliver")
        assert len(receiver.received) == 1 and elsewhere.received == []
        [dead] = afc.json("webhooks", "list", "--dead")["deliveries"]
        assert dead["last_status"] == 308 and elsewhere.url in dead["last_error"]
        assert "not followed" in dead["last_error"]
    finally:
        elsewhere.stop()


def test_a_temporary_redirect_is_tried_again(afc, receiver, hooked):
    receiver.script = [(307, 0, {"Location": "http://127.0.0.1:9/x", "Retry-After": "0"})]
    hooked(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    [pending] = afc.json("webhooks", "list")["deliveries"]
    assert pending["status"] == "pending" and pending["last_status"] == 307
    due_now(afc)  # its backoff over (a Retry-After: 0 is no shortcut)
    assert afc("webhooks", "deliver").returncode == 0
    assert afc.json("webhooks", "list")["deliveries"][0]["status"] == "delivered"


def test_an_answer_body_is_never_read(afc, hooked):
    """A receiver whose 200 came with an endless body: afc read it until the POST's timeout
    and took the delivered event for a failure (a huge one could fill its memory)."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    posts: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                posts.append(conn.recv(65536))
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                try:
                    while True:
                        conn.sendall(b"10000\r\n" + b"x" * 0x10000 + b"\r\n")
                except OSError:
                    pass  # afc closed the connection

    threading.Thread(target=serve, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/hook"
        hooked(manifest(jobs(1)), timeout_s=3.0, url=url)
        assert afc("submit", "manifest.yaml").returncode == 0
        [delivery] = afc.json("webhooks", "list")["deliveries"]
        assert delivery["status"] == "delivered" and len(posts) == 1
    finally:
        listener.close()


def test_a_ledger_locked_past_the_busy_timeout_stops_a_hooked_run_in_one_line(
    afc, receiver, hooked
):
    """A batch with a webhook runs its outbox beside the jobs: a ledger whose write lock another
    process keeps past the busy timeout fails the outbox's next write as it fails every job's.
    The run stops with one line (as without a webhook), not with asyncio's 'Task exception was
    never retrieved' and the outbox's traceback after it."""
    import sqlite3

    hooked(manifest(jobs(4)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    holder = sqlite3.connect(afc.cwd / "afc.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        result = afc("resume", timeout=150)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.returncode == 1, result.stderr
    assert "another process held the ledger's write lock too long" in result.stderr
    assert "Traceback" not in result.stderr and "never retrieved" not in result.stderr, (
        result.stderr
    )
