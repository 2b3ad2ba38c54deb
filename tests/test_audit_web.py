"""Found by an outside audit of the webhooks, ``afc serve`` and ``afc report``."""

from __future__ import annotations

import base64
import sqlite3

import pytest
from browser import browser, rendered_as  # noqa: F401 - the fixture
from conftest import Loopback, jobs, manifest

SECRET = "whsec_" + base64.b64encode(b"afc audit secret, 32 bytes long!").decode()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:99999/hooks",  # past 65535: the drain crashed (OverflowError)
        "http://127.0.0.1:80a/hooks",  # not a number: InvalidURL, 'a bug in afc'
        "http://:8080/hooks",  # no host: retried 8 times, hours apart
        "http://hooks.example com/afc",  # a space in the host
        "http://xn--a.example/hooks",  # an A-label IDNA refuses: 'a bug in afc' at the POST
        "http://\uff0e.example/hooks",  # a fullwidth dot, an empty label: the same
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


def test_a_decision_on_a_later_review_page_comes_back_to_that_page(afc):
    """Approve on page 2 of the review queue: the answer went to page 1, so each decision on
    a later page sent the reviewer back to the first."""
    pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")
    import re

    import httpx
    from browser import Served, awaiting

    from afc_cli.web.server import PAGE

    awaiting(afc, PAGE + 5)
    served = Served(afc)
    try:
        page = httpx.get(served.url + "review", params={"page": "2"}).text
        token = page.split('name="form_token" value="', 1)[1].split('"', 1)[0]
        key = re.search(r'<figure class="card" data-key="([^"]+)"', page).group(1)
        answer = httpx.post(
            served.url + "review/approve",
            data={"key": key, "batch": "b1", "form_token": token, "page": "2"},
        )
    finally:
        served.stop()
    assert answer.status_code == 303, answer.text
    assert "page=2" in answer.headers["location"], answer.headers["location"]


def _svg_output(afc) -> str:
    """A stored output that is an SVG with a script (a vector model's answer, or an object
    changed in storage), the size the ledger has for it; its job id."""
    data = manifest([{"key": "logo", "prompt": "a logo", "output": "{batch}/{key}.svg"}])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    path = afc.outputs() / "b1" / "logo.svg"
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg"><script>'
        "document.documentElement.setAttribute('data-ran', document.domain)"
        "</script><!--"
    )
    svg += "x" * (path.stat().st_size - len(svg) - 9) + "--></svg>"
    rendered_as(afc, "logo", svg.encode())  # as rendered: changed bytes are not shown
    return afc.rows("SELECT id FROM jobs WHERE key = 'logo'")[0][0]


def test_a_full_size_output_runs_no_script_on_the_servers_origin(afc):
    """A stored SVG (or HTML) output was streamed as image/svg+xml from afc serve's own
    origin: its script ran there, where it could read a review page's form token and approve
    or reject anything. Outputs are sent sandboxed, as documents with no script."""
    pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")
    import httpx
    from browser import Served, available

    job_id = _svg_output(afc)
    served = Served(afc)
    try:
        answer = httpx.get(f"{served.url}output/{job_id}")
        assert answer.status_code == 200
        assert answer.headers["content-security-policy"].startswith("sandbox")
        assert answer.headers["x-content-type-options"] == "nosniff"
        if available():
            from browser import _binaries
            from selenium import webdriver
            from selenium.webdriver.chrome.options import Options
            from selenium.webdriver.chrome.service import Service

            options = Options()
            options.binary_location = _binaries()[0]
            for arg in ("--headless=new", "--no-sandbox", "--disable-gpu"):
                options.add_argument(arg)
            driver = webdriver.Chrome(service=Service(_binaries()[1]), options=options)
            try:
                driver.get(f"{served.url}output/{job_id}")
                ran = driver.execute_script(
                    "return document.documentElement.getAttribute('data-ran')"
                )
            finally:
                driver.quit()
            assert ran is None
    finally:
        served.stop()


def test_a_full_size_output_fetches_nothing_from_elsewhere(afc, browser):  # noqa: F811
    """A stored SVG output opened full size loaded what it named from another host (an
    <image href>): a beacon telling whoever made the bytes the reviewer's address and the
    moment of the review. Outputs are sent with default-src 'none', and a picture of the
    server's own still shows."""
    pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")
    import http.server

    from browser import Served

    seen: list[str] = []

    class Beacon(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.path)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = Loopback(Beacon, "/")
    beacon_url = server.base
    try:
        data = manifest([{"key": "logo", "prompt": "a logo", "output": "{batch}/{key}.svg"}])
        afc.write_manifest(data)
        assert afc("submit", "manifest.yaml").returncode == 0
        svg = (
            '<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64">'
            f'<image href="{beacon_url}seen.png" width="64" height="64"/>'
            f'<foreignObject><img xmlns="http://www.w3.org/1999/xhtml" src="{beacon_url}img"/>'
            "</foreignObject></svg>"
        )
        rendered_as(afc, "logo", svg.encode())  # as rendered: changed bytes are not shown
        job_id = afc.rows("SELECT id FROM jobs WHERE key = 'logo'")[0][0]
        served = Served(afc)
        try:
            browser.get(f"{served.url}output/{job_id}")
            # get() returns at the load event, which waits for the document's images
            assert browser.execute_script("return document.documentElement.tagName") == "svg"
        finally:
            served.stop()
        assert seen == [], seen
    finally:
        server.stop()


def test_no_page_can_be_framed_by_another_site(afc):
    """The review page could be shown in another site's frame, under a decoy, for a visitor
    to click Approve or Reject without knowing (clickjacking): the form token does not help."""
    pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")
    import httpx
    from browser import Served, awaiting

    awaiting(afc, 1)
    served = Served(afc)
    try:
        for path in ("", "review", "failures", "spend"):
            headers = httpx.get(served.url + path).headers
            assert headers["x-frame-options"] == "DENY", path
            assert "frame-ancestors 'none'" in headers["content-security-policy"], path
    finally:
        served.stop()


def test_a_run_says_which_events_its_receiver_did_not_get(afc):
    """A receiver that was down, or refused the events (dead at once), left a submit that
    exited 0 and said nothing: the events were found only by 'afc webhooks list'."""
    from receiver import Receiver

    receiver = Receiver(default=(400, 0.0, {})).start()
    try:
        afc.env["AFC_HOOK_SECRET"] = SECRET
        data = manifest(jobs(2))
        data["webhook"] = {"url": receiver.url, "secret_env": "AFC_HOOK_SECRET", "timeout_s": 2}
        afc.write_manifest(data)
        refused = afc("submit", "manifest.yaml")
        assert refused.returncode == 0, refused.stderr  # the renders succeeded
        assert "webhooks: 0 event(s) not delivered yet" in refused.stderr
        assert "2 dead" in refused.stderr and "afc webhooks list" in refused.stderr
    finally:
        receiver.stop()
    data["webhook"]["url"] = "http://127.0.0.1:9/hooks"  # nothing listens there
    data["jobs"] = jobs(3)
    afc.write_manifest(data)
    down = afc.json("submit", "manifest.yaml")
    assert down["exit_code"] == 0 and down["webhooks"] == {"pending": 1, "dead": 2}
    afc.write_manifest(manifest(jobs(1), batch="other"), "other.yaml")
    other = afc("submit", "other.yaml")
    assert other.returncode == 0 and "webhooks:" not in other.stderr  # another batch's events
    assert afc.json("resume")["webhooks"] == {"pending": 1, "dead": 2}  # resume: every batch


def test_a_full_size_output_changed_in_storage_is_refused_whole(afc):
    """``/output`` took its Content-Length from the ledger: an object replaced in storage by
    another tool since (another size) made a response that broke off, or was cut short. It
    is now refused whole, saying why (only the bytes afc verified are shown as the job's:
    tests/test_audit43b_cut_picture.py), and served whole once put back."""
    pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")
    import httpx
    from browser import Served

    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    job_id, key = afc.rows("SELECT id, output_key FROM jobs")[0]
    whole = (afc.outputs() / key).read_bytes()
    (afc.outputs() / key).write_bytes(whole + b"\0" * 5000)
    served = Served(afc)
    try:
        answer = httpx.get(f"{served.url}output/{job_id}")
        assert answer.status_code == 404, answer
        assert "changed in storage since afc verified it" in answer.text
        (afc.outputs() / key).write_bytes(whole)
        answer = httpx.get(f"{served.url}output/{job_id}")
        assert answer.status_code == 200 and answer.content == whole
    finally:
        served.stop()
