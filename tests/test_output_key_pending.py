"""A job of an output key that holds a paid render of it no run is working on: a request a
stopped run left at Replicate or fal, or a render spooled and not stored. Another job of the
key (a batch of the same storage whose template leaves out {batch}) found the key free (the
holder's lease ended with its run), paid for a render of its own, and one of the two renders
was thrown away at its store (OUTPUT_KEY_CONFLICT). Now that job pays for nothing: it rests
``waiting``, naming the holder and what stores its render, until the holder has ended
(``Ledger._check_output``, ``OutputHeld``, ``pipeline._wait_for_holder``)."""

from __future__ import annotations

import signal
import sqlite3

import pytest
from conftest import jobs, ledger_count, manifest, wait_for_ledger

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger, OutputBusy, OutputHeld
from afc_cli.ledger.core import RENDERING
from afc_cli.manifest import load_manifest

GHOST = "another-host:4242:1"


def _shared(batch: str, n: int = 1) -> dict:
    data = manifest(jobs(n), batch=batch)
    data["defaults"]["output"] = "{key}.{ext}"
    return data


@pytest.fixture
def films(afc, ledger_url):
    """Batches v1 and v2 admitted into one storage, with the key shot-001 each."""
    ledger = Ledger(ledger_url)
    both = {}
    for batch in ("v1", "v2"):
        m = load_manifest(afc.write_manifest(_shared(batch), name=f"{batch}.yaml"))
        ledger.admit(m, "file:///tmp/x", RateCards())
        both[batch] = ledger.job(m.jobs[0].job_id)
    yield ledger, both["v1"], both["v2"]
    ledger.close()


def _set(ledger, job, **fields) -> None:
    with ledger.tx():
        ledger.db.execute(
            f"UPDATE jobs SET {', '.join(f'{k} = ?' for k in fields)} WHERE id = ?",
            (*fields.values(), job["id"]),
        )


def _attempt(ledger, job):
    job = ledger.claim(job["id"], 60)
    return job, ledger.start_attempt(job, 0, "local", "m1", None, durable=False)


RENDERING_REASON = RENDERING + "replicate request r-1"


@pytest.mark.parametrize(
    "holder, held",
    [
        # a run stopped (released) or died (its lease ran out) while Replicate rendered
        (dict(status="waiting", waiting_reason=RENDERING_REASON, step="render"), "resume"),
        (
            dict(
                status="waiting",
                waiting_reason=RENDERING_REASON,
                step="render",
                lease_owner=GHOST,
                lease_expires=1,
            ),
            "resume",
        ),
        # a run died after its render was spooled, before its store
        (dict(status="running", step="store", lease_owner=GHOST, lease_expires=1), "resume"),
        # storage failed: the render waits in this host's spool
        (dict(status="waiting", waiting_reason="storage: down", step="store"), "resume"),
        # 'afc retry' of a job dead-lettered at its store step
        (dict(status="queued", step="store"), "resume"),
        (dict(status="dead", step="store", error_code="STORE_FAILED"), "retry"),
        (dict(status="dead", step="store", error_code="SPOOL_MISSING"), "retry"),
    ],
)
def test_a_paid_render_no_run_works_on_holds_its_output_key(films, holder, held):
    ledger, v1, v2 = films
    _set(ledger, v1, attempts=1, **holder)
    job = ledger.claim(v2["id"], 60)
    with pytest.raises(OutputHeld) as refused:
        ledger.start_attempt(job, 0, "local", "m1", None, durable=False)
    assert (refused.value.batch, refused.value.key) == ("v1", "shot-001")
    if held == "resume":
        assert refused.value.how == "'afc resume --batch v1' stores it"
        assert not refused.value.final  # a run stores it: the job waits for that
    else:
        assert refused.value.how == "'afc retry shot-001 --batch v1' stores it"
        assert refused.value.final  # a person's retry: the job ends, nothing waits for ever
    # nothing written: no attempt, the job not running
    assert ledger.attempts(job["id"]) == []
    assert ledger.job(job["id"])["attempts"] == 0


@pytest.mark.parametrize(
    "holder",
    [
        # a synchronous call's run died: its answer (and the image in it) went with it
        dict(status="running", step="render", lease_owner=GHOST, lease_expires=1),
        # the spooled render was damaged: lost, its retry renders anew
        dict(status="dead", step="store", error_code="SPOOL_DAMAGED"),
        # waiting out a backoff: nothing paid is pending
        dict(status="waiting", waiting_reason="backoff 2.00s after 503", step="render"),
        dict(status="dead", step="render", error_code="CHAIN_FAILED"),
    ],
)
def test_a_job_holding_no_paid_render_lets_another_render_the_key(films, holder):
    ledger, v1, v2 = films
    _set(ledger, v1, attempts=1, **holder)
    job, number = _attempt(ledger, v2)
    assert number == 1
    # a job that may have stored the key is looked for in storage before the request leaves
    assert job["output_shared"] is (holder["status"] == "running")


def test_a_live_run_polling_the_holders_request_is_waited_for(films):
    ledger, v1, v2 = films
    _set(
        ledger,
        v1,
        attempts=1,
        status="waiting",
        waiting_reason=RENDERING_REASON,
        lease_owner=GHOST,
        lease_expires=9e18,
    )
    job = ledger.claim(v2["id"], 60)
    with pytest.raises(OutputBusy):
        ledger.start_attempt(job, 0, "local", "m1", None, durable=False)


def test_the_spooled_holders_lookup_uses_its_partial_index(tmp_path, afc):
    """SQLite uses a partial index only for a query that repeats its WHERE: the dead and
    queued jobs of a key at their store step are one index lookup, not a scan of the batch."""
    m = load_manifest(afc.write_manifest(_shared("v1", n=3)))
    ledger = Ledger(str(tmp_path / "afc.db"))
    ledger.admit(m, "file:///tmp/x", RateCards())
    ledger.close()
    from afc_cli.ledger.core import OUTPUT_SPOOLED_SQL

    conn = sqlite3.connect(tmp_path / "afc.db")
    plan = " ".join(
        row[3]
        for row in conn.execute(
            "EXPLAIN QUERY PLAN SELECT o.key FROM jobs o WHERE o.output_key = 'x'"
            f" AND {OUTPUT_SPOOLED_SQL} AND o.id <> 'y'"
        )
    )
    conn.close()
    assert "USING INDEX jobs_output_spooled" in plan, plan


# --- through the afc command: Replicate renders v1's request while its run stops ------------


def _rows(afc, ledger_url: str, sql: str) -> list[tuple]:
    if ledger_url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(ledger_url) as conn:
            return [tuple(r) for r in conn.execute(sql).fetchall()]
    return afc.rows(sql)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL])
def test_a_request_a_stopped_run_left_at_replicate_holds_its_key(afc, fake, ledger_url, stop):
    """v1's run stops (SIGTERM: released; SIGKILL: its lease is dead on this host) while
    Replicate renders v1's prediction. v2's job of the same key paid for a render of its own,
    and v1's prediction, paid too, ended OUTPUT_KEY_CONFLICT at its store when v1 resumed.
    Now v2's job pays for nothing: its run leaves it waiting (exit 1), naming v1's job; once
    v1's batch has run (its prediction polled, stored), v2's job ends OUTPUT_KEY_CONFLICT."""
    calls = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(calls), "AFC_GRACE_S": "0"}
    if ledger_url.startswith("postgresql"):
        env["AFC_LEDGER"] = ledger_url
    first = _shared("v1")
    first["jobs"][0]["prompt"] = "hold render one"
    first["defaults"]["chain"] = [{"provider": "replicate", "model": "owner/model", "attempts": 1}]
    first["rates"] = [{"provider": "replicate", "model": "owner/model", "per_image": "0.05"}]
    afc.write_manifest(first, name="v1.yaml")
    afc.write_manifest(_shared("v2"), name="v2.yaml")
    holder = afc.popen("submit", "v1.yaml", env=env)
    try:
        wait_for_ledger(
            afc,
            ledger_url,
            "SELECT COUNT(*) FROM jobs WHERE batch = 'v1' AND status = 'waiting'"
            " AND waiting_reason LIKE 'provider still rendering%'",
            proc=holder,
        )
    finally:
        holder.send_signal(stop)
        holder.wait(timeout=60)

    second = afc("submit", "v2.yaml", env=env, timeout=60)
    assert second.returncode == 1, second.stderr
    assert not calls.exists(), "v2's job paid for no render"
    [(status, reason)] = _rows(
        afc, ledger_url, "SELECT status, waiting_reason FROM jobs WHERE batch = 'v2'"
    )
    assert status == "waiting"
    assert reason.startswith(
        "output key shot-001.png is held by job 'shot-001' of batch 'v1', whose provider"
    ), reason
    assert "'afc resume --batch v1' stores it" in reason
    assert "held by job 'shot-001' of batch 'v1'" in second.stdout + second.stderr

    fake.released.set()
    resumed = afc("resume", "--batch", "v1", env=env, timeout=60)
    assert resumed.returncode == 0, resumed.stderr
    again = afc("submit", "v2.yaml", env=env, timeout=60)
    assert again.returncode == 1, again.stderr
    assert not calls.exists(), "v2's job paid for no render"
    assert fake.counts["replicate_submit"] == 1
    sql = "SELECT batch, status, COALESCE(error_code, '') FROM jobs ORDER BY batch"
    assert _rows(afc, ledger_url, sql) == [
        ("v1", "succeeded", ""),
        ("v2", "failed", "OUTPUT_KEY_CONFLICT"),
    ]
    # its next run looked in storage before its request left: an attempt at 0, never sent
    sql = "SELECT COUNT(*) FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.batch = 'v2'"
    assert ledger_count(afc, ledger_url, sql + " AND a.cost_source IS DISTINCT FROM 'unsent'") == 0


def test_a_render_spooled_by_a_dead_lettered_job_ends_the_other_job_unpaid(afc, ledger_url):
    """v1's job is dead-lettered at its store step (STORE_FAILED: storage failed in three
    runs), its paid render in the spool: 'afc retry' of it stores it. v2's job of the same
    key rendered and stored, paid, and v1's retry then ended OUTPUT_KEY_CONFLICT. Now v2's
    job ends OUTPUT_KEY_CONFLICT at once, nothing paid, saying what to do: no run would end
    a wait for a person's retry (a worker's --until-idle never went idle)."""
    calls = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(calls)}
    if ledger_url.startswith("postgresql"):
        env["AFC_LEDGER"] = ledger_url
    for batch in ("v1", "v2"):
        afc.write_manifest(_shared(batch), name=f"{batch}.yaml")
    assert afc("submit", "--no-run", "v1.yaml", env=env).returncode == 0
    ledger = Ledger(ledger_url)
    try:
        [v1] = [ledger.job(job_id) for job_id in ledger.runnable_job_ids("v1")]
        _set(ledger, v1, attempts=1, status="dead", step="store", error_code="STORE_FAILED")
    finally:
        ledger.close()
    result = afc("submit", "v2.yaml", env=env, timeout=60)
    assert result.returncode == 1, result.stderr
    assert not calls.exists(), "v2's job paid for no render"
    [(status, code, message)] = _rows(
        afc, ledger_url, "SELECT status, error_code, error_message FROM jobs WHERE batch = 'v2'"
    )
    assert (status, code) == ("failed", "OUTPUT_KEY_CONFLICT")
    assert message.startswith(
        "output key shot-001.png is held by job 'shot-001' of batch 'v1', whose paid render is"
        " spooled and not stored (dead-lettered, STORE_FAILED): 'afc retry shot-001 --batch v1'"
        " stores it. Nothing was paid for this job"
    ), message
    sql = "SELECT COUNT(*) FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.batch = 'v2'"
    assert ledger_count(afc, ledger_url, sql) == 0
