"""A job dead-lettered CRASH_LOOP while its Replicate or fal request rendered holds its output
key (outside audit 27c; left by earlier rounds as 'a polling job's holder that died in a
CRASH_LOOP doesn't hold its key').

'afc retry' of such a job polls that request, paid already, and stores its render (README,
Retry). But the job, dead at its render step, was no holder of its key in
``Ledger._check_output``: a job of another batch with the same output key (a template without
{batch}) paid for its own render and stored it, and the retried job's render, paid too, was
then refused at its store (OUTPUT_KEY_CONFLICT): two renders paid for one output."""

from __future__ import annotations

import sqlite3

from conftest import ledger_count
from test_worker_held_elsewhere import _held_by_v1


def _write(afc, ledger_url: str, sql: str) -> None:
    if ledger_url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(ledger_url) as conn:
            conn.execute(sql)
        return
    with sqlite3.connect(afc.cwd / "afc.db") as conn:
        conn.execute(sql)


def test_a_crash_looped_jobs_request_holds_its_output_key(afc, fake, ledger_url):
    calls, env = _held_by_v1(afc, ledger_url)  # v1's request renders at Replicate
    # v1's runs kept dying while they polled it: the twenty-first takeover dead-letters it
    _write(
        afc,
        ledger_url,
        "UPDATE jobs SET takeovers = 20, lease_owner = 'gone-host:7:7', lease_expires = 0"
        " WHERE batch = 'v1'",
    )
    dead = afc("resume", "--batch", "v1", env=env, timeout=60)
    assert dead.returncode == 1, dead.stderr
    sql = "SELECT COUNT(*) FROM jobs WHERE batch = 'v1' AND error_code = 'CRASH_LOOP'"
    assert ledger_count(afc, ledger_url, sql) == 1, dead.stderr

    # v2's job of the same output key pays for nothing while that request holds the key
    v2 = afc("resume", "--batch", "v2", env=env, timeout=60)
    assert not calls.exists(), "v2's job paid for a render of a key v1's request holds"
    assert v2.returncode == 1, v2.stderr
    sql = "SELECT COUNT(*) FROM jobs WHERE batch = 'v2' AND error_code = 'OUTPUT_KEY_CONFLICT'"
    assert ledger_count(afc, ledger_url, sql) == 1, v2.stderr
    assert "afc retry shot-001 --batch v1" in v2.stderr, v2.stderr

    # the person's retry polls v1's request and stores its render: one render paid in all
    fake.released.set()
    assert afc("retry", "shot-001", "--batch", "v1", env=env).returncode == 0
    assert afc("resume", "--batch", "v1", env=env, timeout=60).returncode == 0
    assert fake.counts["replicate_submit"] == 1
    sql = "SELECT COUNT(*) FROM jobs WHERE batch = 'v1' AND status = 'succeeded'"
    assert ledger_count(afc, ledger_url, sql) == 1


def test_the_lookup_reads_the_providers_gone_answer_as_retry_does():
    from afc_cli.ledger.core import OUTPUT_POLL_LEFT_SQL
    from afc_cli.providers.base import GONE_PREFIX

    assert f"NOT LIKE '{GONE_PREFIX}%'" in OUTPUT_POLL_LEFT_SQL
