"""Outside audit 34b: webhooks read the environment's proxy as the provider calls do
(``HTTPS_PROXY`` / ``HTTP_PROXY`` by scheme, ``NO_PROXY``), never ``ALL_PROXY``: a SOCKS
proxy set there for other tools ended every run with a webhook, after its paid renders, with
'unexpected error: ImportError ... (a bug in afc)', and no 'afc webhooks deliver' could send
an event."""

from __future__ import annotations

import base64
import json

from conftest import jobs, manifest
from receiver import Receiver

SECRET = {"WH_SECRET": "whsec_" + base64.b64encode(b"0123456789abcdef").decode()}


def _submit(afc, url: str, env: dict[str, str]):
    afc.write_manifest(manifest(jobs(1), webhook={"url": url, "secret_env": "WH_SECRET"}))
    return afc("submit", "manifest.yaml", "--json", env={**SECRET, **env})


def test_a_socks_all_proxy_neither_breaks_a_run_nor_its_webhooks(afc):
    receiver = Receiver().start()
    try:
        socks = {"ALL_PROXY": "socks5://127.0.0.1:9", "all_proxy": "socks5://127.0.0.1:9"}
        run = _submit(afc, receiver.url, socks)
        assert run.returncode == 0, run.stderr
        assert "a bug in afc" not in run.stderr and "ImportError" not in run.stderr
        assert json.loads(run.stdout)["webhooks"] is None, run.stdout  # every event arrived
        assert len(receiver.received) == 1
        replay = afc(
            "webhooks",
            "replay",
            afc.rows("SELECT id FROM deliveries")[0][0],
            env={
                **SECRET,
                **socks,
            },
        )
        assert replay.returncode == 0, replay.stderr
        assert len(receiver.received) == 2
    finally:
        receiver.stop()


def test_webhooks_go_through_the_http_proxy_but_not_for_no_proxy_hosts(afc):
    proxy = Receiver().start()  # answers 200 to whatever is POSTed through it
    receiver = Receiver().start()
    try:
        base = proxy.url.rsplit("/hooks/", 1)[0]
        run = _submit(afc, "http://hooks.afc.invalid/in", {"HTTP_PROXY": base})
        assert run.returncode == 0, run.stderr
        assert len(proxy.received) == 1  # the proxy got it, for a host only it can resolve
        assert proxy.received[0].headers["host"] == "hooks.afc.invalid"
        env = {"HTTP_PROXY": base, "NO_PROXY": "127.0.0.1"}
        (afc.cwd / "afc.db").unlink()
        run = _submit(afc, receiver.url, env)
        assert run.returncode == 0, run.stderr
        assert (len(receiver.received), len(proxy.received)) == (1, 1)
    finally:
        proxy.stop()
        receiver.stop()


def test_a_socks_proxy_named_for_the_receiver_is_a_failed_connection_said_so(afc):
    run = _submit(afc, "http://hooks.afc.invalid/in", {"HTTP_PROXY": "socks5://127.0.0.1:9"})
    assert run.returncode == 0, run.stderr
    assert "a bug in afc" not in run.stderr
    assert json.loads(run.stdout)["webhooks"] == {"pending": 1, "dead": 0}, run.stdout
    ((error,),) = afc.rows("SELECT last_error FROM deliveries")
    assert "HTTP_PROXY names a proxy webhooks cannot go through" in error, error
