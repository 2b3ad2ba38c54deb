"""Outside audit 20e: output keys shared across processes (``Ledger._check_output``, the
PostgreSQL advisory lock per key, ``pipeline._start_attempt``'s wait), tried through real
``afc`` processes."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time

import pytest
from conftest import jobs, ledger_count, manifest, wait_for_ledger

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger, OutputBusy
from afc_cli.manifest import load_manifest

GHOST = "another-host:4242:1"


def _shared(batch: str, n: int = 1, **params) -> dict:
    data = manifest(jobs(n, **params), batch=batch)
    data["defaults"]["output"] = "{key}.{ext}"
    return data


def _stop(*procs) -> None:
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait(timeout=30)


# --- PostgreSQL: a job waiting for an output key must not keep the key's advisory lock ---------


def test_on_postgresql_a_refused_attempt_lets_go_of_the_keys_lock(afc, pg_url):
    """Under group commit (a run's loop) a refused attempt wrote nothing, so the shared
    transaction was left open, holding the key's advisory lock until the process's next
    commit: a waiting job's process with nothing else to commit held it between its looks,
    for as long as it waited."""
    import psycopg

    from afc_cli.ledger.postgres import OUTPUT_LOCK

    ledger = Ledger(pg_url)
    films = {}
    for batch in ("v1", "v2"):
        m = load_manifest(afc.write_manifest(_shared(batch), name=f"{batch}.yaml"))
        ledger.admit(m, "file:///tmp/x", RateCards())
        films[batch] = m.jobs[0].job_id
    with ledger.tx():  # another host renders v1's shot-001.png
        ledger.db.execute(
            "UPDATE jobs SET status = 'running', lease_owner = ?, lease_expires = 9e18,"
            " attempts = 1 WHERE id = ?",
            (GHOST, films["v1"]),
        )
    job = ledger.claim(films["v2"], 60)
    loop = asyncio.new_event_loop()
    try:
        with ledger.grouped(loop), psycopg.connect(pg_url, autocommit=True) as other:
            for _ in range(2):  # its first look and the next
                with pytest.raises(OutputBusy) as busy:
                    ledger.start_attempt(job, 0, "local", "m1", None, durable=False)
                assert busy.value.key == "shot-001"
                taken = other.execute(
                    "SELECT pg_try_advisory_lock(%s, hashtext(%s))", (OUTPUT_LOCK, "shot-001.png")
                ).fetchone()[0]
                assert taken, "the waiting job's process holds the output key's lock"
                other.execute(
                    "SELECT pg_advisory_unlock(%s, hashtext(%s))", (OUTPUT_LOCK, "shot-001.png")
                )
    finally:
        loop.close()
        ledger.close()


def test_on_postgresql_the_holders_fallback_is_not_held_up_by_the_waiting_process(afc, pg_url):
    """Through afc: v1's job renders shot-001.png (its first model's call held), v2's job of
    the same key in another process waits for it. v1's first model fails and its chain falls
    back to the next model at once (no backoff, so it still holds the key): that attempt
    took the key's advisory lock, which v2's idle process kept between its looks, so v1 was
    refused every 50 ms until v2's process next committed anything (its lease renewal, a
    third of AFC_LEASE_S): here 200 s."""
    from afc_cli.ledger.postgres import OUTPUT_LOCK

    release = afc.cwd / "release"
    env = {
        "AFC_LEDGER": pg_url,
        "AFC_LOCAL_CALL_LOG": str(afc.cwd / "calls.log"),
        "AFC_LOCAL_RELEASE": str(release),
        "AFC_LEASE_S": "600",
    }
    first = _shared("v1", fail=["server"])
    first["defaults"]["chain"] = [
        {"provider": "local", "model": "m1", "attempts": 1, "fallback_on": ["exhausted"]},
        {"provider": "local", "model": "m2", "attempts": 1},
    ]
    first["rates"].append({"provider": "local", "model": "m2", "per_image": "0.05"})
    afc.write_manifest(first, name="v1.yaml")
    afc.write_manifest(_shared("v2"), name="v2.yaml")
    holder = afc.popen("submit", "v1.yaml", env=env)
    waiter = None
    try:
        wait_for_ledger(afc, pg_url, "SELECT COUNT(*) FROM attempts", proc=holder)
        waiter = afc.popen("submit", "v2.yaml", env=env)
        wait_for_ledger(
            afc,
            pg_url,
            "SELECT COUNT(*) FROM jobs WHERE batch = 'v2' AND waiting_reason LIKE 'output key%'",
            proc=waiter,
        )
        # let the waiting job look again a few times (0.5 s, then 1 s, ...), or see its
        # process sit on the key's lock
        deadline = time.time() + 3
        while time.time() < deadline:
            held = ledger_count(
                afc,
                pg_url,
                "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                f" AND classid::bigint = {OUTPUT_LOCK} AND objsubid = 2",
            )
            if held:
                break
            time.sleep(0.05)
        release.touch()
        assert holder.wait(timeout=30) == 0, holder.stderr.read()
        assert waiter.wait(timeout=30) == 1, waiter.stderr.read()
    finally:
        _stop(holder, waiter)
    # one image paid: v1's second model; v2 found it and paid nothing
    sql = "SELECT COUNT(*) FROM jobs WHERE batch = 'v2' AND error_code = 'OUTPUT_KEY_CONFLICT'"
    assert ledger_count(afc, pg_url, sql) == 1
    sql = (
        "SELECT COUNT(*) FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.batch = 'v2'"
        " AND a.cost_source IS DISTINCT FROM 'unsent'"
    )
    assert ledger_count(afc, pg_url, sql) == 0


# --- a job cancelled while it waits for the key ------------------------------------------------


def test_a_job_cancelled_while_it_waits_for_the_key_ends_its_run(afc, ledger_url):
    """v2's job waits for shot-001.png, which v1's job renders (its call held); `afc cancel`
    of v2's job must end v2's run at its next look, not when v1's render ends (the refusal
    came before the attempt's own check of the job: its run went on waiting, for as long as
    the other job rendered)."""
    release = afc.cwd / "release"
    env = {"AFC_LOCAL_CALL_LOG": str(afc.cwd / "calls.log"), "AFC_LOCAL_RELEASE": str(release)}
    if ledger_url.startswith("postgresql"):
        env["AFC_LEDGER"] = ledger_url
    for batch in ("v1", "v2"):
        afc.write_manifest(_shared(batch), name=f"{batch}.yaml")
    holder = afc.popen("submit", "v1.yaml", env=env)
    waiter = None
    try:
        wait_for_ledger(afc, ledger_url, "SELECT COUNT(*) FROM attempts", proc=holder)
        waiter = afc.popen("submit", "v2.yaml", env=env)
        wait_for_ledger(
            afc,
            ledger_url,
            "SELECT COUNT(*) FROM jobs WHERE batch = 'v2' AND waiting_reason LIKE 'output key%'",
            proc=waiter,
        )
        result = afc("cancel", "shot-001", "--batch", "v2", env=env)
        assert result.returncode == 0, result.stderr
        assert waiter.wait(timeout=30) == 1, "its run ended, the job cancelled"
        assert holder.poll() is None, "v1's render is still held"
        release.touch()
        assert holder.wait(timeout=60) == 0, holder.stderr.read()
    finally:
        _stop(holder, waiter)
    sql = "SELECT COUNT(*) FROM jobs WHERE batch = 'v2' AND status = 'cancelled'"
    assert ledger_count(afc, ledger_url, sql) == 1
    assert ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM attempts") == 1


# --- a stopping run does not count a job waiting for the key as in a call ----------------------


def test_a_stopping_run_cancels_a_wait_for_the_key_as_a_backoffs(afc, ledger_url):
    """SIGTERM while v2's job waits for shot-001.png (v1's job renders it in another process):
    the run said it waited for 1 job in a call and slept out the job's pause between looks
    (up to 7.5 s) before stopping; the job is in no call, and its wait is cut as a backoff's.
    It rests waiting, nothing paid, for the next run."""
    release = afc.cwd / "release"
    env = {"AFC_LOCAL_CALL_LOG": str(afc.cwd / "calls.log"), "AFC_LOCAL_RELEASE": str(release)}
    if ledger_url.startswith("postgresql"):
        env["AFC_LEDGER"] = ledger_url
    for batch in ("v1", "v2"):
        afc.write_manifest(_shared(batch), name=f"{batch}.yaml")
    holder = afc.popen("submit", "v1.yaml", env=env)
    waiter = None
    try:
        wait_for_ledger(afc, ledger_url, "SELECT COUNT(*) FROM attempts", proc=holder)
        waiter = afc.popen("submit", "v2.yaml", env=env)
        wait_for_ledger(
            afc,
            ledger_url,
            "SELECT COUNT(*) FROM jobs WHERE batch = 'v2' AND waiting_reason LIKE 'output key%'",
            proc=waiter,
        )
        waiter.send_signal(signal.SIGTERM)
        assert waiter.wait(timeout=30) == 130
        stderr = waiter.stderr.read()
        assert "waiting up to 30s for 0 job(s) in a call" in stderr, stderr
        assert "Traceback" not in stderr
        release.touch()
        assert holder.wait(timeout=60) == 0, holder.stderr.read()
    finally:
        _stop(holder, waiter)
    sql = "SELECT COUNT(*) FROM jobs WHERE batch = 'v2' AND status = 'waiting'"
    assert ledger_count(afc, ledger_url, sql) == 1
    assert ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM attempts") == 1
    # the next run of v2 finds v1's object and pays for nothing
    result = afc("resume", "--batch", "v2", env=env)
    assert result.returncode == 1, result.stderr
    sql = "SELECT COUNT(*) FROM jobs WHERE batch = 'v2' AND error_code = 'OUTPUT_KEY_CONFLICT'"
    assert ledger_count(afc, ledger_url, sql) == 1
    assert len((afc.cwd / "calls.log").read_text().splitlines()) == 1


# --- afc plan says what the submit refuses: a batch's output key given to another job ----------


def test_plan_refuses_a_second_manifest_giving_a_batchs_output_key_to_another_job(afc, ledger_url):
    """`afc submit` refuses a second manifest of a batch that gives a new job the output key
    an earlier manifest gave another job (exit 2, invalid manifest); `afc plan` and
    `afc submit --dry-run` of it said it would admit 2 new jobs and render 3, exit 0: a script
    that plans first went on to a submit that refused. They refuse it as the submit does."""
    env = {"AFC_LEDGER": ledger_url} if ledger_url.startswith("postgresql") else {}
    afc.write_manifest(manifest([{"key": "a", "prompt": "one", "output": "hero.png"}]), "one.yaml")
    assert afc("submit", "one.yaml", "--no-run", env=env).returncode == 0
    second = manifest(
        [{"key": "c", "prompt": "three"}, {"key": "b", "prompt": "two", "output": "hero.png"}]
    )
    afc.write_manifest(second, name="two.yaml")
    refusal = "job 'b': field 'output': output key 'hero.png' is job 'a''s"
    submitted = afc("submit", "two.yaml", "--no-run", env=env)
    assert submitted.returncode == 2 and refusal in submitted.stderr, submitted.stderr
    for args in (("plan", "two.yaml"), ("submit", "two.yaml", "--dry-run")):
        result = afc(*args, env=env)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert "two.yaml" in result.stderr and refusal in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    # the job that has the key replays: planned as before
    second["jobs"][1] = {"key": "a", "prompt": "one", "output": "hero.png"}
    afc.write_manifest(second, name="two.yaml")
    result = afc("plan", "two.yaml", env=env)
    assert result.returncode == 0, result.stderr
    assert "new 1, replayed 1" in result.stdout, result.stdout


# --- a job whose provider renders its request (Replicate, fal) holds its key -------------------


def test_a_job_whose_prediction_is_rendering_holds_its_output_key(afc, fake, ledger_url):
    """v1's job renders shot-001.png on Replicate: while its prediction renders, polled, the
    job is ``waiting`` ("provider still rendering"), not ``running``, and v2's job of the same
    key in another process was not refused: it paid for its own render and stored it, and
    v1's prediction, paid too, ended OUTPUT_KEY_CONFLICT at its store. Now v2's job waits for
    it, then finds v1's object and pays for nothing."""
    env = {"AFC_LOCAL_CALL_LOG": str(afc.cwd / "calls.log")}
    if ledger_url.startswith("postgresql"):
        env["AFC_LEDGER"] = ledger_url
    first = _shared("v1")
    first["jobs"][0]["prompt"] = "hold render one"
    first["defaults"]["chain"] = [{"provider": "replicate", "model": "owner/model", "attempts": 1}]
    first["rates"] = [{"provider": "replicate", "model": "owner/model", "per_image": "0.05"}]
    afc.write_manifest(first, name="v1.yaml")
    afc.write_manifest(_shared("v2"), name="v2.yaml")
    holder = afc.popen("submit", "v1.yaml", env=env)
    waiter = None
    try:
        wait_for_ledger(
            afc,
            ledger_url,
            "SELECT COUNT(*) FROM jobs WHERE batch = 'v1' AND status = 'waiting'"
            " AND waiting_reason LIKE 'provider still rendering%'",
            proc=holder,
        )
        waiter = afc.popen("submit", "v2.yaml", env=env)
        waiting = (
            "output key shot-001.png is being rendered by job 'shot-001' of batch 'v1'"
        ).replace("'", "''")
        wait_for_ledger(
            afc,
            ledger_url,
            f"SELECT COUNT(*) FROM jobs WHERE batch = 'v2' AND waiting_reason = '{waiting}'",
            proc=waiter,
        )
        fake.released.set()
        assert holder.wait(timeout=60) == 0, holder.stderr.read()
        assert waiter.wait(timeout=60) == 1, waiter.stderr.read()
    finally:
        fake.released.set()
        _stop(holder, waiter)
    assert not (afc.cwd / "calls.log").exists(), "v2's job paid for no render"
    assert fake.counts["replicate_submit"] == 1
    sql = "SELECT batch, status, COALESCE(error_code, '') FROM jobs ORDER BY batch"
    if ledger_url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(ledger_url) as conn:
            rows = conn.execute(sql).fetchall()
    else:
        rows = afc.rows(sql)
    assert [tuple(r) for r in rows] == [
        ("v1", "succeeded", ""),
        ("v2", "failed", "OUTPUT_KEY_CONFLICT"),
    ]


def test_the_rendering_holders_lookup_uses_its_partial_index(tmp_path, afc):
    """The waiting jobs of a key are found by their own partial index (m013), not by a scan
    of every waiting job of the storage's batches (2 ms an attempt with 1,000 of them)."""
    m = load_manifest(afc.write_manifest(_shared("v1")))
    ledger = Ledger(str(tmp_path / "afc.db"))
    ledger.admit(m, "file:///tmp/x", RateCards())
    ledger.close()
    from afc_cli.ledger.core import OUTPUT_HOLDERS_LOOKUP

    conn = sqlite3.connect(tmp_path / "afc.db")
    plan = " ".join(
        row[3]
        for row in conn.execute("EXPLAIN QUERY PLAN " + OUTPUT_HOLDERS_LOOKUP, ("x", "y", "v1") * 4)
    )
    conn.close()
    assert "USING INDEX jobs_output_holders" in plan, plan
    assert "USING INDEX jobs_output_rendering" in plan, plan
    assert "USING INDEX jobs_output_spooled" in plan, plan  # m014, the spooled holders
    # the dead-lettered jobs with a request left polling: m016's partial index
    assert "USING INDEX jobs_output_poll_left (output_key=?)" in plan, plan


# --- a job waiting for the key holds no call slot of its provider ------------------------------


def test_a_job_waiting_for_the_key_leaves_its_providers_call_slot_to_the_others(
    afc, fake, ledger_url
):
    """v1's job renders shot-001.png on Replicate (its prediction held). v2's run, on the
    local provider under a limit of one call at a time, has shot-001, which waits for that
    key, and five jobs whose keys nobody holds: shot-001 waited holding the provider's one
    call slot, so the jobs behind it could not start until v1's render ended."""
    env = {"AFC_LEDGER": ledger_url} if ledger_url.startswith("postgresql") else {}
    first = _shared("v1")
    first["jobs"][0]["prompt"] = "hold render one"
    first["defaults"]["chain"] = [{"provider": "replicate", "model": "owner/model", "attempts": 1}]
    first["rates"] = [{"provider": "replicate", "model": "owner/model", "per_image": "0.05"}]
    afc.write_manifest(first, name="v1.yaml")
    second = _shared("v2")
    # keys whose job ids sort after shot-001's: a run starts its jobs in that order on SQLite
    # (the admission's on PostgreSQL), so shot-001 is first to the provider's call slot
    second["jobs"] += [
        {"key": f"solo-{i}", "prompt": f"alone {i}", "output": f"solo-{i}.png"}
        for i in (2, 3, 4, 5, 7)
    ]
    second["limits"] = {"local": {"concurrency": 1}}
    afc.write_manifest(second, name="v2.yaml")
    holder = afc.popen("submit", "v1.yaml", env=env)
    waiter = None
    try:
        wait_for_ledger(
            afc,
            ledger_url,
            "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL",
            proc=holder,
        )
        waiter = afc.popen("submit", "v2.yaml", env=env)
        wait_for_ledger(
            afc,
            ledger_url,
            "SELECT COUNT(*) FROM jobs WHERE batch = 'v2' AND waiting_reason LIKE 'output key%'",
            proc=waiter,
        )
        wait_for_ledger(
            afc,
            ledger_url,
            "SELECT COUNT(*) = 5 FROM jobs WHERE batch = 'v2' AND key LIKE 'solo-%'"
            " AND status = 'succeeded'",
            timeout=30,
            proc=waiter,
        )
        assert holder.poll() is None, "v1's render is still held"
        fake.released.set()
        assert holder.wait(timeout=60) == 0, holder.stderr.read()
        assert waiter.wait(timeout=60) == 1, waiter.stderr.read()
    finally:
        fake.released.set()
        _stop(holder, waiter)
    sql = "SELECT COUNT(*) FROM jobs WHERE batch = 'v2' AND error_code = 'OUTPUT_KEY_CONFLICT'"
    assert ledger_count(afc, ledger_url, sql) == 1
    assert fake.counts["replicate_submit"] == 1
