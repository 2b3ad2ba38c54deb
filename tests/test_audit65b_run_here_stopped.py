"""Outside audit 65b: a submit stopped by Ctrl-C or SIGTERM counted every job it had not come
to yet as 'run here'.

A submit starts a task for every job of the batch, each waiting for a ``--concurrency`` slot;
a stop cancels those still waiting. They were counted as run here all the same: 20 jobs at
``--concurrency 4`` against the fake OpenAI over HTTP, SIGTERM during the first four calls,
said '20 run here; of 20 job(s): 16 queued, 4 succeeded' beside 'interrupted: 4 job(s) finished
in this run, 16 left to do'. Beside an overlapping submit, the jobs that other process was
rendering were counted as this one's too ('20 run here' of a run that had rendered 8, the
other 4 of them at that moment). Now a job whose task the stop cancelled before it claimed the
job is not counted: '4 run here'."""

from __future__ import annotations

import signal

from conftest import manifest, wait_for


def test_jobs_a_stop_left_before_their_claim_are_not_run_here(afc, fake):
    data = manifest([{"key": f"shot-{i:02d}", "prompt": f"slow-1s shot {i}"} for i in range(20)])
    data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1", "attempts": 2}]
    data["rates"] = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.05"}]
    afc.write_manifest(data)
    run = afc.popen("submit", "manifest.yaml", "--concurrency", "4")
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 4)
        run.send_signal(signal.SIGTERM)
        code = run.wait(timeout=60)
        err = run.stderr.read()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert code == 130, err
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [
        ("queued", 16),
        ("succeeded", 4),
    ]
    assert "4 run here; of 20 job(s): 16 queued, 4 succeeded" in err, err
