"""A job-style request that completed before afc asked the provider to stop it was rendered
and billed: its result is there to fetch by its id, and afc fetches it rather than pay for the
one output again.

- At an attempt window's end (``window_s``), Replicate answers the cancel of a prediction that
  had succeeded meanwhile with the prediction, ``succeeded`` (it cannot be cancelled). afc
  took any 2xx as "stopped", recorded the attempt window_expired at an unknown cost and fell
  back to the next model: two providers paid for one output. (fal's ALREADY_COMPLETED was
  handled so already: tests/test_audit24b_chains.py.)
- ``afc cancel`` of a job whose run had stopped while its request rendered: the provider said
  the request had completed. afc noted the cancel as sent, and 'afc retry' made a new request,
  paying again. Now the cancel says so (stderr, ``--json`` ``completed_at_provider``) and the
  retry polls the request by its id.

The fake servers (tests/fakeproviders.py) complete a "done-at-cancel" request just before the
cancel reaches it, as the real ones answer then.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time

import pytest
from conftest import manifest, wait_for
from test_providers import FAST, MODELS, RATES


def _chain(provider: str, **first) -> list[dict]:
    return [
        {"provider": provider, "model": MODELS[provider], "backoff": FAST, **first},
        {"provider": "openai", "model": MODELS["openai"], "backoff": FAST},
    ]


def test_a_replicate_prediction_done_as_its_window_ended_is_fetched_not_paid_again(afc, fake):
    chain = _chain("replicate", attempts=1, window_s=1, fallback_on=["window_expired"])
    afc.write_manifest(
        manifest([{"key": "shot", "prompt": "done-at-cancel shot", "chain": chain}], rates=RATES)
    )
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    assert len(fake.cancels) == 1, "the window passed: the prediction was asked to stop"
    assert fake.counts["replicate_submit"] == 1
    assert fake.counts["openai"] + fake.counts["openai_edits"] == 0, "a second provider paid"
    [attempt] = afc.json("show", "shot")["attempts"]
    assert (attempt["provider"], attempt["status"]) == ("replicate", "succeeded")
    assert attempt["cost"] == "0.003840"  # 3.2 s of predict_time at the card's 0.0012/s
    assert (afc.outputs() / "b1" / "shot.png").read_bytes().startswith(b"\x89PNG")


def _requests(afc, count: int = 1, timeout: float = 30) -> list[str]:
    """The provider request ids the ledger holds, once there are ``count`` of them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            rows = afc.rows(
                "SELECT provider_request_id FROM attempts WHERE provider_request_id > ''"
            )
        except sqlite3.OperationalError:  # the ledger is being made
            rows = []
        if len(rows) >= count:
            return [r[0] for r in rows]
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} requests were submitted")


def _wait_for_request(afc, timeout: float = 30) -> str:
    return _requests(afc, 1, timeout)[0]


def _killed_while_rendering(afc, count: int = 1) -> list[str]:
    """Submit the manifest written, and kill the run (SIGKILL) once ``count`` requests are
    submitted: they render on at the provider. Their ids."""
    run = afc.popen("submit", "manifest.yaml")
    try:
        return _requests(afc, count)
    finally:
        run.send_signal(signal.SIGKILL)  # the run dies; its requests render on
        run.wait(timeout=30)


@pytest.mark.parametrize("provider", ["replicate", "fal"])
def test_a_request_done_before_afc_cancel_is_fetched_by_retry_not_paid_again(afc, fake, provider):
    chain = [{"provider": provider, "model": MODELS[provider], "backoff": FAST}]
    afc.write_manifest(
        manifest([{"key": "shot", "prompt": "done-at-cancel shot", "chain": chain}], rates=RATES)
    )
    request = _killed_while_rendering(afc)[0]
    cancelled = afc("cancel", "shot", "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    out = json.loads(cancelled.stdout)
    assert out["cancelled"] == [{"key": "shot", "batch": "b1"}]
    assert out["not_stopped_at_provider"] == []
    assert out["completed_at_provider"] == [
        {"key": "shot", "batch": "b1", "provider": provider, "request": request}
    ]
    assert "had completed before the cancel came" in cancelled.stderr
    assert "'afc retry shot'" in cancelled.stderr
    # priced as it stands, from what the provider reports of it (a free GET): it was left
    # unpriced, 'unknown outcome, possibly paid', until a person retried the job (audit 50b)
    [left] = afc.json("show", "shot")["attempts"]
    assert left["cost"] == {"replicate": "0.003840", "fal": "0.025000"}[provider], left
    report = afc.json("costs", "report")
    assert [row["unpriced_attempts"] for row in report["rows"]] == [0], report

    assert afc("retry", "shot").returncode == 0
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    submits = fake.counts[f"{provider}_submit"]
    assert submits == 1, "the retry paid for a new request"
    [attempt] = afc.json("show", "shot")["attempts"]
    assert (attempt["status"], attempt["provider_request_id"]) == ("succeeded", request)
    assert attempt["cost"] is not None
    assert (afc.outputs() / "b1" / "shot.png").read_bytes().startswith(b"\x89PNG")


def test_a_prediction_that_failed_before_afc_cancel_is_priced_by_its_seconds(afc, fake):
    """A Replicate prediction that had failed by itself (flagged, 1.5 s billed) before the
    cancel came: Replicate answers the cancel with it, ``failed``. afc took the answer for a
    stop and left its attempt unpriced for good, 'unknown outcome, possibly paid' in every
    report (found by outside audit 51b); it is priced by its seconds, as a poll of it is."""
    chain = [{"provider": "replicate", "model": MODELS["replicate"], "backoff": FAST}]
    afc.write_manifest(
        manifest([{"key": "shot", "prompt": "flagged-at-cancel shot", "chain": chain}], rates=RATES)
    )
    request = _killed_while_rendering(afc)[0]
    cancelled = afc("cancel", "shot", "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    out = json.loads(cancelled.stdout)
    assert out["not_stopped_at_provider"] == [] and out["completed_at_provider"] == []
    assert fake.cancels == [request]
    [left] = afc.json("show", "shot")["attempts"]
    assert left["cost"] == "0.001800", left  # 1.5 s of predict_time at the card's 0.0012/s
    report = afc.json("costs", "report")
    assert [row["unpriced_attempts"] for row in report["rows"]] == [0], report


def test_a_request_the_cancel_stopped_is_not_polled_by_retry(afc, fake):
    """The rule above takes only a request the provider said had completed: one it cancelled
    is not polled again; the retry makes a new request (the cancelled one is recorded)."""
    chain = [{"provider": "replicate", "model": MODELS["replicate"], "backoff": FAST}]
    afc.write_manifest(manifest([{"key": "shot", "prompt": "hold", "chain": chain}], rates=RATES))
    _killed_while_rendering(afc)
    cancelled = afc("cancel", "shot", "--json")
    assert json.loads(cancelled.stdout)["completed_at_provider"] == []
    fake.released.set()
    assert afc("retry", "shot").returncode == 0
    assert afc("resume").returncode == 0
    assert fake.counts["replicate_submit"] == 2
    first, second = afc.json("show", "shot")["attempts"]
    assert first["status"] == "unknown" and second["status"] == "succeeded"


def test_a_cancelled_jobs_answered_call_left_started_is_fetched_by_retry(afc, fake):
    """The run had Replicate's answer (priced) but not yet the output when the job was
    cancelled, and it was killed before the download: its attempt stays ``started``. The
    cancel finds the prediction succeeded; 'afc retry' kept only an ``unknown`` attempt after
    its base, so the next run paid for a new prediction (found by outside audit 25c)."""
    chain = [{"provider": "replicate", "model": MODELS["replicate"], "attempts": 1}]
    afc.write_manifest(
        manifest([{"key": "shot", "prompt": "cdn-held sunrise", "chain": chain}], rates=RATES)
    )
    run = afc.popen("submit", "manifest.yaml")
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE cost_micros IS NOT NULL", 1)
        os.kill(run.pid, signal.SIGSTOP)  # its output still out of reach: the call not ended
        cancelled = afc("cancel", "shot", "--json")
        assert cancelled.returncode == 0, cancelled.stderr
    finally:
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
    assert len(json.loads(cancelled.stdout)["completed_at_provider"]) == 1
    assert afc.rows("SELECT status FROM attempts") == [("started",)]
    fake.cdn_back.set()  # the CDN answers again
    assert afc("retry", "shot").returncode == 0
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert fake.counts["replicate_submit"] == 1, "the retry paid for a new prediction"
    [attempt] = afc.json("show", "shot")["attempts"]
    assert (attempt["status"], attempt["cost"]) == ("succeeded", "0.003840")
