"""Audit 19 (c), money: what a budget lets start and what the commands say a job cost, through
the real ``afc`` command (the local provider)."""

from __future__ import annotations

from conftest import manifest


def test_a_budget_below_one_micro_usd_is_not_rounded_up_past_what_was_given(afc):
    """``--max-spend 0.0000005`` was rounded half-up to a cap of 0.000001 USD (the plan said
    "budget 0.000001 USD: the estimate fits"), so a call priced 0.000001 started and the run
    spent more than the cap it was given. A cap finer than a micro-USD is now refused (exit
    2, audit 21a: afc could only hold another cap than the one written): nothing is paid."""
    data = manifest([{"key": "a", "prompt": "p"}])
    data["rates"] = [{"provider": "local", "model": "m1", "per_image": "0.000001"}]
    afc.write_manifest(data)
    plan = afc("plan", "manifest.yaml", "--max-spend", "0.0000005", "--json")
    assert plan.returncode == 2 and "whole number of micro-USD" in plan.stderr, plan.stderr
    result = afc("submit", "manifest.yaml", "--max-spend", "0.0000005", "--json")
    assert result.returncode == 2, result.stderr
    assert not (afc.cwd / "afc.db").exists()


def test_afc_show_of_a_job_whose_call_is_in_flight_says_no_cost_is_known_yet(afc):
    """``afc show`` of a job whose only attempt was a call still in flight said "cost
    unpriced (0 attempts of unknown cost)": unpriced for want of attempts of unknown cost, a
    line that contradicts itself (its ``--json`` has cost null and ``unpriced_attempts`` 0, as
    ``afc status`` does). It says the call is in flight, with no cost known yet."""
    from conftest import wait_for

    release = afc.cwd / "release"
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    proc = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(release)})
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
        shown = afc("show", "a")
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert "cost          unpriced (no cost known yet: its call is in flight)" in lines, lines
        assert "0 attempts" not in shown.stdout
    finally:
        release.touch()
    assert proc.wait(timeout=60) == 0
    lines = afc("show", "a").stdout.splitlines()
    assert "cost          0.050000 USD" in lines, lines


def test_the_status_table_and_the_pictures_say_a_running_jobs_call_is_in_flight(afc):
    """``afc status`` showed a plain ``unpriced`` in the cost column of every job whose first
    call was in flight (as of a model with no rate card), and the contact sheet of ``afc report
    --html`` the same, where ``afc show`` says no cost is known yet; a call whose run is gone
    stays ``unpriced`` (possibly paid)."""
    from conftest import wait_for

    release = afc.cwd / "release"
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    proc = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(release)})
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
        shown = afc("status")
        assert shown.returncode == 0, shown.stderr
        rows = [line.split("\t") for line in shown.stdout.splitlines()]  # a pipe: tabs
        cost = rows[0].index("cost")
        assert [row[cost] for row in rows if row[0] == "a"] == ["unpriced (in flight)"], rows
        report = afc("report", "--html", "report.html")
        assert report.returncode == 0, report.stderr
        assert "unpriced (in flight)" in (afc.cwd / "report.html").read_text()
    finally:
        release.touch()
    assert proc.wait(timeout=60) == 0
    assert "in flight" not in afc("status", "--all").stdout
