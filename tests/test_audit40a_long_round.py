"""Outside audit 40a: a worker whose round holds one long render claims, every --poll, the
jobs that became runnable meanwhile into its free slots (``run._fed``'s ``every``).

Its loop asked for more jobs only until a claim found none: from then on the round ran down
what it held, and a worker of --concurrency 4 rendering one long video left three slots idle
for as long as that render took (ten minutes for a video). Jobs submitted meanwhile, and the
shots whose style frame a person approved meanwhile, waited for it: the shots' status said
'its needs have succeeded: ... (or an 'afc worker') runs it' with a worker running and idle.
(A batch admitted after the round began: tests/test_worker_new_batch.py.)"""

from __future__ import annotations

from conftest import ledger_count, manifest, wait_for_ledger

STYLE = {"key": "style", "prompt": "harbour", "review": True}


def test_jobs_that_become_runnable_during_a_long_render_run_beside_it(afc, ledger_url):
    afc.env["AFC_LEDGER"] = ledger_url
    release = afc.cwd / "release"
    for key in ("style", "shot-1", "shot-2", "later"):
        (afc.cwd / f"release.{key}").touch()  # every render returns at once, but the long one
    env = {"AFC_LOCAL_RELEASE": str(release)}
    gated = [STYLE, *({"key": f"shot-{i}", "prompt": f"s{i}", "needs": ["style"]} for i in (1, 2))]
    afc.write_manifest(manifest(gated, batch="shots"), "shots.yaml")
    assert afc("submit", "shots.yaml", env=env).returncode == 0  # the style awaits review
    afc.write_manifest(manifest([{"key": "long", "prompt": "a video"}], batch="films"), "f.yaml")
    assert afc("submit", "f.yaml", "--no-run").returncode == 0
    worker = afc.popen("worker", "--concurrency", "4", "--poll", "0.05", env=env)
    try:
        running = "SELECT COUNT(*) FROM attempts WHERE status = 'started'"
        wait_for_ledger(afc, ledger_url, running, proc=worker)  # the long render is under way
        assert afc("review", "approve", "style").returncode == 0
        films = [{"key": "long", "prompt": "a video"}, {"key": "later", "prompt": "x"}]
        afc.write_manifest(manifest(films, batch="films"), "f.yaml")  # one job more
        assert afc("submit", "f.yaml", "--no-run").returncode == 0
        # each runs while the long render goes on: they waited for its end
        done = (
            "SELECT CASE WHEN COUNT(*) = 3 THEN 1 ELSE 0 END FROM jobs"
            " WHERE status = 'succeeded' AND key IN ('shot-1', 'shot-2', 'later')"
        )
        wait_for_ledger(afc, ledger_url, done, timeout=30, proc=worker)
        long = "SELECT COUNT(*) FROM jobs WHERE key = 'long' AND status = 'running'"
        assert ledger_count(afc, ledger_url, long) == 1
        release.touch()
        worker.terminate()  # SIGTERM: drained
        _, stderr = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, stderr
    assert (
        ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM jobs WHERE status <> 'succeeded'") == 0
    )
    assert "worker claimed 4 jobs" in stderr, stderr
