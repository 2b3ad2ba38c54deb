"""Two jobs of one output key in one storage (batches whose output template leaves out
{batch}) run by two processes at once: the first to start an attempt holds the key, the other
waits, then looks in storage before its request leaves (``Ledger._check_output``,
``pipeline._stored_meanwhile``). Before, both probes found the key free and both renders were
paid, the second thrown away at its store (OUTPUT_KEY_CONFLICT). One process already ran such
jobs one after the other (tests/test_audit19d_joblists.py)."""

from __future__ import annotations

import signal
import sqlite3

import pytest
from conftest import frozen_at, jobs, ledger_count, manifest, wait_for_ledger

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger, OutputBusy
from afc_cli.manifest import load_manifest

GHOST = "another-host:4242:1"


def _shared(afc, batch: str, n: int = 3, **params) -> dict:
    data = manifest(jobs(n, **params), batch=batch)
    data["defaults"]["output"] = "{key}.{ext}"
    return data


@pytest.fixture
def two_films(afc, ledger_url):
    """Batches v1 and v2 admitted into one storage with the keys shot-001..003 each, and v3
    into another storage with the same keys."""
    ledger = Ledger(ledger_url)
    films = {}
    for batch, storage in (
        ("v1", "file:///tmp/x"),
        ("v2", "file:///tmp/x"),
        ("v3", "file:///tmp/y"),
    ):
        m = load_manifest(afc.write_manifest(_shared(afc, batch), name=f"{batch}.yaml"))
        ledger.admit(m, storage, RateCards())
        films[batch] = [ledger.job(j.job_id) for j in m.jobs]
    yield ledger, films
    ledger.close()


def _running_elsewhere(ledger, job, expires: str) -> None:
    with ledger.tx():
        ledger.db.execute(
            f"UPDATE jobs SET status = 'running', lease_owner = ?, lease_expires = {expires},"
            " attempts = 1 WHERE id = ?",
            (GHOST, job["id"]),
        )


def _start(ledger, job):
    job = ledger.claim(job["id"], 60)
    return job, ledger.start_attempt(job, 0, "local", "m1", None, durable=False)


def test_an_attempt_waits_while_another_job_renders_its_output_key(two_films):
    ledger, films = two_films
    _running_elsewhere(ledger, films["v1"][0], expires="9e18")  # another host renders it
    job = ledger.claim(films["v2"][0]["id"], 60)
    with pytest.raises(OutputBusy) as busy:
        ledger.start_attempt(job, 0, "local", "m1", None, durable=False)
    assert (busy.value.batch, busy.value.key) == ("v1", "shot-001")
    assert busy.value.retry_after > 0
    # nothing written: no attempt, the job not running
    assert ledger.attempts(job["id"]) == []
    assert ledger.job(job["id"])["attempts"] == 0

    # the same key in another storage is another object: not held
    other, number = _start(ledger, films["v3"][0])
    assert number == 1 and other["output_shared"] is False

    # the other host died: once its lease expired the key is free, and the attempt looks in
    # storage before its request leaves (the dead job may have stored it)
    with ledger.tx():
        ledger.db.execute("UPDATE jobs SET lease_expires = 1 WHERE id = ?", (films["v1"][0]["id"],))
    assert ledger.start_attempt(job, 0, "local", "m1", None, durable=False) == 1
    assert job["output_shared"] is True


def test_an_attempt_after_another_job_stored_its_key_looks_first(two_films):
    ledger, films = two_films
    done = ledger.claim(films["v1"][1]["id"], 60)
    assert ledger.finish(done, "succeeded", step="finish")
    job, number = _start(ledger, films["v2"][1])
    assert number == 1 and job["output_shared"] is True
    # a job of the key that is only queued holds nothing: no look
    job, number = _start(ledger, films["v2"][2])
    assert number == 1 and job["output_shared"] is False


def test_the_holders_lookup_uses_its_partial_index(tmp_path, afc):
    """SQLite uses a partial index only for a query that repeats its WHERE: the lookup must
    not become a scan of every job as a batch grows."""
    m = load_manifest(afc.write_manifest(_shared(afc, "v1")))
    ledger = Ledger(str(tmp_path / "afc.db"))
    ledger.admit(m, "file:///tmp/x", RateCards())
    ledger.close()
    from afc_cli.ledger.core import OUTPUT_HOLDERS_SQL

    conn = sqlite3.connect(tmp_path / "afc.db")
    plan = " ".join(
        row[3]
        for row in conn.execute(
            "EXPLAIN QUERY PLAN SELECT o.key FROM jobs o JOIN batches ob ON ob.name = o.batch"
            f" WHERE o.output_key = 'x' AND o.status IN {OUTPUT_HOLDERS_SQL} AND o.id <> 'y'"
            " AND ob.storage = (SELECT storage FROM batches WHERE name = 'v1')"
        )
    )
    conn.close()
    assert "USING INDEX jobs_output_holders" in plan, plan


def test_on_postgresql_a_key_another_process_is_checking_is_tried_again_not_waited_for(afc, pg_url):
    """The check's advisory lock is tried, never waited for: a group transaction holds one
    for each job starting in it, and two groups waiting for each other's would deadlock."""
    import psycopg

    from afc_cli.ledger.postgres import OUTPUT_LOCK

    ledger = Ledger(pg_url)
    m = load_manifest(afc.write_manifest(_shared(afc, "v1")))
    ledger.admit(m, "file:///tmp/x", RateCards())
    job = ledger.claim(m.jobs[0].job_id, 60)
    with psycopg.connect(pg_url) as other:  # another process, checking shot-001.png now
        other.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (OUTPUT_LOCK, "shot-001.png")
        )
        with pytest.raises(OutputBusy) as busy:
            ledger.start_attempt(job, 0, "local", "m1", None, durable=False)
        assert busy.value.key is None and busy.value.retry_after < 0.5
        assert ledger.attempts(job["id"]) == []
        # another key is not held by it
        second = ledger.claim(m.jobs[1].job_id, 60)
        assert ledger.start_attempt(second, 0, "local", "m1", None, durable=False) == 1
    assert ledger.start_attempt(job, 0, "local", "m1", None, durable=False) == 1
    ledger.close()


# --- through the afc command, two processes at once ---------------------------------------------


def _env(ledger_url: str, calls) -> dict[str, str]:
    env = {"AFC_LOCAL_CALL_LOG": str(calls)}
    if ledger_url.startswith("postgresql"):
        env["AFC_LEDGER"] = ledger_url
    return env


def test_two_processes_running_two_films_of_one_key_pay_for_each_render_once(afc, ledger_url):
    """v1's run is in its provider call (frozen there, as a slow provider would hold it) when
    v2's run starts: v2's job waits, saying for which job, then finds v1's object and pays
    for nothing (OUTPUT_KEY_CONFLICT, an attempt at 0 if it got that far)."""
    calls = afc.cwd / "calls.log"
    env = _env(ledger_url, calls)
    for batch in ("v1", "v2"):
        afc.write_manifest(_shared(afc, batch, n=1), name=f"{batch}.yaml")
    first = afc.popen("submit", "v1.yaml", env={**env, "AFC_STALL_POINT": "after_attempt_row"})
    second = None
    try:
        frozen_at(first)
        second = afc.popen("submit", "v2.yaml", env=env)
        waiting = (
            "output key shot-001.png is being rendered by job 'shot-001' of batch 'v1'"
        ).replace("'", "''")
        wait_for_ledger(
            afc,
            ledger_url,
            f"SELECT COUNT(*) FROM jobs WHERE batch = 'v2' AND waiting_reason = '{waiting}'",
            proc=second,
        )
        first.send_signal(signal.SIGCONT)
        assert first.wait(timeout=60) == 0, first.stderr.read()
        assert second.wait(timeout=60) == 1, second.stderr.read()
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
    assert len(calls.read_text().splitlines()) == 1, "one paid render"
    sql = "SELECT COUNT(*) FROM jobs WHERE batch = 'v2' AND error_code = 'OUTPUT_KEY_CONFLICT'"
    assert ledger_count(afc, ledger_url, sql) == 1
    sql = "SELECT COUNT(*) FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.batch = 'v2'"
    assert ledger_count(afc, ledger_url, sql + " AND a.cost_source IS DISTINCT FROM 'unsent'") == 0


def test_a_key_whose_output_was_removed_since_is_rendered_again(afc):
    """The other job succeeded, and its object was deleted since (to render it anew): the
    look finds nothing and the request goes."""
    calls = afc.cwd / "calls.log"
    env = _env("", calls)
    for batch in ("v1", "v2"):
        afc.write_manifest(_shared(afc, batch, n=1), name=f"{batch}.yaml")
    assert afc("submit", "v1.yaml", env=env).returncode == 0
    for path in afc.outputs().rglob("shot-001*"):
        path.unlink()
    result = afc("submit", "v2.yaml", env=env)
    assert result.returncode == 0, result.stderr
    assert len(calls.read_text().splitlines()) == 2
    assert afc.rows("SELECT batch, status FROM jobs ORDER BY batch") == [
        ("v1", "succeeded"),
        ("v2", "succeeded"),
    ]


def test_a_key_held_by_a_killed_run_on_this_host_is_not_waited_for(afc):
    """The run rendering the key died (SIGKILL): a process on this host knows it is gone and
    does not wait out its lease; the render it may have paid for stays 'unknown' on its job."""
    calls = afc.cwd / "calls.log"
    env = _env("", calls)
    afc.write_manifest(_shared(afc, "v1", n=1, latency_s=60), name="v1.yaml")
    afc.write_manifest(_shared(afc, "v2", n=1), name="v2.yaml")
    first = afc.popen("submit", "v1.yaml", env={**env, "AFC_LEASE_S": "600"})
    try:
        wait_for_ledger(afc, "", "SELECT COUNT(*) FROM attempts")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    result = afc("submit", "v2.yaml", env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert afc.rows("SELECT batch, status FROM jobs ORDER BY batch") == [
        ("v1", "running"),
        ("v2", "succeeded"),
    ]


def test_a_second_manifest_giving_a_batchs_output_key_to_another_job_is_refused(afc):
    """Two jobs of one manifest given one output key are refused; two manifests of one batch
    did it unrefused, and one of the two jobs could only end OUTPUT_KEY_CONFLICT. Now refused
    at admission too (exit 2, naming the file, the job and the field), nothing admitted; the
    job that has the key replays as before."""
    first = manifest([{"key": "a", "prompt": "one", "output": "hero.png"}])
    afc.write_manifest(first, name="one.yaml")
    assert afc("submit", "one.yaml", "--no-run").returncode == 0
    second = manifest(
        [{"key": "c", "prompt": "three"}, {"key": "b", "prompt": "two", "output": "hero.png"}]
    )
    afc.write_manifest(second, name="two.yaml")
    result = afc("submit", "two.yaml", "--no-run")
    assert result.returncode == 2, result.stderr
    assert "two.yaml" in result.stderr and "job 'b': field 'output': output key 'hero.png'" in (
        result.stderr
    ), result.stderr
    assert "is job 'a''s, admitted to batch 'b1' before" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert afc.rows("SELECT key FROM jobs ORDER BY key") == [("a",)]
    second["jobs"][1] = {"key": "a", "prompt": "one", "output": "hero.png"}
    afc.write_manifest(second, name="two.yaml")
    assert afc("submit", "two.yaml", "--no-run").returncode == 0
    assert afc.rows("SELECT key FROM jobs ORDER BY key") == [("a",), ("c",)]
