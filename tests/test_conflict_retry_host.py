"""A job failed OUTPUT_KEY_CONFLICT at its store step keeps its paid render in the spool of the
host that rendered it; retried once a person removed the other object, it stays with that host
for a lease, so a worker on another host (its own spool, on a shared PostgreSQL ledger) does
not pay for the render again. The same gap outside audit 24d closed for a job dead-lettered
STORE_FAILED at its probe (tests/test_audit24d_money.py), left open by it for this one."""

from __future__ import annotations

import time

from conftest import manifest
from test_postgres_e2e import PgAfc


def _calls(path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_retried_conflict_at_store_stays_with_the_host_that_spooled_its_render(tmp_path, pg_url):
    pg = PgAfc(tmp_path, pg_url)
    log, release = pg.cwd / "calls.log", pg.cwd / "release"
    here = {"AFC_HOST_ID": "host-a", "AFC_LOCAL_CALL_LOG": str(log)}
    there = {**here, "AFC_HOST_ID": "host-b", "AFC_SPOOL_DIR": str(pg.cwd / "spool-b")}
    pg.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    run = pg.popen("submit", "manifest.yaml", env={**here, "AFC_LOCAL_RELEASE": str(release)})
    foreign = pg.cwd / "afc-outputs" / "b1" / "a.png"
    try:
        deadline = time.time() + 30
        while _calls(log) < 1:
            assert time.time() < deadline and run.poll() is None, run.stderr.read()
            time.sleep(0.05)
        # someone else's file lands at the key while the render is paid for
        foreign.parent.mkdir(parents=True, exist_ok=True)
        foreign.write_bytes(b"someone else's picture")
        release.touch()
        assert run.wait(timeout=60) == 1, run.stderr.read()
    finally:
        if run.poll() is None:
            run.kill()
    assert pg.rows("SELECT status, step, error_code FROM jobs") == [
        ("failed", "store", "OUTPUT_KEY_CONFLICT")
    ]
    [spooled] = (pg.cwd / "afc-spool").glob("*.spool")  # the paid render, kept on host-a
    render = spooled.read_bytes()
    foreign.unlink()  # the person removes the other object and retries, from host-b
    assert pg("retry", "a", env=there).returncode == 0
    pg("resume", env=there)  # a worker there meets it first
    assert _calls(log) == 1, "the spooled render was paid for again on a host without it"
    done = pg("resume", env=here)
    assert done.returncode == 0, done.stderr
    assert pg.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert _calls(log) == 1
    assert foreign.read_bytes() == render, "the spooled render is the one stored"
