"""``afc status`` on jobs whose afc process was killed mid-run: they stay ``running`` (the
next run takes them over), and the reason says nobody is running them now, where it said
nothing and a cron log reader waited for a run that was gone."""

from __future__ import annotations

import signal

from conftest import manifest

from afc_cli.listing import PROCESS_GONE, process_gone


def test_a_killed_runs_jobs_say_their_process_is_gone(afc):
    afc.write_manifest(manifest([{"key": "a", "prompt": "a"}]))
    died = afc("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_attempt_row"})
    assert died.returncode == -signal.SIGKILL, died.stderr
    [job] = afc.json("status")["jobs"]
    assert (job["status"], job["waiting"]) == ("running", PROCESS_GONE)
    assert "is gone" in afc("status", "--all").stdout
    assert afc("resume").returncode == 0  # taken over and finished
    [job] = afc.json("status")["jobs"]
    assert (job["status"], job["waiting"]) == ("succeeded", None)


def test_a_live_holder_a_spool_hold_and_a_moved_ledger_are_not_gone():
    from afc_cli.owner import MOVED_OWNER, current_owner, host_lease

    now = 1000.0
    live = {"lease_owner": current_owner(), "lease_expires": now + 60}
    assert not process_gone(live, now)
    assert process_gone({**live, "lease_expires": now - 1}, now)  # another host's, lapsed
    assert process_gone({"lease_owner": "elsewhere:1:1", "lease_expires": now - 1}, now)
    assert not process_gone({"lease_owner": "elsewhere:1:1", "lease_expires": now + 1}, now)
    assert not process_gone({"lease_owner": MOVED_OWNER, "lease_expires": 9e18}, now)
    assert not process_gone({"lease_owner": host_lease(), "lease_expires": now - 1}, now)
    assert not process_gone({"lease_owner": None, "lease_expires": None}, now)


def test_a_lease_that_never_ends_is_refused(afc, monkeypatch):
    """``AFC_LEASE_S=inf`` (or 1e400) was taken: a dead host's jobs were never taken over."""
    from afc_cli.errors import UsageError
    from afc_cli.run import MAX_LEASE_S, lease_seconds

    for value in ("inf", "1e400", "nan", str(MAX_LEASE_S + 1), "2"):
        monkeypatch.setenv("AFC_LEASE_S", value)
        try:
            lease_seconds()
        except UsageError as exc:
            assert "AFC_LEASE_S must be a number of seconds from 3 to 86400" in str(exc)
        else:
            raise AssertionError(f"AFC_LEASE_S={value} was taken")
    monkeypatch.setenv("AFC_LEASE_S", str(MAX_LEASE_S))
    assert lease_seconds() == MAX_LEASE_S
    afc.write_manifest(manifest([{"key": "a", "prompt": "a"}]))
    refused = afc("submit", "manifest.yaml", env={"AFC_LEASE_S": "inf"})
    assert refused.returncode == 2 and "AFC_LEASE_S" in refused.stderr
