"""Found by an outside audit that walked README's commands as a new user does."""

from __future__ import annotations

import base64

from conftest import jobs, manifest

SECRET = "whsec_" + base64.b64encode(b"afc audit secret, 32 bytes long!").decode()


def test_json_webhooks_is_null_when_every_event_arrived(afc):
    """README: a run's ``--json`` has ``"webhooks": {"pending", "dead"}``, ``null`` when every
    event arrived. It was ``{"pending": 0, "dead": 0}`` on every run, webhooks or none, so a
    script that alerts on a non-null field alerted on every run."""
    afc.write_manifest(manifest(jobs(2)))
    assert afc.json("submit", "manifest.yaml")["webhooks"] is None
    assert afc.json("submit", "manifest.yaml")["webhooks"] is None  # a replay
    assert afc.json("resume")["webhooks"] is None
