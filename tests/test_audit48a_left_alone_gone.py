"""Outside audit 48a (two operators, one ledger): a submit, and a plan, made beside another
run of the batch, through real ``afc`` child processes."""

from __future__ import annotations

import signal

from conftest import manifest, wait_for


def test_a_job_left_to_a_run_killed_since_is_not_said_to_be_running_by_it(afc):
    """Found by outside audit 48a: a submit that left a job alone because another afc
    process held it (the operator's earlier submit), and ended after that process was
    killed, said only 'b1/slow: running at render' and exit 1, as if something still ran
    it, while ``afc status`` said that its process is gone and that the next afc resume
    takes it over. Since outside audit 65b the submit takes it over itself at its end
    (``run._take_released``) and renders it: exit 0, nothing left to a process that is gone."""
    slow = {"key": "slow", "prompt": "a slow shot"}
    fast = {"key": "fast", "prompt": "a quick shot", "params": {"latency_s": 2}}
    afc.write_manifest(manifest([slow]), "first.yaml")
    afc.write_manifest(manifest([slow, fast]), "second.yaml")
    # the first run's call is held until it is killed (its release file never made)
    first = afc.popen("submit", "first.yaml", env={"AFC_LOCAL_RELEASE": str(afc.cwd / "never")})
    second = None
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts", 1)
        second = afc.popen("submit", "second.yaml", "--concurrency", "1")
        # the second run tries 'slow' first (its manifest's order), finds it held and
        # leaves it; then its attempt of 'fast' starts
        wait_for(afc, "SELECT COUNT(*) FROM attempts", 2)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        err = second.communicate(timeout=120)[1]
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
    assert second.returncode == 0, err
    assert not [li for li in err.splitlines() if li.startswith("afc: b1/slow: running")], err
    assert afc.rows("SELECT key, status FROM jobs ORDER BY key") == [
        ("fast", "succeeded"),
        ("slow", "succeeded"),
    ]
    # the killed run's call (its cost unknown, possibly paid) and the one that rendered it
    statuses = afc.rows(
        "SELECT a.status FROM attempts a JOIN jobs j ON j.id = a.job_id"
        " WHERE j.key = 'slow' ORDER BY a.number"
    )
    assert statuses == [("unknown",), ("succeeded",)], statuses


def test_a_plan_beside_a_live_run_leaves_its_jobs_out_of_the_estimate(afc):
    """Found by outside audit 48a: 'afc plan' (and 'afc submit --dry-run') made beside a run
    of the batch (a cron'd resume) counted the jobs that run had in flight as to render and
    priced them, so the plan said the submit would cost 0.10 USD and that '--max-spend 0.05'
    did NOT fit, where the submit leaves those jobs to the run holding them (their calls are
    that run's, under its budget) and renders the one job left for 0.05. The plan names them
    as left to the other process, not rendered or priced."""
    slow = {"key": "slow", "prompt": "a slow shot", "params": {"latency_s": 120}}
    later = {"key": "later", "prompt": "a later shot", "params": {"latency_s": 120}}
    afc.write_manifest(manifest([slow, later]))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    running = afc.popen("resume", "--concurrency", "1")
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts", 1)
        plan = afc.json("plan", "manifest.yaml", "--max-spend", "0.05")
        text = afc("submit", "manifest.yaml", "--dry-run")
    finally:
        running.kill()
        running.wait(timeout=30)
    actions = {job["key"]: job["action"] for job in plan["jobs"]}
    (held,) = [key for key, action in actions.items() if action != "render"]
    assert actions[held].startswith("left alone (being run by another afc process, pid "), actions
    assert f"{running.pid} on " in actions[held]
    assert (plan["to_render"], plan["elsewhere"], plan["replayed"]) == (1, 1, 2)
    assert plan["estimated_spend"] == "0.050000"
    assert plan["fits_budget"] is True
    assert "to render: 1," in text.stdout, text.stdout
    assert "being run by another afc process, left to it (not rendered or priced here): 1" in (
        text.stdout
    )
