"""The pictures in a real browser (headless Chromium through selenium): the report file and
``afc serve``'s pages, against a ledger made by real ``afc submit`` runs. Also serve's rules
over plain HTTP: a GET never changes anything, a POST needs the server's form token, a host
other than loopback needs AFC_SERVE_TOKEN, Ctrl-C stops it cleanly."""

from __future__ import annotations

import httpx
import pytest
from browser import LOADED_IMAGES, Served, browser, ledger_state  # noqa: F401 - fixture
from conftest import jobs, manifest

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def batch_with_a_failure(afc, n: int) -> list[dict]:
    """``n`` stored outputs and one failed job; the outputs as ``afc outputs`` lists them."""
    listed = jobs(n, size="96x64")
    listed.append({"key": "broken", "prompt": "refused", "params": {"fail": ["refusal"] * 3}})
    afc.write_manifest(manifest(listed))
    assert afc("submit", "manifest.yaml").returncode == 1
    return afc.json("outputs")["outputs"]


def loaded(driver) -> dict[str, int]:
    return {alt: width for alt, width in driver.execute_async_script(LOADED_IMAGES)}


def test_the_report_shows_every_stored_output_and_the_costs_reports_totals(afc, browser):  # noqa: F811
    outputs = batch_with_a_failure(afc, 230)  # two pages of the contact sheet
    assert afc("report", "--html", "report.html").returncode == 0
    browser.get((afc.cwd / "report.html").as_uri())
    images = loaded(browser)
    # every stored output is a loaded picture (on either page), and only those
    assert set(images) == {o["key"] for o in outputs}
    assert all(width > 0 for width in images.values()), images
    from selenium.webdriver.common.by import By

    total = afc.json("costs", "report")["total"]
    shown = {
        el.get_attribute("data-figure"): el.text
        for el in browser.find_elements(By.CSS_SELECTOR, "[data-figure]")
    }
    assert shown == {
        name: str(total[name])
        for name in (
            "priced",
            "failed_spend",
            "avoided_cost",
            "unpriced_attempts",
            "unknown_attempts",
        )
    }
    for by in ("provider", "model", "day"):
        report = afc.json("costs", "report", "--by", by)["total"]
        cells = browser.find_elements(By.CSS_SELECTOR, f"table[data-by={by}] [data-total]")
        assert {c.get_attribute("data-total"): c.get_attribute("textContent") for c in cells} == {
            k: str(v) for k, v in report.items()
        }
    # the pager: page 2 holds the cards past the first 200, shown when its button is pressed
    card = browser.find_element(By.CSS_SELECTOR, "figure[data-key=shot-230]")
    assert not card.is_displayed()
    browser.find_element(By.CSS_SELECTOR, ".pager button[data-page='2']").click()
    assert card.is_displayed()
    failed = browser.find_element(By.CSS_SELECTOR, "table.failures tr[data-key=broken]")
    assert "CHAIN_FAILED" in failed.text


def test_serve_shows_the_same_views_live_and_streams_full_size_outputs(afc, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    outputs = batch_with_a_failure(afc, 5)
    served = Served(afc)
    try:
        browser.get(served.url)
        images = loaded(browser)
        assert set(images) == {o["key"] for o in outputs} and all(images.values())
        link = browser.find_element(By.CSS_SELECTOR, "figure[data-key=shot-003] a")
        href = link.get_attribute("href")
        browser.get(href)  # the full-size picture, from storage
        assert browser.execute_script("return document.images[0].naturalWidth") == 96
        full = httpx.get(href)
        with open(next(o["path"] for o in outputs if o["key"] == "shot-003"), "rb") as f:
            assert full.content == f.read() and full.headers["content-type"] == "image/png"

        browser.get(served.url + "spend")
        total = afc.json("costs", "report")["total"]
        assert browser.find_element(By.CSS_SELECTOR, "[data-figure=priced]").text == total["priced"]
        browser.get(served.url + "failures")
        assert "CHAIN_FAILED" in browser.find_element(By.CSS_SELECTOR, "tr[data-key=broken]").text
    finally:
        code, stderr = served.stop()
    assert code == 0 and "serve stopped" in stderr and "Traceback" not in stderr


def test_a_get_to_an_action_url_changes_nothing_and_a_post_needs_the_form_token(afc):
    batch_with_a_failure(afc, 2)
    before = ledger_state(afc.cwd / "afc.db")
    served = Served(afc)
    try:
        for action in ("approve", "reject"):
            url = f"{served.url}review/{action}?key=shot-001&batch=b1&reason=bad"
            assert httpx.get(url).status_code == 405
            forged = httpx.post(
                f"{served.url}review/{action}",
                data={"key": "shot-001", "batch": "b1", "reason": "x", "form_token": "guess"},
            )
            assert forged.status_code == 403 and "did not come from this afc serve" in forged.text
        # a page on another site reaching 127.0.0.1 through DNS rebinding is refused
        assert httpx.get(served.url, headers={"Host": "evil.example"}).status_code == 400
    finally:
        code, _ = served.stop()
    assert code == 0
    assert ledger_state(afc.cwd / "afc.db") == before


def test_another_host_needs_a_token_and_every_request_then_carries_it(afc):
    afc.write_manifest(manifest(jobs(1)))
    afc("submit", "manifest.yaml")
    refused = afc("serve", "--host", "0.0.0.0", "--port", "0", timeout=30)
    assert refused.returncode == 2
    assert "--host 0.0.0.0 would serve the ledger to other machines: set AFC_SERVE_TOKEN" in (
        refused.stderr
    )
    short = afc("serve", "--host", "0.0.0.0", env={"AFC_SERVE_TOKEN": "abc"}, timeout=30)
    assert short.returncode == 2 and "too short" in short.stderr

    token = "t0ken-" + "x" * 20
    served = Served(afc, env={"AFC_SERVE_TOKEN": token})
    try:
        assert httpx.get(served.url).status_code == 401
        assert httpx.get(served.url, cookies={"afc_serve_token": "wrong" * 5}).status_code == 401
        with httpx.Client() as client:
            first = client.get(served.url + "spend?token=" + token)
            assert first.status_code == 303 and "token" not in first.headers["location"]
            assert client.get(first.headers["location"]).status_code == 200  # by the cookie
    finally:
        code, stderr = served.stop()
    assert code == 0 and token not in stderr


def test_a_port_in_use_is_one_message(afc):
    import socket

    afc.write_manifest(manifest(jobs(1)))
    afc("submit", "manifest.yaml")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = afc("serve", "--port", str(port), timeout=30)
    assert result.returncode == 2 and f"cannot listen on 127.0.0.1 port {port}" in result.stderr
