"""Outside audit 31e: a Replicate poll (GET /v1/predictions/{id}) answered 429. Polling is
free, so afc polls on; but the next poll went at the next interval whatever the 429 said,
and with a thousand predictions in flight every one of them kept polling a throttled API
(Replicate's limit for its other endpoints is per account, a run's 1,000 polls every 2 s are
far past it). Now every poll of the provider waits what the 429 said (its Retry-After, else
the wait its detail names). Against the fake Replicate server (tests/fakeproviders.py) over
HTTP, on a clock of the test's own: nothing sleeps for real."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fakeproviders import KEYS
from test_providers import MODELS

from afc_cli.providers.replicate import ReplicateProvider


def _prediction(fake, prompt: str) -> str:
    answer = httpx.post(
        f"{fake.base}/v1/models/{MODELS['replicate']}/predictions",
        json={"input": {"prompt": prompt}},
        headers={"Authorization": f"Bearer {KEYS['REPLICATE_API_TOKEN']}"},
    )
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


@pytest.mark.parametrize("prompt, said", [("poll-429", 7.0), ("poll-429 retry-after", 9.0)])
def test_a_throttled_poll_holds_every_poll_of_the_provider_as_long_as_it_said(
    afc, fake, monkeypatch, prompt, said
):
    for name, value in fake.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AFC_POLL_S", "2")
    throttled, other = _prediction(fake, prompt), _prediction(fake, "a boat")
    now, slept = [1000.0], []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    provider = ReplicateProvider()
    provider.clock, provider.sleep = (lambda: now[0]), sleep
    headers = provider._headers()

    async def polls() -> None:
        try:
            url = f"{provider.base}/predictions/{throttled}"
            assert await provider.poll(url, throttled, headers) is None  # its 429: poll again
            # the other prediction's next poll, due an interval after its last one
            due, _ = await provider.poll_wait(1, (now[0], now[0]))
            # the first slot of its own 2 s grid at or after the wait said
            assert slept == {7.0: [8.0], 9.0: [10.0]}[said], slept
            assert due >= 1000.0 + said
            assert fake.counts["replicate_poll"] == 1, "no poll went out meanwhile"
            answer = await provider.poll(f"{provider.base}/predictions/{other}", other, headers)
            assert answer is not None and answer[0].status_code == 200
            # once past, polls go at their interval again
            slept.clear()
            await provider.poll_wait(2, (due, now[0]))
            assert slept == [2.0]
        finally:
            await provider.close()

    asyncio.run(polls())
