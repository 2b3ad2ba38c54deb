"""Audit 18: what the ledger tells a person about money and jobs after an afc process died
(SIGKILL, an OOM kill), before any run takes its jobs over, through the real ``afc`` command,
on SQLite and PostgreSQL alike."""

from __future__ import annotations

import signal
import time

from conftest import frozen_at, manifest
from test_output_refetch import PRICED

from afc_cli.providers.http import FETCH_TRIES


def test_a_dead_runs_call_is_unpriced_in_status_and_show_as_in_the_costs_report(afc, ledger_url):
    """A call left ``started`` by a process that died is counted by ``afc costs report`` as an
    attempt of unknown outcome and cost (the run that takes the job over marks it so). ``afc
    status`` and ``afc show`` counted it nowhere: the same attempt was unpriced in the report
    and absent from the job's ``unpriced_attempts``, so a person saw two figures for one job.
    They count it by the same rule now; a call of a live run is in flight in all three."""
    env = {"AFC_LEDGER": ledger_url}
    afc.write_manifest(manifest([{"key": "a", "prompt": "a"}]))
    frozen = afc.popen("submit", "manifest.yaml", env={**env, "AFC_STALL_POINT": "before_request"})
    try:
        frozen_at(frozen)  # its attempt row committed, its process alive: a call in flight
        total = afc.json("costs", "report", env=env)["total"]
        assert (total["unknown_attempts"], total["unpriced_attempts"]) == (0, 0), total
        [job] = afc.json("status", env=env)["jobs"]
        assert (job["cost"], job["unpriced_attempts"], job["waiting"]) == (None, 0, None), job
        assert afc.json("show", "a", env=env)["job"]["unpriced_attempts"] == 0
    finally:
        frozen.kill()
    assert frozen.wait(timeout=30) == -signal.SIGKILL
    total = afc.json("costs", "report", env=env)["total"]
    assert (total["unknown_attempts"], total["unpriced_attempts"]) == (1, 1), total
    [job] = afc.json("status", env=env)["jobs"]
    assert (job["cost"], job["unpriced_attempts"]) == (None, 1), job
    shown = afc.json("show", "a", env=env)["job"]
    assert (shown["cost"], shown["unpriced_attempts"]) == (None, 1), shown
    assert "unpriced (1 attempt of unknown cost)" in afc("show", "a", env=env).stdout
    # taken over and finished: the same count, now from the attempt's own status
    assert afc("resume", env=env).returncode == 0
    [job] = afc.json("status", "--all", env=env)["jobs"]
    assert (job["cost"], job["unpriced_attempts"]) == ("0.050000", 1), job
    total = afc.json("costs", "report", env=env)["total"]
    assert (total["priced"], total["unpriced_attempts"]) == ("0.050000", 1), total


def test_one_rule_says_whose_calls_are_abandoned_and_whose_process_is_gone():
    """``owner.process_gone`` is the money's rule (a call left ``started`` counts as unknown)
    and, for a lease a process held, the status's: a free job's calls and a moved ledger's
    are abandoned (the claim that takes a free job marks them; no run takes a moved job
    again), though no process of theirs is said to be gone."""
    from afc_cli.ledger.core import MOVED_UNTIL
    from afc_cli.listing import process_gone as status_says_gone
    from afc_cli.owner import MOVED_OWNER, current_owner, host_lease, process_gone

    now = 1000.0
    for owner, expires, gone, said in [
        (current_owner(), now + 60, False, False),  # a live run's call: in flight
        (current_owner(), now - 1, True, True),  # its lease ran out
        ("elsewhere:1:1", now + 1, False, False),  # another host's, still renewed
        ("elsewhere:1:1", now - 1, True, True),
        (None, None, True, False),  # a free job (a retry freed it)
        (MOVED_OWNER, MOVED_UNTIL, True, False),
        (host_lease(), now + 60, True, False),  # this host's spool hold: this host takes it
    ]:
        assert process_gone(owner, expires, now) is gone, owner
        job = {"lease_owner": owner, "lease_expires": expires}
        assert status_says_gone(job, now) is said, owner


def test_a_renders_known_cost_survives_a_kill_while_its_output_is_out_of_reach(
    afc, fake, ledger_url
):
    """OpenAI answered a DALL-E URL and its usage (the render is billed, its cost known), and
    the URL stayed out of reach: afc fetches it again in later rounds, for up to an hour. The
    cost was held in memory until the fetch ended, so a process killed meanwhile (an OOM kill,
    a reboot, a cron timeout's SIGKILL) left the attempt unpriced, recorded ``unknown`` at no
    known cost by the next run, though the answer had said what it cost. It is written on the
    attempt as the later rounds begin, as a budget's ``hold_known_cost`` writes it; since
    audit 28c, with the output URL, before the download begins."""
    env = {"AFC_LEDGER": ledger_url}
    data = manifest([{"key": "j0", "prompt": "dalle-url cdn-held"}], rates=PRICED)
    data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1"}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml", env=env)
    try:
        deadline = time.time() + 30
        while fake.counts["download_refused"] <= FETCH_TRIES and time.time() < deadline:
            time.sleep(0.02)  # the first round failed: later rounds are under way
        assert fake.counts["download_refused"] > FETCH_TRIES
    finally:
        proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL

    def attempts() -> list[tuple]:
        return [(a["status"], a["cost"]) for a in afc.json("show", "j0", env=env)["attempts"]]

    assert attempts() == [("started", "0.040000")]
    total = afc.json("costs", "report", env=env)["total"]
    assert (total["priced"], total["unpriced_attempts"]) == ("0.040000", 0), total
    assert (total["unknown_attempts"], total["failed_spend"]) == (1, "0.040000"), total
    fake.cdn_back.set()
    assert afc("resume", env=env).returncode == 0
    # its output URL was committed with that cost: the next run fetches it, paying nothing
    # again (tests/test_audit28c_answer_url.py)
    assert attempts() == [("succeeded", "0.040000")]
    assert fake.counts["openai_billed"] == 1


def test_afc_show_says_a_jobs_process_is_gone_as_afc_status_does(afc):
    """After a SIGKILL, ``afc status`` says of a running job that the afc process running it
    is gone (README 'Job statuses'); ``afc show``, where a person goes next for the job's
    whole story, said it was running, with no reason, as if a run were rendering it."""
    from afc_cli.listing import PROCESS_GONE

    afc.write_manifest(manifest([{"key": "a", "prompt": "a"}]))
    died = afc("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_attempt_row"})
    assert died.returncode == -signal.SIGKILL, died.stderr
    [job] = afc.json("status")["jobs"]
    assert job["waiting"] == PROCESS_GONE
    shown = afc.json("show", "a")["job"]
    assert (shown["status"], shown["waiting"]) == ("running", PROCESS_GONE), shown
    assert f"waiting       {PROCESS_GONE}" in afc("show", "a").stdout
    assert afc("resume").returncode == 0
    assert afc.json("show", "a")["job"]["waiting"] is None


def test_the_contact_sheet_says_a_jobs_process_is_gone_as_afc_status_does(afc):
    """The contact sheet's card of a running job whose afc process was killed said nothing
    of it (its reason is the ledger's ``waiting_reason``, none), where ``afc status`` and
    ``afc show`` say the process is gone and the next run takes it over; its cost is
    ``unpriced``, as the killed call counts."""
    import html

    import pytest

    from afc_cli.listing import PROCESS_GONE

    pytest.importorskip("jinja2", reason="the web extra: pip install 'afc-cli[web]'")
    afc.write_manifest(manifest([{"key": "a", "prompt": "a"}]))
    died = afc("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_attempt_row"})
    assert died.returncode == -signal.SIGKILL, died.stderr
    result = afc("report", "--html", "r.html")
    assert result.returncode == 0, result.stderr
    assert html.escape(PROCESS_GONE) in (afc.cwd / "r.html").read_text()
