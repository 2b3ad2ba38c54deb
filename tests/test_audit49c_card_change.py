"""Outside audit 49c: what an attempt is priced at, and what a budget counts for it, when a
batch's rate card changes, through the real ``afc`` command on SQLite and PostgreSQL."""

from __future__ import annotations

import signal
import time

import pytest
from conftest import ledger_count, manifest

MODEL = "fal-ai/flux/dev"


def fal_manifest(jobs: list[tuple[str, str]], per_image: str) -> dict:
    data = manifest(
        [{"key": key, "prompt": prompt} for key, prompt in jobs],
        rates=[{"provider": "fal", "model": MODEL, "per_image": per_image}],
    )
    data["defaults"]["chain"] = [{"provider": "fal", "model": MODEL}]
    return data


@pytest.mark.parametrize("command", ["resume", "worker"])
def test_requests_adopted_under_a_corrected_card_are_reserved_at_it(afc, fake, ledger_url, command):
    """A run killed while fal rendered three requests, under a card of 0.025 an image; the
    studio then corrected the card to 0.25 (and added a job) before ``afc resume --max-spend
    0.35``. The resume prices the three adopted answers by the card as it is now (0.75), but
    counted them at the reservations of the run that sent them (0.075), so it started the new
    job's call beside them (0.075 + 0.25 fits 0.35): 1.00 USD spent, four calls paid, where
    the same requests sent under a 0.25 card left the new job waiting on the budget. So did
    an ``afc worker --until-idle --max-spend 0.35`` that took the requests over."""
    afc.env["AFC_LEDGER"] = ledger_url
    held = [(f"j{i}", f"hold {i}") for i in range(3)]
    afc.write_manifest(fal_manifest(held, "0.025"))
    proc = afc.popen("submit", "manifest.yaml")
    sql = "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL"
    deadline = time.time() + 60
    while ledger_count(afc, ledger_url, sql) < 3 and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    afc.write_manifest(fal_manifest([*held, ("j3", "plain 3")], "0.25"))
    admitted = afc("submit", "manifest.yaml", "--no-run")
    assert admitted.returncode == 0, admitted.stderr
    fake.released.set()

    if command == "resume":
        result = afc("resume", "--max-spend", "0.35", "--concurrency", "4")
        said = ["this run spent 0.750000 USD (priced)", "0.750000 USD of it was requests an"]
    else:
        result = afc("worker", "--until-idle", "--max-spend", "0.35", "--concurrency", "4")
        said = ["spent 0.750000 USD (priced); budget 'workers': 0.750000 of 0.350000"]
    assert fake.counts["fal_submit"] == 3, "no new call started beside the adopted ones"
    for line in said:
        assert line in result.stderr, result.stderr
    shown = {job["key"]: job for job in afc.json("status", "--all")["jobs"]}
    assert [shown[f"j{i}"]["cost"] for i in range(3)] == ["0.250000"] * 3
    assert shown["j3"]["status"] == "waiting" and shown["j3"]["attempts"] == 0
