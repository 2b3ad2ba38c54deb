"""Outside audit 29a: a synchronous provider's paid render left at its output URL
(``attempts.answer_url``) by a run that stopped or died before its download ended, followed
through the commands that meet it next. Real ``afc`` children, real signals, the fake OpenAI-
compatible gateway of tests/fakeproviders.py, whose ``cdn-held`` outputs answer 503 until
``cdn_back`` is set."""

from __future__ import annotations

import re
import signal
import sqlite3
import time

import pytest
from conftest import manifest
from test_audit28c_answer_url import (
    PRICED,
    _namespaces,
    left_url,
    spool_filled_during_download,
    start,
)
from test_providers import MODELS

from afc_cli.providers.http import FETCH_TRIES


def _stopped(afc, fake) -> str:
    """One OpenAI job whose paid render's output is out of reach, the submit stopped by Ctrl-C
    during its later rounds of fetches (the URL committed with its cost): its stderr."""
    proc = start(afc, fake, "--grace", "20", tries=FETCH_TRIES + 1)
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 130, err
    left_url(afc)
    return err


def _spent(text: str) -> list[str]:
    return re.findall(r"spent (\d+\.\d+) USD \(priced\)", text)


def test_a_render_a_stopped_run_counted_is_not_counted_again_by_the_run_that_fetches_its_url(
    afc, fake
):
    """The stopped run's summary said 'spent 0.040000 USD (priced)' for the render (its cost
    came with the URL), and the next run, which only fetched the URL, said so too and counted
    it against its own --max-spend: two renders in the logs for the one paid for."""
    first = _stopped(afc, fake)
    assert _spent(first)[-1] == "0.040000", first
    fake.cdn_back.set()
    again = afc.json("resume", "--max-spend", "0.05")
    assert again["spent"] == "0.000000", again
    assert fake.counts["openai_billed"] == 1
    assert afc.rows("SELECT status, cost_micros FROM attempts") == [("succeeded", 40_000)]
    assert afc.json("costs", "report")["total"]["priced"] == "0.040000"


def _shared(afc, batch: str, prompt: str) -> str:
    """A manifest of one OpenAI job whose output key leaves out {batch}: two batches of one
    storage give it one key."""
    data = manifest([{"key": "j0", "prompt": prompt}], batch=batch, rates=PRICED)
    data["defaults"]["chain"] = [{"provider": "openai", "model": MODELS["openai"]}]
    data["defaults"]["output"] = "shared/{key}.{ext}"
    return afc.write_manifest(data, f"{batch}.yaml").name


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_a_url_left_holds_its_output_key_against_another_batchs_render(afc, fake, sig):
    """The maintainer's known item ('a URL left after Ctrl-C doesn't reserve the job's output
    key'). Before: the left job went back to 'queued' (or stayed 'running' under a dead
    process), which holds no key, so another batch's job of the same output key rendered
    (paid) and stored it, and the left job's next run failed OUTPUT_KEY_CONFLICT at its render
    step: its paid render never fetched, two renders paid and one thrown away. Now it holds
    the key as a job-style request left polling does: the other job waits for it, the URL is
    fetched and stored, and the other job then finds the key taken before it pays."""
    first = _shared(afc, "b1", "dalle-url cdn-held")
    proc = afc.popen("submit", first, "--grace", "20")
    deadline = time.time() + 30
    while fake.counts["download_refused"] < FETCH_TRIES + 1 and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(sig)
    proc.wait(timeout=60)
    left_url(afc)
    fake.cdn_back.set()
    other = afc("submit", _shared(afc, "b2", "dalle-url another picture"))
    assert fake.counts["openai_billed"] == 1, other.stderr  # b2 paid nothing
    assert "b1" in other.stderr and "afc resume --batch b1" in other.stderr, other.stderr
    resumed = afc("resume", "--batch", "b1")
    assert resumed.returncode == 0, resumed.stderr
    assert fake.counts["openai_billed"] == 1, "b1's render was paid for again, or b2's"
    jobs = dict(afc.rows("SELECT batch, status FROM jobs"))
    assert jobs["b1"] == "succeeded", jobs
    assert (afc.outputs() / "shared" / "j0.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("age", [0, 6 * 3600])
def test_a_cancelled_job_whose_paid_render_waits_at_its_url_is_fetched_by_its_retry(afc, fake, age):
    """A person cancels a job a stopped run left at its output URL, then thinks again. Before:
    the cancel said only 'cancelled', and 'afc retry' put the paid attempt behind the job's
    base, so the next run paid for a new render while the provider still served the one paid
    for. Now the cancel says the render was paid for and that a retry fetches it, and the
    retry's run fetches the URL, as it polls a Replicate or fal request that had completed;
    so too for a render left longer than the 55 minutes afc counts on (said nothing of
    before, though the retry's run tries the URL before it pays)."""
    _stopped(afc, fake)
    if age:
        conn = sqlite3.connect(afc.cwd / "afc.db")
        with conn:
            conn.execute("UPDATE attempts SET started_at = started_at - ?", (age,))
        conn.close()
    cancelled = afc("cancel", "j0")
    assert cancelled.returncode == 0, cancelled.stderr
    assert "afc retry j0" in cancelled.stderr and "paying for it again" in cancelled.stderr, (
        cancelled.stderr
    )
    assert afc("retry", "j0").returncode == 0
    fake.cdn_back.set()
    resumed = afc.json("resume")
    assert resumed["exit_code"] == 0, resumed
    assert fake.counts["openai_billed"] == 1, "the retry paid for the render again"
    assert afc.rows("SELECT number, status, cost_micros FROM attempts") == [
        (1, "succeeded", 40_000)
    ]
    assert (afc.outputs() / "b1" / "j0.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("lost", ["expired", "gone"])
def test_a_url_left_that_can_no_longer_be_fetched_is_said_before_a_new_render_is_paid(
    afc, fake, lost
):
    """The URL answers 404 (expired, revoked), whether the next run came within the
    provider's keep time or after it (a weekend's Ctrl-C). Before: a late run paid for a new
    render with nothing said, the left attempt's message still 'the next run fetches it from
    the output URL ..., paying nothing again'; a 404 was in 'afc show' alone, the run's line
    'spent 0.040000 USD' for a render nobody was told of. Now the attempt ends
    failed/interrupted at its cost, saying why, and the run says so on stderr before it
    pays."""
    _stopped(afc, fake)
    if lost == "expired":
        conn = sqlite3.connect(afc.cwd / "afc.db")
        with conn:
            conn.execute("UPDATE attempts SET started_at = started_at - 3600")
        conn.close()
    url = left_url(afc)
    fake.gone_files.add("/files/" + url.split("/files/", 1)[1])
    fake.cdn_back.set()
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert fake.counts["openai_billed"] == 2
    rows = afc.rows("SELECT number, status, error_class, cost_micros, error_message FROM attempts")
    assert [r[:4] for r in rows] == [
        (1, "failed", "interrupted", 40_000),
        (2, "succeeded", None, 40_000),
    ], rows
    assert "a new render follows (paid again)" in rows[0][4], rows[0][4]
    assert "paying nothing again" not in rows[0][4], rows[0][4]
    said = "b1/j0: the output URL its paid render (attempt 1) was left at"
    assert said in resumed.stderr and "paid for again" in resumed.stderr, resumed.stderr
    assert "404" in resumed.stderr, resumed.stderr


def test_a_url_left_longer_than_the_provider_is_said_to_keep_it_is_tried_before_paying(afc, fake):
    """The next run came later than the 55 minutes afc takes an OpenAI-compatible gateway to
    keep its outputs (a cron resume an hour on; a gateway that keeps them a day; the host's
    clock stepped forward). Before: the URL was taken as lost without a request, and a new
    render was paid for while the gateway still served the one paid for. Now it is fetched
    (free) first: served, it is stored and nothing is paid again; refused, a new render
    follows as above."""
    _stopped(afc, fake)
    conn = sqlite3.connect(afc.cwd / "afc.db")
    with conn:
        conn.execute("UPDATE attempts SET started_at = started_at - 6 * 3600")
    conn.close()
    fake.cdn_back.set()
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert fake.counts["openai_billed"] == 1, "the render still served was paid for again"
    assert afc.rows("SELECT number, status, cost_micros FROM attempts") == [
        (1, "succeeded", 40_000)
    ]
    assert "paid for again" not in resumed.stderr, resumed.stderr
    assert (afc.outputs() / "b1" / "j0.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("provider", ["replicate", "fal"])
def test_a_left_requests_output_the_provider_let_go_is_rendered_again_not_failed(
    afc, fake, provider
):
    """A Replicate or fal request a killed run left, polled by the next run: it succeeded,
    and its output URL answers 404 (the provider deletes outputs after an hour; a model's
    signed URL expired). Before: the attempt failed 'unavailable', using up one of the
    model's attempts, so a job of 'attempts: 1' failed CHAIN_FAILED (or went to the next,
    dearer, model) for an output afc's own end had lost, where a request the provider no
    longer has at all is 'interrupted' (uses none) and rendered again. Now the same: failed/
    interrupted at its cost, said on stderr, and a new request renders the job."""
    data = manifest([{"key": "j0", "prompt": "a lighthouse"}], rates=PRICED)
    data["defaults"]["chain"] = [{"provider": provider, "model": MODELS[provider], "attempts": 1}]
    afc.write_manifest(data)
    killed = afc("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_submit"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    [(request_id,)] = afc.rows("SELECT provider_request_id FROM attempts")
    fake.gone_files.add(f"/files/{request_id}.png")
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert fake.counts[f"{provider}_submit"] == 2
    rows = afc.rows("SELECT number, status, error_class, cost_micros, error_message FROM attempts")
    assert [r[:3] for r in rows] == [(1, "failed", "interrupted"), (2, "succeeded", None)], rows
    assert rows[0][3] is not None and rows[0][3] > 0, rows  # its cost kept
    assert "404" in rows[0][4] and "a new request follows (paid again)" in rows[0][4], rows
    said = f"b1/j0: the output of {provider} request {request_id}"
    assert said in resumed.stderr and "paid for again" in resumed.stderr, resumed.stderr
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]


def test_a_render_a_run_abandoned_at_its_url_is_not_counted_again_by_the_run_that_fetches_it(
    afc, fake
):
    """The second Ctrl-C (or a grace that ran out) abandons the download in flight: the
    attempt is marked unknown at its known cost by the run's end (Ledger.release_all), whose
    summary counts it ('spent 0.040000 USD (priced)'), and the next run, which only fetched
    the URL, counted it again, in its line and against its --max-spend."""
    data = manifest([{"key": "j0", "prompt": "dalle-url cdn-slow"}], rates=PRICED)
    data["defaults"]["chain"] = [{"provider": "openai", "model": MODELS["openai"]}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml")
    deadline = time.time() + 30
    while fake.counts["download"] < 1 and time.time() < deadline:
        time.sleep(0.005)  # a GET of the output is in flight (its 503 comes after 0.4 s)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 130, err
    assert "1 call(s) in flight abandoned" in err, err
    assert _spent(err)[-1] == "0.040000", err
    fake.slow_files.clear()
    fake.cdn_back.set()
    again = afc.json("resume", "--max-spend", "0.05")
    assert again["spent"] == "0.000000", again
    assert fake.counts["openai_billed"] == 1
    assert afc.rows("SELECT status, cost_micros FROM attempts") == [("succeeded", 40_000)]


@pytest.mark.skipif(not _namespaces(), reason="needs unprivileged mount namespaces (Linux)")
def test_a_url_a_full_spool_could_not_keep_holds_its_output_key(afc, fake):
    """The third way a run leaves a paid render at its URL (README: a full spool disk): the
    run stops (exit 1) and its job went back to 'queued', its output key held by nothing, so
    another batch's job of the key paid for a render and stored it, and the left render was
    never fetched (its job failed OUTPUT_KEY_CONFLICT)."""
    spool_filled_during_download(afc, fake, ["submit", _shared(afc, "b1", "dalle-url cdn-held")])
    [(status, reason)] = afc.rows("SELECT status, waiting_reason FROM jobs")
    assert status == "waiting" and reason.startswith("provider still rendering"), (status, reason)
    other = afc("submit", _shared(afc, "b2", "dalle-url another picture"))
    assert fake.counts["openai_billed"] == 1, other.stderr  # b2 paid nothing
    resumed = afc("resume", "--batch", "b1")
    assert resumed.returncode == 0, resumed.stderr
    assert fake.counts["openai_billed"] == 1
    assert dict(afc.rows("SELECT batch, status FROM jobs"))["b1"] == "succeeded"
