"""``afc serve``'s rules over plain HTTP: a GET never changes anything, a POST needs the
server's form token, a host other than loopback needs AFC_SERVE_TOKEN (and every request
then carries it), a port in use is one message, Ctrl-C and SIGTERM stop it cleanly."""

from __future__ import annotations

import json
import signal
import subprocess

import httpx
import pytest
from browser import Served, ledger_state
from conftest import jobs, manifest

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def batch_with_a_failure(afc, n: int) -> list[dict]:
    """``n`` stored outputs and one failed job; the outputs as ``afc outputs`` lists them."""
    listed = jobs(n, size="96x64")
    listed.append({"key": "broken", "prompt": "refused", "params": {"fail": ["refusal"] * 3}})
    afc.write_manifest(manifest(listed))
    assert afc("submit", "manifest.yaml").returncode == 1
    return afc.json("outputs")["outputs"]


def serve_json(afc) -> subprocess.Popen:
    """``afc serve --port 0 --json`` with its stdout (the address line) and stderr piped."""
    return subprocess.Popen(
        afc.command("serve", "--port", "0", "--json"),
        cwd=afc.cwd,
        env=afc.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


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


def test_the_host_rules_as_functions():
    from afc_cli.web.server import access_token, host_name, is_loopback

    assert [host_name(h) for h in ("127.0.0.1:8765", "[::1]:80", "localhost", "a.example:1")] == [
        "127.0.0.1",
        "::1",
        "localhost",
        "a.example",
    ]
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "192.168.1.4", "evil.example", ""))
    assert access_token("127.0.0.1", {}) is None
    assert access_token("0.0.0.0", {"AFC_SERVE_TOKEN": "s" * 16}) == "s" * 16
    from afc_cli.errors import UsageError

    with pytest.raises(UsageError, match="AFC_SERVE_TOKEN"):
        access_token("::", {})


def test_sigterm_stops_serve_cleanly_too(afc):
    import signal

    afc.write_manifest(manifest(jobs(1)))
    afc("submit", "manifest.yaml")
    served = Served(afc)
    assert httpx.get(served.url).status_code == 200
    served.proc.send_signal(signal.SIGTERM)
    code, stderr = served.stop()
    assert code == 0 and "serve stopped" in stderr and "Traceback" not in stderr


def test_a_password_in_a_postgresql_ledger_url_is_on_no_page_and_in_no_json(afc, pg_url):
    """Found by an outside audit: every page said 'live from postgresql://afc:PASSWORD@…'
    and ``--json`` carried the URL as given. The server trusts loopback, so any password
    connects."""
    password = "Sup3rS3cretPW-0123"
    url = pg_url.replace("postgresql://afc@", f"postgresql://afc:{password}@")
    afc.env["AFC_LEDGER"] = url
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    served = Served(afc, "--json")
    try:
        pages = [httpx.get(served.url + path).text for path in ("", "review", "spend")]
    finally:
        code, stderr = served.stop()
    assert code == 0
    assert "postgresql://&lt;redacted&gt;@127.0.0.1" in pages[0]
    for text in (*pages, stderr):
        assert password not in text
    proc = serve_json(afc)
    try:
        line = proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert json.loads(line)["ledger"].startswith("postgresql://<redacted>@127.0.0.1")
    assert password not in line


def test_ctrl_c_the_moment_serve_says_its_address_stops_it(afc):
    """A script that read the address (``--json``) and stops the server at once: the signal
    may land before uvicorn takes the signals. CI once saw such a serve never stop; it was
    also exit 130 'interrupted' where a stop is exit 0."""
    afc.write_manifest(manifest(jobs(1)))
    afc("submit", "manifest.yaml")
    for how in (signal.SIGINT, signal.SIGTERM) * 3:
        proc = serve_json(afc)
        assert json.loads(proc.stdout.readline())["url"].startswith("http://127.0.0.1:")
        proc.send_signal(how)
        try:
            _, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        assert proc.returncode == 0 and "serve stopped" in stderr, (how, stderr)


# The web extra's check imports each library by the name it has now: python-multipart's old
# name ``multipart`` warns that it is deprecated (PendingDeprecationWarning from 0.0.13), and
# once it is gone ``afc serve`` would have said the extra was missing when it was not.
CHECK = (
    "import sys\n"
    "sys.modules.update({name: None for name in sys.argv[1:]})\n"
    "from afc_cli.errors import UsageError\n"
    "from afc_cli.web import SERVE_MODULES, require\n"
    "try:\n"
    "    require(SERVE_MODULES)\n"
    "except UsageError as exc:\n"
    "    print(exc.message)\n"
)


def test_serve_checks_its_libraries_by_their_current_names_and_names_a_missing_one():
    import sys

    deprecated = ["-W", "error::DeprecationWarning", "-W", "error::PendingDeprecationWarning"]

    quiet = subprocess.run(
        [sys.executable, *deprecated, "-c", CHECK], capture_output=True, text=True
    )
    assert quiet.returncode == 0 and quiet.stdout == "", quiet.stdout + quiet.stderr
    missing = subprocess.run(
        [sys.executable, *deprecated, "-c", CHECK, "python_multipart", "uvicorn"],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 0, missing.stderr
    assert "uvicorn, python-multipart" in missing.stdout
    assert "pip install 'afc-cli[web]'" in missing.stdout
