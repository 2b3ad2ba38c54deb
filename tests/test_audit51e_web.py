"""Outside audit 51e: the web security of ``afc serve`` and ``afc report --html``."""

from __future__ import annotations

import os

import httpx
import pytest
from browser import Served, awaiting, rendered_as

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")

# an EPS "picture", as a hostile or broken provider may answer one: PostScript is a program
EPS = (
    b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 64 64\n"
    b"newpath 0 0 moveto 64 64 lineto stroke\nshowpage\n%%EOF\n"
)


def fake_ghostscript(afc, tmp_path) -> os.PathLike:
    """A ``gs`` first on the PATH of afc's processes, which notes each time it is run."""
    folder = tmp_path / "bin"
    folder.mkdir()
    ran = tmp_path / "gs-ran"
    gs = folder / "gs"
    gs.write_text(f'#!/bin/sh\necho "$@" >> {ran}\nexit 1\n')
    gs.chmod(0o755)
    afc.env["PATH"] = f"{folder}{os.pathsep}{afc.env.get('PATH', '')}"
    return ran


def test_a_postscript_output_is_never_given_to_ghostscript(afc, tmp_path):
    """Pillow opens some forty formats by their first bytes, and an EPS one it renders by
    running Ghostscript: an output whose bytes were PostScript (a provider's answer, whatever
    it says it is) made afc serve's thumbnail, and afc report --html, run ``gs`` on them,
    an interpreter of a programming language, on the reviewer's or the server's machine.
    Only the kinds of picture a model renders are previewed now: the card says the output
    is not a picture it can preview, and no program is run."""
    awaiting(afc, 2)
    rendered_as(afc, "shot-001", EPS)
    ran = fake_ghostscript(afc, tmp_path)
    ids = dict(afc.rows("SELECT key, id FROM jobs"))
    served = Served(afc)
    try:
        thumb = httpx.get(f"{served.url}thumb/{ids['shot-001']}")
        other = httpx.get(f"{served.url}thumb/{ids['shot-002']}")
    finally:
        served.stop()
    assert thumb.status_code == 200
    assert thumb.headers["content-type"].startswith("image/svg+xml")
    assert "not a picture this afc can preview" in thumb.text
    assert other.headers["content-type"] == "image/webp"  # a PNG still is
    report = afc("report", "--html", "report.html")
    assert report.returncode == 0, report.stderr
    assert "not a picture this afc can preview" in (afc.cwd / "report.html").read_text()
    assert not ran.exists(), ran.read_text()
