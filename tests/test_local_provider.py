"""The local provider writes real PNGs and injects failures as asked."""

from __future__ import annotations

import asyncio
import struct
import zlib

import pytest

from afc_cli.costs import RateCards, format_usd, to_micros
from afc_cli.providers.base import AttemptRequest, ProviderError
from afc_cli.providers.local import LocalProvider, render_png


def decode_png(data: bytes) -> tuple[int, int, bytes]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        tag = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(tag + body) & 0xFFFFFFFF
        chunks[tag] = body
        pos += 12 + length
    width, height = struct.unpack(">II", chunks[b"IHDR"][:8])
    raw = zlib.decompress(chunks[b"IDAT"])
    assert len(raw) == height * (1 + 3 * width)
    return width, height, raw


def test_png_is_valid_and_depends_on_the_seed():
    a = render_png("model\x00a lighthouse", 40, 30)
    b = render_png("model\x00a boat", 40, 30)
    assert decode_png(a)[:2] == (40, 30)
    assert a != b
    assert a == render_png("model\x00a lighthouse", 40, 30)


def request(params, attempt=1, rates=None):
    return AttemptRequest("id", "k", "p", params, "local", "m", attempt, rates or RateCards())


def test_injected_failures_follow_attempt_numbers():
    provider = LocalProvider()
    params = {"fail": ["rate_limited", "window_expired"], "retry_after_s": 3}
    with pytest.raises(ProviderError) as first:
        asyncio.run(provider.render(request(params, 1)))
    assert (first.value.error_class, first.value.http_status) == ("rate_limited", 429)
    assert first.value.retry_after == 3 and first.value.cost_micros == 0
    with pytest.raises(ProviderError) as second:
        asyncio.run(provider.render(request(params, 2)))
    assert second.value.error_class == "window_expired" and second.value.cost_micros is None
    result = asyncio.run(provider.render(request(params, 3)))
    assert result.data.startswith(b"\x89PNG")


def test_priced_from_the_rate_card_with_source_local():
    from decimal import Decimal

    cards = RateCards({("local", "m"): {"per_image": Decimal("0.04")}})
    result = asyncio.run(LocalProvider().render(request({}, rates=cards)))
    assert (result.cost_micros, result.cost_source) == (40_000, "local")
    unpriced = asyncio.run(LocalProvider().render(request({})))
    assert (unpriced.cost_micros, unpriced.cost_source) == (None, None)


def test_exact_money():
    from decimal import Decimal

    cards = RateCards(
        {
            ("p", "img"): {"per_image": Decimal("0.05")},
            ("p", "vid"): {"per_second": Decimal("0.0012")},
        }
    )
    total = 2 * cards.price("p", "img", {"images": 1}) + cards.price("p", "vid", {"seconds": 3.2})
    assert format_usd(total) == "0.103840"
    assert cards.price("p", "img", {"seconds": 1}) is None, "a unit without a rate is unpriced"
    assert cards.price("p", "nope", {"images": 1}) is None
    assert to_micros(Decimal("0.0000005")) == 1 and format_usd(None) is None
