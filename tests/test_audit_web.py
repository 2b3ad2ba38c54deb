"""Found by an outside audit of the webhooks, ``afc serve`` and ``afc report``."""

from __future__ import annotations

import base64
import sqlite3

import pytest
from conftest import jobs, manifest

SECRET = "whsec_" + base64.b64encode(b"afc audit secret, 32 bytes long!").decode()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:99999/hooks",  # past 65535: the drain crashed (OverflowError)
        "http://127.0.0.1:80a/hooks",  # not a number: InvalidURL, 'a bug in afc'
        "http://:8080/hooks",  # no host: retried 8 times, hours apart
        "http://hooks.example com/afc",  # a space in the host
    ],
)
def test_a_webhook_url_no_post_can_reach_is_a_manifest_error(afc, url):
    afc.env["AFC_HOOK_SECRET"] = SECRET
    data = manifest(jobs(1))
    data["webhook"] = {"url": url, "secret_env": "AFC_HOOK_SECRET"}
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 2, result.stderr
    assert "webhook.url" in result.stderr and "a bug in afc" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()


def test_a_stored_delivery_to_an_unreachable_url_ends_dead_not_in_a_crash(afc):
    """A row admitted before the manifest refused such URLs: 'afc webhooks deliver' (and
    every run's drain) ended in 'unexpected error ... a bug in afc', the row left leased."""
    afc.env["AFC_HOOK_SECRET"] = SECRET
    data = manifest(jobs(1))
    data["webhook"] = {"url": "http://127.0.0.1:9/hooks", "secret_env": "AFC_HOOK_SECRET"}
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    assert afc("cancel", "shot-001").returncode == 0
    conn = sqlite3.connect(afc.cwd / "afc.db")
    with conn:
        conn.execute(
            "UPDATE deliveries SET url = 'http://127.0.0.1:99999/hooks', attempts = 0,"
            " next_attempt_at = 0, lease_owner = NULL, lease_expires = NULL"
        )
    conn.close()
    result = afc("webhooks", "deliver")
    assert "a bug in afc" not in result.stderr, result.stderr
    assert result.returncode == 1 and "1 dead" in result.stderr
    (row,) = afc.json("webhooks", "list", "--dead")["deliveries"]
    assert "port" in row["last_error"].lower()


def test_the_review_queue_is_paged_as_the_contact_sheet(afc):
    """10,000 jobs awaiting review were one 14 MB page asking for 10,000 thumbnails at once:
    98 s in headless Chromium (2 s a page of 120 now)."""
    pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")
    import re

    import httpx
    from browser import Served, awaiting

    from afc_cli.web.server import PAGE

    awaiting(afc, PAGE + 5)
    served = Served(afc)
    try:
        first = httpx.get(served.url + "review").text
        last = httpx.get(served.url + "review", params={"page": "99"}).text
    finally:
        served.stop()
    cards = re.compile(r'<figure class="card" data-key="([^"]+)"')
    assert len(cards.findall(first)) == PAGE and len(cards.findall(last)) == 5
    assert f"{PAGE + 5} jobs awaiting review" in first and 'href="?page=2"' in first
    assert set(cards.findall(first)).isdisjoint(cards.findall(last))
