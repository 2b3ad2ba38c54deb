"""Who holds a lease: host, pid and the process's start time (so a reused pid is not mistaken
for the process that died), then the fingerprint of the process table that pid is in
(``host:pid:start:@MACHINE.BOOT.PIDNS``). An owner whose process this process can see (this
host, this boot, this pid namespace) and that died has its lease void at once; any other
owner's lease is judged by its expiry on the ledger's clock alone.

``AFC_HOST_ID`` names this host in owner ids instead of its host name. A host name or an
``AFC_HOST_ID`` shared by several machines (a worker.env copied to every one) or by
containers with pid namespaces of their own no longer makes one take the other's live pids
for dead ones of its own: the fingerprint tells them apart (README, "Leases and fencing").
Owner ids written by older builds (``host:pid:start``, no fingerprint) are judged as they
were: by ``/proc`` whenever they name this host."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import time
from functools import cache


def _start_ticks(pid: int) -> str | None:
    """The start time of a live process ``pid`` (in clock ticks since boot), or None when it
    is gone: no /proc entry, or a process that has died and waits for its parent to reap it
    (state Z or X), whose entry stays until then (an afc that a script started and killed,
    not waited for yet: its jobs are taken over at once, not after its lease)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode(errors="replace")
    except OSError:
        return None
    # the command name (field 2) may contain spaces; fields after it are space-separated
    fields = stat.rsplit(")", 1)[-1].split()
    if fields and fields[0] in ("Z", "X"):
        return None
    return fields[19] if len(fields) > 19 else None


def host_id() -> str:
    return os.environ.get("AFC_HOST_ID") or socket.gethostname()


# ``AFC_TEST_FINGERPRINT``, for tests only: stands for this machine's machine id and boot id,
# so two afc processes of one machine look like processes of two machines (its pid namespace
# is then "1"): tests/test_audit28a_shared_host_id.py. Never set it in production.
TEST_FINGERPRINT_ENV = "AFC_TEST_FINGERPRINT"


def _digest(kind: str, value: str) -> str:
    # an application-specific hash, as systemd asks of machine ids written anywhere shared
    return hashlib.sha256(f"afc-{kind}:{value}".encode()).hexdigest()[:16]


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return ""


@cache
def _identity() -> tuple[str | None, str | None, str | None]:
    """This process's (machine, boot, pid namespace): the machine id (``/etc/machine-id``,
    stable across reboots: a host's spool is on its disk) hashed, the kernel's boot id
    hashed, and the inode of its pid namespace; None where there is none (not Linux)."""
    test = os.environ.get(TEST_FINGERPRINT_ENV)
    if test:
        return _digest("machine", test), _digest("boot", test), "1"
    machine = None
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        text = _read(path)
        if text and text != "uninitialized":
            machine = _digest("machine", text)
            break
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        pidns = os.readlink("/proc/self/ns/pid")  # pid:[4026531836]
    except OSError:
        pidns = ""
    found = re.fullmatch(r"pid:\[([0-9]+)\]", pidns)
    if not boot or found is None:
        return machine, None, None
    return machine, _digest("boot", boot), found.group(1)


def process_fingerprint() -> str | None:
    """The last field of this process's owner id: ``@MACHINE.BOOT.PIDNS`` (``-`` for a
    machine without a machine id), naming the process table its pid is in; None without a
    boot id or a pid namespace to name (then owner ids are written as older builds wrote
    them)."""
    machine, boot, pidns = _identity()
    if boot is None:
        return None
    return f"@{machine or '-'}.{boot}.{pidns}"


def machine_fingerprint() -> str | None:
    """The last field of this host's spool hold (``host_lease``): ``@MACHINE``, the same
    after a reboot, since the spool it holds for is on this machine's disk. Without a machine
    id (a container image without /etc/machine-id) the boot id's hash stands in, the same for
    every container of that kernel and across their restarts, not across a reboot: named by
    the host alone, as older builds wrote it, another machine under the same host id took the
    hold as its own at once, with no spool file there. None without either."""
    machine, boot, _ = _identity()
    found = machine or boot
    return None if found is None else f"@{found}"


_PROCESS_FP = re.compile(r"@(?:[0-9a-f]{16}|-)\.[0-9a-f]{16}\.[0-9]+")
_MACHINE_FP = re.compile(r"@[0-9a-f]{16}")


def _with(owner: str, fingerprint: str | None) -> str:
    return owner if fingerprint is None else f"{owner}:{fingerprint}"


@cache
def current_owner() -> str:
    pid = os.getpid()
    return _with(f"{host_id()}:{pid}:{_start_ticks(pid) or '0'}", process_fingerprint())


def parse_owner(owner: str | None) -> tuple[str, str, str, str | None] | None:
    """An owner id's (host, pid, start, fingerprint): the fingerprint None for one an older
    build wrote (``host:pid:start``); None for a text that is no owner id. The host may hold
    colons (it is read from the right); the fingerprint never does."""
    text = owner or ""
    head, _, last = text.rpartition(":")
    fingerprint = None
    if head and (_PROCESS_FP.fullmatch(last) or _MACHINE_FP.fullmatch(last)):
        text, fingerprint = head, last
    parts = text.rsplit(":", 2)
    if len(parts) != 3:
        return None
    return parts[0], parts[1], parts[2], fingerprint


def host_of(owner: str | None) -> str:
    """The host part of an owner id (``host:pid:start[:fingerprint]``); "" for none."""
    parsed = parse_owner(owner)
    return parsed[0] if parsed is not None else (owner or "").rsplit(":", 2)[0]


def fingerprint_of(owner: str | None) -> str | None:
    """An owner id's fingerprint (``@...``); None for an older build's, or no owner id."""
    parsed = parse_owner(owner)
    return None if parsed is None else parsed[3]


def process_named(owner: str | None) -> str:
    """The process an owner id names, as messages name it: ``pid N on HOST``."""
    host, pid = (parse_owner(owner) or (owner or "", "?"))[:2]
    return f"pid {pid} on {host}"


def shown(owner: str | None) -> str:
    """An owner id as messages show it: ``host:pid:start``, without its fingerprint."""
    parsed = parse_owner(owner)
    return ":".join(parsed[:3]) if parsed is not None else (owner or "")


def host_lease() -> str:
    """An owner id that holds a job for this host rather than for one of its processes: pid 0,
    which no process has, and this machine's fingerprint (``machine_fingerprint``). Any run on
    this machine under this host id finds that owner dead, so takes the job at once (with no
    takeover counted: ``Ledger.claim``), after a reboot too; a run on another host (or another
    machine under the same host id) waits for the lease to expire, as for any other host's
    job. A job that waits for storage with its paid output in this host's spool is leased so
    (``Ledger.set_waiting``): no other host meets it without its spool file before this one
    has had a lease's time to store it."""
    return _with(f"{host_id()}:0:0", machine_fingerprint())


def host_lease_of(owner: str | None) -> str | None:
    """The spool hold of the machine a process owner ran on (the host whose spool a render
    of that process is in); None for no owner id."""
    parsed = parse_owner(owner)
    if parsed is None:
        return None
    host, _, _, fingerprint = parsed
    if not fingerprint or not _PROCESS_FP.fullmatch(fingerprint):
        return f"{host}:0:0"
    machine, boot, _ = fingerprint[1:].split(".")
    return f"{host}:0:0:@{boot if machine == '-' else machine}"  # as machine_fingerprint


def is_host_lease(owner: str | None) -> bool:
    parsed = parse_owner(owner)
    return parsed is not None and parsed[1:3] == ("0", "0")


def is_spool_hold_of(holder: str | None, owner: str) -> bool:
    """Whether ``holder`` is the spool hold (``host_lease``) of the machine ``owner`` runs on:
    its host's, with that machine's fingerprint (either without one, as an older build wrote
    them: judged by the host alone, as then)."""
    parsed = parse_owner(holder)
    return (
        parsed is not None
        and parsed[1:3] == ("0", "0")
        and parsed[0] == host_of(owner)
        and (parsed[3] is None or fingerprint_of(owner) is None or holder == host_lease_of(owner))
    )


def is_own_host_lease(owner: str | None) -> bool:
    """A spool hold of this host (``host_lease``): this host id's, of this machine (or one an
    older build wrote, which named the host alone)."""
    parsed = parse_owner(owner)
    return (
        parsed is not None
        and parsed[1:3] == ("0", "0")
        and parsed[0] == host_id()
        and (parsed[3] is None or parsed[3] == machine_fingerprint())
    )


def sees_process(owner: str | None) -> bool:
    """Whether an owner's pid is one of this process's process table: it names this host and
    its fingerprint is this process's boot and pid namespace (or it has none: an older
    build's, judged as it was). Only such an owner may be judged by ``/proc`` or by
    ``lease_mono`` (this kernel's monotonic clock); any other by its lease's expiry on the
    ledger's clock alone, whatever host it names: another machine, or a container with its
    own pid namespace, run under this host id has pids and a clock of its own."""
    parsed = parse_owner(owner)
    if parsed is None or parsed[0] != host_id():
        return False
    fingerprint = parsed[3]
    if fingerprint is None:
        return True
    mine = process_fingerprint()
    if mine is None or not _PROCESS_FP.fullmatch(fingerprint):
        return False
    return fingerprint.split(".")[1:] == mine.split(".")[1:]


# The owner a ledger's unfinished jobs are leased to for good once ``afc ledger copy`` moved
# its work elsewhere (afc_cli/ledger/copy.py): no process has it, none finds it dead (its pid
# is no number), and its lease never runs out (ledger.core.MOVED_UNTIL), so no claim takes
# those jobs.
MOVED_OWNER = "afc-ledger-copy:moved:-"


def held_by_no_process(owner: str | None) -> bool:
    """A lease no process holds, though ``lease_held`` keeps claims off it: a host's spool
    hold (``host_lease``) or a moved ledger's (``MOVED_OWNER``). Nothing to wait for before
    a migration (``ledger_file.check_no_live_runs``) or a copy (``ledger/copy.py``)."""
    return is_host_lease(owner) or owner == MOVED_OWNER


def owner_is_dead(owner: str | None) -> bool:
    """True only when we can tell for certain that the owning process is gone: a process of
    this process table (``sees_process``) whose pid is gone or was reused, or this machine's
    spool hold (``is_own_host_lease``). Never another machine's, boot's or pid namespace's,
    whatever host id it names."""
    if not owner:
        return True
    parsed = parse_owner(owner)
    if parsed is None:
        return False
    host, pid_text, ticks, _ = parsed
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    if host != host_id():
        return False
    if owner == current_owner():
        return False
    if pid == 0:  # a lease held for this host, no process (host_lease): this machine's
        return is_own_host_lease(owner)
    if not sees_process(owner):
        return False  # another machine's, boot's or container's pid: its lease decides
    now_ticks = _start_ticks(pid)
    if now_ticks is not None:
        return ticks != "0" and now_ticks != ticks
    if os.path.isdir("/proc"):
        return True  # no /proc entry: the process is gone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def awake_clock() -> float:
    """Seconds on Linux's ``CLOCK_BOOTTIME`` (the monotonic clock where there is none): never
    stepped, and, unlike ``time.monotonic()``, it goes on while the host is suspended, as other
    hosts' clocks and the database server's do. What a lease's renewals (run._renew), the look
    before a paid request (pipeline._awake_since) and PostgreSQL's lease clock between its
    samples (PostgresLedger.lease_clock) are timed by: on the monotonic clock, a host woken
    from a suspend found no time had passed, renewed late, sent requests for jobs taken over
    meanwhile, and wrote leases short by the whole suspend."""
    if hasattr(time, "CLOCK_BOOTTIME"):
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    return time.monotonic()


def lease_held(
    owner: str | None, expires: float | None, now: float, mono: float | None = None
) -> bool:
    """Whether a live run holds a job's lease: the rule a takeover follows (``Ledger.claim``),
    a cancel (which leaves a live run's call to it) and a re-submit's gates (which change
    only a job no run holds). Not one whose lease ran out by the ledger's clock (``now``), nor
    one whose process is known to be gone.

    A live process of this host (its boot and pid namespace: ``sees_process``) holds its
    lease until ``mono`` (``jobs.lease_mono``: the expiry on this host's monotonic clock, which
    every process of the host shares, and no other machine's or boot's does) where it
    wrote one, whatever the wall clock says: a step of the wall clock (NTP) or a suspend
    (the monotonic clock, which the run's renewals wait on, stands still while the host
    sleeps; the wall clock does not) would otherwise make a live run's jobs look expired to
    another afc process here at once, which would take them over and pay for them again.
    A stalled process (``SIGSTOP``, a hung disk) still loses them once its lease has run out
    on that clock."""
    if owner is None:
        return False
    if mono is not None and not is_host_lease(owner) and sees_process(owner):
        return mono >= time.monotonic() and not owner_is_dead(owner)
    return (expires or 0) >= now and not owner_is_dead(owner)


def process_gone(
    owner: str | None, expires: float | None, now: float, mono: float | None = None
) -> bool:
    """Whether no live run holds a job any more: its lease's process died on this host, or
    the lease ran out (``lease_held``: the rule a takeover follows), or nothing holds it (no
    owner: a retry freed it), or ``afc ledger copy`` moved it (``MOVED_OWNER``: no run here
    takes it again). The one rule for "its run is gone": a call such a run left ``started``
    is abandoned, which the run that takes the job over marks ``unknown``, and every figure
    counts it so before that run comes (``Ledger.gone_calls``, ``Ledger.cost_groups``);
    ``afc status`` says a job's process is gone when a process held it
    (``listing.process_gone``: not a free job, nor a lease ``held_by_no_process``)."""
    return owner == MOVED_OWNER or not lease_held(owner, expires, now, mono)
