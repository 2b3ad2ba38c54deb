"""Outside audit 34g: a stored picture past twice Pillow's pixel limit (a 16,384 x 16,384
upscale: 268 million pixels, a 4x upscale of a 4,096-pixel render) was said on its card, in
``afc report``'s stderr and in "Approve the N shown"'s undecided jobs to be "not a picture
this afc can preview": Pillow refuses to open a picture that big (DecompressionBombError),
which was taken for bytes that are no picture. A reviewer read that a paid upscale was
broken. It is said as one just past the limit is: its size in pixels, no preview."""

from __future__ import annotations

import struct
import zlib

import pytest
from browser import rendered_as
from conftest import jobs, manifest


def huge_png(width: int, height: int) -> bytes:
    """A valid black 1-bit PNG of ``width`` x ``height``, a few tens of KB."""

    def chunk(tag: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(tag + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", crc)

    row = bytes(1 + (width + 7) // 8)
    packer = zlib.compressobj(9)
    data = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")
    )


def test_a_picture_past_pillow_s_hard_limit_is_said_by_its_size_not_as_no_picture(afc):
    pytest.importorskip("PIL", reason="the web extra: pip install 'afc-cli[web]'")
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml").returncode == 0
    # as if the model had rendered it (other bytes than the verified ones are said changed)
    rendered_as(afc, "shot-001", huge_png(16384, 16384))
    result = afc("report", "--html", "r.html")
    assert result.returncode == 0, result.stderr
    assert "1 stored outputs have no picture in the report (shot-001)" in result.stderr
    page = (afc.cwd / "r.html").read_text()
    assert "268 million pixels: no preview" in page
    assert "not a picture this afc can preview" not in page
