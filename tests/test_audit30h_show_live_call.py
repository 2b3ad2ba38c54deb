"""Outside audit 30h (a review of audit 30b's 'afc show names an attempt left started on an
ended job unknown'): a person cancels a job while a live run's call of it is in flight. The
run's call goes on (a synchronous provider's cannot be stopped) and that run records its
answer and cost when it comes (README: "A live run's call is left to that run, which records
its answer and cost"). 'afc show' of the job meanwhile called the call 'unknown' and said
'left started: its job ended (cancelled) before afc recorded this call's end; of unknown
outcome and unpriced (the provider may have charged for it)': a call still in flight, whose
outcome and cost its run was about to record, named as one no run would ever settle."""

from __future__ import annotations

import json
import time

from conftest import manifest


def test_show_leaves_a_live_runs_call_of_a_cancelled_job_started(afc):
    log, release = afc.cwd / "calls.log", afc.cwd / "release"
    env = {"AFC_LOCAL_CALL_LOG": str(log), "AFC_LOCAL_RELEASE": str(release)}
    afc.write_manifest(manifest([{"key": "shot-1", "prompt": "a lighthouse"}]))
    run = afc.popen("submit", "manifest.yaml", env=env)
    try:
        deadline = time.time() + 30
        while not (log.exists() and log.read_text().strip()):
            assert time.time() < deadline and run.poll() is None, run.stderr.read()
            time.sleep(0.05)
        assert afc("cancel", "shot-1").returncode == 0
        story = json.loads(afc("show", "shot-1", "--json").stdout)
        [attempt] = story["attempts"]
        # the run holding the call is alive: its call is in flight, not of unknown outcome
        assert (attempt["status"], attempt["error"]) == ("started", None), attempt
        release.touch()
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    story = json.loads(afc("show", "shot-1", "--json").stdout)
    [attempt] = story["attempts"]
    assert attempt["status"] == "succeeded" and attempt["cost"] is not None, attempt
