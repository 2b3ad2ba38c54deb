"""Outside audit 30 (c): the documentation against the behaviour, through the real afc
command where the promise is a user's."""

from __future__ import annotations

import base64
import re
import socket
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from conftest import jobs, manifest, wait_for

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()


def test_a_delivery_to_a_receiver_that_is_down_says_the_connection_was_refused(afc):
    """README ("Webhooks", At least once): a delivery's `last_error` says what the connection
    met: refused, a host name that does not resolve, a certificate this host does not trust.
    A receiver that was down (nothing listening on its port) read 'connection failed:
    ConnectError (All connection attempts failed)', the words httpx's connector uses for
    every failed connect, which a person cannot tell from a network that drops the packets;
    the refusal was there, in the error's cause."""
    closed = socket.socket()  # bound, not listening: a connect to it is refused, no race
    closed.bind(("127.0.0.1", 0))
    try:
        afc.env["AFC_HOOK_SECRET"] = SECRET
        data = manifest(jobs(1))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/hooks/afc"
        data["webhook"] = {"url": url, "secret_env": "AFC_HOOK_SECRET", "timeout_s": 5}
        afc.write_manifest(data)
        assert afc("submit", "manifest.yaml").returncode == 0
        [row] = afc.json("webhooks", "list")["deliveries"]
        assert row["status"] == "pending", row
        assert row["last_error"].startswith("connection failed: ConnectError ("), row
        assert "refused" in row["last_error"].lower(), row["last_error"]
    finally:
        closed.close()


def test_every_conflict_of_a_submit_and_a_plan_has_the_documented_fields(afc):
    """README (Idempotency): '--json carries each conflict as {"key", "stored_hash",
    "new_hash", "changes", "status"}'; a new job refused with a job it needs carries
    "refused_need" beside them. That conflict had no "status" at all, so a script reading
    each conflict's status (to tell a refused request that still renders from one that
    ended) met a KeyError on it. It is null: the job was never admitted."""
    data = manifest([{"key": "style", "prompt": "a style frame"}])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    data["jobs"] = [
        {"key": "style", "prompt": "a warmer style frame"},
        {"key": "shot", "prompt": "a shot", "needs": ["style"]},
    ]
    afc.write_manifest(data)
    documented = {"key", "stored_hash", "new_hash", "changes", "status", "inputs_changed"}
    for args in (("submit", "manifest.yaml", "--no-run"), ("plan", "manifest.yaml")):
        result = afc.json(*args, expect=3 if args[0] == "submit" else 0)
        by_key = {c["key"]: c for c in result["conflicts"]}
        assert set(by_key) == {"style", "shot"}, args
        for conflict in by_key.values():
            assert documented <= set(conflict), (args, conflict)
        assert by_key["style"]["status"] == "queued", args
        assert by_key["shot"]["refused_need"] == "style", args
        assert by_key["shot"]["status"] is None and by_key["shot"]["stored_hash"] is None


def test_review_list_help_names_every_field_its_json_gives(afc):
    """'afc review list -h' lists the fields of its --json ("--json gives each job's job_id,
    batch, key, model, output, cost, unpriced_attempts, age_s and prompt"), and left out
    sha256, the stored output's digest that README (Review gates) promises there: the one
    field that tells a reviewer's script which output a decision is about."""
    job = {"key": "frame", "prompt": "a style frame", "review": True}
    afc.write_manifest(manifest([job]))
    assert afc("submit", "manifest.yaml").returncode == 0
    [row] = afc.json("review", "list")["awaiting_review"]
    shown = afc("review", "list", "-h", env={"COLUMNS": "200"})
    assert shown.returncode == 0
    text = " ".join(shown.stdout.split())
    assert [field for field in row if field not in text] == []


def test_outputs_help_names_every_field_its_json_gives(afc):
    """'afc outputs -h' says what --json adds to the table's columns (the batch, output key,
    model and prompt) and left out unpriced_attempts, the attempts of unknown cost that the
    job's cost leaves out (README: `afc outputs --json`), which a script adding up what its
    outputs cost needs to know the sum is short."""
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    [row] = afc.json("outputs")["outputs"]
    shown = afc("outputs", "-h", env={"COLUMNS": "200"})
    assert shown.returncode == 0
    text = " ".join(shown.stdout.split()).lower().replace("-", "").replace(" ", "_")
    assert [field for field in row if field not in text] == []


def test_webhooks_deliver_exits_1_for_a_dead_event_as_readme_says(afc):
    """'afc webhooks deliver -h' says it exits 1 if an event became dead (a cron line's only
    sign that a receiver refused one for good), and so it does, a replay too; README's table
    of exit codes, where a person looks up a cron mail's code, did not say so."""

    class Gone(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers["content-length"]))
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    closed = socket.socket()  # the receiver is down during the run: the event stays pending
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    afc.env["AFC_HOOK_SECRET"] = SECRET
    data = manifest(jobs(1))
    url = f"http://127.0.0.1:{port}/hooks/afc"
    data["webhook"] = {"url": url, "secret_env": "AFC_HOOK_SECRET", "timeout_s": 5}
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    closed.close()
    server = ThreadingHTTPServer(("127.0.0.1", port), Gone)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with sqlite3.connect(afc.cwd / "afc.db") as conn:
            conn.execute("UPDATE deliveries SET next_attempt_at = 0")
        sent = afc("webhooks", "deliver")
        assert sent.returncode == 1, sent.stderr
        assert "1 dead" in sent.stderr
    finally:
        server.shutdown()
        server.server_close()
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    [row] = re.findall(r"(?m)^\| 1 \|.*$", readme)
    assert "webhooks deliver" in row


def test_a_field_refused_in_the_defaults_is_listed_with_the_jobs_refused_fields(afc):
    """README (The manifest) said a problem outside the jobs 'is listed alone' and the checks
    across jobs follow on the next try; afc lists it with every field refused in the jobs
    (one try names both), and leaves only the checks across jobs (a duplicate key) and
    against the providers (a param no provider reads) for the next try, as README now says."""
    data = manifest(
        [
            {"key": "a", "prompt": "x", "params": {"sise": "64x64"}},
            {"key": "a", "prompt": "y"},
            {"key": "b", "prompt": "z", "promt": "typo"},
        ]
    )
    data["defaults"]["bogus"] = 1
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 2
    assert "field 'defaults.bogus': unknown field" in result.stderr
    assert "job 2 (key 'b'): field 'promt'" in result.stderr
    assert "duplicate key" not in result.stderr and "sise" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()
    data["defaults"].pop("bogus")
    del data["jobs"][2]["promt"]
    afc.write_manifest(data)
    again = afc("submit", "manifest.yaml")
    assert again.returncode == 2
    assert "duplicate key" in again.stderr and "'params.sise'" in again.stderr


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[-1].split()[0]


def test_a_killed_afc_not_yet_reaped_by_its_parent_is_gone(afc):
    """README (Concurrency, leases): a lease whose owner died on this host is taken over at
    once, and 'afc status' says the afc process running a job is gone. An afc killed by a
    script that started it (Popen, then kill) and had not reaped it yet is a zombie: its
    /proc entry stays, with its start time, until its parent waits for it, and afc took it
    for alive, its jobs left 'running' for the lease's five minutes, no run taking them."""
    afc.write_manifest(manifest([{"key": "slow", "prompt": "x", "params": {"latency_s": 30}}]))
    child = afc.popen("submit", "manifest.yaml")
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts", 1)
        child.kill()  # not waited for: the parent has not reaped it
        deadline = time.monotonic() + 10
        while _state(child.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _state(child.pid) == "Z"
        [job] = afc.json("status")["jobs"]
        assert job["status"] == "running"
        assert "the afc process running it is gone" in (job["waiting"] or ""), job
    finally:
        child.kill()
        child.wait()


def test_queue_stats_and_costs_report_json_of_a_moved_ledger_say_where_it_went(afc):
    """README (Moving a ledger): 'status' says where a moved ledger's work went, on stderr and
    in --json as moved_to, 'so does queue stats, whose figures an alert should take from the
    new ledger, and costs report'. Their --json did not: an alert that reads 'afc queue stats
    --json' (its stderr sent elsewhere) read the old ledger's figures, jobs no run takes, and no sign that its
    backlog now lives in another."""
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    copied = afc("ledger", "copy", "afc.db", str(afc.cwd / "moved.db"))
    assert copied.returncode == 0, copied.stderr
    assert afc.json("status")["moved_to"].endswith("moved.db")
    stats = afc.json("queue", "stats")
    assert stats["moved_to"].endswith("moved.db"), stats
    report = afc.json("costs", "report")
    assert report["moved_to"].endswith("moved.db"), report
    for args in (("queue", "stats"), ("costs", "report")):  # a ledger not moved: no field
        assert "moved_to" not in afc.json(*args, "--ledger", "moved.db")
    piped = afc("queue", "stats")  # its rows stay the figures alone
    assert "moved" not in piped.stdout
