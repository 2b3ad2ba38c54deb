"""Outside audit 56a: a run stopped (Ctrl-C, SIGTERM) while a job waited out its backoff frees
the job and leaves its reason in the ledger, 'backoff 60.00s after rate_limited'. 'afc status',
'afc show' and --json went on saying so, of a wait no afc process was waiting out any more:
the job waits for the next 'afc resume' (or a worker), as one its run left waiting for its
provider's call slot already said (tests/test_audit55e_slot_wait_after_stop.py)."""

from __future__ import annotations

import signal

from conftest import manifest, wait_for

REASON = "backoff 60.00s after rate_limited"


def test_a_backoff_left_by_a_stopped_run_says_no_process_waits_now(afc):
    chain = [
        {"provider": "local", "model": "m1", "attempts": 3, "backoff": {"base": 60, "cap": 60}}
    ]
    job = {"key": "x", "prompt": "a", "params": {"fail": ["rate_limited"], "retry_after_s": 3600}}
    afc.write_manifest(manifest([job], defaults={"chain": chain}))
    run = afc.popen("submit", "manifest.yaml", env={"AFC_GRACE_S": "0"})
    try:
        wait_for(afc, f"SELECT COUNT(*) FROM jobs WHERE waiting_reason = '{REASON}'", 1)
        # while the run waits, the reason is said as it is
        [live] = afc.json("status")["jobs"]
        assert live["waiting"] == REASON
        run.send_signal(signal.SIGINT)
        assert run.wait(timeout=60) == 130
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert afc.rows("SELECT status, lease_owner FROM jobs") == [("waiting", None)]
    [said] = afc.json("status")["jobs"]
    assert said["waiting"].startswith(REASON + "; no afc process waits for it now"), said
    assert "afc resume" in said["waiting"]
    shown = afc("show", "x")
    assert "no afc process waits for it now" in shown.stdout, shown.stdout
    table = afc("status")
    assert "no afc process waits for it now" in table.stdout, table.stdout


def test_only_the_waits_a_run_makes_get_the_word_once_it_is_gone():
    """A wait for an output key another job renders is the run's (it looks again); one for a
    job that holds the key with a paid render no run works on (``OutputHeld``) waits for no run
    and keeps its own words, as does the budget's (a person raises the cap)."""
    from afc_cli.listing import waiting_now

    def said(reason: str) -> str | None:
        return waiting_now({"status": "waiting", "lease_owner": None}, reason, 0.0)

    rendered = "output key b1/x.png is being rendered by job 'y' of batch 'b2'"
    assert said(rendered).startswith(rendered + "; no afc process waits for it now")
    held = "output key b1/x.png is held by job 'y' of batch 'b2', rendered: its run stores it"
    assert said(held) == held
    budget = "budget: this run has spent or reserved 0.10 of 0.10 USD"
    assert said(budget) == budget
