"""Outside audit 27a found: 'afc serve' listened on 127.0.0.1 alone, and another process could
hold [::1] on the same port; a browser opening localhost:PORT tries ::1 first and reached that
process (given '?token=', it received the token). afc serve now holds the port on both
loopback addresses, and refuses (exit 2) when the other one is another process's."""

from __future__ import annotations

import socket

import httpx
import pytest
from browser import Served
from conftest import jobs, manifest

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


pytestmark = pytest.mark.skipif(not ipv6_loopback(), reason="no ::1 on this host")


def test_serve_refuses_a_port_another_process_holds_on_the_other_loopback(afc):
    afc.write_manifest(manifest(jobs(1)))
    afc("submit", "manifest.yaml")
    with socket.socket(socket.AF_INET6) as taken:
        taken.bind(("::1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = afc("serve", "--port", str(port), timeout=30)
    assert result.returncode == 2, result
    assert f"[::1] port {port} is another process's" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_serve_answers_localhost_on_both_loopback_addresses(afc):
    afc.write_manifest(manifest(jobs(1)))
    afc("submit", "manifest.yaml")
    served = Served(afc)
    try:
        port = httpx.URL(served.url).port
        assert httpx.get(served.url).status_code == 200
        # the same server on [::1]: the port is held there, by afc serve, and its own user's
        # request is answered as on 127.0.0.1
        page = httpx.get(f"http://[::1]:{port}/")
        assert page.status_code == 200, page.text
        assert "shot-001" in page.text or "b1" in page.text
        with socket.socket(socket.AF_INET6) as other, pytest.raises(OSError):
            other.bind(("::1", port))
    finally:
        code, _ = served.stop()
    assert code == 0
