"""A paid render whose output stays out of reach for longer than one round of fetches.

Before: four free GETs over about 7 s, then the paid attempt failed and the next attempt
submitted (and paid for) a second render, though the provider kept the first one's output
for minutes (fal) to an hour (Replicate, DALL-E URLs). Now the output is fetched again in
later rounds, after growing pauses, for as long as the provider keeps it and the attempt's
window leaves room (``HttpProvider.outlast`` in afc_cli/providers/http.py)."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
from conftest import manifest, wait_for
from fakeproviders import CDN_OUTAGE
from test_providers import FAST, MODELS, RATES, attempts_of

from afc_cli.costs import RateCards
from afc_cli.providers.base import AttemptRequest, ProviderError
from afc_cli.providers.http import (
    FETCH_TRIES,
    REFETCH_PAUSE_INTERVALS,
    HttpProvider,
    OutputUnreachable,
    refetch_pause,
)

# DALL-E URL answers carry no tokens: a per-image rate prices them
PRICED = [
    {"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"},
    *[rate for rate in RATES if rate["provider"] != "openai"],
]
SUBMITS = {"replicate": "replicate_submit", "fal": "fal_submit", "openai": "openai_billed"}


def write(afc, provider: str, prompt: str, **entry) -> None:
    data = manifest([{"key": "j0", "prompt": prompt}], rates=RATES)
    data["defaults"]["chain"] = [
        {"provider": provider, "model": MODELS[provider], "attempts": 3, "backoff": FAST, **entry}
    ]
    afc.write_manifest(data)


@pytest.mark.parametrize(
    "provider, prompt",
    [
        ("replicate", "cdn-outage"),
        ("fal", "cdn-outage"),
        ("openai", "dalle-url cdn-outage"),
        ("fal", "result-outage"),  # fal's result (its image list) out of reach, not the image
    ],
)
def test_an_output_out_of_reach_past_a_round_is_fetched_in_later_rounds_not_paid_again(
    afc, fake, provider, prompt
):
    write(afc, provider, prompt)
    result = afc("submit", "manifest.yaml", "--json")
    assert result.returncode == 0, result.stderr
    assert afc.json("show", "j0")["job"]["status"] == "succeeded"
    [attempt] = attempts_of(afc, "j0")
    assert attempt["status"] == "succeeded" and attempt["number"] == 1
    assert fake.counts[SUBMITS[provider]] == 1, "one render, paid once"
    if prompt.endswith("cdn-outage"):
        assert fake.counts["download_refused"] == CDN_OUTAGE > 2 * FETCH_TRIES
        assert fake.counts["download"] == CDN_OUTAGE + 1
    else:
        assert fake.counts["fal_result"] == CDN_OUTAGE + 1
    # the outage and its end are said once each, on stderr (not in --json's stdout)
    assert result.stderr.count("is out of reach") == 1, result.stderr
    assert "rather than pay for a new render" in result.stderr
    assert result.stderr.count("an output out of reach was fetched again") == 1
    assert (afc.outputs() / "b1" / "j0.png").read_bytes().startswith(b"\x89PNG")


def test_a_run_stopped_while_an_output_is_out_of_reach_leaves_it_to_the_next_run(afc, fake):
    """Ctrl-C during the later rounds: the prediction is left polling (its id recorded), and
    the next run fetches its output, paying nothing again."""
    write(afc, "replicate", "cdn-held")
    proc = afc.popen("submit", "manifest.yaml")
    deadline = time.time() + 30
    while fake.counts["download_refused"] <= FETCH_TRIES and time.time() < deadline:
        time.sleep(0.02)  # the first round failed: later rounds are under way
    assert fake.counts["download_refused"] > FETCH_TRIES
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)
    assert proc.returncode == 130
    [left] = afc.rows("SELECT status, error_class FROM attempts")
    assert left == ("unknown", "interrupted")
    fake.cdn_back.set()
    resumed = afc.json("resume")
    assert resumed["exit_code"] == 0, resumed
    assert fake.counts["replicate_submit"] == 1, "the render was not paid for again"
    assert afc.rows("SELECT number, status FROM attempts") == [(1, "succeeded")]


# --- the rounds' bounds, with the provider's clock and sleep replaced (no real waits) ------


class Gone(HttpProvider):
    """A provider whose outputs stay out of reach: each round fails at once."""

    name = "x"
    keeps_outputs_s = 300.0

    def __init__(self, failure: ProviderError) -> None:
        super().__init__()
        self.now, self.pauses, self.rounds, self.failure = 0.0, [], 0, failure
        self.notices: list[str] = []
        self.watch_polls(self.notices.append)
        self.clock = lambda: self.now
        self.rand = lambda: 1.0

        async def sleep(seconds: float) -> None:
            self.pauses.append(seconds)
            self.now += seconds

        self.sleep = sleep

    async def fetch(self):
        self.rounds += 1
        self.now += 1.0  # a round's own time
        raise self.failure


def request(window_s: float | None = None) -> AttemptRequest:
    return AttemptRequest(
        job_id="j",
        key="k",
        prompt="p",
        params={},
        provider="x",
        model="m",
        attempt=1,
        rates=RateCards(),
        window_s=window_s,
    )


def outage(provider: Gone, window_s: float | None = None) -> ProviderError:
    with pytest.raises(ProviderError) as raised:
        asyncio.run(provider.outlast(request(window_s), 0.0, provider.fetch))
    return raised.value


def test_rounds_go_on_while_the_provider_keeps_the_output_and_no_longer(monkeypatch):
    monkeypatch.setenv("AFC_POLL_S", "2")
    provider = Gone(OutputUnreachable("unavailable", "x: output download answered HTTP 503"))
    error = outage(provider)
    # pauses of 16, 32, then 60 s (rand 1.0: the whole step), while a next round fits in the
    # 300 s the provider keeps its outputs (each round's own waits: 3.5 intervals at most)
    assert provider.pauses[:3] == [16.0, 32.0, 60.0]
    assert set(provider.pauses[3:]) == {60.0}
    assert provider.now - 1.0 + 60.0 + 7.0 > 300.0 >= provider.now - 1.0 - 60.0
    assert provider.rounds == len(provider.pauses) + 1
    assert f"({provider.rounds} rounds of {FETCH_TRIES} tries)" in error.message
    assert len(provider.notices) == 1 and "out of reach" in provider.notices[0]


def test_a_window_ends_the_rounds_before_the_runs_own_limit_cuts_them(monkeypatch):
    monkeypatch.setenv("AFC_POLL_S", "2")
    provider = Gone(OutputUnreachable("unavailable", "x: output download answered HTTP 503"))
    outage(provider, window_s=40.0)
    # a synchronous provider's call is cut at its window (40 s): one pause of 16 s fits
    assert provider.pauses == [16.0] and provider.rounds == 2
    provider = Gone(OutputUnreachable("unavailable", "x: output download answered HTTP 503"))
    provider.resumable = True  # a job-style one gets a quarter more (50 s): still one
    outage(provider, window_s=40.0)
    assert provider.pauses == [16.0]


def test_a_definite_answer_ends_the_fetch_at_once(monkeypatch):
    """A 404 or a 403 is no passing failure: no later round (Replicate says data_removed)."""
    monkeypatch.setenv("AFC_POLL_S", "2")
    provider = Gone(ProviderError("unavailable", "x: output download answered HTTP 404"))
    outage(provider)
    assert provider.pauses == [] and provider.rounds == 1 and provider.notices == []


def test_a_provider_that_keeps_nothing_makes_one_round(monkeypatch):
    provider = Gone(OutputUnreachable("unavailable", "x: output download answered HTTP 503"))
    provider.keeps_outputs_s = 0.0
    outage(provider)
    assert provider.rounds == 1 and provider.pauses == []


def test_refetch_pauses_are_half_to_whole_steps(monkeypatch):
    monkeypatch.setenv("AFC_POLL_S", "2")
    steps = [s * 2 for s in REFETCH_PAUSE_INTERVALS]
    assert [refetch_pause(n, lambda: 0.0) for n in (1, 2, 3, 9)] == [
        steps[0] / 2,
        steps[1] / 2,
        steps[2] / 2,
        steps[2] / 2,
    ]
    assert [refetch_pause(n, lambda: 1.0) for n in (1, 2, 3, 9)] == [*steps, steps[2]]


# --- a round's own GETs take time: the run's limit on the call must not cut it ---------------


def test_a_round_whose_gets_are_slow_ends_before_the_runs_limit_on_the_call(afc, fake):
    """Each 503 takes CDN_SLOW_S (a gateway's own timeout, a connect timeout): the rounds'
    room was reckoned from their waits alone, so a synchronous provider's last round ran
    past its window, the run's wait_for cut it, and the paid DALL-E render (its cost known)
    was recorded window_expired at an unknown cost."""
    data = manifest([{"key": "j0", "prompt": "dalle-url cdn-slow"}], rates=PRICED)
    data["defaults"]["chain"] = [
        {"provider": "openai", "model": MODELS["openai"], "attempts": 1, "window_s": 4}
    ]
    afc.write_manifest(data)
    afc("submit", "manifest.yaml")
    [row] = afc.rows("SELECT status, error_class, cost_micros FROM attempts")
    assert row == ("failed", "server", 40_000), row


class Slow(Gone):
    """Rounds that take real time (0.25 s each), on the real clock."""

    def __init__(self) -> None:
        super().__init__(OutputUnreachable("server", "x: output download answered HTTP 503"))
        self.clock = time.monotonic
        self.sleep = asyncio.sleep

    async def fetch(self):
        self.rounds += 1
        await asyncio.sleep(0.25)
        raise self.failure


def test_the_rounds_end_within_the_window_whatever_a_round_takes(monkeypatch):
    monkeypatch.setenv("AFC_POLL_S", "0.01")
    provider = Slow()
    began = time.monotonic()
    with pytest.raises(OutputUnreachable):
        asyncio.run(provider.outlast(request(window_s=2.0), began, provider.fetch))
    assert time.monotonic() - began < 2.0, "the run's own limit (the window) would cut it"
    assert provider.rounds > 2


def test_a_synchronous_providers_rounds_end_at_a_stop_with_the_renders_cost(afc, fake):
    """Ctrl-C (as the notice says) while a DALL-E URL is out of reach: no request id to leave
    to the next run, so the stopping run waited its whole grace period on the rounds, then
    abandoned the call: the paid render, its cost known, was recorded unknown at no cost.
    Its output URL, committed before the download, is left to the next run
    (tests/test_audit28c_answer_url.py)."""
    data = manifest([{"key": "j0", "prompt": "dalle-url cdn-held"}], rates=PRICED)
    data["defaults"]["chain"] = [{"provider": "openai", "model": MODELS["openai"]}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml", "--grace", "20")
    deadline = time.time() + 30
    while fake.counts["download_refused"] <= FETCH_TRIES and time.time() < deadline:
        time.sleep(0.02)
    assert fake.counts["download_refused"] > FETCH_TRIES
    stopped = time.time()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    assert time.time() - stopped < 10, "the run waited out its grace period"
    assert proc.returncode == 130
    [row] = afc.rows("SELECT status, cost_micros, error_message FROM attempts")
    assert row[:2] == ("unknown", 40_000) and "afc stopped" in row[2], row
    assert fake.counts["openai_billed"] == 1


def test_a_job_in_later_rounds_gives_its_slot_back_and_a_cancel_ends_them(afc, fake):
    """Found by a review: an output out of reach held its job's run slot through every round
    (up to 55 min for Replicate), so with --concurrency 1 the next job waited all that time;
    and 'afc cancel' from another process did not reach the rounds. Now a pause gives the
    slot back, as a backoff wait does, and a job that ended elsewhere ends its rounds, the
    paid render recorded at its cost."""
    data = manifest(
        [{"key": "j0", "prompt": "cdn-held"}, {"key": "j1", "prompt": "plain"}], rates=RATES
    )
    data["defaults"]["chain"] = [{"provider": "replicate", "model": MODELS["replicate"]}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml", "--concurrency", "1")
    try:
        deadline = time.time() + 30
        while fake.counts["replicate_submit"] < 2 and time.time() < deadline:
            time.sleep(0.02)
        assert fake.counts["replicate_submit"] == 2, "j1 rendered while j0's output was away"
        wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE key = 'j1' AND status = 'succeeded'", 1)
        assert afc("cancel", "j0").returncode == 0
        assert proc.wait(timeout=30) == 1  # j0 cancelled; the run ends without waiting on it
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
    [attempt] = attempts_of(afc, "j0")
    assert attempt["status"] == "failed" and attempt["cost"] is not None
    assert "not fetched further: the job is cancelled" in attempt["error"], attempt
    assert fake.counts["replicate_submit"] == 2


def test_a_left_urls_rounds_end_when_the_provider_lets_it_go(monkeypatch):
    """A paid render a stopped run left at its URL 250 s ago, whose provider keeps outputs
    300 s: the next run's rounds end within the 50 s left (``kept_until``), not 300 s after
    its own first failure (found by outside audit 29a: a URL left 50 minutes ago behind a
    failing CDN was tried until about 105 minutes, holding a slot)."""
    monkeypatch.setenv("AFC_POLL_S", "2")
    provider = Gone(OutputUnreachable("unavailable", "x: output download answered HTTP 503"))
    with pytest.raises(ProviderError):
        asyncio.run(provider.outlast(request(), 0.0, provider.fetch, kept_until=50.0))
    assert provider.pauses == [16.0]  # one pause, then no round fits before 50 s
    assert provider.now < 50.0

    # and fetch_left gives the render's age to the download: what the provider keeps is left
    seen: dict = {}

    async def fetch_output(request, began, url, usage, cost, request_id=None, kept_s=None):
        seen.update(began=began, kept_s=kept_s)
        return b"png"

    provider.now = 1000.0
    monkeypatch.setattr(provider, "fetch_output", fetch_output)
    asyncio.run(provider.fetch_left(request(), "http://cdn/x.png", 40_000, "derived", age=250.0))
    assert seen == {"began": 1000.0, "kept_s": 50.0}
