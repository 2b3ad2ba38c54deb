"""Outside audit 27a: the memory a thumbnail's stored bytes take while it is made."""

from __future__ import annotations

import io
import threading
import tracemalloc

import pytest

pytest.importorskip("PIL", reason="the web extra: pip install 'afc-cli[web]'")


class Store:
    """A store of one big picture, read a MiB at a time (as ``Storage.read_chunks``)."""

    def __init__(self, data: bytes):
        self.data = data

    def read_chunks(self, key: str):
        for at in range(0, len(self.data), 1 << 20):
            yield self.data[at : at + (1 << 20)]


def test_a_thumbnail_does_not_hold_its_stored_bytes_in_memory(tmp_path, monkeypatch):
    """Each thumbnail request read the whole stored object into memory (up to 64 MiB) before
    decoding it, outside the decoded pixels' budget (thumbs.DECODE_PIXELS): the requests
    that wait for that budget each held their buffer meanwhile, so a contact sheet of 50 MiB
    upscales, six pictures at a time per browser tab (and afc serve's 40 threads), held
    hundreds of MB to GBs of buffers that nothing bounded. The bytes past a few MiB now wait
    in a temporary file. Measured: Python's own allocations while four thumbnails of a
    24 MiB picture are made at once, one of them holding the decoding budget."""
    from PIL import Image

    from afc_cli.web import thumbs

    out = io.BytesIO()
    Image.new("RGB", (2900, 2900), (20, 120, 220)).save(out, "BMP")  # ~24 MiB, 8.4 Mpx
    data = out.getvalue()
    assert len(data) > 24 * 10**6
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)  # TMPDIR read afresh
    budget = thumbs._Budget(1)  # one decoding at a time: the others wait, holding their bytes
    monkeypatch.setattr(thumbs, "_DECODING", budget)
    store = Store(data)
    made: list = []
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        workers = [
            threading.Thread(target=lambda: made.append(thumbs.make(store, "big.bmp")))
            for _ in range(4)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert [thumb.data is not None for thumb in made] == [True] * 4, [t.note for t in made]
    # four buffers of 24 MiB were ~100 MB; each now holds a few MiB, the rest on disk
    assert peak < 40 * 2**20, peak >> 20
    assert not list(tmp_path.iterdir())  # the temporary files are gone
