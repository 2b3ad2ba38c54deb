"""Outside audit 43b: a verified picture cut short in storage, on afc serve's cards and in
afc report --html."""

from __future__ import annotations

import httpx
import pytest
from browser import Served, awaiting

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
