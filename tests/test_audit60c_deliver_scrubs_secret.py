"""'afc webhooks deliver' (and a replay, an idle worker's drain of another batch's events)
scrubs the secret it signs with from what a receiver answers, as a run does: a run names
the manifest's secret variables to the scrubber before it posts (``require_secrets``), a
deliver did not, so a receiver quoting the secret's base64 back in a redirect's Location
had it kept in the delivery's last_error, in the ledger and in 'afc webhooks list --json',
whenever the variable's name does not end in SECRET, KEY, TOKEN or PASSWORD (outside audit
60c)."""

from __future__ import annotations

import sqlite3

from conftest import jobs, manifest
from receiver import Receiver
from test_webhooks import SECRET, due_now

NAME = "HOOK_SIGNING"  # a name the scrubber does not take for a secret's by itself
BODY = SECRET.removeprefix("whsec_")  # the part a receiver keys its HMAC with


def test_a_secret_quoted_back_by_a_receiver_is_in_no_ledger_row_nor_json(afc):
    receiver = Receiver(default=(503, 0.0, {})).start()
    try:
        afc.env[NAME] = SECRET
        data = manifest(jobs(1))
        data["webhook"] = {"url": receiver.url, "secret_env": NAME, "timeout_s": 2}
        afc.write_manifest(data)
        assert afc("submit", "manifest.yaml").returncode == 0
        due_now(afc)
        receiver.default = (301, 0.0, {"Location": f"https://moved.example/hooks/{BODY}"})
        assert afc("webhooks", "deliver").returncode == 1  # dead: a 301 is not followed
        assert len(receiver.received) == 2
        listed = afc("webhooks", "list", "--json")
        assert "moved.example" in listed.stdout
        assert BODY not in listed.stdout + listed.stderr
        with sqlite3.connect(afc.cwd / "afc.db") as conn:
            dump = "\n".join(conn.iterdump())
        conn.close()
        assert "moved.example" in dump
        assert BODY not in dump
    finally:
        receiver.stop()
