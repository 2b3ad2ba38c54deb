"""Attempts, error classes, costs, plan and budget, end to end through the ``afc`` command."""

from __future__ import annotations

import csv
import io

import pytest
from conftest import jobs, manifest

FAST = {"base": 0.01, "cap": 0.05}


def chain(*entries):
    return [{"provider": "local", "attempts": 3, "backoff": FAST, **e} for e in entries]


def run_one(afc, params, entries, expect):
    data = manifest([{"key": "j", "prompt": "p", "params": params}])
    data["defaults"]["chain"] = chain(*entries)
    data["rates"] = [
        {"provider": "local", "model": "m1", "per_image": "0.05"},
        {"provider": "local", "model": "m2", "per_image": "0.07"},
    ]
    afc.write_manifest(data)
    result = afc.json("submit", "manifest.yaml", expect=expect)
    story = afc.json("show", "j")
    return result["jobs"][0], story


@pytest.mark.parametrize("cls", ["auth", "invalid", "cancelled"])
def test_stop_chain_classes_fail_after_one_attempt(afc, cls):
    job, story = run_one(afc, {"fail": [cls]}, [{"model": "m1"}, {"model": "m2"}], 1)
    assert job["status"] == "failed" and job["attempts"] == 1
    assert job["error"]["class"] == cls
    assert [a["model"] for a in story["attempts"]] == ["m1"]


@pytest.mark.parametrize("cls", ["rate_limited", "timeout", "unavailable", "server"])
def test_transient_classes_retry_the_same_model(afc, cls):
    job, story = run_one(afc, {"fail": [cls, cls]}, [{"model": "m1"}], 0)
    assert job["status"] == "succeeded" and job["attempts"] == 3
    assert [a["status"] for a in story["attempts"]] == ["failed", "failed", "succeeded"]
    assert all(a["waited_s"] is not None for a in story["attempts"][1:])
    assert job["cost"] == "0.050000" if cls != "timeout" else job["unpriced_attempts"] == 2


def test_exhausted_chain_fails_with_last_real_cause(afc):
    job, _ = run_one(afc, {"fail": ["rate_limited", "server", "unavailable"]}, [{"model": "m1"}], 1)
    assert job["attempts"] == 3
    assert job["error"]["class"] == "unavailable"
    assert "HTTP 503" in job["error"]["message"] and "retries" not in job["error"]["message"]


def test_exhausted_falls_back_when_allowed(afc):
    job, story = run_one(
        afc,
        {"fail": ["server", "server"]},
        [{"model": "m1", "attempts": 2}, {"model": "m2"}],
        0,
    )
    assert job["status"] == "succeeded"
    assert [a["model"] for a in story["attempts"]] == ["m1", "m1", "m2"]
    assert job["cost"] == "0.070000"


def test_fallback_on_filters_reasons(afc):
    job, story = run_one(
        afc,
        {"fail": ["server", "server"]},
        [{"model": "m1", "attempts": 2, "fallback_on": ["refusal"]}, {"model": "m2"}],
        1,
    )
    assert job["status"] == "failed" and job["error"]["class"] == "server"
    assert [a["model"] for a in story["attempts"]] == ["m1", "m1"]


def test_refusal_uses_same_model_then_falls_back(afc):
    job, story = run_one(
        afc,
        {"fail": ["refusal", "refusal"]},
        [{"model": "m1", "attempts": 2, "fallback_on": ["refusal"]}, {"model": "m2"}],
        0,
    )
    assert [(a["model"], a["status"]) for a in story["attempts"]] == [
        ("m1", "failed"),
        ("m1", "failed"),
        ("m2", "succeeded"),
    ]
    assert story["attempts"][1]["waited_s"] is None, "a refusal is retried without backoff"


def test_refusal_without_fallback_fails_as_refusal(afc):
    job, _ = run_one(
        afc, {"fail": ["refusal", "refusal", "refusal"]}, [{"model": "m1"}, {"model": "m2"}], 1
    )
    assert job["error"]["class"] == "refusal" and job["attempts"] == 3


def test_injected_window_expired_never_retries_the_model(afc):
    job, story = run_one(
        afc,
        {"fail": ["window_expired"]},
        [{"model": "m1", "attempts": 5, "fallback_on": ["window_expired"]}, {"model": "m2"}],
        0,
    )
    assert [a["model"] for a in story["attempts"]] == ["m1", "m2"]
    assert story["attempts"][0]["cost"] is None, "the window may have been billed: unpriced"


def test_attempt_window_expires_and_is_unpriced(afc):
    job, story = run_one(afc, {"latency_s": 2.0}, [{"model": "m1", "window_s": 0.2}], 1)
    assert job["attempts"] == 1
    assert job["error"]["class"] == "window_expired"
    first = story["attempts"][0]
    assert first["error_class"] == "window_expired" and first["cost"] is None
    assert first["duration_s"] < 1.5


def test_retry_after_is_honoured_up_to_the_cap(afc):
    _, story = run_one(afc, {"fail": ["rate_limited"], "retry_after_s": 0.3}, [{"model": "m1"}], 0)
    assert story["attempts"][1]["waited_s"] == pytest.approx(0.05)  # capped at 0.05
    other = afc.cwd / "other"
    other.mkdir()
    afc.cwd = other
    _, story = run_one(
        afc,
        {"fail": ["rate_limited"], "retry_after_s": 0.3},
        [{"model": "m1", "backoff": {"base": 0.01, "cap": 5}}],
        0,
    )
    assert story["attempts"][1]["waited_s"] == pytest.approx(0.3)  # Retry-After, not jitter


def test_costs_report_exact_totals_unpriced_and_avoided(afc):
    data = manifest(
        [
            {"key": "img-1", "prompt": "a"},
            {"key": "img-2", "prompt": "b"},
            {
                "key": "vid",
                "prompt": "c",
                "chain": chain({"model": "video"}),
                "params": {"seconds": 3.2},
            },
            {"key": "free", "prompt": "d", "chain": chain({"model": "no-card"})},
        ]
    )
    data["defaults"]["chain"] = chain({"model": "m1"})
    data["rates"] = [
        {"provider": "local", "model": "m1", "per_image": "0.05"},
        {"provider": "local", "model": "video", "per_second": "0.0012"},
    ]
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    report = afc.json("costs", "report")
    total = report["total"]
    assert total["priced"] == "0.103840"
    assert total["unpriced_attempts"] == 1
    assert total["avoided_renders"] == 0
    by_model = {r["model"]: r for r in afc.json("costs", "report", "--by", "model")["rows"]}
    assert by_model["local/no-card"]["priced"] == "0.000000"
    assert by_model["local/no-card"]["unpriced_attempts"] == 1
    assert by_model["local/video"]["priced"] == "0.003840"
    table = afc("costs", "report")
    assert "1 attempt is unpriced: real spend is higher than shown" in table.stderr
    rows = list(csv.DictReader(io.StringIO(afc("costs", "report", "--csv").stdout)))
    assert rows[-1]["provider"] == "total" and rows[-1]["unpriced_attempts"] == "1"
    assert rows[-1]["priced"] == "0.103840"
    both = afc("costs", "report", "--csv", "--json")  # JSON silently won (an audit)
    assert both.returncode == 2 and "choose one" in both.stderr and both.stdout == ""

    # a replay renders nothing and counts four avoided renders, priced where known
    assert afc("submit", "manifest.yaml").returncode == 0
    total = afc.json("costs", "report")["total"]
    assert total["priced"] == "0.103840"
    assert total["avoided_renders"] == 4
    assert total["avoided_cost"] == "0.103840"
    assert total["avoided_unpriced"] == 1
    assert afc.json("costs", "report", "--since", "2999-01-01")["rows"] == []
    by_day = afc.json("costs", "report", "--by", "day")["rows"]
    assert len(by_day) == 1 and by_day[0]["priced"] == "0.103840"
    assert afc("costs", "report", "--by", "colour").returncode == 2


def test_plan_writes_nothing_and_matches_the_real_spend(afc):
    data = manifest(jobs(6))
    data["jobs"].append({"key": "odd", "prompt": "x", "chain": chain({"model": "no-card"})})
    afc.write_manifest(data)
    planned = afc.json("plan", "manifest.yaml")
    assert not (afc.cwd / "afc.db").exists() and not afc.outputs().exists()
    assert planned["new"] == 7 and planned["to_render"] == 7
    assert planned["estimated_spend"] == "0.300000"
    assert planned["unpriced_models"] == ["local/no-card"]
    dry = afc.json("submit", "manifest.yaml", "--dry-run")
    assert dry["estimated_spend"] == planned["estimated_spend"]
    assert not (afc.cwd / "afc.db").exists()

    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc.json("costs", "report")["total"]["priced"] == planned["estimated_spend"]
    again = afc.json("plan", "manifest.yaml")
    assert again["replayed"] == 7 and again["to_render"] == 0
    # a changed job is a conflict; a fresh ledger finds the outputs already stored
    data["jobs"][0]["prompt"] = "changed"
    afc.write_manifest(data)
    assert afc.json("plan", "manifest.yaml")["conflicting"] == 1
    fresh = afc.json("plan", "manifest.yaml", "--ledger", "other.db")
    assert fresh["stored"] == 6 and fresh["conflicting"] == 1 and fresh["to_render"] == 0
    assert not (afc.cwd / "other.db").exists()


def test_budget_holds_under_concurrency_and_the_rest_resumes(afc):
    afc.write_manifest(manifest(jobs(20, latency_s=0.2)))
    result = afc.json(
        "submit", "manifest.yaml", "--concurrency", "16", "--max-spend", "0.25", expect=4
    )
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(5,)], "exactly 5 paid attempts"
    assert result["stopped_by_budget"] is True and result["spent"] == "0.250000"
    statuses = {j["status"] for j in result["jobs"]}
    assert statuses <= {"succeeded", "waiting", "queued"}
    waiting = [j for j in result["jobs"] if j["status"] == "waiting"]
    assert waiting and all("budget" in j["waiting"] for j in waiting)
    assert sum(j["status"] == "succeeded" for j in result["jobs"]) == 5
    resumed = afc.json("resume", "--concurrency", "16")
    assert resumed["counts"] == {"succeeded": 15}
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(20,)]


def test_manifest_budget_and_unpriced_models(afc):
    data = manifest(jobs(4), budget="0.10")
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 4
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(2,)]
    unpriced = manifest(jobs(2), batch="b2")
    unpriced["rates"] = []
    afc.write_manifest(unpriced, "u.yaml")
    refused = afc("submit", "u.yaml", "--max-spend", "1")
    assert refused.returncode == 2 and "local/m1" in refused.stderr
    assert afc.rows("SELECT COUNT(*) FROM jobs WHERE batch = 'b2'") == [(0,)]
    allowed = afc("submit", "u.yaml", "--max-spend", "1", "--allow-unpriced")
    assert allowed.returncode == 0, allowed.stderr
    assert afc("submit", "u.yaml", "--max-spend", "lots").returncode == 2


def test_rate_cards_from_the_config_file(afc):
    (afc.cwd / "afc.yaml").write_text(
        'rates:\n  - {provider: local, model: m1, per_image: "0.02"}\n'
        '  - {provider: local, model: m9, per_image: "0.09"}\n'
    )
    data = manifest(jobs(1))
    data["rates"] = []
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", env={"AFC_CONFIG": str(afc.cwd / "afc.yaml")})
    assert result.returncode == 0
    assert afc.json("status")["jobs"][0]["cost"] == "0.020000"
    # the manifest's own card wins over the config file's
    data = manifest(jobs(1), batch="b2")
    afc.write_manifest(data, "m2.yaml")
    assert afc("submit", "m2.yaml", env={"AFC_CONFIG": str(afc.cwd / "afc.yaml")}).returncode == 0
    assert afc.json("status", "--batch", "b2")["jobs"][0]["cost"] == "0.050000"
    (afc.cwd / "bad.yaml").write_text("rates:\n  - {provider: local, model: m1, per_image: x}\n")
    bad = afc("submit", "m2.yaml", env={"AFC_CONFIG": str(afc.cwd / "bad.yaml")})
    assert bad.returncode == 2 and "bad.yaml" in bad.stderr


def test_the_config_files_rate_cards_are_checked_as_the_manifests_and_named_so(afc):
    """An outside audit: two cards for one model in the AFC_CONFIG file were accepted and the
    last silently won (the same in a manifest is refused), and the file's errors said
    "invalid manifest nope.yaml". It is refused by the manifest's rules, as the AFC_CONFIG
    rate file, by every command that reads it, before anything is written."""
    (afc.cwd / "afc.yaml").write_text(
        'rates:\n  - {provider: local, model: m1, per_image: "0.02"}\n'
        '  - {provider: local, model: m1, per_image: "0.20"}\n'
        "  - {provider: local, model: m2}\n"
    )
    data = manifest(jobs(1))
    data["rates"] = []
    afc.write_manifest(data)
    env = {"AFC_CONFIG": str(afc.cwd / "afc.yaml")}
    for args in (("submit",), ("plan",), ("submit", "--dry-run")):
        refused = afc(*args, "manifest.yaml", env=env)
        assert refused.returncode == 2, (args, refused.stderr)
        assert f"invalid AFC_CONFIG rate file {afc.cwd / 'afc.yaml'}:" in refused.stderr
        assert "field 'rates[1]': a second rate card for local/m1" in refused.stderr
        assert "field 'rates[2]': names no price" in refused.stderr
        assert "manifest" not in refused.stderr
    assert not (afc.cwd / "afc.db").exists()
    missing = afc("plan", "manifest.yaml", env={"AFC_CONFIG": "nope.yaml"})
    assert missing.returncode == 2
    assert "invalid AFC_CONFIG rate file nope.yaml:\n  - file not found" in missing.stderr


def test_a_backoff_wait_gives_its_slot_to_other_jobs(afc):
    data = manifest(
        [
            {
                "key": "slow",
                "prompt": "a",
                "params": {"fail": ["rate_limited"], "retry_after_s": 1.0},
            },
            {"key": "quick-1", "prompt": "b"},
            {"key": "quick-2", "prompt": "c"},
        ]
    )
    data["defaults"]["chain"] = chain({"model": "m1", "backoff": {"base": 0.01, "cap": 2}})
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--concurrency", "1").returncode == 0
    started = dict(
        afc.rows(
            "SELECT j.key || '#' || a.number, a.started_at FROM attempts a"
            " JOIN jobs j ON j.id = a.job_id"
        )
    )
    # with one slot, both quick jobs ran while the slow one waited out its Retry-After
    assert started["quick-1#1"] < started["slow#2"]
    assert started["quick-2#1"] < started["slow#2"]
    assert started["slow#2"] - started["slow#1"] >= 1.0


def test_a_call_in_flight_is_not_shown_unpriced(afc):
    """afc status counted an attempt still in flight as unpriced while afc costs report did
    not (an outside audit): a call in flight has no cost yet, known or unknown."""
    from conftest import wait_for

    release = afc.cwd / "release"
    afc.write_manifest(manifest(jobs(1)))
    proc = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(release)})
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
        [job] = afc.json("status", "--all")["jobs"]
        assert job["status"] == "running" and job["unpriced_attempts"] == 0, job
        assert afc.json("costs", "report")["total"]["unpriced_attempts"] == 0
        # nor is its cost 0: it is not known yet (the job has an attempt; status and the
        # pictures priced it as a job with none, "0.000000", while afc show said null)
        assert job["cost"] is None and afc.json("show", "shot-001")["job"]["cost"] is None
        from afc_cli.web.sheet import sheet

        [card] = sheet(str(afc.cwd / "afc.db"), batch=None, since=None)["jobs"]
        assert card["cost"] is None, card
    finally:
        release.touch()
    assert proc.wait(timeout=60) == 0


def test_one_unpriced_attempt_reads_as_one_and_a_failed_job_shows_no_output(afc):
    """Outside audit: "1 attempts of unknown cost", "1 attempts unpriced", and `afc show`
    gave a failed job's output as a file:// URL where nothing is stored."""
    job, _ = run_one(afc, {"fail": ["window_expired"]}, [{"model": "m1", "attempts": 1}], 1)
    assert job["status"] == "failed" and job["cost"] is None
    shown = afc("show", "j")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "output        none stored (key b1/j.png)" in lines, shown.stdout
    assert "file://" not in shown.stdout
    assert "cost          unpriced (1 attempt of unknown cost)" in lines, shown.stdout
    (afc.cwd / "x").mkdir()
    afc.cwd = afc.cwd / "x"
    afc.write_manifest(manifest([{"key": "j", "prompt": "p", "params": {"fail": ["timeout"]}}]))
    summary = afc("submit", "manifest.yaml").stderr
    assert "+ 1 attempt of unknown cost\n" in summary, summary
    report = afc("costs", "report")
    assert "1 attempt is unpriced: real spend" in report.stderr, report.stderr
