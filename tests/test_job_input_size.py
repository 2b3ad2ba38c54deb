"""A job's output used as another job's input is read no further than a reference image may
be (``afc_cli/manifest.py``'s ``MAX_INPUT_BYTES``, 50 MiB): an object replaced in storage by a
huge one is refused after reading one byte past the cap, never held in memory whole; the job
fails naming the object, and nothing is sent to the provider."""

from __future__ import annotations

from collections.abc import Iterator

from conftest import manifest

from afc_cli.manifest import MAX_INPUT_BYTES
from afc_cli.storage.base import Storage

MIB = 1024 * 1024


class Endless(Storage):
    """A storage whose object never ends: each chunk read is counted, the stream's close seen."""

    def __init__(self) -> None:
        self.chunks = 0
        self.closed = False

    def read_chunks(self, key: str, chunk: int = MIB) -> Iterator[bytes]:
        try:
            while True:
                self.chunks += 1
                yield b"\0" * chunk
        finally:
            self.closed = True


def test_a_bounded_read_stops_one_chunk_past_its_limit_and_closes_the_stream():
    storage = Endless()
    data = storage.read("huge.png", 3 * MIB)
    assert len(data) == 3 * MIB + 1  # one byte past the limit says "larger"
    assert storage.chunks == 4
    assert storage.closed


def test_a_job_input_larger_than_a_reference_image_fails_the_job_unsent(afc):
    style = {"key": "style", "prompt": "the style frame", "review": False}
    afc.write_manifest(manifest([style]))
    assert afc("submit", "manifest.yaml").returncode == 0
    stored = afc.outputs() / "b1" / "style.png"
    with stored.open("r+b") as fh:  # replaced in storage by something huge (sparse: no disk)
        fh.truncate(MAX_INPUT_BYTES + 10 * MIB)
    afc.write_manifest(
        manifest([style, {"key": "shot", "prompt": "from the style", "inputs": [{"job": "style"}]}])
    )
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 1, result.stderr
    shot = afc.json("show", "shot")
    assert shot["job"]["status"] == "failed"
    error = shot["job"]["error"]
    assert error["code"] == "INPUT_UNAVAILABLE", error
    assert "is larger than 50 MiB" in error["message"] and "b1/style.png" in error["message"]
    assert shot["attempts"] == [], "nothing was sent for it"
