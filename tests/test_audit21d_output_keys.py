"""Outside audit 21d: this session's output-key holds (c32cae1) and spool retries (d98212c).

A job of an output key holds the key against the other jobs of it (batches of one storage
whose output template leaves out {batch}) while it has a paid render of it that can still be
stored: a render spooled and not stored is one (``Ledger._check_output``)."""

from __future__ import annotations

import shutil

from conftest import jobs, ledger_count, manifest
from s3fake import Fault


def _shared(batch: str, storage: str) -> dict:
    data = manifest(jobs(1), batch=batch, storage=storage)
    data["defaults"]["output"] = "{key}.{ext}"
    return data


def _rows(afc, ledger_url: str, sql: str) -> list[tuple]:
    if ledger_url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(ledger_url) as conn:
            return [tuple(r) for r in conn.execute(sql).fetchall()]
    return afc.rows(sql)


def test_a_spool_missing_job_retried_with_its_file_holds_its_output_key(afc, s3, ledger_url):  # noqa: F811
    """v1's render is spooled and its upload fails; its spool file goes missing (another
    host's disk, a cleanup): v1 is dead-lettered SPOOL_MISSING, which holds the key (v2's job
    would end OUTPUT_KEY_CONFLICT unpaid). The remedy SPOOL_MISSING names: the file put
    back, then 'afc retry'. That retry queued v1 at its probe, which holds nothing: v2's job
    of the same key, run next, found the key free and paid for a render of its own, and v1's
    paid render was thrown away at its run (OUTPUT_KEY_CONFLICT). Now the retried job starts
    again at its store step, holding the key: v2 pays for nothing and waits for it."""
    calls = afc.cwd / "calls.log"
    spool = afc.cwd / "spool"
    env = {"AFC_LOCAL_CALL_LOG": str(calls), "AFC_SPOOL_DIR": str(spool)}
    if ledger_url.startswith("postgresql"):
        env["AFC_LEDGER"] = ledger_url
        root = spool
    else:
        root = afc.cwd / "afc.db-spool"
    for batch in ("v1", "v2"):
        afc.write_manifest(_shared(batch, s3.url), name=f"{batch}.yaml")
    s3.plan.add(Fault("PUT", r"/films/", "500", -1))
    assert afc("submit", "v1.yaml", env=env).returncode == 1
    s3.plan.clear()
    [(job_id,)] = _rows(afc, ledger_url, "SELECT id FROM jobs WHERE batch = 'v1'")
    spooled = root / f"{job_id}.spool"
    assert spooled.is_file()
    kept = afc.cwd / spooled.name
    shutil.move(spooled, kept)
    missing = afc("resume", "--batch", "v1", env=env)
    assert missing.returncode == 1, missing.stderr
    assert _rows(afc, ledger_url, "SELECT status, error_code FROM jobs WHERE batch = 'v1'") == [
        ("dead", "SPOOL_MISSING")
    ]
    # the remedy: the file put back, then the retry
    shutil.move(kept, spooled)
    retried = afc("retry", "shot-001", "--batch", "v1", env=env)
    assert retried.returncode == 0, retried.stderr

    second = afc("submit", "v2.yaml", env=env, timeout=60)
    assert second.returncode == 1, second.stdout + second.stderr
    assert len(calls.read_text().splitlines()) == 1, "v2's job paid for a render of v1's key"
    [(status, reason)] = _rows(
        afc, ledger_url, "SELECT status, waiting_reason FROM jobs WHERE batch = 'v2'"
    )
    assert status == "waiting"
    assert "held by job 'shot-001' of batch 'v1'" in reason, reason

    # v1's run stores the file it was given; v2's next run finds it, paying nothing
    stored = afc("resume", "--batch", "v1", env=env)
    assert stored.returncode == 0, stored.stderr
    again = afc("submit", "v2.yaml", env=env, timeout=60)
    assert again.returncode == 1
    assert len(calls.read_text().splitlines()) == 1
    sql = "SELECT batch, status, COALESCE(error_code, '') FROM jobs ORDER BY batch"
    assert _rows(afc, ledger_url, sql) == [
        ("v1", "succeeded", ""),
        ("v2", "failed", "OUTPUT_KEY_CONFLICT"),
    ]
    sql = "SELECT COUNT(*) FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.batch = 'v2'"
    assert ledger_count(afc, ledger_url, sql + " AND a.cost_source IS DISTINCT FROM 'unsent'") == 0


def test_a_render_spooled_by_a_run_that_died_before_its_checkpoint_holds_its_key(afc, ledger_url):
    """v1's run dies (SIGKILL) after its paid render landed in the spool and before the
    checkpoint saying so: the ledger has v1 running at its render step, and v1's next run
    adopts the spool file (``pipeline._adopt_spool``). v2's job of the same key found the key
    held by a dead run with nothing stored, paid for a render of its own and stored it, and
    v1's run then ended OUTPUT_KEY_CONFLICT with its paid render thrown away. Now v2's job
    sees the file in this host's spool before its request leaves: it pays for nothing
    (its attempt unsent, at 0) and waits until v1's batch has run."""
    calls = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(calls)}
    if ledger_url.startswith("postgresql"):
        env["AFC_LEDGER"] = ledger_url
        env["AFC_SPOOL_DIR"] = str(afc.cwd / "spool")
    for batch in ("v1", "v2"):
        afc.write_manifest(_shared(batch, "file://" + str(afc.outputs())), name=f"{batch}.yaml")
    died = afc("submit", "v1.yaml", env={**env, "AFC_CRASH_POINT": "after_spool"})
    assert died.returncode == -9, died.stderr
    assert _rows(afc, ledger_url, "SELECT status, step FROM jobs") == [("running", "render")]
    assert len(calls.read_text().splitlines()) == 1

    second = afc("submit", "v2.yaml", env=env, timeout=60)
    assert second.returncode == 1, second.stdout + second.stderr
    assert len(calls.read_text().splitlines()) == 1, "v2's job paid for a render of v1's key"
    [(status, reason)] = _rows(
        afc, ledger_url, "SELECT status, waiting_reason FROM jobs WHERE batch = 'v2'"
    )
    assert status == "waiting"
    assert "held by job 'shot-001' of batch 'v1'" in reason, reason
    assert "'afc resume --batch v1' stores it" in reason, reason

    stored = afc("resume", "--batch", "v1", env=env)
    assert stored.returncode == 0, stored.stderr
    again = afc("submit", "v2.yaml", env=env, timeout=60)
    assert again.returncode == 1
    assert len(calls.read_text().splitlines()) == 1
    sql = "SELECT batch, status, COALESCE(error_code, '') FROM jobs ORDER BY batch"
    assert _rows(afc, ledger_url, sql) == [
        ("v1", "succeeded", ""),
        ("v2", "failed", "OUTPUT_KEY_CONFLICT"),
    ]
    sql = "SELECT COUNT(*) FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.batch = 'v2'"
    assert ledger_count(afc, ledger_url, sql + " AND a.cost_source IS DISTINCT FROM 'unsent'") == 0


def test_one_run_of_the_holder_and_the_other_job_ends_the_wait_itself(afc, ledger_url):
    """Batch b's job holds the key with a paid render its killed run spooled; batch a's job
    of the same key is queued. One 'afc resume' runs both: a's job, taking the key first,
    rested waiting 'held by job shot-001 of batch b ... afc resume --batch b stores it',
    then b's job stored its render in that same run, and a's job was left waiting on a job
    that had ended, for the next run to find the object (exit 1, the wait's words stale in
    afc status). Now a's job waits for b's task in that run and then looks again: it ends
    OUTPUT_KEY_CONFLICT there, nothing paid, as the next run would have ended it."""
    calls = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(calls)}
    if ledger_url.startswith("postgresql"):
        env["AFC_LEDGER"] = ledger_url
        env["AFC_SPOOL_DIR"] = str(afc.cwd / "spool")
    for batch in ("a", "b"):
        afc.write_manifest(_shared(batch, "file://" + str(afc.outputs())), name=f"{batch}.yaml")
    died = afc("submit", "b.yaml", env={**env, "AFC_CRASH_POINT": "after_spool"})
    assert died.returncode == -9, died.stderr
    assert afc("submit", "--no-run", "a.yaml", env=env).returncode == 0

    resumed = afc("resume", env=env, timeout=60)
    assert len(calls.read_text().splitlines()) == 1, "a's job paid for a render of b's key"
    sql = "SELECT batch, status, COALESCE(error_code, '') FROM jobs ORDER BY batch"
    assert _rows(afc, ledger_url, sql) == [
        ("a", "failed", "OUTPUT_KEY_CONFLICT"),
        ("b", "succeeded", ""),
    ], resumed.stderr
    assert resumed.returncode == 1  # a's job failed (a conflict), as the run says
    sql = "SELECT COUNT(*) FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.batch = 'a'"
    assert ledger_count(afc, ledger_url, sql + " AND a.cost_source IS DISTINCT FROM 'unsent'") == 0
