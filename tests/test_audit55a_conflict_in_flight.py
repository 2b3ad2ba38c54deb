"""A prompt edited while a run renders the job, end to end through ``afc`` (an outside audit).
The edit is refused (IDEMPOTENCY_CONFLICT), and the conflict says what becomes of the
admitted request. For a job an afc run was rendering at that moment it said 'the next run
of the batch renders it', in ``afc submit`` and ``afc plan``: the call was in flight then,
and the next run found it done. It now says a run is rendering it."""

from __future__ import annotations

import signal

from conftest import manifest, wait_for


def test_a_conflict_on_a_job_in_flight_says_a_run_is_rendering_it(afc):
    data = manifest([{"key": "a", "prompt": "a cat", "params": {"latency_s": 60}}])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    run = afc.popen("resume")
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
        data["jobs"][0]["prompt"] = "a tabby cat"
        afc.write_manifest(data)
        result = afc("submit", "manifest.yaml", "--no-run")
        plan = afc("plan", "manifest.yaml").stdout
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
    assert result.returncode == 3, result.stderr
    assert "the next run of the batch renders it" not in result.stderr
    assert (
        "Its admitted request has not finished (running): an afc run is rendering it now "
        "(its run gone, the next run of the batch takes it over) unless 'afc cancel a' drops it."
    ) in result.stderr
    assert "its admitted request is running, and a run is rendering it now" in plan, plan
