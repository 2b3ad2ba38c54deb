"""Outside audit 45c (interruptions as a person meets them): cron, or a second terminal,
starting a run while the first still polls a Replicate or fal request. The second run leaves
the job alone (the first holds its lease) and exits 1, as README says of an overlapping run,
but a job waiting on its provider kept the first run's own words: 'b1/a: waiting at render:
provider still rendering: replicate request ...', '0 run here', and nothing said that another
afc process has it, while a running job is said 'being run by another afc process (pid ...)'.
Under a budget, the warning that the budget does not cap the other process's calls was
missing for such a job too. The job's last recorded reason is kept after the holder."""

from __future__ import annotations

import signal

from conftest import manifest, wait_for

CHAIN = [
    {
        "provider": "replicate",
        "model": "black-forest-labs/flux-1.1-pro",
        "attempts": 2,
        "backoff": {"base": 0.01, "cap": 0.05},
    }
]
RATES = [{"provider": "replicate", "model": "black-forest-labs/flux-1.1-pro", "per_image": "0.04"}]


def test_a_run_beside_one_that_polls_the_job_says_another_process_has_it(afc, fake):
    data = manifest([{"key": "a", "prompt": "hold a lighthouse"}], rates=RATES, budget="0.50")
    data["defaults"]["chain"] = CHAIN
    afc.write_manifest(data)
    first = afc.popen("submit", "manifest.yaml")
    try:
        # the first run has its prediction's id and polls it (the fake holds it rendering)
        wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE status = 'waiting'", 1, timeout=60)
        second = afc("resume")
        assert second.returncode == 1, second.stderr
        assert "being run by another afc process (pid " in second.stderr, second.stderr
        assert f"pid {first.pid} on " in second.stderr, second.stderr
        # the job's own last word is still there
        assert "provider still rendering: replicate request" in second.stderr, second.stderr
        again = afc("submit", "manifest.yaml")
        assert again.returncode == 1, again.stderr
        assert "being run by another afc process" in again.stderr, again.stderr
        assert "1 job of batch b1 is run by another afc process" in again.stderr, again.stderr
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == 130, first.stderr.read()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    # one prediction made, none by the runs beside the first
    assert sum(1 for _, p, _, billed in fake.log if billed and p == "replicate") == 1
    fake.released.set()
    done = afc("resume")
    assert done.returncode == 0, done.stderr
    assert sum(1 for _, p, _, billed in fake.log if billed and p == "replicate") == 1
