"""Outside audit 43b: a verified picture cut short in storage, on afc serve's cards and in
afc report --html."""

from __future__ import annotations

import os

import httpx
import pytest
from browser import Served, awaiting, rendered_as

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def test_a_picture_cut_short_in_storage_is_said_changed_and_shown_once_put_back(afc):
    """An output afc verified, cut short in storage since (a sync or a copy half done, a
    disk that lost its end), was "not a picture this afc can preview" on its card: a paid
    render its reviewer read as broken, to reject and pay again for. And afc serve kept
    that note for good, so the card stayed broken after the file was put back whole, until
    the server restarted. Now it says the bytes changed since afc verified them, and the
    card is back once they are."""
    awaiting(afc, 1)
    [(job_id, key)] = afc.rows("SELECT id, output_key FROM jobs")
    path = afc.outputs() / key
    whole = path.read_bytes()
    path.write_bytes(whole[:40])
    served = Served(afc)
    try:
        cut = httpx.get(f"{served.url}thumb/{job_id}")
        assert cut.headers["content-type"].startswith("image/svg+xml")
        assert "changed in storage since afc verified it" in cut.text
        assert "not a picture" not in cut.text
        path.write_bytes(whole)
        back = httpx.get(f"{served.url}thumb/{job_id}")
        assert back.status_code == 200 and back.headers["content-type"] == "image/webp"
    finally:
        code, _ = served.stop()
    assert code == 0
    path.write_bytes(whole[:40])
    made = afc("report", "--html", "report.html")
    assert made.returncode == 0, made.stderr
    text = (afc.cwd / "report.html").read_text()
    assert "changed in storage since afc verified it" in text
    assert "not a picture this afc can preview" not in text


def test_a_full_size_view_shows_only_the_bytes_afc_verified(afc):
    """A card left undecided as "changed in storage since afc verified it" asks for a look
    at the full-size output, which sent the other bytes (a retoucher's save over it, a copy
    cut short) as the job's: the reviewer looked, and the card's Approve then approved the
    verified output, never seen. The full-size view now sends only the verified bytes: a
    404 saying why for a picture read whole before the answer starts, and past 4 MiB an
    answer broken off before its end, never finished as if whole."""
    awaiting(afc, 2)
    ids = dict(afc.rows("SELECT key, id FROM jobs"))
    keys = dict(afc.rows("SELECT key, output_key FROM jobs"))
    small = afc.outputs() / keys["shot-001"]
    whole = small.read_bytes()
    big = os.urandom(6 << 20)
    rendered_as(afc, "shot-002", big)  # a verified output of 6 MiB
    served = Served(afc)
    try:
        assert httpx.get(f"{served.url}output/{ids['shot-001']}").content == whole
        assert httpx.get(f"{served.url}output/{ids['shot-002']}").content == big
        small.write_bytes(whole[:-10] + b"0123456789")
        changed = httpx.get(f"{served.url}output/{ids['shot-001']}")
        assert changed.status_code == 404
        assert "changed in storage since afc verified it" in changed.text
        (afc.outputs() / keys["shot-002"]).write_bytes(big[:-1] + b"!")
        with pytest.raises(httpx.RemoteProtocolError):
            httpx.get(f"{served.url}output/{ids['shot-002']}")
        small.write_bytes(whole)  # put back: shown again
        assert httpx.get(f"{served.url}output/{ids['shot-001']}").content == whole
    finally:
        code, stderr = served.stop()
    assert code == 0 and "Traceback" not in stderr
    assert "the full-size view was cut short" in stderr
    assert "changed in storage since afc verified it" in stderr
