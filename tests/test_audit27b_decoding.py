"""Outside audit 27b: a gzip-encoded answer (an output from a hostile or broken CDN) is decoded
in bounded pieces, never one read's whole swell at once.

A read of the body takes up to 64 KiB off the wire (``transport._Stream.CHUNK``), and httpx's
decoder turned each read into one piece, whatever it swelled to: deflate's ratio is about
1,000 to 1, so one read of zeros decoded to some 64 MiB in one piece, before the download
counted it or the spill (``http._read_output``) could write it out. A run with a hundred such
downloads in flight held over 6 GiB for them: the kernel killed it, and every paid call in
flight was left possibly paid."""

from __future__ import annotations

import asyncio
import gzip
import tracemalloc

from test_audit_wire import WireServer, answered, reply

from afc_cli.providers import transport
from afc_cli.providers.http import download, new_client
from afc_cli.spool import Spilled

MIB = 1 << 20
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# 60 MiB once decoded, some 60 KiB on the wire: one read's worth
SWELL = PNG_SIGNATURE + bytes(60 * MIB - len(PNG_SIGNATURE))


def gzip_server() -> WireServer:
    body = gzip.compress(SWELL, 9)
    assert len(body) < transport._Stream.CHUNK  # a single read's worth on the wire
    return WireServer(
        answered(reply("200 OK", body, {"Content-Type": "image/png", "Content-Encoding": "gzip"}))
    )


def test_a_read_of_a_gzip_body_decodes_to_a_bounded_piece():
    server = gzip_server()

    async def pieces() -> tuple[int, int]:
        client = new_client()
        try:
            async with client.stream("GET", f"{server.url}/out.png") as response:
                largest = total = 0
                async for piece in response.aiter_bytes():
                    largest, total = max(largest, len(piece)), total + len(piece)
                return largest, total
        finally:
            await client.aclose()

    try:
        largest, total = asyncio.run(pieces())
    finally:
        server.stop()
    assert total == len(SWELL)
    assert largest <= transport.DECODE_SLICE * 1100, f"one read decoded to {largest / MIB:.0f} MiB"


def test_a_swelling_output_download_holds_a_bounded_amount(tmp_path):
    """The download of that output, spilled past 16 MiB, held one piece of 60 MiB at its
    peak (and its copy in the download's list): now some 16 MiB and a few pieces."""
    server = gzip_server()

    async def fetch():
        client = new_client()
        try:
            return await download(
                client, "replicate", f"{server.url}/out.png", spill_to=str(tmp_path)
            )
        finally:
            await client.aclose()

    tracemalloc.start()
    try:
        data = asyncio.run(fetch())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        server.stop()
    assert isinstance(data, Spilled) and len(data) == len(SWELL)
    data.close()
    assert peak < 36 * MIB, f"{peak / MIB:.0f} MiB at the peak"
