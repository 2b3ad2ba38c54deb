"""An output download larger than ``IN_MEMORY_OUTPUT_BYTES`` goes to a file as it arrives.

Before: every output was read whole into memory (up to 2 GiB each, a gzip-encoded body
counted decoded) and joined into one more copy, and it waited there for its spool step: a run
with a few hundred video-sized outputs in flight, or a provider whose CDN answered a small
gzip body that swells, took more memory than the machine had and the kernel killed the run.
Now a large one is spilled to an unnamed file in the spool's folder (``Spilled``,
afc_cli/spool.py) and copied into its spool file from there; a spill the disk refuses stops
the run as a failed spool write does, the paid attempt recorded and its request left for the
next run to fetch again for free (``_not_kept`` in afc_cli/pipeline.py)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import resource
import subprocess

import pytest
from conftest import manifest
from fakeproviders import big_output
from test_providers import FAST, MODELS, RATES

from afc_cli.providers.http import IN_MEMORY_OUTPUT_BYTES, download, new_client
from afc_cli.spool import Spilled, Spool

MIB = 1 << 20


def write(afc, prompts: list[str], batch: str = "b1") -> None:
    """A batch of ``prompts`` on the fake Replicate (jobs j0, j1...)."""
    data = manifest(
        [{"key": f"j{i}", "prompt": p} for i, p in enumerate(prompts)], rates=RATES, batch=batch
    )
    data["defaults"]["chain"] = [
        {"provider": "replicate", "model": MODELS["replicate"], "attempts": 2, "backoff": FAST}
    ]
    afc.write_manifest(data)


def run_measured(afc, *args: str, limit_file_bytes: int | None = None):
    """Run ``afc`` to its end; its exit code, stderr and peak resident memory in bytes (the
    largest of the process and the children it waited for: ``wait4``)."""

    def limit() -> None:
        if limit_file_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file_bytes, limit_file_bytes))

    proc = subprocess.Popen(
        afc.command(*args),
        cwd=afc.cwd,
        env=afc.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=limit,
    )
    stderr = proc.stderr.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, stderr, usage.ru_maxrss * 1024  # KiB on Linux


def test_video_sized_outputs_are_not_held_in_memory(afc, fake):
    """Two 160 MiB outputs (gzip-encoded on the wire, as a CDN may send them) downloaded at
    once: stored whole, while the run's memory stays far under one output's size. Read into
    memory, each took its 160 MiB of chunks and a 160 MiB joined copy at once."""
    write(afc, ["small one", "small two"], batch="small")
    code, stderr, small = run_measured(afc, "submit", "manifest.yaml")
    assert code == 0, stderr
    size = 160 * MIB
    write(afc, ["big-out-160 one", "big-out-160 two"])
    code, stderr, peak = run_measured(afc, "submit", "manifest.yaml")
    assert code == 0, stderr
    expected = hashlib.sha256(big_output(size)).hexdigest()
    for key in ("j0", "j1"):
        stored = afc.outputs() / "b1" / f"{key}.png"
        assert stored.stat().st_size == size
        digest = hashlib.sha256()
        with open(stored, "rb") as fh:
            while chunk := fh.read(MIB):
                digest.update(chunk)
        assert digest.hexdigest() == expected
        assert afc.json("show", key, "--batch", "b1")["job"]["output_sha256"] == expected
    assert fake.counts["replicate_submit"] == 4
    # two small renders' run, and the big ones' run: 320 MiB more, were they held in memory
    grew = peak - small
    assert grew < size, f"{grew / MIB:.0f} MiB more than a run of two small outputs"
    spool = afc.cwd / "afc.db-spool"
    assert [p.name for p in spool.iterdir() if not p.name.startswith(".")] == []


def test_a_spill_the_disk_refuses_stops_the_run_and_the_next_fetches_it_free(afc, fake):
    """A disk that takes no file past 64 MiB (RLIMIT_FSIZE: writes past it fail with EFBIG,
    as a full disk's fail with ENOSPC): the 100 MiB output cannot be kept. The run stops with
    the spool's exit code, the paid attempt recorded at its cost with its request id; the next
    run, on a disk that takes it, fetches the same prediction's output again and pays nothing
    more."""
    write(afc, ["big-out-100 shot"])
    code, stderr, _ = run_measured(afc, "submit", "manifest.yaml", limit_file_bytes=64 * MIB)
    assert code != 0 and "could not be written" in stderr, stderr
    assert "Traceback" not in stderr
    assert "fetches it again from replicate request" in stderr, stderr
    [attempt] = afc.json("show", "j0")["attempts"]
    assert attempt["status"] == "unknown" and attempt["provider_request_id"]
    assert attempt["cost"] == "0.003840"  # 3.2 s at 0.0012/s: known, recorded
    assert fake.counts["replicate_submit"] == 1

    code, stderr, _ = run_measured(afc, "resume")
    assert code == 0, stderr
    assert fake.counts["replicate_submit"] == 1, "the render was paid once"
    stored = afc.outputs() / "b1" / "j0.png"
    assert stored.stat().st_size == 100 * MIB
    total = afc.json("costs", "report")["total"]
    assert total["priced"] == "0.003840" and total["unpriced_attempts"] == 0, total


@pytest.mark.parametrize("size", [IN_MEMORY_OUTPUT_BYTES, IN_MEMORY_OUTPUT_BYTES + 1])
def test_download_spills_only_past_the_in_memory_limit(fake, tmp_path, size):
    path = f"/files/spill-{size}.png"
    fake.big_files[path] = size
    folder = tmp_path / "spool"

    async def fetch():
        client = new_client()
        try:
            return await download(client, "replicate", fake.base + path, spill_to=str(folder))
        finally:
            await client.aclose()

    data = asyncio.run(fetch())
    expected = big_output(size)
    if size <= IN_MEMORY_OUTPUT_BYTES:
        assert data == expected
        return
    assert isinstance(data, Spilled) and len(data) == size and data.head == expected[:256]
    assert list(folder.iterdir()) == []  # the spill has no name: nothing is left if killed
    spooled = Spool(folder).write("job", data)
    data.close()
    assert spooled.size == size
    assert spooled.sha256 == hashlib.sha256(expected).hexdigest()
    assert spooled.path.read_bytes() == expected
