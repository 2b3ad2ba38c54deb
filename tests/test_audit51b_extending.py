"""Outside audit 51b: docs/extending.md read by a maintainer adding a provider, against what
the transport and the built-in adapters do at the wire."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest
from fakeproviders import KEYS

from afc_cli.costs import RateCards
from afc_cli.providers.base import AttemptRequest, ProviderError
from afc_cli.providers.fal import FalProvider
from afc_cli.providers.gemini import GeminiProvider
from afc_cli.providers.http import new_client
from afc_cli.providers.openai import OpenAIProvider
from afc_cli.providers.replicate import ReplicateProvider


class HangUp:
    """An HTTP/1.1 server that reads each request whole (the provider has it: a paid call is
    billed) and drops the connection without a word; it keeps each request's line."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def handle(self, reader, writer) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            self.seen.append(head.split(b"\r\n", 1)[0].decode())
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> HangUp:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.base = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()


@pytest.mark.parametrize("method, sent", [("POST", 1), ("PUT", 2), ("DELETE", 2), ("GET", 2)])
def test_the_transport_sends_a_dropped_request_again_only_for_an_idempotent_method(method, sent):
    """docs/extending.md ("No retries in the adapter"): a paid request goes as a POST, since
    the transport sends a GET, PUT or DELETE whose connection dropped before an answer once
    more, on its own (aiohttp, RFC 9112's retry of an idempotent request). An adapter whose
    paid call was a PUT would be billed twice for one attempt row. Should aiohttp stop doing
    so, the page's advice can be eased; should it resend a POST, every adapter pays twice."""
    import httpx

    async def main() -> list[str]:
        async with HangUp() as server:
            client = new_client(connections=1)
            try:
                with pytest.raises(httpx.TransportError):
                    await client.request(method, f"{server.base}/paid", json={"prompt": "x"})
            finally:
                await client.aclose()
            return server.seen

    assert asyncio.run(main()) == [f"{method} /paid HTTP/1.1"] * sent


PAID_CALLS = [
    (OpenAIProvider, "OPENAI_BASE_URL", "/v1", "OPENAI_API_KEY", "gpt-image-1"),
    (GeminiProvider, "GEMINI_BASE_URL", "/v1beta", "GEMINI_API_KEY", "gemini-2.5-flash-image"),
    (ReplicateProvider, "REPLICATE_BASE_URL", "/v1", "REPLICATE_API_TOKEN", "owner/model"),
    (FalProvider, "FAL_QUEUE_URL", "", "FAL_KEY", "fal-ai/flux/dev"),
]


@pytest.mark.parametrize("adapter, base_env, path, key_env, model", PAID_CALLS)
def test_each_adapters_paid_call_dropped_unanswered_is_sent_once_at_a_cost_unknown(
    monkeypatch, adapter, base_env, path, key_env, model
):
    """Each built-in adapter's paid call, dropped by the server after it was read, is sent
    once (a POST), and its attempt is of unknown cost: the provider may have billed it."""

    async def main() -> tuple[ProviderError, list[str]]:
        async with HangUp() as server:
            monkeypatch.setenv(base_env, server.base + path)
            monkeypatch.setenv(key_env, KEYS[key_env])
            provider = adapter()
            request = AttemptRequest(
                job_id="j1",
                key="k1",
                prompt="a lighthouse",
                params={},
                provider=provider.name,
                model=model,
                attempt=1,
                rates=RateCards(),
            )
            try:
                with pytest.raises(ProviderError) as caught:
                    await provider.render(request)
            finally:
                await provider.close()
            return caught.value, server.seen

    error, seen = asyncio.run(main())
    assert len(seen) == 1 and seen[0].startswith("POST "), seen
    assert (error.cost_micros, error.cost_source) == (None, None), error.message


@pytest.mark.parametrize(
    "adapter, model, prompt, error_class",
    [
        (ReplicateProvider, "owner/model", "checker-fails shot", "refusal"),
        (ReplicateProvider, "owner/model", "flagged shot", "refusal"),
        (GeminiProvider, "gemini-2.5-flash-image", "blocked shot", "refusal"),
    ],
)
def test_a_failure_that_does_not_say_what_it_made_is_unpriced_by_a_per_image_card(
    monkeypatch, adapter, model, prompt, error_class
):
    """docs/extending.md ("Cost and usage"): a failed request whose answer does not say what
    it made reports no ``images``; ``images: 0`` would have a per_image card price it a known
    0, where the provider may have made (and billed) the image it then withheld. The
    built-in adapters' refusals keep what they measured (seconds, tokens) and are unpriced
    under a card of per_image alone: never shown as free."""
    from fakeproviders import FakeProviders

    fake = FakeProviders().start()
    try:
        for name, value in fake.env().items():
            monkeypatch.setenv(name, value)
        provider = adapter()
        rates = RateCards({(provider.name, model): {"per_image": Decimal("0.04")}})
        request = AttemptRequest(
            job_id="j1",
            key="k1",
            prompt=prompt,
            params={},
            provider=provider.name,
            model=model,
            attempt=1,
            rates=rates,
        )

        async def main() -> ProviderError:
            try:
                with pytest.raises(ProviderError) as caught:
                    await provider.render(request)
            finally:
                await provider.close()
            return caught.value

        error = asyncio.run(main())
    finally:
        fake.stop()
    assert error.error_class == error_class, error.message
    assert "images" not in error.usage and error.usage, error.usage
    assert (error.cost_micros, error.cost_source) == (None, None)


def test_a_cancels_pricing_keeps_the_usage_as_every_attempt_keeps_it(afc, fake):
    """``afc cancel`` of a job whose request had completed prices it from what the provider
    reports (``Provider.completed_usage``, ``Ledger.price_left``). That usage went to the
    ledger as the provider answered it, past what every other write of an attempt's usage
    does (``usage_kept``, ``scrub_data``): a Replicate metric sent as megabytes of text that
    quoted the API key was kept whole, key and all, and printed by every 'afc show'."""
    import json
    import signal

    from conftest import manifest
    from test_cancel_completed import _wait_for_request

    chain = [{"provider": "replicate", "model": "owner/model", "backoff": {"base": 0.01}}]
    rates = [{"provider": "replicate", "model": "owner/model", "per_image": "0.04"}]
    afc.write_manifest(
        manifest(
            [{"key": "shot", "prompt": "done-at-cancel odd-metrics shot", "chain": chain}],
            rates=rates,
        )
    )
    run = afc.popen("submit", "manifest.yaml")
    try:
        _wait_for_request(afc)
    finally:
        run.send_signal(signal.SIGKILL)  # the run dies; its request renders on
        run.wait(timeout=30)
    cancelled = afc("cancel", "shot", "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    [(kept,)] = afc.rows("SELECT usage_json FROM attempts")
    assert KEYS["REPLICATE_API_TOKEN"] not in kept, "the ledger keeps the key"
    shown = afc("show", "shot", "--json")
    [left] = json.loads(shown.stdout)["attempts"]
    assert left["cost"] == "0.040000", left  # its one image, by the card
    assert len(json.dumps(left["usage"])) < 400, "the usage was kept whole"
    assert left["usage"]["images"] == 1


@pytest.mark.parametrize(
    "provider, model", [("replicate", "black-forest-labs/flux-1.1-pro"), ("fal", "fal-ai/flux/dev")]
)
def test_a_cancel_prices_a_completed_request_whose_output_is_gone_by_the_images_asked(
    afc, fake, provider, model
):
    """A request 'afc cancel' finds completed (rendered, billed) whose output the provider
    had already removed (Replicate's data_removed an hour on; fal's result deleted minutes
    on) made the images its request asked for: a poll prices it so (``_finished``, fal's
    404), but the cancel's pricing read only the outputs listed, none, and under a
    per_image card left it 'unpriced, possibly paid' until a person retried the job."""
    import signal

    from conftest import manifest
    from test_cancel_completed import _wait_for_request

    chain = [{"provider": provider, "model": model, "backoff": {"base": 0.01}}]
    rates = [{"provider": provider, "model": model, "per_image": "0.04"}]
    params = {"num_outputs" if provider == "replicate" else "num_images": 2}
    prompt = {"replicate": "removed-at-cancel", "fal": "done-at-cancel result-gone"}[provider]
    job = {"key": "shot", "prompt": f"{prompt} shot", "chain": chain, "params": params}
    afc.write_manifest(manifest([job], rates=rates))
    run = afc.popen("submit", "manifest.yaml")
    try:
        _wait_for_request(afc)
    finally:
        run.send_signal(signal.SIGKILL)  # the run dies; its request renders on
        run.wait(timeout=30)
    cancelled = afc("cancel", "shot", "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    [left] = afc.json("show", "shot")["attempts"]
    assert left["cost"] == "0.080000", (left, cancelled.stdout, cancelled.stderr)


def test_a_cancel_leaves_a_fal_request_that_ended_in_its_own_error_unpriced(afc, fake):
    """A fal request whose result is gone is priced by the images it asked for only when its
    status says it completed without an error: one that ended in fal's own 5xx (a runner
    lost, fal's retries spent) made nothing fal bills, and is not given a cost it never had."""
    import signal

    from conftest import manifest
    from test_cancel_completed import _wait_for_request

    model = "fal-ai/flux/dev"
    chain = [{"provider": "fal", "model": model, "backoff": {"base": 0.01}}]
    rates = [{"provider": "fal", "model": model, "per_image": "0.04"}]
    prompt = "done-at-cancel result-gone runner-died shot"
    afc.write_manifest(manifest([{"key": "shot", "prompt": prompt, "chain": chain}], rates=rates))
    run = afc.popen("submit", "manifest.yaml")
    try:
        _wait_for_request(afc)
    finally:
        run.send_signal(signal.SIGKILL)  # the run dies; its request renders on
        run.wait(timeout=30)
    cancelled = afc("cancel", "shot", "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    [left] = afc.json("show", "shot")["attempts"]
    assert left["cost"] is None, left
