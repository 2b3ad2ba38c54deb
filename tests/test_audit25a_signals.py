"""Outside audit 25a (interruptions of the commands that write): SIGTERM and SIGHUP (a cron
job's timeout, a container stopping, a closed terminal) to 'afc cancel', 'afc retry' and a
review's decision are an interruption as Ctrl-C is: exit 130, saying what was kept and what
to run again, never a silent death by signal (-15). Real child processes, real signals."""

from __future__ import annotations

import signal
import time

import psycopg
import pytest
from conftest import manifest
from test_audit25a_cancel import _cut_off, _rendering


def test_sigterm_to_a_cancel_waiting_on_the_provider_is_an_interruption(afc, fake):
    requests = _rendering(afc, ["j0"])
    err = _cut_off(afc, signal.SIGTERM, "j0")  # it died with -15, saying nothing
    assert "interrupted" in err and "cancel those again" in err, err
    again = afc("cancel", "j0")
    assert again.returncode == 0 and fake.cancels == [requests["j0"]], again.stderr


def _held(afc, pg_url: str, sig: int, *args: str) -> str:
    """Run 'afc ARGS' on the PostgreSQL ledger while the jobs table is locked, stop it with
    ``sig`` while it waits for the lock: its stderr (it must exit 130)."""
    with psycopg.connect(pg_url, autocommit=True) as watch, psycopg.connect(pg_url) as lock:
        lock.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        proc = afc.popen(*args, "--ledger", pg_url)
        try:
            deadline = time.time() + 30
            waiting = 0
            while not waiting and time.time() < deadline:
                assert proc.poll() is None, proc.stderr.read()
                time.sleep(0.05)
                waiting = watch.execute(
                    "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                ).fetchone()[0]
            assert waiting, "the command never waited for the lock"
            proc.send_signal(sig)
            assert proc.wait(timeout=30) == 130, proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
        lock.rollback()
    return proc.stderr.read()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_sighup_to_a_retry_is_an_interruption_and_it_retries_when_run_again(
    afc, pg_url, sig
):
    """Found by outside audit 25a: 'afc retry' (and 'afc cancel', 'afc review approve' and
    'reject') had no handler for SIGTERM or SIGHUP: the process died by the signal, exit -15
    (143 in a shell), saying nothing, where README's exit codes say 130 for an interruption
    by Ctrl-C, SIGTERM or SIGHUP, with what was kept and what to run again."""
    afc.env["AFC_LEDGER"] = pg_url
    afc.write_manifest(
        manifest([{"key": "j0", "prompt": "a lighthouse", "params": {"fail": ["invalid"]}}])
    )
    assert afc("submit", "manifest.yaml").returncode == 1
    err = _held(afc, pg_url, sig, "retry", "j0")
    assert "interrupted" in err and "retry those again" in err, err
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT status FROM jobs").fetchall() == [("failed",)]
    again = afc("retry", "j0")
    assert again.returncode == 0 and "queued again" in again.stderr, again.stderr


@pytest.mark.parametrize("verb", ["approve", "reject"])
def test_sigterm_to_a_review_decision_is_an_interruption_and_nothing_is_decided(afc, pg_url, verb):
    afc.env["AFC_LEDGER"] = pg_url
    afc.write_manifest(manifest([{"key": "style", "prompt": "a style frame", "review": True}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    extra = ["--reason", "too dark"] if verb == "reject" else []
    err = _held(afc, pg_url, signal.SIGTERM, "review", verb, "style", *extra)
    assert "interrupted" in err and "run this again" in err, err
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT status FROM jobs").fetchall() == [("awaiting_review",)]
    again = afc("review", verb, "style", *extra)
    assert again.returncode == 0, again.stderr
