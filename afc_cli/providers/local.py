"""The offline ``local`` provider: real PNG bytes, no account, no network.

It makes ``make run`` work anywhere and gives tests a provider whose behaviour they choose
through the job's ``params``:

- ``latency_s``: seconds each attempt takes (default 0).
- ``fail``: error classes injected on the job's first attempts, e.g. ``[rate_limited, server]``
  fails attempt 1 as rate_limited and attempt 2 as server. Attempts are counted across runs, so
  a resumed job does not replay its injected failures.
- ``retry_after_s``: a Retry-After the injected failures carry.
- ``size``: ``WxH`` of the image (default 64x64, at most 1024 each side).
- ``seconds``: the compute seconds the attempt reports as used (default ``latency_s``).

With ``AFC_LOCAL_CALL_LOG`` set to a file, every call appends ``<job id> <attempt>`` to it
(then, when the request has reference images, the SHA-256 of each as it arrived, joined by
commas): the independent call counter that concurrency and crash tests check against.
With ``AFC_LOCAL_RELEASE`` set to a path, every call is held (after its ``latency_s``) until
a file exists there, or one named ``<path>.<job key>`` for that job alone: a test decides the
instant a render returns (and which jobs a run it kills has provably left unrendered), instead
of racing a latency against its own commands on a busy machine.

Reference images (``inputs``) change the picture: their SHA-256 digests join the seed, so
the same prompt with another style frame renders differently, as on a real model.

Success reports one image and its seconds, and is priced from the rate card by the one rule
(``RateCards.price`` in afc_cli/costs.py: ``per_image`` when the card has it, else
``per_second`` x the seconds, like Replicate's ``predict_time``), source ``local``. With no
card it is unpriced. An injected failure is free (cost 0, source local), as real APIs do not bill a
rejected request, except ``timeout`` and ``window_expired``: there the work may have happened, so
their cost is unknown (null), exactly as it would be on a paid provider.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import struct
import zlib
from typing import Any

from afc_cli.providers.base import AttemptRequest, AttemptResult, Provider, ProviderError

_STATUS = {
    "auth": 401,
    "invalid": 400,
    "rate_limited": 429,
    "server": 500,
    "unavailable": 503,
    "refusal": 400,
    "timeout": None,
    "window_expired": None,
    "cancelled": None,
    "exhausted": None,
}
_WORK_MAY_HAVE_HAPPENED = {"timeout", "window_expired"}


class LocalProvider(Provider):
    name = "local"
    priced_by = frozenset({"per_image", "per_second"})
    refusal_holds_model = False  # an injected 'auth' failure is its job's alone
    params = frozenset(
        {"latency_s", "fail", "retry_after_s", "size", "seconds", "output_format", "seed"}
    )

    def params_problems(self, params: dict[str, Any]) -> list[str]:
        problems = []
        latency = params.get("latency_s", 0)
        if not _seconds(latency):
            problems.append(
                f"latency_s: must be a number of seconds >= 0 (under a day), got {latency!r}"
            )
        fail = params.get("fail", [])
        if not isinstance(fail, list) or not all(isinstance(c, str) for c in fail):
            problems.append(f"fail: must be a list of error classes, got {fail!r}")
        else:
            from afc_cli.manifest import ERROR_CLASSES  # only a manifest's check comes here

            for cls in fail:
                if cls not in ERROR_CLASSES or cls == "exhausted":
                    problems.append(f"fail: {cls!r} is not an error class")
        seconds = params.get("seconds")
        if seconds is not None and not _seconds(seconds):
            problems.append(
                f"seconds: must be a number of seconds >= 0 (under a day), got {seconds!r}"
            )
        retry_after = params.get("retry_after_s")
        if retry_after is not None and not _seconds(retry_after):
            problems.append(
                f"retry_after_s: must be a number of seconds >= 0 (under a day), "
                f"got {retry_after!r}"
            )
        size = params.get("size", "64x64")
        if _parse_size(size) is None:
            problems.append(f"size: must be WxH with sides 1..1024, got {size!r}")
        fmt = params.get("output_format", "png")
        if fmt != "png":
            problems.append(f"output_format: the local provider writes png only, got {fmt!r}")
        return problems

    def param_defaults(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "latency_s": 0,
            "fail": [],
            "size": "64x64",
            "output_format": "png",
            "seconds": params.get("latency_s", 0),
        }

    async def render(self, request: AttemptRequest) -> AttemptResult:
        params = request.params
        request.last_look()  # as a paid adapter's, right before its request
        call_log = os.environ.get("AFC_LOCAL_CALL_LOG")
        if call_log:
            with open(call_log, "a", encoding="utf-8") as log:
                received = ",".join(hashlib.sha256(i.data).hexdigest() for i in request.inputs)
                log.write(f"{request.job_id} {request.attempt}{' ' * bool(received)}{received}\n")
        latency = float(params.get("latency_s", 0) or 0)
        if latency:
            await asyncio.sleep(latency)
        release = os.environ.get("AFC_LOCAL_RELEASE")
        if release:
            mine = f"{release}.{request.key}"
            while not (os.path.exists(release) or os.path.exists(mine)):
                await asyncio.sleep(0.02)
        fail = params.get("fail", [])
        if request.attempt <= len(fail):
            cls = fail[request.attempt - 1]
            unknown = cls in _WORK_MAY_HAVE_HAPPENED
            raise ProviderError(
                cls,
                f"injected {cls} on attempt {request.attempt}",
                http_status=_STATUS.get(cls),
                retry_after=params.get("retry_after_s"),
                cost_micros=None if unknown else 0,
                cost_source=None if unknown else "local",
            )
        width, height = _parse_size(params.get("size", "64x64")) or (64, 64)
        seed = f"{request.model}\x00{request.prompt}\x00{params.get('seed', '')}"
        if request.inputs:
            seed += "\x00" + ",".join(hashlib.sha256(i.data).hexdigest() for i in request.inputs)
        data = render_png(seed, width, height)
        usage = {"images": 1, "seconds": float(params.get("seconds", latency))}
        cost = request.rates.price(self.name, request.model, usage)
        return AttemptResult(
            data=data,
            ext="png",
            usage=usage,
            cost_micros=cost,
            cost_source="local" if cost is not None else None,
            provider_request_id=f"local-{request.job_id[:8]}-{request.attempt}",
        )


def _seconds(value: Any) -> bool:
    """A number of seconds the local provider can wait or bill: finite, >= 0, under a day."""
    return not isinstance(value, bool) and isinstance(value, int | float) and 0 <= value < 86_400


def _parse_size(size: Any) -> tuple[int, int] | None:
    if not isinstance(size, str) or "x" not in size:
        return None
    w, _, h = size.partition("x")
    if not (w.isascii() and w.isdigit() and h.isascii() and h.isdigit()):  # not "²x²"
        return None
    if max(len(w.lstrip("0")), len(h.lstrip("0"))) > 4:
        # past 1024 whatever it reads as, and not read: Python reads no integer of more than
        # 4,300 digits, and such a side stopped the manifest's check as 'unexpected error'
        return None
    width, height = int(w), int(h)
    if not (1 <= width <= 1024 and 1 <= height <= 1024):
        return None
    return width, height


def render_png(seed: str, width: int, height: int) -> bytes:
    """A real, valid RGB PNG whose colours and bands follow from the seed (prompt and model):
    two vertical bands, each a vertical gradient in 16 steps."""
    digest = hashlib.sha256(seed.encode()).digest()
    a = digest[0:3]
    b = digest[3:6]
    split = max(1, width * (32 + digest[6] % 192) // 256)
    steps = min(16, height)
    bands = []
    for step in range(steps):
        shade = (step * 255) // max(1, steps - 1)
        left = bytes([(a[0] + shade) >> 1, (a[1] + shade) >> 1, (a[2] + shade) >> 1])
        right = bytes(
            [(b[0] + 255 - shade) >> 1, (b[1] + 255 - shade) >> 1, (b[2] + 255 - shade) >> 1]
        )
        bands.append(b"\x00" + left * split + right * (width - split))
    raw = b"".join(bands[y * steps // height] for y in range(height))

    def chunk(tag: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body))
            + tag
            + body
            + struct.pack(">I", zlib.crc32(tag + body) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 1))
        + chunk(b"IEND", b"")
    )
