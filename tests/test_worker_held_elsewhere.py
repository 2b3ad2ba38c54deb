"""``afc worker --until-idle --batch B`` whose only jobs left wait on an output key held by a
job of another batch (a batch of the same storage whose template leaves out {batch}: a request
a stopped run left at Replicate, a render spooled and not stored). No round of that worker
ends the wait, as it never runs the holder's batch: it polled for ever (every --poll, its
claim paused ``OUTPUT_HELD_PAUSE_S`` at a time), and a cron'd script never got its exit.
Now it is idle: it exits 1, as ``afc resume --batch B`` does with such a job left waiting,
naming the job and what stores the holder's render."""

from __future__ import annotations

import json
import signal

from conftest import jobs, ledger_count, manifest, wait_for_ledger


def _shared(batch: str) -> dict:
    data = manifest(jobs(1), batch=batch)
    data["defaults"]["output"] = "{key}.{ext}"
    return data


def _held_by_v1(afc, ledger_url: str):
    """v1's run stopped (SIGTERM) while Replicate renders its request for shot-001.png; v2,
    of the same key, admitted. Returns the call log of the local provider and the env."""
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
        holder.send_signal(signal.SIGTERM)
        holder.wait(timeout=60)
    assert afc("submit", "--no-run", "v2.yaml", env=env).returncode == 0
    return calls, env


def test_an_until_idle_worker_of_one_batch_does_not_wait_on_another_batch(afc, fake, ledger_url):
    calls, env = _held_by_v1(afc, ledger_url)

    # the timeout is a hang's bound, not a measurement: the worker used to poll for ever
    args = ("worker", "--until-idle", "--batch", "v2", "--poll", "0.1", "--json")
    worker = afc(*args, env=env, timeout=60)
    assert worker.returncode == 1, worker.stderr
    assert not calls.exists(), "v2's job paid for no render"
    out = json.loads(worker.stdout)
    assert out["exit_code"] == 1
    assert out["held_elsewhere"] == 1
    assert "held by job 'shot-001' of batch 'v1'" in worker.stderr, worker.stderr
    assert "'afc resume --batch v1' stores it" in worker.stderr
    sql = "SELECT COUNT(*) FROM jobs WHERE batch = 'v2' AND status = 'waiting'"
    assert ledger_count(afc, ledger_url, sql) == 1

    # v1's run stores its render; v2's worker then ends its job unpaid and exits (1: failed)
    fake.released.set()
    assert afc("resume", "--batch", "v1", env=env, timeout=60).returncode == 0
    again = afc(*args, env=env, timeout=120)
    assert again.returncode == 1, again.stderr
    assert json.loads(again.stdout)["held_elsewhere"] == 0
    assert not calls.exists(), "v2's job paid for no render"
    assert fake.counts["replicate_submit"] == 1
    sql = "SELECT COUNT(*) FROM jobs WHERE batch = 'v2' AND error_code = 'OUTPUT_KEY_CONFLICT'"
    assert ledger_count(afc, ledger_url, sql) == 1


def test_a_worker_of_every_batch_runs_the_holder_and_ends_the_wait(afc, fake, ledger_url):
    """Without --batch the holder is the worker's to run: it waits for it, then is idle."""
    calls, env = _held_by_v1(afc, ledger_url)
    fake.released.set()
    worker = afc("worker", "--until-idle", "--poll", "0.1", "--json", env=env, timeout=120)
    assert worker.returncode == 1, worker.stderr  # v2's job failed OUTPUT_KEY_CONFLICT
    assert json.loads(worker.stdout)["held_elsewhere"] == 0
    assert not calls.exists(), "v2's job paid for no render"
    assert fake.counts["replicate_submit"] == 1
    sql = "SELECT COUNT(*) FROM jobs WHERE status = 'succeeded' AND batch = 'v1'"
    assert ledger_count(afc, ledger_url, sql) == 1


def test_held_elsewhere_is_every_active_job_of_the_batch_or_none(afc, ledger_url):
    """``Ledger.held_elsewhere``: the batch's jobs when each waits on another batch's holder;
    None as soon as one does not (a job waiting out a backoff, a queued one, one held by a
    job of its own batch, which a worker of that batch runs)."""
    from afc_cli.costs import RateCards
    from afc_cli.ledger import Ledger
    from afc_cli.ledger.core import RENDERING
    from afc_cli.manifest import load_manifest

    ledger = Ledger(ledger_url)
    try:
        ids = {}
        for batch in ("v1", "v2"):
            data = manifest(jobs(2), batch=batch)
            data["defaults"]["output"] = "{key}.{ext}"
            m = load_manifest(afc.write_manifest(data, name=f"{batch}.yaml"))
            ledger.admit(m, "file:///tmp/x", RateCards())
            ids[batch] = [job.job_id for job in m.jobs]

        def put(job_id, **fields):
            with ledger.tx():
                ledger.db.execute(
                    f"UPDATE jobs SET {', '.join(f'{k} = ?' for k in fields)} WHERE id = ?",
                    (*fields.values(), job_id),
                )

        rendering = dict(status="waiting", waiting_reason=RENDERING + "replicate r-1")
        for job_id in ids["v1"]:
            put(job_id, attempts=1, **rendering)
        assert ledger.held_elsewhere("v2") is None  # both queued
        put(ids["v2"][0], status="waiting", waiting_reason="output key held")
        assert ledger.held_elsewhere("v2") is None  # the second one is queued
        put(ids["v2"][1], status="waiting", waiting_reason="backoff 2.00s after 503")
        held = ledger.held_elsewhere("v2")
        assert [(job["key"], job["held"].batch) for job in held] == [
            ("shot-001", "v1"),
            ("shot-002", "v1"),
        ]
        put(ids["v1"][1], status="succeeded", waiting_reason=None, step="done")
        assert ledger.held_elsewhere("v2") is None  # shot-002's key is free: it renders
        # v1's own jobs are held by no other batch
        assert ledger.held_elsewhere("v1") is None
    finally:
        ledger.close()
