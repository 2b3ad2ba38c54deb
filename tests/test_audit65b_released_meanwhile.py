"""Outside audit 65b: a submit (or resume) that left jobs to another afc process, which then
stopped while this run went on, ended without them.

Cron starts ``afc submit manifest.yaml`` while the last one still runs: the new run finds the
first jobs held by the old one and leaves them alone ('ended here: left to another afc
process'), then renders the rest. The old run is stopped meanwhile (Ctrl-C or SIGTERM: it
releases its jobs, leaving its Replicate and fal requests for the next run to poll; SIGKILL or
the OOM killer: its leases are a dead process's, taken over at once on this host). The new run,
still at work, never looked at those jobs again: it ended exit 1 with them 'waiting at render:
provider still rendering' (the old run's reason: nobody polled them) or 'the afc process
running it is gone', and they waited for the next cron run: minutes in which a fal output
(kept six minutes) may be deleted and the render paid again. Measured: 4 of 8 jobs left, their
4 paid predictions unpolled until the next run. Now a submit or resume looks once more, at its
end, at the jobs it left to another process, and runs those no live process holds any more:
the requests are polled, never created again."""

from __future__ import annotations

import signal

import pytest
from conftest import manifest, wait_for

MODEL = "black-forest-labs/flux-1.1-pro"


def _held_by(afc, pid: int) -> str:
    return (
        "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL"
        f" AND owner LIKE '%:{pid}:%'"
    )


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGKILL])
def test_a_run_takes_the_jobs_a_stopped_run_left_while_it_went_on(afc, fake, stop):
    data = manifest([{"key": f"shot-{i}", "prompt": f"hold shot {i}"} for i in range(1, 9)])
    data["defaults"]["chain"] = [{"provider": "replicate", "model": MODEL, "attempts": 2}]
    data["rates"] = [{"provider": "replicate", "model": MODEL, "per_image": "0.04"}]
    afc.write_manifest(data)
    old = afc.popen("submit", "manifest.yaml", "--concurrency", "4")
    new = None
    try:
        wait_for(afc, _held_by(afc, old.pid), 4)
        new = afc.popen("submit", "manifest.yaml", "--concurrency", "4")
        # the new run has passed the old one's four jobs and holds the other four's requests
        wait_for(afc, _held_by(afc, new.pid), 4)
        old.send_signal(stop)
        assert old.wait(timeout=60) in (130, -signal.SIGKILL)
        fake.released.set()  # every prediction renders to its end now
        code = new.wait(timeout=60)
        err = new.stderr.read()
    finally:
        fake.released.set()
        for proc in (old, new):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", 8)], err
    assert code == 0, err
    assert fake.counts["replicate_submit"] == 8  # the old run's requests polled, not paid again
    assert afc.rows("SELECT COUNT(*) FROM attempts WHERE cost_micros IS NOT NULL") == [(8,)]
    assert "8 run here" in err, err  # its own four and the four it took over
