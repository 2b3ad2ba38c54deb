"""Outside audit 34g: a stored output in a ``file://`` store that cannot be read (the disk
answers EIO: a failing sector, an NFS store's stale handle; here a link to /proc/self/mem,
which reads as EIO).

Before: ``afc report --html`` stopped, exit 2, with "--html r.html: cannot write it
(Input/output error); nothing was written under that name", blaming the report's own file
for one output's read, and wrote no report at all; ``afc serve`` answered that output's
thumbnail and full-size view with a 500 and a traceback on its stderr each. The README says
an unreadable output is said on its card, the report still written. Now a read error of
the file is the storage error it is (``server.file_chunks``): said on the card, a 404 for
the full-size view."""

from __future__ import annotations

import os
import sys

import httpx
import pytest
from browser import Served, awaiting

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="/proc/self/mem reads as EIO on Linux"
)


def unreadable(afc) -> dict[str, str]:
    awaiting(afc, 2)
    name = afc.outputs() / "b1" / "shot-001.png"
    name.unlink()
    os.symlink("/proc/self/mem", name)
    return dict(afc.rows("SELECT key, id FROM jobs"))


def test_an_unreadable_output_is_said_on_its_card_and_the_report_is_written(afc):
    pytest.importorskip("PIL", reason="the web extra: pip install 'afc-cli[web]'")
    unreadable(afc)
    result = afc("report", "--html", "r.html")
    assert result.returncode == 0, result.stderr
    assert "cannot write" not in result.stderr
    assert "1 stored outputs have no picture in the report (shot-001)" in result.stderr
    page = (afc.cwd / "r.html").read_text()
    assert "Input/output error" in page


def test_afc_serve_says_an_unreadable_output_on_its_card_not_a_traceback(afc):
    pytest.importorskip("PIL", reason="the web extra: pip install 'afc-cli[web]'")
    ids = unreadable(afc)
    served = Served(afc)
    try:
        thumb = httpx.get(f"{served.url}thumb/{ids['shot-001']}")
        full = httpx.get(f"{served.url}output/{ids['shot-001']}")
        other = httpx.get(f"{served.url}thumb/{ids['shot-002']}")
    finally:
        code, stderr = served.stop()
    assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/svg+xml"
    assert b"Input/output error" in thumb.content
    assert full.status_code == 404 and "Input/output error" in full.text
    assert other.status_code == 200 and other.headers["content-type"] == "image/webp"
    assert code == 0 and "Traceback" not in stderr, stderr
