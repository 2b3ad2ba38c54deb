"""Outside audit 22 (b) of the pictures: ``afc serve`` as a user meets it, over plain HTTP."""

from __future__ import annotations

import socket
import threading
from urllib.parse import quote

import httpx
import pytest
from browser import LOADED_IMAGES, Served, browser  # noqa: F401 - the browser fixture
from conftest import jobs, manifest

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def test_a_base64_token_pasted_into_the_address_is_taken_as_it_is(afc):
    """AFC_SERVE_TOKEN made by ``openssl rand -base64 24`` holds a '+' two times in five. The
    page asks to open the address with the query parameter token set to the value, and that
    address, pasted as it is (``?token=q3+Zr/...``), was a 401 saying to do just that: the
    query was read as a form, its '+' a space. Only the token percent-encoded got in."""
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    token = "q3+Zr/8kT0+pL9wXyA1bC2dE=="
    served = Served(afc, env={"AFC_SERVE_TOKEN": token})
    try:
        for sent in (token, quote(token, safe="")):
            with httpx.Client() as client:
                first = client.get(f"{served.url}review?token={sent}&page=1")
                assert first.status_code == 303, (sent, first.text)
                assert "token" not in first.headers["location"]
                assert first.headers["location"].endswith("/review?page=1")
                assert client.get(first.headers["location"]).status_code == 200  # the cookie
        # a '+' sent is the token's plus (or a form's space); a space sent as such is not
        # a plus, nor is anything else
        for wrong in (token.replace("+", " "), token.replace("+", "-"), token[:-1]):
            answer = httpx.get(f"{served.url}?token={quote(wrong, safe='')}")
            assert answer.status_code == 401, wrong
    finally:
        code, stderr = served.stop()
    assert code == 0 and token not in stderr and "Traceback" not in stderr


def test_a_full_size_output_is_sent_as_what_its_bytes_are(afc, monkeypatch):
    """The full-size view labelled an output by its key's extension alone, through Python's
    mimetypes, which knows .webp only from the system's mime.types (3.11 and 3.12 have none
    of their own): where there is none (a slim container image) a .webp output was
    application/octet-stream, sent with nosniff, so clicking its thumbnail downloaded a file
    instead of showing the picture; and a key whose extension is not what the model answered
    (``pipeline._named_as``: a .png key holding WebP) was labelled by the key. It is labelled
    as S3 storage labels the object: by its first bytes, else by its key."""
    import asyncio
    import mimetypes

    from afc_cli.web.server import build_app

    data = manifest(jobs(1, size="32x32"))
    data["defaults"]["output"] = "{batch}/{key}.webp"  # the local model answers PNG
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    [[job_id]] = afc.rows("SELECT id FROM jobs")
    # Python's own table, without the system's mime.types, as 3.11's and 3.12's (3.13's own
    # table knows .webp)
    table = mimetypes.MimeTypes(filenames=())
    for strict in (True, False):
        table.types_map[strict].pop(".webp", None)
    monkeypatch.setattr(mimetypes, "_db", table)
    monkeypatch.setattr(mimetypes, "inited", True)
    assert mimetypes.guess_type("x.webp")[0] is None
    monkeypatch.chdir(afc.cwd)
    app = build_app("afc.db", batch=None, host="127.0.0.1", token=None)

    async def get() -> httpx.Response:  # the server's app in this process, its mimetypes these
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return await client.get(f"/output/{job_id}")

    answer = asyncio.run(get())
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "image/png"
    assert answer.content.startswith(b"\x89PNG")
    assert answer.headers["x-content-type-options"] == "nosniff"


def test_a_browser_shows_each_ledgers_own_pictures_on_the_same_port(afc, browser):  # noqa: F811
    """A job's id is its batch's and key's (``job_id_for``), and its thumbnail's address is
    /thumb/<job id>, sent as fresh for an hour (max-age=3600): a batch re-run in a fresh ledger
    (new prompts, same batch name and keys) and served on the same port (8765, the default)
    showed, on its review page, the first ledger's pictures, even after a reload, and a
    reviewer approved a picture the job never made. Each thumbnail is now asked for again
    at each use (no-cache, answered 304 by its ETag while it is the same)."""
    from selenium.webdriver.common.by import By

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
    seen = {}
    for name, size in (("first", "32x32"), ("second", "64x48")):
        data = manifest(jobs(1, size=size))
        data["defaults"]["review"] = True
        afc.write_manifest(data, f"{name}.yaml")
        ledger = ["--ledger", f"{name}.db"]
        submitted = afc("submit", f"{name}.yaml", *ledger, "--storage", f"file://./{name}")
        assert submitted.returncode == 0, submitted.stderr
        served = Served(afc, "--port", str(port), *ledger)
        try:
            assert served.url.endswith(f":{port}/")
            for again in (False, True):  # a reload uses what the browser keeps
                browser.get(served.url + "review")
                seen[name, again] = dict(browser.execute_async_script(LOADED_IMAGES))
            thumb = browser.find_element(By.CSS_SELECTOR, "figure[data-key=shot-001] img")
            first = httpx.get(thumb.get_attribute("src"))
            tag = first.headers["etag"]
            again = httpx.get(thumb.get_attribute("src"), headers={"If-None-Match": tag})
            assert again.status_code == 304 and again.content == b""  # the same: not sent again
            full = browser.find_element(By.CSS_SELECTOR, "figure[data-key=shot-001] a")
            browser.get(full.get_attribute("href"))
            seen[name, "full"] = browser.execute_script("return document.images[0].naturalWidth")
        finally:
            code, stderr = served.stop()
        assert code == 0 and "Traceback" not in stderr
    assert seen["first", False] == seen["first", True] == {"shot-001": 32}
    assert seen["second", False] == seen["second", True] == {"shot-001": 64}
    assert seen["first", "full"] == 32 and seen["second", "full"] == 64


def test_a_host_given_with_its_port_or_scheme_is_told_where_the_port_goes(afc):
    """``--host 127.0.0.1:9000`` (or localhost:9000, http://127.0.0.1) was told that it would
    serve the ledger to other machines, to set AFC_SERVE_TOKEN 'or serve on 127.0.0.1'; with
    the token set, 'cannot listen on 127.0.0.1:9000 port 8765: Name or service not known'."""
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    for host in ("127.0.0.1:9000", "localhost:9000", "[::1]:9000", "http://127.0.0.1"):
        for env in ({}, {"AFC_SERVE_TOKEN": "t0ken-" + "x" * 20}):
            result = afc("serve", "--host", host, "--port", "0", env=env, timeout=30)
            assert result.returncode == 2, (host, env, result.stderr)
            assert f"--host {host}: give the address alone" in result.stderr
            assert "the port goes in --port" in result.stderr
            assert "other machines" not in result.stderr and "Traceback" not in result.stderr


def test_a_store_out_of_reach_is_not_asked_again_for_every_picture(afc, s3):  # noqa: F811
    """An S3 endpoint afc serve cannot reach (a MinIO down or hung, a VPN not up) was asked
    again for every thumbnail and full-size view, each waiting out its own connect or read
    timeout (10 to 120 s), six at a time in a browser, whose clicks on the server's other
    pages queued behind them: a contact sheet of 120 cards took many minutes to settle. As
    the report does (tests/test_audit20d_report_s3.py), once a read finds no connection to
    a store, its other pictures say so at once (for DOWN_S), and a full-size view is a 503."""
    n = 30
    afc.write_manifest(manifest(jobs(n, size="32x32")))
    assert afc("submit", "manifest.yaml", "--storage", s3.url).returncode == 0
    ids = [job_id for (job_id,) in afc.rows("SELECT id FROM jobs ORDER BY key")]
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    connections = []

    def refuse() -> None:  # takes each connection and closes it unanswered
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            connections.append(1)
            conn.close()

    threading.Thread(target=refuse, daemon=True).start()
    served = Served(
        afc, env={"AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{listener.getsockname()[1]}"}
    )
    try:
        for job_id in ids:
            thumb = httpx.get(f"{served.url}thumb/{job_id}")
            assert thumb.headers["content-type"].startswith("image/svg+xml")
            assert "connection problem" in thumb.text, thumb.text
        full = httpx.get(f"{served.url}output/{ids[0]}")
        assert full.status_code == 503 and "could not be reached" in full.text
        assert httpx.get(served.url).status_code == 200
    finally:
        listener.close()
        code, stderr = served.stop()
    assert code == 0 and "Traceback" not in stderr
    assert len(connections) < 3, len(connections)


def test_two_servers_of_one_machine_keep_their_own_tokens(afc):
    """A browser sends a host's cookies to each of its ports, and every afc serve stored its
    token in the one cookie afc_serve_token: with two served on one machine (two ledgers, each
    started with its own AFC_SERVE_TOKEN), opening the second with its token logged the
    browser out of the first (401 'needs its token' on a tab already open), and back again."""
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    tokens = ["first-" + "a" * 20, "second-" + "b" * 20]
    servers = [Served(afc, env={"AFC_SERVE_TOKEN": token}) for token in tokens]
    try:
        with httpx.Client() as browser_like:  # one cookie jar, as a browser's, ports ignored
            for served, token in zip(servers, tokens, strict=True):
                opened = browser_like.get(f"{served.url}?token={token}", follow_redirects=True)
                assert opened.status_code == 200
            for served in servers:
                assert browser_like.get(served.url + "review").status_code == 200, served.url
    finally:
        stopped = [served.stop() for served in servers]
    for code, stderr in stopped:
        assert code == 0 and not any(token in stderr for token in tokens)
