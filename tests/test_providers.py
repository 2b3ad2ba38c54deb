"""Provider adapters against local fake servers that speak each API's wire format."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from decimal import Decimal

import pytest
from conftest import manifest, wait_for
from fakeproviders import KEYS

from afc_cli.ledger import MAX_TAKEOVERS

FAST = {"base": 0.01, "cap": 0.05}
RATES = [
    {
        "provider": "openai",
        "model": "gpt-image-1",
        "per_1k_input_tokens": "0.005",
        "per_1k_output_tokens": "0.04",
    },
    {"provider": "replicate", "model": "black-forest-labs/flux-1.1-pro", "per_second": "0.0012"},
    {"provider": "fal", "model": "fal-ai/flux/dev", "per_image": "0.025"},
    {
        "provider": "gemini",
        "model": "gemini-2.5-flash-image",
        "per_1k_input_tokens": "0.0003",
        "per_1k_output_tokens": "0.03",
    },
]
MODELS = {
    "openai": "gpt-image-1",
    "replicate": "black-forest-labs/flux-1.1-pro",
    "fal": "fal-ai/flux/dev",
    "gemini": "gemini-2.5-flash-image",
}


def run(afc, provider, prompts, expect=None, attempts=3, **entry):
    chain = [
        {
            "provider": provider,
            "model": MODELS[provider],
            "attempts": attempts,
            "backoff": FAST,
            **entry,
        }
    ]
    data = manifest([{"key": f"j{i}", "prompt": p} for i, p in enumerate(prompts)], rates=RATES)
    data["defaults"]["chain"] = chain
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "--json")
    if expect is not None:
        assert result.returncode == expect, result.stderr
    import json

    return {j["key"]: j for j in json.loads(result.stdout)["jobs"]}


def attempts_of(afc, key):
    return afc.json("show", key)["attempts"]


def test_openai_success_and_token_cost(afc, fake):
    jobs = run(afc, "openai", ["a lighthouse"], expect=0)
    assert jobs["j0"]["cost"] == "0.166650"  # 50 x 0.005/1k + 4160 x 0.04/1k
    a = attempts_of(afc, "j0")[0]
    assert a["cost_source"] == "derived" and a["usage"]["output_tokens"] == 4160
    assert a["provider_request_id"].startswith("req_")
    assert (afc.outputs() / "b1" / "j0.png").read_bytes().startswith(b"\x89PNG")


def test_a_408_or_409_is_sent_again_not_the_end_of_the_job(afc, fake):
    """OpenAI's own SDK sends a 408 (the request timed out) or a 409 (a conflict) again, as
    Gemini's 409 ABORTED asks: classed ``invalid`` they stopped the chain and failed the job,
    leaving it to a person's retry. They are retried as ``unavailable`` (within the model's
    attempts): a conflict at its known cost, nothing; a 408 at a cost unknown (a gateway that
    stopped waiting may answer it after the image was made)."""
    jobs = run(afc, "openai", ["conflict-once", "request-timeout-once"], expect=0)
    for key, status, cost in (("j0", 409, "0.000000"), ("j1", 408, None)):
        assert jobs[key]["status"] == "succeeded", jobs[key]
        first, second = attempts_of(afc, key)
        assert (first["error_class"], first["http_status"], first["cost"]) == (
            "unavailable",
            status,
            cost,
        )
        assert second["status"] == "succeeded"


def test_a_503_that_says_when_to_come_back_is_waited_for(afc, fake):
    """A 503 with Retry-After: the backoff honours it (up to its cap) as it does a 429's, not
    the rate-limit reset OpenAI sends on every answer; it was ignored for any class but
    ``rate_limited`` (the retry came at a random moment of the jittered backoff)."""
    jobs = run(afc, "openai", ["overloaded-once"], expect=0)
    assert jobs["j0"]["status"] == "succeeded"
    first, second = attempts_of(afc, "j0")
    assert (first["error_class"], first["http_status"]) == ("unavailable", 503)
    assert second["waited_s"] == pytest.approx(0.05)  # Retry-After 2 s, capped by FAST


def test_a_fal_image_sent_inline_as_a_data_url_is_stored_not_paid_for_again(afc, fake):
    """With the model input ``sync_mode: true`` fal returns its images as data URLs: afc could
    not fetch such a URL, so each attempt failed after its render was paid, and the next paid
    again for an answer that came back the same way."""
    data = manifest([{"key": "j", "prompt": "inline", "params": {"sync_mode": True}}], rates=RATES)
    data["defaults"]["chain"] = [{"provider": "fal", "model": MODELS["fal"], "backoff": FAST}]
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    assert fake.counts["fal_submit"] == 1 and fake.counts["download"] == 0
    [attempt] = attempts_of(afc, "j")
    assert (attempt["status"], attempt["cost"]) == ("succeeded", "0.025000")
    stored = (afc.outputs() / "b1" / "j.png").read_bytes()
    assert stored.startswith(b"\x89PNG")


def test_a_fal_status_poll_answered_409_is_polled_again_not_paid_again(afc, fake):
    """A 409 is "send it again" (``class_for_status``): on a poll of a request already queued
    (and so possibly billed) that means polling again, as for a 429 or a 5xx, never a new
    attempt that would pay for a second request while the first may run on."""
    jobs = run(afc, "fal", ["poll-409"], expect=0)
    assert jobs["j0"]["status"] == "succeeded"
    assert fake.counts["fal_submit"] == 1
    [attempt] = attempts_of(afc, "j0")
    assert attempt["status"] == "succeeded"


def test_openai_error_classes(afc, fake):
    jobs = run(
        afc,
        "openai",
        ["rate-limit me", "moderation", "bad-size", "boom", "dalle-url"],
        expect=1,
    )
    assert jobs["j0"]["status"] == "succeeded" and jobs["j0"]["attempts"] == 2
    first = attempts_of(afc, "j0")[0]
    assert (first["error_class"], first["http_status"]) == ("rate_limited", 429)
    assert jobs["j1"]["error"]["class"] == "refusal" and jobs["j1"]["attempts"] == 3
    assert jobs["j2"]["error"]["class"] == "invalid" and jobs["j2"]["attempts"] == 1
    assert jobs["j3"]["error"]["class"] == "server" and jobs["j3"]["attempts"] == 3
    assert jobs["j4"]["status"] == "succeeded"  # a url answer, downloaded at once
    assert fake.counts["download"] == 1


def test_openai_out_of_quota_is_auth(afc, fake):
    """Apart from the other classes: an account out of money holds the model's other jobs in
    the run (tests/test_audit65i_refused_key.py)."""
    jobs = run(afc, "openai", ["quota"], expect=1)
    assert jobs["j0"]["error"]["class"] == "auth" and jobs["j0"]["attempts"] == 1
    assert "quota" in jobs["j0"]["error"]["message"]


def test_openai_bad_key_is_auth(afc, fake):
    afc.env["OPENAI_API_KEY"] = "sk-wrong"
    jobs = run(afc, "openai", ["x"], expect=1)
    assert jobs["j0"]["error"]["class"] == "auth" and jobs["j0"]["attempts"] == 1
    assert "sk-wrong" not in str(jobs)


def test_replicate_predictions(afc, fake):
    jobs = run(afc, "replicate", ["a boat", "flagged", "throttle me", "broke"], expect=1)
    assert jobs["j0"]["status"] == "succeeded"
    assert jobs["j0"]["cost"] == "0.003840"  # 3.2 s x 0.0012
    a = attempts_of(afc, "j0")[0]
    assert a["usage"] == {"images": 1, "seconds": 3.2} and a["provider_request_id"]
    assert jobs["j1"]["error"]["class"] == "refusal" and "E005" in jobs["j1"]["error"]["message"]
    assert jobs["j2"]["status"] == "succeeded" and jobs["j2"]["attempts"] == 2
    assert jobs["j3"]["error"]["class"] == "invalid" and jobs["j3"]["attempts"] == 1


def test_replicate_window_is_sent_as_cancel_after(afc, fake):
    run(afc, "replicate", ["a boat"], expect=0, window_s=120)
    assert {p["cancel_after"] for p in fake.predictions.values()} == {"120s"}


@pytest.mark.parametrize("provider", ["replicate", "fal"])
def test_an_outage_of_polls_is_said_once_and_polling_goes_on(afc, fake, provider):
    """Polls answered 503 for a while: the run says so (once, not per poll) and again when
    they answer; the request is polled through it and paid once."""
    data = manifest([{"key": "j0", "prompt": "poll-outage"}], rates=RATES)
    data["defaults"]["chain"] = [{"provider": provider, "model": MODELS[provider]}]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    attempts = afc.json("show", "j0")["attempts"]
    assert [a["status"] for a in attempts] == ["succeeded"]
    assert fake.counts[f"{provider}_submit"] == 1
    assert fake.counts[f"{provider}_poll"] > 12  # the outage's polls, then the rest
    stderr = result.stderr
    said = [line for line in stderr.splitlines() if "every poll has failed" in line]
    assert len(said) == 1, stderr
    assert said[0].startswith(f"afc: {provider}: every poll has failed for ")
    assert "(last: HTTP 503)" in said[0] and "nothing is paid again" in said[0]
    assert stderr.count(f"afc: {provider}: polls answer again") == 1, stderr
    assert stderr.index("every poll has failed") < stderr.index("polls answer again")


def test_fal_queue(afc, fake):
    jobs = run(afc, "fal", ["a cat", "nsfw thing"], expect=1)
    assert jobs["j0"]["status"] == "succeeded" and jobs["j0"]["cost"] == "0.025000"
    assert fake.counts["fal_result"] == 1 and fake.counts["fal_poll"] >= 3
    assert jobs["j1"]["error"]["class"] == "refusal"


def test_gemini(afc, fake):
    jobs = run(afc, "gemini", ["a tree", "blocked", "image-safety", "quota please"], expect=1)
    assert jobs["j0"]["status"] == "succeeded"
    assert jobs["j0"]["cost"] == "0.038703"  # 10 x 0.0003/1k + 1290 x 0.03/1k
    assert jobs["j1"]["error"]["class"] == "refusal" and "SAFETY" in jobs["j1"]["error"]["message"]
    # a refusal's input tokens are billed: its responseId is kept to reconcile them
    assert attempts_of(afc, "j1")[0]["provider_request_id"] == "resp-blocked-01"
    assert jobs["j2"]["error"]["class"] == "refusal"
    first = attempts_of(afc, "j3")[0]
    assert first["error_class"] == "rate_limited" and jobs["j3"]["status"] == "succeeded"
    assert first["waited_s"] is None
    assert attempts_of(afc, "j3")[1]["waited_s"] == pytest.approx(0.05)  # retryDelay, capped


def test_a_missing_key_stops_before_any_job(afc, fake):
    afc.env.pop("REPLICATE_API_TOKEN")
    data = manifest([{"key": "a", "prompt": "p"}], rates=RATES)
    data["defaults"]["chain"] = [{"provider": "replicate", "model": MODELS["replicate"]}]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 2 and "REPLICATE_API_TOKEN" in result.stderr
    assert not (afc.cwd / "afc.db").exists()
    assert fake.counts["replicate_submit"] == 0


@pytest.mark.parametrize("provider", ["replicate", "fal"])
def test_killed_after_submit_resume_polls_with_zero_new_submits(afc, fake, provider):
    data = manifest([{"key": f"j{i}", "prompt": f"hold {i}"} for i in range(3)], rates=RATES)
    data["defaults"]["chain"] = [{"provider": provider, "model": MODELS[provider], "backoff": FAST}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml")
    wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL", 3)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    submits = fake.counts[f"{provider}_submit"]
    assert submits == 3
    [(killed_run,)] = afc.rows("SELECT DISTINCT run_id FROM attempts")
    fake.released.set()
    resumed = afc.json("resume")
    assert resumed["exit_code"] == 0, resumed
    assert fake.counts[f"{provider}_submit"] == submits, "zero new submits"
    rows = afc.rows("SELECT number, status FROM attempts ORDER BY job_id")
    assert rows == [(1, "succeeded")] * 3
    assert afc.rows("SELECT COUNT(*) FROM events WHERE kind = 'attempt_resumed'") == [(3,)]
    # each moved into this run (its spend and budget), and its event names the killed run
    [(run,)] = afc.rows("SELECT DISTINCT run_id FROM attempts")
    assert run != killed_run
    details = afc.rows("SELECT detail_json FROM events WHERE kind = 'attempt_resumed'")
    assert {json.loads(d)["from_run"] for (d,) in details} == {killed_run}
    # the run that learnt the three costs shows them: its spend is the costs report's priced
    # (an outside audit found it said 0.000000, the attempts left to the killed run)
    priced = afc.json("costs", "report")["total"]["priced"]
    assert Decimal(priced) > 0 and resumed["spent"] == priced


def _killed_while_polling(afc) -> None:
    """A Replicate job 'j' whose run was SIGKILLed while it polled (its prediction's id
    recorded; the fake holds the prediction until ``fake.released``)."""
    data = manifest([{"key": "j", "prompt": "hold"}], rates=RATES)
    data["defaults"]["chain"] = [
        {"provider": "replicate", "model": MODELS["replicate"], "backoff": FAST}
    ]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml")
    wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL", 1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def test_a_forgotten_prediction_is_unknown_and_a_new_one_is_made(afc, fake):
    _killed_while_polling(afc)
    fake.predictions.clear()  # the provider no longer has it
    fake.released.set()
    assert afc("resume").returncode == 0
    rows = afc.rows("SELECT number, status, error_message FROM attempts ORDER BY number")
    assert [(n, s) for n, s, _ in rows] == [(1, "unknown"), (2, "succeeded")]
    assert "no longer has request" in rows[0][2]
    assert fake.counts["replicate_submit"] == 2


def test_openai_crash_every_request_has_an_attempt_row(afc, fake):
    data = manifest([{"key": f"j{i}", "prompt": f"slow {i}"} for i in range(4)], rates=RATES)
    data["defaults"]["chain"] = [{"provider": "openai", "model": MODELS["openai"]}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml", "--concurrency", "2")
    wait_for(afc, "SELECT COUNT(*) FROM attempts", 2)
    deadline = time.time() + 20
    while fake.counts["openai"] < 2 and time.time() < deadline:
        time.sleep(0.01)  # both requests reached the provider (each row is committed first)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert fake.counts["openai"] <= afc.rows("SELECT COUNT(*) FROM attempts")[0][0]
    in_flight = afc.rows("SELECT COUNT(*) FROM attempts WHERE status = 'started'")[0][0]
    assert afc("resume").returncode == 0
    total = afc.rows("SELECT COUNT(*) FROM attempts")[0][0]
    assert fake.counts["openai"] == total, "no provider request without an attempt row"
    assert total <= 4 + in_flight, "at most the in-flight calls were repeated"
    assert afc.rows("SELECT COUNT(*) FROM attempts WHERE status = 'unknown'")[0][0] == in_flight


def test_cancel_reaches_a_job_style_provider(afc, fake):
    data = manifest([{"key": "j", "prompt": "hold"}], rates=RATES)
    data["defaults"]["chain"] = [{"provider": "replicate", "model": MODELS["replicate"]}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml")
    wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL", 1)
    assert afc.json("cancel", "j")["cancelled"]
    assert proc.wait(timeout=30) == 1
    assert len(fake.cancels) == 1
    assert afc.rows("SELECT status FROM jobs") == [("cancelled",)]
    assert afc.rows("SELECT status, error_class FROM attempts") == [("failed", "cancelled")]


def test_a_cancelled_jobs_request_left_at_a_stop_is_not_promised_to_a_next_run(afc, fake):
    """A run stopped (SIGTERM) while it polled a request whose job another process had just
    cancelled left the attempt saying "the next run polls the request": no run polls a
    cancelled job's request, so its cost stays unknown, and the attempt says so."""
    data = manifest([{"key": "j", "prompt": "hold"}], rates=RATES)
    data["defaults"]["chain"] = [{"provider": "replicate", "model": MODELS["replicate"]}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml", env={"AFC_POLL_S": "30"})  # asleep in a poll
    wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL", 1)
    assert afc.json("cancel", "j")["cancelled"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 130
    [(status, message)] = afc.rows("SELECT status, error_message FROM attempts")
    assert status == "unknown"
    assert "the job was cancelled" in message and "next run polls" not in message


def test_keys_never_reach_the_ledger_or_output(afc, fake):
    outputs = []
    for provider in MODELS:
        afc.cwd.joinpath("afc.db").unlink(missing_ok=True)
        jobs = run(afc, provider, ["x", "boom"])
        outputs.append(str(jobs))
    outputs.append(afc("show", "j0", "--json").stdout)
    for name in ("afc.db", "afc.db-wal"):
        path = afc.cwd / name
        if path.exists():
            outputs.append(path.read_bytes().decode("latin-1"))
    for key in KEYS.values():
        assert all(key not in text for text in outputs)


@pytest.mark.parametrize(
    "provider,variable",
    [("replicate", "REPLICATE_API_TOKEN"), ("fal", "FAL_KEY"), ("gemini", "GEMINI_API_KEY")],
)
def test_a_wrong_key_is_auth_and_stops_the_chain(afc, fake, provider, variable):
    afc.env[variable] = "wrong-key"
    jobs = run(afc, provider, ["x"], expect=1)
    assert jobs["j0"]["error"]["class"] == "auth" and jobs["j0"]["attempts"] == 1


@pytest.mark.parametrize(
    ("provider", "variable", "value", "why"),
    [
        ("openai", "OPENAI_API_KEY", "sk-test-openai-0123456789\r", "carriage return"),
        ("openai", "OPENAI_API_KEY", "sk\u2013test-openai-0123456789", "U+2013"),
        ("fal", "FAL_KEY", "fal-test key", "space"),
    ],
)
def test_a_key_no_header_can_carry_is_refused_before_anything_is_written(
    afc, fake, provider, variable, value, why
):
    """A key with a carriage return (a Windows .env file) or a pasted en dash failed inside
    the HTTP client after its attempt row was written: recorded as 'a bug in afc', failed,
    cost unknown, though no request left (found by an outside audit). Now refused up front."""
    afc.env[variable] = value
    data = manifest([{"key": "j0", "prompt": "x"}], rates=RATES)
    data["defaults"]["chain"] = [{"provider": provider, "model": MODELS[provider]}]
    afc.write_manifest(data)
    for command in (("submit", "manifest.yaml"), ("submit", "manifest.yaml", "--json")):
        result = afc(*command)
        assert result.returncode == 2, result.stderr
        assert f"API key cannot be sent: {variable} holds" in result.stderr
        assert why in result.stderr and value.strip() not in result.stderr
        assert "Traceback" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()
    assert sum(fake.counts.values()) == 0


@pytest.mark.parametrize("provider", ["replicate", "fal"])
def test_an_output_whose_first_download_fails_is_fetched_again_not_paid_again(afc, fake, provider):
    """Found by an outside audit: one 503 from the output URL failed the paid attempt (cost
    unknown) and the next attempt submitted, and paid for, a second render."""
    jobs = run(afc, provider, ["flaky-download"], expect=0)
    assert jobs["j0"]["status"] == "succeeded" and jobs["j0"]["attempts"] == 1
    assert fake.counts[f"{provider}_submit"] == 1
    assert fake.counts["download"] == 2  # the 503, then the image
    assert jobs["j0"]["cost"] is not None


@pytest.mark.parametrize("provider", ["replicate", "fal"])
def test_a_poll_answered_with_a_page_that_is_no_status_is_made_again(afc, fake, provider):
    """Found by an outside audit: one 200 HTML poll answer ended a Replicate attempt as
    'replicate: None' (fal's as completed), and a second render was paid for."""
    jobs = run(afc, provider, ["garbled-poll"], expect=0)
    assert jobs["j0"]["status"] == "succeeded" and jobs["j0"]["attempts"] == 1
    assert fake.counts[f"{provider}_submit"] == 1


@pytest.mark.parametrize("provider", ["replicate", "fal"])
def test_a_poll_refused_after_the_submit_leaves_the_cost_unknown_not_zero(afc, fake, provider):
    """Found by an outside audit: a 401 on a poll recorded the submitted (and billable)
    request at a known cost of 0."""
    jobs = run(afc, provider, ["poll-401"], expect=1)
    assert jobs["j0"]["error"]["class"] == "auth"
    [attempt] = attempts_of(afc, "j0")
    assert attempt["cost"] is None and attempt["provider_request_id"]
    assert afc.json("costs", "report")["total"]["unpriced_attempts"] == 1


def test_a_fal_submit_ending_in_5xx_is_known_to_cost_nothing(afc, fake):
    """fal bills no request that ends in 5xx (its docs); the adapter said so in a comment and
    recorded the opposite, so a budget held reservations for free failures."""
    run(afc, "fal", ["runner-503"], expect=0)
    first, second = attempts_of(afc, "j0")
    assert first["error_class"] == "unavailable" and first["cost"] == "0.000000"
    assert second["status"] == "succeeded"


def test_a_fal_422_it_marks_retryable_is_sent_again_not_the_end_of_the_model(afc, fake):
    """fal's X-Fal-Retryable: true on a 422 says the request may pass when sent again; it was
    taken as invalid input and the job failed (left alone by an earlier audit). A refused
    submit costs nothing, so the retry risks no money."""
    run(afc, "fal", ["retryable-422"], expect=0)
    first, second = attempts_of(afc, "j0")
    assert first["http_status"] == 422 and first["error_class"] == "unavailable"
    assert first["cost"] == "0.000000"
    assert second["status"] == "succeeded"


def test_a_retryable_422_on_a_queued_requests_result_is_not_sent_again(afc, fake):
    """Found by a review: X-Fal-Retryable on a result (the request was queued and may have
    run, cost unknown) also became a retry, that is a second, paid submit. Only a refused
    submit is provably free to send again."""
    run(afc, "fal", ["result-422"], expect=1)
    [attempt] = attempts_of(afc, "j0")
    assert attempt["error_class"] == "invalid" and attempt["cost"] is None
    assert fake.counts["fal_submit"] == 1


def test_a_calls_known_cost_counts_against_the_budget_before_its_output_is_spooled(afc, fake):
    """Found by an outside audit: at --concurrency 1 the first call cost 0.166650 (tokens)
    against a 0.10 cap, yet the next call started: its budget check saw the first attempt's
    0.04 per-image reservation, its known cost being written only at the spool step, after
    the slot went to the next render. Three calls were paid past the cap."""
    card = {"per_image": "0.04", "per_1k_input_tokens": "0.005", "per_1k_output_tokens": "0.04"}
    data = manifest(
        [{"key": f"j{i}", "prompt": f"prompt {i}"} for i in range(4)],
        rates=[{"provider": "openai", "model": "gpt-image-1", **card}],
    )
    data["defaults"]["chain"] = [
        {"provider": "openai", "model": "gpt-image-1", "attempts": 1, "backoff": FAST}
    ]
    afc.write_manifest(data)
    out = afc.json("submit", "manifest.yaml", "--max-spend", "0.10", "--concurrency", "1", expect=4)
    assert fake.counts["openai"] == 1, "no call starts once the known spend is past"
    assert out["spent"] == "0.166650"
    assert afc.rows("SELECT cost_micros, reserved_micros FROM attempts") == [(166650, 166650)]


def test_a_download_is_tried_four_times_with_waits_and_no_real_sleep(fake):
    """The free GET of an output is made again on 5xx (Retry-After honoured up to its cap),
    FETCH_TRIES in all; then the attempt fails with its cost left for the adapter to set."""
    import asyncio

    from afc_cli.providers.base import ProviderError
    from afc_cli.providers.http import FETCH_TRIES, FETCH_WAIT_CAP_S, download, new_client

    waits = []

    async def sleep(seconds):
        waits.append(seconds)

    async def fetch(path):
        client = new_client(connections=2)
        try:
            return await download(client, "x", fake.base + path, sleep=sleep, rand=lambda: 0.5)
        finally:
            await client.aclose()

    before = fake.counts["download"]
    with pytest.raises(ProviderError) as caught:
        asyncio.run(fetch("/files/cdn-down.png"))
    assert fake.counts["download"] - before == FETCH_TRIES
    assert waits == [FETCH_WAIT_CAP_S] * (FETCH_TRIES - 1)  # Retry-After: 99, capped
    assert caught.value.error_class == "server" and caught.value.cost_micros is None
    assert asyncio.run(fetch("/files/fine.png")).startswith(b"\x89PNG")


def test_a_fal_request_left_by_an_expired_window_is_cancelled(afc, fake):
    """fal keeps no window of its own: a request afc stops waiting for would run on and be
    billed beside the next model's attempt (an outside audit saw no cancel sent)."""
    jobs = run(afc, "fal", ["hold"], expect=1, attempts=1, window_s=1)
    assert jobs["j0"]["error"]["class"] == "window_expired"
    [attempt] = attempts_of(afc, "j0")
    assert fake.cancels == [attempt["provider_request_id"]]
    assert attempt["cost"] is None  # it may have run, and been billed, before the cancel


def test_a_paid_answer_cut_short_keeps_its_status_and_request_id(afc, fake):
    """Found by an outside audit: a 200 whose body the connection cut was recorded as a
    connection failure with no HTTP status and no request id, though the 200 and the
    x-request-id header had arrived: the call was paid, and the id is what reconciles it."""
    run(afc, "openai", ["cut-body"], expect=1, attempts=1)
    [attempt] = attempts_of(afc, "j0")
    assert attempt["error_class"] == "server" and attempt["http_status"] == 200
    assert attempt["provider_request_id"] == "req_cut_0123456789"
    assert attempt["cost"] is None and "before its body ended" in attempt["error"]


def test_a_prediction_whose_output_was_deleted_keeps_the_cost_of_its_seconds(afc, fake):
    """Found by an outside audit: a succeeded prediction with ``data_removed`` was recorded
    unknown with no cost, though its ``predict_time`` says what it was billed."""
    run(afc, "replicate", ["data-removed"], expect=1, attempts=1)
    [attempt] = attempts_of(afc, "j0")
    assert attempt["status"] == "failed"  # paid, its output lost (test_audit31e_data_removed)
    assert attempt["cost"] == "0.003840"  # 3.2 s x 0.0012


def test_a_bare_gateway_5xx_on_a_fal_submit_leaves_the_cost_unknown(afc, fake):
    """A 502 without fal's own words may come from a gateway in front of a request already
    queued (a review): only fal's refusals are known to cost nothing."""
    run(afc, "fal", ["gateway-502"], expect=0)
    first, second = attempts_of(afc, "j0")
    assert first["http_status"] == 502 and first["cost"] is None
    assert second["status"] == "succeeded"


@pytest.mark.parametrize("provider", ["replicate", "fal"])
def test_a_status_that_never_makes_sense_is_given_up_without_polling_for_ever(afc, fake, provider):
    """Unreadable poll answers are polled again (transient ones cost nothing), but not for
    ever (the hypothesis test found a status URL serving a picture polled until its 10 s
    bound): after UNREADABLE_POLLS, Replicate's prediction is asked to stop, fal's result is
    asked for (free) and here found."""
    from afc_cli.providers.http import UNREADABLE_POLLS

    if provider == "replicate":
        jobs = run(afc, provider, ["garbled-forever"], expect=1, attempts=1)
        assert jobs["j0"]["error"]["class"] == "server"
        assert fake.counts["replicate_poll"] == UNREADABLE_POLLS
        [attempt] = attempts_of(afc, "j0")
        assert fake.cancels == [attempt["provider_request_id"]] and attempt["cost"] is None
    else:
        jobs = run(afc, provider, ["garbled-forever"], expect=0, attempts=1)
        assert jobs["j0"]["status"] == "succeeded" and fake.counts["fal_submit"] == 1
        assert fake.counts["fal_poll"] == UNREADABLE_POLLS


def test_a_job_dead_lettered_while_it_polled_is_polled_after_its_retry(afc, fake):
    """Found by bench/chaos.py: a job whose runs kept dying while it polled a prediction was
    dead-lettered (CRASH_LOOP, at a claim), and 'afc retry' then submitted, and paid for, a
    second prediction though the first one's id was recorded."""
    _killed_while_polling(afc)
    with sqlite3.connect(afc.cwd / "afc.db") as conn:  # the runs kept dying
        conn.execute("UPDATE jobs SET takeovers = ?", (MAX_TAKEOVERS,))
    assert afc("resume").returncode == 1
    assert afc.rows("SELECT status, error_code FROM jobs") == [("dead", "CRASH_LOOP")]
    assert afc("retry", "j").returncode == 0
    fake.released.set()
    assert afc("resume").returncode == 0
    assert fake.counts["replicate_submit"] == 1, "the recorded prediction was polled"
    assert afc.rows("SELECT number, status FROM attempts") == [(1, "succeeded")]


def test_a_cancelled_job_retried_pays_for_a_new_request(afc, fake):
    """The cancel asked the provider to stop the request: a retry submits a new one."""
    _killed_while_polling(afc)
    assert afc("cancel", "j").returncode == 0
    assert afc.rows("SELECT status FROM attempts") == [("unknown",)]
    assert afc("retry", "j").returncode == 0
    fake.released.set()
    assert afc("resume").returncode == 0
    assert fake.counts["replicate_submit"] == 2
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]


def test_a_gemini_image_withheld_as_recitation_is_a_refusal_not_a_server_failure(afc, fake):
    """Gemini withholds an image that recites protected work with the finishReason
    IMAGE_RECITATION, an image finish reason beside IMAGE_SAFETY (README: the finishReason
    SAFETY family is a refusal). It was taken for a server failure: its paid attempts were backed
    off and, exhausted, handed to the next model by the default fallback_on [exhausted],
    which paid again for a prompt Gemini refuses."""
    data = manifest([{"key": "j0", "prompt": "image-recitation"}], rates=RATES)
    data["defaults"]["chain"] = [
        {"provider": "gemini", "model": MODELS["gemini"], "attempts": 2, "backoff": FAST},
        {"provider": "openai", "model": MODELS["openai"], "backoff": FAST},
    ]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "--json")
    assert result.returncode == 1, result.stderr
    [job] = json.loads(result.stdout)["jobs"]
    assert job["error"]["class"] == "refusal" and "IMAGE_RECITATION" in job["error"]["message"]
    assert [a["error_class"] for a in attempts_of(afc, "j0")] == ["refusal", "refusal"]
    assert fake.counts["gemini"] == 2 and fake.counts["openai"] == 0


def test_a_fal_submit_refused_for_its_content_is_known_to_cost_nothing(afc, fake):
    """fal's 422 content_policy_violation on a submit: the request was never queued, so it
    cost nothing, as any other submit fal refuses. The refusal was recorded with its cost
    unknown, each of the model's attempts an unpriced one whose reservation a budget held."""
    jobs = run(afc, "fal", ["nsfw thing"], expect=1)
    assert jobs["j0"]["error"]["class"] == "refusal"
    attempts = attempts_of(afc, "j0")
    assert [(a["http_status"], a["cost"]) for a in attempts] == [(422, "0.000000")] * 3
    assert afc.json("costs", "report")["total"]["unpriced_attempts"] == 0


def test_a_fal_request_ended_by_fals_own_infrastructure_error_is_known_to_cost_nothing(afc, fake):
    """A queued request whose status ends COMPLETED with fal's own error_type (here
    runner_disconnected: a 503 after fal's own retries) ended in a 5xx, which fal does not
    bill. It was recorded as a server failure of unknown cost: unpriced, its reservation held
    by a budget, and not the 'unavailable' a fallback_on names, as the same error on a submit
    is."""
    run(afc, "fal", ["runner-died"], expect=0)
    first, second = attempts_of(afc, "j0")
    assert first["error_class"] == "unavailable" and first["cost"] == "0.000000"
    assert "runner_disconnected" in first["error"]
    assert second["status"] == "succeeded"
    assert fake.counts["fal_submit"] == 2


def test_a_plan_prices_no_render_the_provider_is_still_rendering(afc, fake):
    """``afc plan`` of a job whose paid request the provider is still rendering (its run
    killed while it polled): the next run polls that request and pays nothing more, and the
    plan said 'render'. Its cost counts in that run's spend all the same, unknown ahead under
    Replicate's per-second price: its model is unpriced."""
    _killed_while_polling(afc)
    planned = afc.json("plan", "manifest.yaml")
    assert (planned["to_render"], planned["resumed"], planned["estimated_spend"]) == (
        0,
        1,
        "0.000000",
    )
    assert planned["unpriced_models"] == [f"replicate/{MODELS['replicate']}"]
    [job] = planned["jobs"]
    assert job["action"] == "poll (the provider is still rendering its paid request)"
    fake.released.set()
    assert afc("resume").returncode == 0
    assert fake.counts["replicate_submit"] == 1


def test_a_plans_budget_counts_a_request_the_run_polls_as_the_runs_budget_does(afc, fake):
    """A fal request a killed run left rendering is polled, not paid again, but the run that
    polls it counts its cost against its own budget (README "Budget"): the plan left it out
    of the estimate and said a budget fits that the submit then stopped at (exit 4)."""
    chain = [{"provider": "fal", "model": MODELS["fal"], "backoff": FAST}]
    data = manifest([{"key": "j", "prompt": "hold"}], rates=RATES)
    data["defaults"]["chain"] = chain
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml")
    wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL", 1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    data = manifest([{"key": "j", "prompt": "hold"}, {"key": "k", "prompt": "p"}], rates=RATES)
    data["defaults"]["chain"] = chain
    afc.write_manifest(data)
    planned = afc.json("plan", "manifest.yaml", "--max-spend", "0.04")
    actions = [job["action"] for job in planned["jobs"]]
    assert actions == ["poll (the provider is still rendering its paid request)", "render"]
    fake.released.set()
    ran = afc("submit", "manifest.yaml", "--max-spend", "0.04", "--concurrency", "1")
    assert ran.returncode == 4, ran.stderr  # the polled request's 0.025 and k's do not fit
    assert fake.counts["fal_submit"] == 1
    assert (planned["estimated_spend"], planned["fits_budget"]) == ("0.050000", False)


@pytest.mark.parametrize("provider", ["replicate", "fal"])
def test_a_job_whose_provider_is_still_rendering_is_waiting(afc, fake, provider):
    """The contract's job statuses: ``waiting`` is a backoff or a provider still rendering.
    A Replicate or fal job whose request the provider renders showed ``running``, as a call in
    progress, and, left by a stopped run, ``queued``, as a job never started. It is
    ``waiting``, its reason naming the request, while a run polls it and once a stopped run
    released it; ``running`` again once the provider answered; and one request is paid."""
    data = manifest([{"key": "j", "prompt": "hold"}], rates=RATES)
    data["defaults"]["chain"] = [{"provider": provider, "model": MODELS[provider]}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml", "--grace", "0.5")
    wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL", 1)
    [request_id] = [r for (r,) in afc.rows("SELECT provider_request_id FROM attempts")]

    def job() -> dict:
        [row] = afc.json("status", "--all")["jobs"]
        return row

    polled = job()
    assert polled["status"] == "waiting"
    assert polled["waiting"] == f"provider still rendering: {provider} request {request_id}"
    assert afc.json("queue", "stats")["delayed"] == 1
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 130
    left = job()
    assert (left["status"], left["waiting"]) == ("waiting", polled["waiting"])
    assert afc.rows("SELECT lease_owner FROM jobs") == [(None,)], "released: any run polls it"
    fake.released.set()
    assert afc("resume").returncode == 0
    assert job()["status"] == "succeeded"
    assert fake.counts[f"{provider}_submit"] == 1
    kinds = [k for (k,) in afc.rows("SELECT kind FROM events ORDER BY id")]
    # running again (its attempt answered) before it was spooled and stored
    assert afc.rows("SELECT waiting_reason FROM jobs") == [(None,)]
    assert kinds.index("attempt_resumed") < kinds.index("succeeded")
