"""One spend figure: a run's summary says what ``afc costs report`` calls ``priced``, and the
attempts of unknown cost (with what the budget reserved for them) are shown apart. The same
job's cost is the same number in ``status``, ``show`` and its webhook."""

from __future__ import annotations

import base64
import json

from conftest import manifest
from receiver import Receiver

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()


def timeouts_manifest(receiver_url: str | None = None):
    data = manifest(
        [
            {"key": "ok-1", "prompt": "a"},
            {"key": "ok-2", "prompt": "b"},
            # two timeouts (cost unknown: the provider may have billed), then a success
            {"key": "slow", "prompt": "c", "params": {"fail": ["timeout", "timeout"]}},
        ]
    )
    if receiver_url:
        data["webhook"] = {"url": receiver_url, "secret_env": "AFC_HOOK_SECRET"}
    return data


def test_the_summary_spend_is_the_reports_priced_for_a_run_with_timeouts(afc):
    afc.write_manifest(timeouts_manifest())
    result = afc.json("submit", "manifest.yaml")
    report = afc.json("costs", "report")["total"]
    assert report["priced"] == "0.150000"  # three images at 0.05; the timeouts unpriced
    assert report["unpriced_attempts"] == 2
    assert result["spent"] == report["priced"]
    assert result["unknown_cost_attempts"] == 2
    assert result["reserved"] == "0.100000"  # the estimate held for each timed-out attempt
    # the plain summary says the same, with the unknown apart
    again = afc.cwd / "again"
    again.mkdir()
    afc.cwd = again
    afc.write_manifest(timeouts_manifest())
    plain = afc("submit", "manifest.yaml")
    assert plain.returncode == 0, plain.stderr
    assert "this run spent 0.150000 USD (priced) + 2 attempts of unknown cost\n" in plain.stderr
    # without a budget, reservations mean nothing to a person: the summary says nothing of
    # them (it said "reserved 0.100000"; --json keeps the figure)
    assert "reserved" not in plain.stderr and "budget" not in plain.stderr


def test_a_budget_counts_reservations_but_the_summary_does_not(afc):
    data = timeouts_manifest()
    data["jobs"] = [data["jobs"][2]]
    afc.write_manifest(data)
    result = afc.json("submit", "manifest.yaml", "--max-spend", "0.10", expect=4)
    # two reserved timeouts fill the budget of 0.10: the third attempt is not started
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(2,)]
    assert result["spent"] == "0.000000" == afc.json("costs", "report")["total"]["priced"]
    assert result["unknown_cost_attempts"] == 2 and result["reserved"] == "0.100000"
    assert "spent or reserved 0.100000 of 0.100000 USD" in result["jobs"][0]["waiting"]
    again = afc.cwd / "again"
    again.mkdir()
    afc.cwd = again
    afc.write_manifest(data)
    plain = afc("submit", "manifest.yaml", "--max-spend", "0.10")
    assert plain.returncode == 4, plain.stderr
    assert (
        "this run spent 0.000000 USD (priced) + 2 attempts of unknown cost; the budget counts "
        "0.100000 USD for them" in plain.stderr
    )


def test_a_jobs_cost_is_one_number_everywhere(afc):
    receiver = Receiver().start()
    try:
        afc.env["AFC_HOOK_SECRET"] = SECRET
        afc.write_manifest(timeouts_manifest(receiver.url))
        result = afc.json("submit", "manifest.yaml")
    finally:
        receiver.stop()
    status = {j["key"]: j["cost"] for j in afc.json("status")["jobs"]}
    submitted = {j["key"]: j["cost"] for j in result["jobs"]}
    shown = {key: afc.json("show", key)["job"]["cost"] for key in status}
    hooked = {
        payload["data"]["key"]: payload["data"]["cost"]
        for payload in (json.loads(r.body) for r in receiver.received)
    }
    assert status == submitted == shown == hooked
    assert status == {"ok-1": "0.050000", "ok-2": "0.050000", "slow": "0.050000"}
    by_batch = afc.json("costs", "report", "--by", "batch")["rows"]
    assert by_batch[0]["priced"] == result["spent"] == "0.150000"
