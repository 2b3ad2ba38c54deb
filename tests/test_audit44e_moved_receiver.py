"""A receiver that moved: its new URL, given the webhook by a re-submit, is where the events
not yet delivered go (outside audit 44e). README tells a person whose receiver answered 301
to 'give the webhook that URL'; a re-submit set it only on the jobs that had not ended, so the
events already queued (dead at the old URL) were replayed to the old URL, dead again, and a
failed job retried after it sent its job.succeeded to the old URL too: no afc command could
get those events to the receiver the manifest names."""

from __future__ import annotations

import base64

import pytest
from conftest import manifest
from receiver import Receiver

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()


@pytest.fixture
def receivers():
    old, new = Receiver().start(), Receiver().start()
    yield old, new
    old.stop()
    new.stop()


def ids(receiver):
    return sorted(r.headers["webhook-id"].split(":", 1)[1] for r in receiver.received)


def test_events_not_yet_delivered_go_where_the_latest_manifest_says(afc, receivers, ledger_url):
    old, new = receivers
    afc.env["AFC_LEDGER"] = ledger_url
    afc.env["AFC_HOOK_SECRET"] = SECRET
    old.default = (301, 0.0, {"Location": new.url})  # moved for good
    data = manifest(
        [
            {"key": "done", "prompt": "a"},
            {"key": "shot", "prompt": "b", "params": {"fail": ["auth"]}},
        ]
    )
    data["defaults"]["chain"][0]["attempts"] = 1
    data["webhook"] = {"url": old.url, "secret_env": "AFC_HOOK_SECRET", "timeout_s": 2.0}
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 1  # 'shot' failed
    listed = afc.json("webhooks", "list")["deliveries"]
    assert sorted(d["status"] for d in listed) == ["dead", "dead"]
    assert all(new.url in d["last_error"] for d in listed)  # 'give the webhook that URL'

    data["webhook"]["url"] = new.url
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 1
    for delivery in listed:  # each sent again: to the receiver the manifest now names
        assert afc("webhooks", "replay", delivery["id"]).returncode == 0
    assert afc("retry", "shot").returncode == 0
    assert afc("resume").returncode == 0
    assert ids(new) == ["job.failed", "job.succeeded", "job.succeeded:retry1"]
    assert ids(old) == ["job.failed", "job.succeeded"]  # the first tries only
    listed = afc.json("webhooks", "list")["deliveries"]
    assert {d["status"] for d in listed} == {"delivered"}
    assert {d["url"] for d in listed} == {new.url}
