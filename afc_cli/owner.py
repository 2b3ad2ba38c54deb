"""Who holds a lease: host, pid and the process's start time (so a reused pid is not mistaken
for the process that died). On the same host a dead owner's lease is void at once; elsewhere
the lease's expiry decides.

``AFC_HOST_ID`` names this host in owner ids instead of its host name: workers in containers
that share one host name on different machines must each set a distinct one, or one would
take the other's pid for a process of its own."""

from __future__ import annotations

import os
import socket
import time
from functools import cache


def _start_ticks(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode(errors="replace")
    except OSError:
        return None
    # the command name (field 2) may contain spaces; fields after it are space-separated
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def host_id() -> str:
    return os.environ.get("AFC_HOST_ID") or socket.gethostname()


@cache
def current_owner() -> str:
    pid = os.getpid()
    return f"{host_id()}:{pid}:{_start_ticks(pid) or '0'}"


def host_of(owner: str | None) -> str:
    """The host part of an owner id (``host:pid:start``); "" for none."""
    return (owner or "").rsplit(":", 2)[0]


def host_lease() -> str:
    """An owner id that holds a job for this host rather than for one of its processes: pid 0,
    which no process has. Any run on this host finds that owner dead, so takes the job at once
    (with no takeover counted: ``Ledger.claim``); a run on another host waits for the lease to
    expire, as for any other host's job. A job that waits for storage with its paid output in
    this host's spool is leased so (``Ledger.set_waiting``): no other host meets it without its
    spool file before this one has had a lease's time to store it."""
    return f"{host_id()}:0:0"


def is_host_lease(owner: str | None) -> bool:
    return (owner or "").rsplit(":", 2)[1:] == ["0", "0"]


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
    """True only when we can tell for certain that the owning process is gone."""
    if not owner:
        return True
    try:
        host, pid_text, ticks = owner.rsplit(":", 2)
        pid = int(pid_text)
    except ValueError:
        return False
    if host != host_id():
        return False
    if owner == current_owner():
        return False
    if pid == 0:  # a lease held for this host, no process (host_lease)
        return True
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

    A live process of this host holds its lease until ``mono`` (``jobs.lease_mono``: the
    expiry on this host's monotonic clock, which every process of the host shares) where it
    wrote one, whatever the wall clock says: a step of the wall clock (NTP) or a suspend
    (the monotonic clock, which the run's renewals wait on, stands still while the host
    sleeps; the wall clock does not) would otherwise make a live run's jobs look expired to
    another afc process here at once, which would take them over and pay for them again.
    A stalled process (``SIGSTOP``, a hung disk) still loses them once its lease has run out
    on that clock."""
    if owner is None:
        return False
    if mono is not None and host_of(owner) == host_id() and not is_host_lease(owner):
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
