"""Outside audit 24d (money windows): the rare paths where a retry might pay again for an
output already rendered, through the real ``afc`` command (S3 through moto's server over
HTTP, tests/s3fake.py; the local provider's calls counted in a log)."""

from __future__ import annotations

import hashlib

from conftest import manifest
from s3fake import Fault


def _fresh_ledger(afc) -> None:
    for suffix in ("", "-wal", "-shm"):
        (afc.cwd / f"afc.db{suffix}").unlink(missing_ok=True)


def _calls(path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_spooled_render_outlives_its_ledger_and_is_stored_not_paid_again(afc, s3):  # noqa: F811
    """Found by outside audit 24d: a render paid for and spooled, its store refused (the S3
    credentials lack PutObject: the job waits at its store step, its render in the spool),
    then the ledger deleted (to start afresh) or made anew: the next submit of the same
    manifest paid for the render again (a job the ledger had no attempt of never looked in
    the spool) and overwrote the paid file with the new one. It now stores the spooled
    render, counted as a render avoided at its cost, and pays nothing; a render of another
    request (the prompt changed along with the new ledger) is never taken for it."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}, {"key": "b", "prompt": "q"}]))
    s3.plan.add(Fault("PUT", r"/films/b1/", "403", -1))
    calls = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(calls)}
    first = afc("submit", "manifest.yaml", "--storage", s3.url, env=env)
    assert first.returncode == 1, first.stderr
    assert "AccessDenied" in first.stderr and "never the render" in first.stderr, first.stderr
    assert afc.rows("SELECT key, status, step FROM jobs ORDER BY key") == [
        ("a", "waiting", "store"),
        ("b", "waiting", "store"),
    ]
    assert _calls(calls) == 2
    spooled = {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in (afc.cwd / "afc.db-spool").glob("*.spool")
    }
    assert len(spooled) == 2
    s3.plan.clear()
    _fresh_ledger(afc)
    # b's request changed with the new ledger: its spooled render is another request's
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}, {"key": "b", "prompt": "q2"}]))
    second = afc("submit", "manifest.yaml", "--storage", s3.url, env=env)
    assert second.returncode == 0, second.stderr
    assert _calls(calls) == 3, "the spooled render of an unchanged request was paid for again"
    stored = s3.client.get_object(Bucket=s3.bucket, Key="films/b1/a.png")
    body = stored["Body"].read()
    [a_file] = [name for name in spooled if name.startswith(afc.json("show", "a")["job"]["id"])]
    assert hashlib.sha256(body).hexdigest() == spooled[a_file]
    assert stored["Metadata"]["afc-provider"] == "local", stored["Metadata"]
    b_body = s3.client.get_object(Bucket=s3.bucket, Key="films/b1/b.png")["Body"].read()
    assert hashlib.sha256(b_body).hexdigest() not in spooled.values(), "another request's render"
    total = afc.json("costs", "report")["total"]
    assert total["avoided_renders"] == 1 and total["avoided_cost"] == "0.050000", total
    assert not list((afc.cwd / "afc.db-spool").iterdir()), "files left in the spool"


def test_a_copy_killed_before_it_marked_its_source_never_leaves_both_ledgers_running(afc):
    """Found by outside audit 24d: 'afc ledger copy' commits the destination, then marks the
    source moved. Killed in between (SIGKILL, a power cut), it left a whole copy that ran and
    a source, unmarked, that ran too (its cron line, its workers): every unfinished job paid
    for in both, and a copy again was refused ('already holds batches'). The copy now runs
    nothing until its source is marked moved; the source runs on; a copy again copies the
    source anew (what it did since included) and moves it, and one killed after the mark is
    finished by a copy again."""
    import signal

    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}, {"key": "b", "prompt": "q"}]))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    back = afc.cwd / "back.db"
    died = afc("ledger", "copy", "afc.db", str(back), env={"AFC_CRASH_POINT": "copy_committed"})
    assert died.returncode == -signal.SIGKILL, died.stderr
    calls = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(calls), "AFC_LEDGER": str(back)}
    refused = afc("resume", env=env)
    assert refused.returncode == 2, refused.stderr
    assert "did not finish" in refused.stderr and "ledger copy" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    assert afc("submit", "manifest.yaml", "--no-run", env=env).returncode == 2
    assert _calls(calls) == 0
    status = afc("status", env=env)
    assert status.returncode == 0 and "did not finish" in status.stderr, status.stderr
    # the source was not marked: it runs its jobs (once), as a cron line would
    ran = afc("resume", env={"AFC_LOCAL_CALL_LOG": str(calls)})
    assert ran.returncode == 0, ran.stderr
    assert _calls(calls) == 2
    # a copy again copies the source as it is now and moves it
    again = afc("ledger", "copy", "afc.db", str(back))
    assert again.returncode == 0, again.stderr
    replay = afc("submit", "manifest.yaml", env=env)
    assert replay.returncode == 0, replay.stderr
    assert _calls(calls) == 2, "a job paid for again on the copy"
    assert afc("resume").returncode == 2  # the source is moved

    # killed after the mark, before the copy was opened: a copy again finishes it
    other = afc.cwd / "other.db"
    died = afc("ledger", "copy", str(back), str(other), env={"AFC_CRASH_POINT": "copy_marked"})
    assert died.returncode == -signal.SIGKILL, died.stderr
    assert afc("resume", env={"AFC_LEDGER": str(other)}).returncode == 2
    finished = afc("ledger", "copy", str(back), str(other), "--json")
    assert finished.returncode == 0, finished.stderr
    result = __import__("json").loads(finished.stdout)
    assert result["source_moved"] and result["rows"]["jobs"] == 2, result
    assert afc("resume", env={"AFC_LEDGER": str(other)}).returncode == 0
    assert afc("resume", env={"AFC_LEDGER": str(back)}).returncode == 2


def test_a_copy_into_postgresql_killed_before_the_mark_runs_nothing_until_copied_again(afc, pg_url):
    """The same on a PostgreSQL destination: refused while unfinished, copied anew (its rows
    deleted first) by the same copy again, then a replay there renders nothing."""
    import signal

    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}, {"key": "b", "prompt": "q"}]))
    calls = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(calls)}
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    died = afc("ledger", "copy", "afc.db", pg_url, env={"AFC_CRASH_POINT": "copy_committed"})
    assert died.returncode == -signal.SIGKILL, died.stderr
    refused = afc("resume", env={**env, "AFC_LEDGER": pg_url})
    assert refused.returncode == 2 and "did not finish" in refused.stderr, refused.stderr
    assert afc("resume", env=env).returncode == 0  # the source runs on
    again = afc("ledger", "copy", "afc.db", pg_url)
    assert again.returncode == 0, again.stderr
    replay = afc("submit", "manifest.yaml", env={**env, "AFC_LEDGER": pg_url})
    assert replay.returncode == 0, replay.stderr
    assert _calls(calls) == 2, "a job paid for in both ledgers"


def test_a_retried_late_result_dead_lettered_at_its_probe_stays_with_its_spools_host(
    afc,
    pg_url,
    s3,  # noqa: F811
):
    """Found by outside audit 24d: a job cancelled while it rendered keeps its late, paid
    result in its host's spool when the storage refuses it; 'afc retry' puts it back at the
    probe, and a probe whose storage kept failing dead-letters it STORE_FAILED there ('Fix
    the storage, then afc retry (it stores the spooled output; no render)'). That retry,
    run from another host, queued it for any worker: one on a host without the spool file
    found nothing stored and paid for the render again. It now stays leased to the host
    whose spool holds the render for a lease, as a job dead-lettered STORE_FAILED at its
    store step does, and a run there stores the render without paying again."""
    import time

    from test_postgres_e2e import PgAfc

    pg = PgAfc(afc.cwd, pg_url)
    pg.env = {**afc.env, "AFC_LEDGER": pg_url}  # the S3 fixture's endpoint and keys
    log, release = pg.cwd / "calls.log", pg.cwd / "release"
    here = {"AFC_HOST_ID": "host-a", "AFC_LOCAL_CALL_LOG": str(log)}
    there = {**here, "AFC_HOST_ID": "host-b", "AFC_SPOOL_DIR": str(pg.cwd / "spool-b")}
    pg.write_manifest(manifest([{"key": "a", "prompt": "p"}], storage=s3.url))
    s3.plan.add(Fault("PUT", r"/films/", "403", -1))
    run = pg.popen("submit", "manifest.yaml", env={**here, "AFC_LOCAL_RELEASE": str(release)})
    try:
        deadline = time.time() + 30
        while _calls(log) < 1:
            assert time.time() < deadline and run.poll() is None, run.stderr.read()
            time.sleep(0.05)
        cancelled = pg("cancel", "a", env=here)
        assert cancelled.returncode == 0, cancelled.stderr
        release.touch()
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert pg.rows("SELECT status FROM jobs") == [("cancelled",)]
    [spooled] = (pg.cwd / "afc-spool").glob("*.spool")  # the late result, kept on host-a
    s3.plan.add(Fault("HEAD", r"/films/", "403", -1))
    assert pg("retry", "a", env=here).returncode == 0
    for _ in range(5):  # the probe's storage keeps failing, run after run
        pg("resume", env=here)
    assert pg.rows("SELECT status, step, error_code FROM jobs") == [
        ("dead", "probe", "STORE_FAILED")
    ]
    s3.plan.clear()
    # the operator, from another machine, retries it; a worker there meets it first
    assert pg("retry", "a", env=there).returncode == 0
    pg("resume", env=there)
    assert _calls(log) == 1, "the late result was paid for again on a host without it"
    done = pg("resume", env=here)
    assert done.returncode == 0, done.stderr
    assert pg.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert _calls(log) == 1
    assert not spooled.exists()
