"""A resume under a budget counts the requests it will take over before it starts a new call
(outside audit 45a's finding, left then; README "Budget").

A run killed while fal rendered three requests left them to the next run, which polls them
rather than pay again (``Ledger.reopen_attempt``): their reservations become the resume's. A
new job listed before them reached its attempt row first, its reservation fitting a cap
those requests would fill, and the resume paid for it beside them: past its cap by a call it
chose to start. The requests it will adopt are now counted as reserved from the run's start
(``RunContext.to_adopt``), so the new job waits on the budget, as it did when it was listed
after them."""

from __future__ import annotations

import signal
import time

import pytest
from conftest import ledger_count, manifest

MODEL = "fal-ai/flux/dev"


def fal_manifest(jobs: list[tuple[str, str]]) -> dict:
    data = manifest(
        [{"key": key, "prompt": prompt} for key, prompt in jobs],
        rates=[{"provider": "fal", "model": MODEL, "per_image": "0.10"}],
    )
    data["defaults"]["chain"] = [{"provider": "fal", "model": MODEL}]
    return data


def kill_while_rendering(afc, ledger_url: str) -> None:
    """Three fal requests held rendering (the fake's ``hold`` prompts), their ids committed,
    and the submit that sent them killed: left for the next run to take over."""
    held = [(f"j{i}", f"hold {i}") for i in range(3)]
    afc.write_manifest(fal_manifest(held))
    proc = afc.popen("submit", "manifest.yaml")
    sql = "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL"
    deadline = time.time() + 60
    while ledger_count(afc, ledger_url, sql) < 3 and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def run_beside_new_jobs(afc, fake, command: str) -> None:
    """Three new jobs admitted in a batch claimed and run before the held jobs' (by name):
    their tasks reach their attempts before the others' takeovers. Then ``command`` under a
    budget of 0.35 USD, where the three left requests (0.30) leave no room for a new call:
    no request sent but the three polled, the new jobs waiting on the budget."""
    fresh = [(f"a{i}", f"plain {i}") for i in range(3)]
    afc.write_manifest({**fal_manifest(fresh), "batch": "a1"}, "fresh.yaml")
    admitted = afc("submit", "fresh.yaml", "--no-run")
    assert admitted.returncode == 0, admitted.stderr
    fake.released.set()

    if command == "resume":
        result = afc("resume", "--max-spend", "0.35", "--concurrency", "6")
    else:
        result = afc("worker", "--until-idle", "--max-spend", "0.35", "--concurrency", "6")
    assert fake.counts["fal_submit"] == 3, result.stderr
    shown = {job["key"]: job for job in afc.json("status", "--all")["jobs"]}
    assert [shown[f"j{i}"]["status"] for i in range(3)] == ["succeeded"] * 3
    for key, _ in fresh:
        assert shown[key]["status"] == "waiting" and shown[key]["attempts"] == 0, shown[key]
    assert "0.300000" in result.stderr, result.stderr


@pytest.mark.parametrize("command", ["resume", "worker"])
def test_requests_to_adopt_are_counted_before_a_new_call(afc, fake, ledger_url, command):
    afc.env["AFC_LEDGER"] = ledger_url
    kill_while_rendering(afc, ledger_url)
    run_beside_new_jobs(afc, fake, command)


@pytest.mark.parametrize("command", ["resume", "worker"])
def test_a_new_job_of_the_same_output_key_does_not_wait_for_the_request_for_ever(
    afc, fake, ledger_url, command
):
    """A new job of another batch of the storage with the request's output key (a template
    without {batch}), listed first, holds the key (``run_job``); refused by the budget, it
    waited for the request's job to take its request over, and that job waited for the key:
    the run hung for ever (found by outside audit 51d)."""
    afc.env["AFC_LEDGER"] = ledger_url
    shared = fal_manifest([("k0", "hold 0")])
    shared["defaults"]["output"] = "{key}.{ext}"
    afc.write_manifest(shared)
    proc = afc.popen("submit", "manifest.yaml")
    sql = "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL"
    deadline = time.time() + 60
    while ledger_count(afc, ledger_url, sql) < 1 and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    fresh = {**fal_manifest([("k0", "plain 0")]), "batch": "a1"}
    fresh["defaults"]["output"] = "{key}.{ext}"
    afc.write_manifest(fresh, "fresh.yaml")
    admitted = afc("submit", "fresh.yaml", "--no-run")
    assert admitted.returncode == 0, admitted.stderr
    fake.released.set()

    args = ["--max-spend", "0.15", "--concurrency", "6"]
    if command == "resume":
        result = afc("resume", *args, timeout=90)
    else:
        result = afc("worker", "--until-idle", *args, timeout=90)
    assert fake.counts["fal_submit"] == 1, result.stderr
    shown = {job["batch"]: job for job in afc.json("status", "--all")["jobs"]}
    assert shown["b1"]["status"] == "succeeded", result.stderr
    # it paid for nothing: it waits on the budget, or found the key stored (worker: it came
    # to the key after the request's job)
    assert shown["a1"]["attempts"] == 0, shown["a1"]
