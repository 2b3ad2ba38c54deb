"""Two machines (or two containers of one machine, each with its own pid namespace) that run
afc under one AFC_HOST_ID: each found the other's pids no processes of its own, so took the
other's live jobs over at once (a worker's claim looks for this host's dead runs every 10 s)
and both paid for them. Owner ids now carry the fingerprint of the process table their pid is
in (owner.process_fingerprint): an owner naming this host id from another machine, boot or pid
namespace is judged by its lease's expiry alone, never by /proc nor by lease_mono (outside
audit 28a; left by 27c)."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time

import pytest
from conftest import jobs, ledger_count, manifest, wait_for_ledger

from afc_cli import owner

# --- the rules, unit by unit ----------------------------------------------------------------


@pytest.fixture
def render07(monkeypatch):
    """This process as host 'render-07', its fingerprint known."""
    monkeypatch.setenv("AFC_HOST_ID", "render-07")
    monkeypatch.setattr(owner, "_identity", lambda: ("a" * 16, "b" * 16, "4026531836"))
    owner.current_owner.cache_clear()
    yield
    owner.current_owner.cache_clear()


def test_an_owner_of_this_host_id_from_another_process_table_is_judged_by_its_lease(render07):
    mine = owner.current_owner()
    assert mine.endswith(":@" + "a" * 16 + "." + "b" * 16 + ".4026531836")
    assert owner.host_of(mine) == "render-07" and owner.shown(mine).count(":") == 2
    other_machine = f"render-07:999999:1:@{'c' * 16}.{'d' * 16}.4026531836"
    other_container = f"render-07:999999:1:@{'a' * 16}.{'b' * 16}.4026532180"
    rebooted = f"render-07:999999:1:@{'a' * 16}.{'e' * 16}.4026531836"
    for other in (other_machine, other_container, rebooted):
        assert not owner.owner_is_dead(other), other
        assert not owner.sees_process(other)
        # held until its lease runs out by the ledger's clock, whatever lease_mono says
        assert owner.lease_held(other, 100.0, 50.0, mono=-1.0)
        assert not owner.lease_held(other, 100.0, 150.0, mono=1e18)
    # this process table's: /proc decides, as before (pid 999999 is no process)
    same = f"render-07:999999:1:@{'a' * 16}.{'b' * 16}.4026531836"
    assert owner.sees_process(same) and owner.owner_is_dead(same)
    # an older build's owner id (no fingerprint) is judged as it was
    assert owner.owner_is_dead("render-07:999999:1")
    assert owner.parse_owner("render-07:999999:1") == ("render-07", "999999", "1", None)
    assert not owner.owner_is_dead("render-08:999999:1")
    # a host id with colons is read from the right
    assert owner.parse_owner(f"a:b:5:7:@-.{'b' * 16}.9") == ("a:b", "5", "7", f"@-.{'b' * 16}.9")
    assert owner.parse_owner("a:b:5:7") == ("a:b", "5", "7", None)
    assert owner.parse_owner(owner.MOVED_OWNER)[3] is None


def test_a_spool_hold_is_this_machines_across_a_reboot_and_no_other_machines(render07, monkeypatch):
    hold = owner.host_lease()
    assert hold == f"render-07:0:0:@{'a' * 16}"
    assert owner.is_host_lease(hold) and owner.is_own_host_lease(hold) and owner.owner_is_dead(hold)
    # a reboot changes the boot id, not the machine id: still this host's spool hold
    monkeypatch.setattr(owner, "_identity", lambda: ("a" * 16, "f" * 16, "4026531836"))
    assert owner.is_own_host_lease(hold) and owner.owner_is_dead(hold)
    # another machine's under the same host id: its lease decides
    other = f"render-07:0:0:@{'c' * 16}"
    assert owner.is_host_lease(other) and not owner.is_own_host_lease(other)
    assert not owner.owner_is_dead(other) and owner.lease_held(other, 100.0, 50.0)
    # an older build's hold named the host alone: this host's, as before
    assert owner.is_own_host_lease("render-07:0:0") and owner.owner_is_dead("render-07:0:0")
    # the hold of the machine a render was made on, from its process's owner id
    render = f"render-07:4242:1:@{'c' * 16}.{'d' * 16}.7"
    assert owner.host_lease_of(render) == other
    assert owner.is_spool_hold_of(other, render) and not owner.is_spool_hold_of(hold, render)
    assert owner.host_lease_of("render-07:4242:1") == "render-07:0:0"


def test_a_run_says_a_job_held_under_its_host_id_elsewhere_waits_for_its_lease(render07):
    """'afc resume' beside such a holder (another machine's, or this host's before a reboot)
    says why the job is left and until when, not that a process of this host runs it."""
    from afc_cli.run import note_held_elsewhere

    class Book:
        owner = owner.current_owner()

        def lease_clock(self):
            return 50.0

    rows = [
        {"status": "running", "lease_owner": f"render-07:4242:1:@{'c' * 16}.{'d' * 16}.9",
         "lease_expires": 100.0},
        {"status": "running", "lease_owner": "render-08:4242:1", "lease_expires": 100.0},
    ]  # fmt: skip
    note_held_elsewhere(Book(), rows)
    assert "another machine, boot or pid namespace" in rows[0]["waiting_reason"]
    assert "until its lease runs out" in rows[0]["waiting_reason"]
    assert "pid 4242 on render-08" in rows[1]["waiting_reason"]


# --- end to end: two workers under one AFC_HOST_ID ------------------------------------------


def _two_workers(afc, ledger_url, first_env, second_cmd, second_env):
    """A worker under AFC_HOST_ID=render-07 holds both jobs, its calls in flight; a second
    worker under the same id, on what looks like another process table, starts beside it.
    Returns the calls made (one line per call) and the second worker's stderr."""
    release, calls = afc.cwd / "release", afc.cwd / "calls.log"
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--no-run", "--ledger", ledger_url).returncode == 0
    common = {
        "AFC_HOST_ID": "render-07",
        "AFC_LOCAL_RELEASE": str(release),
        "AFC_LOCAL_CALL_LOG": str(calls),
    }
    first = afc.popen(
        "worker", "--until-idle", "--poll", "0.1", "--ledger", ledger_url,
        env={**common, "AFC_SPOOL_DIR": str(afc.cwd / "spool-1"), **first_env},
    )  # fmt: skip
    second = None
    try:
        both = "SELECT CASE WHEN COUNT(*) >= 2 THEN 1 ELSE 0 END FROM attempts"
        wait_for_ledger(afc, ledger_url, both + " WHERE status = 'started'", proc=first)
        env = {**afc.env, **common, "AFC_SPOOL_DIR": str(afc.cwd / "spool-2"), **second_env}
        second = subprocess.Popen(
            [*second_cmd, *afc.command("worker", "--until-idle", "--poll", "0.1")]
            + ["--ledger", ledger_url],
            cwd=afc.cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        # the second worker's first claim looks for this host's dead runs' jobs at once:
        # it took them over there (and called the provider again), or says it waits for them
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(second.stderr), daemon=True)
        reader.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and second.poll() is None:
            if len(calls.read_text().splitlines()) > 2 or any("waiting for" in x for x in lines):
                break
            time.sleep(0.05)
        release.touch()
        assert first.wait(timeout=60) == 0, first.stderr.read()
        second.wait(timeout=60)
        reader.join(timeout=10)
        said = "".join(lines)
        assert second.returncode == 0, said
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    return calls.read_text().splitlines(), said


def _paid_once(afc, ledger_url, calls):
    assert len(calls) == 2 and len(set(calls)) == 2, calls
    assert ledger_count(afc, ledger_url, "SELECT SUM(takeovers) FROM jobs") == 0
    assert (
        ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'") == 2
    )
    assert ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM attempts") == 2


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_a_container_with_its_own_pid_namespace_under_one_host_id_pays_for_no_job_twice(
    afc, ledger_url
):
    """Containers of one machine that share a host name, each with its own pid namespace:
    the second cannot see the first's pids, and took its two live jobs over at once, calling
    the provider for each again."""
    probe = subprocess.run(["unshare", "-Urpf", "--mount-proc", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("unprivileged pid namespaces are not allowed here")
    calls, said = _two_workers(afc, ledger_url, {}, ["unshare", "-Urpf", "--mount-proc"], {})
    _paid_once(afc, ledger_url, calls)
    assert "render-07" in said and "AFC_HOST_ID" in said, said


def test_two_machines_under_one_host_id_pay_for_no_job_twice(afc, ledger_url):
    """AFC_TEST_FINGERPRINT makes the two workers of this machine look like two machines': the
    second leaves the first's jobs alone and says why, up front. (Each can still see the
    other's pid here, so the payment itself is reproduced by the pid namespace test above.)"""
    calls, said = _two_workers(
        afc,
        ledger_url,
        {"AFC_TEST_FINGERPRINT": "machine-a"},
        [],
        {"AFC_TEST_FINGERPRINT": "machine-b"},
    )
    _paid_once(afc, ledger_url, calls)
    # said up front, naming the id and a holder, and what it waits for
    assert "same AFC_HOST_ID" in said and "'render-07'" in said, said
    assert "waiting for 2 job(s) other processes hold" in said, said


def test_without_a_machine_id_a_spool_hold_names_the_boot_not_the_host_alone(render07, monkeypatch):
    """A container image without /etc/machine-id: its spool hold named the host alone
    (``host:0:0``), so another machine's worker under the same host id took it as its own at
    once, found no spool file, and dead-lettered the job SPOOL_MISSING (or, for a retried job
    at its probe, rendered and paid again). The boot id stands in: one kernel's containers
    restart under the same one."""
    monkeypatch.setattr(owner, "_identity", lambda: (None, "b" * 16, "7"))
    hold = owner.host_lease()
    assert hold == f"render-07:0:0:@{'b' * 16}" and owner.is_own_host_lease(hold)
    mine = f"render-07:4242:1:@-.{'b' * 16}.7"  # a render of this machine's
    assert owner.host_lease_of(mine) == hold and owner.is_spool_hold_of(hold, mine)
    # on the other machine, under the same host id, without a machine id either
    monkeypatch.setattr(owner, "_identity", lambda: (None, "c" * 16, "7"))
    assert not owner.is_own_host_lease(hold) and not owner.owner_is_dead(hold)
    assert owner.lease_held(hold, 100.0, 50.0)
