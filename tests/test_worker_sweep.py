"""A worker restarted after a crash removes the spool files of the successes that crash left
(after the job's final commit, before the file's removal) at its start: it swept only when a
round ran, so on a ledger with nothing to claim the file (a whole copy of an output) stayed
until new work came, possibly for days (``run.sweep_left``)."""

from __future__ import annotations

import signal

from conftest import manifest


def test_a_worker_with_nothing_to_claim_sweeps_what_a_crash_left(afc, ledger_url):
    env = {"AFC_LEDGER": ledger_url} if ledger_url.startswith("postgresql") else {}
    afc.write_manifest(manifest([{"key": "j0", "prompt": "a lighthouse"}]))
    died = afc("submit", "manifest.yaml", env={**env, "AFC_CRASH_POINT": "after_terminal"})
    assert died.returncode == -signal.SIGKILL, died.stderr
    spool = afc.cwd / ("afc-spool" if env else "afc.db-spool")
    assert len(list(spool.glob("*.spool"))) == 1  # the window was hit
    worker = afc("worker", "--until-idle", "--poll", "0.1", env=env, timeout=60)
    assert worker.returncode == 0, worker.stderr
    assert "claimed 0 jobs" in worker.stderr
    assert list(spool.glob("*.spool")) == []
    assert (afc.outputs() / "b1" / "j0.png").exists()
