"""Audit 63d: a PostgreSQL session the server ended while a call was in flight (a restart, a
failover, an operator's ``pg_terminate_backend``) was called a freeze of afc's own.

``PostgresLedger.write_error`` tells a session the server ended for staying idle in a
transaction a whole lease (the process stopped that long) from a server failure by the time
since the last transaction began. It measured that time each time the failure was said, not
when it was met: the run's first word (its lease renewal's) was right, 'check the database
server and the connection to it', but the same loss said again once the call in flight came
back (the run's last word, its exit message) measured the seconds the call had taken: 'this
process was stopped or starved that long ..., its transaction open 7 s ... nothing is wrong
with the server or the connection', sending the operator away from the server that failed.
Now the loss is judged once, when it is met, and said so again."""

from __future__ import annotations

import psycopg
from conftest import manifest, wait_for_ledger


def _end_sessions(url: str) -> int:
    """End afc's sessions as a server restart or an operator would (not an idle timeout)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()[0]


def test_a_session_the_server_ended_during_a_call_is_not_called_a_freeze(afc, fake, pg_url):
    data = manifest([{"key": "a", "prompt": "slow-8s a"}])  # the fake OpenAI answers in 8 s
    data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1", "attempts": 1}]
    data["rates"] = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]
    afc.write_manifest(data)
    # a lease of 3 s: the call outlasts it, renewed every second, never frozen
    run = afc.popen("submit", "manifest.yaml", env={"AFC_LEDGER": pg_url, "AFC_LEASE_S": "3"})
    wait_for_ledger(afc, pg_url, "SELECT COUNT(*) FROM attempts", proc=run)
    assert _end_sessions(pg_url) >= 1
    _, err = run.communicate(timeout=90)
    assert run.returncode == 1, err
    assert "cannot write to the ledger" in err, err
    # its render, paid, is kept for the next run all the same
    assert "1 paid render the ledger could not record kept in the spool" in err, err
    last = err.strip().splitlines()[-1]
    assert "check the database server and the connection to it" in last, err
    assert "stopped or starved" not in err, err
    assert "nothing is wrong with the server" not in err, err
    assert fake.counts["openai_billed"] == 1
