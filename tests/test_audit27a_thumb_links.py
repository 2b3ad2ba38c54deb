"""Outside audit 27a: what afc serve reads for a picture in a ``file://`` store when the
output's name is a symbolic link, or no file at all."""

from __future__ import annotations

import os

import httpx
import pytest
from browser import Served, awaiting

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def test_a_thumbnail_does_not_follow_a_link_to_another_picture(afc, tmp_path):
    """The full-size view refuses a symbolic link at an output's name unless it holds the
    job's own bytes (26c), but the thumbnail followed it: a link put there to any picture the
    server's user can read (a private photo, a scan of a passport, another client's render)
    was shown, downscaled, on the contact sheet and on the review page, where Approve the N
    shown would approve it. A thumbnail now reads the store as the full-size view does: a
    link to other bytes is a placeholder saying so; a link holding the job's own bytes (a
    studio's link to the render kept elsewhere) is shown."""
    from PIL import Image

    awaiting(afc, 2)
    folder = afc.outputs() / "b1"
    private = tmp_path / "private.png"
    Image.new("RGB", (96, 64), (10, 200, 10)).save(private)
    (folder / "shot-001.png").unlink()
    os.symlink(private, folder / "shot-001.png")
    kept = tmp_path / "kept.png"  # the second job's own render, moved and linked back
    os.rename(folder / "shot-002.png", kept)
    os.symlink(kept, folder / "shot-002.png")
    ids = dict(afc.rows("SELECT key, id FROM jobs"))
    served = Served(afc)
    try:
        linked = httpx.get(f"{served.url}thumb/{ids['shot-001']}")
        own = httpx.get(f"{served.url}thumb/{ids['shot-002']}")
    finally:
        code, stderr = served.stop()
    assert code == 0 and "Traceback" not in stderr
    assert linked.status_code == 200
    assert linked.headers["content-type"].startswith("image/svg+xml"), linked.headers
    assert "symbolic link" in linked.text
    assert own.status_code == 200 and own.headers["content-type"] == "image/webp"


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_an_output_name_that_is_no_file_is_not_read(afc, kind):
    """A FIFO at an output's name (or a link to one, or to /dev/zero) held the request's
    thread for ever: open() of a FIFO waits for a writer, and a link to /dev/zero was hashed
    without end to compare it with the job's SHA-256, one core at 100 % per request. Neither
    is an object afc stores: both views say so at once."""
    awaiting(afc, 1)
    target = afc.outputs() / "b1" / "shot-001.png"
    target.unlink()
    if kind == "fifo":
        os.mkfifo(target)
    else:
        os.symlink("/dev/zero", target)
    [(job_id,)] = afc.rows("SELECT id FROM jobs")
    served = Served(afc)
    try:
        thumb = httpx.get(f"{served.url}thumb/{job_id}", timeout=20)
        full = httpx.get(f"{served.url}output/{job_id}", timeout=20)
    finally:
        code, stderr = served.stop()
    assert code == 0 and "Traceback" not in stderr
    assert thumb.headers["content-type"].startswith("image/svg+xml")
    assert "not a file" in thumb.text
    assert full.status_code == 404 and "not a file" in full.text


def test_the_report_file_does_not_embed_a_linked_picture(afc, tmp_path):
    """afc report --html made its thumbnails through the store's reads, which follow a
    symbolic link at an output's name: a link there to another picture the user can read was
    embedded in the file (mailed to a producer) as that job's output. The report reads a
    file:// store as afc serve does now: the card says why it has no picture."""
    from PIL import Image

    awaiting(afc, 2)
    folder = afc.outputs() / "b1"
    private = tmp_path / "private.png"
    Image.new("RGB", (96, 64), (10, 200, 10)).save(private)
    (folder / "shot-001.png").unlink()
    os.symlink(private, folder / "shot-001.png")
    result = afc("report", "--html", "report.html", "--json")
    assert result.returncode == 0, result.stderr
    import json

    said = json.loads(result.stdout)
    assert said["pictures"] == 1 and said["without_picture"] == ["shot-001"], said
    assert "symbolic link" in (afc.cwd / "report.html").read_text()
