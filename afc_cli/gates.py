"""What one admission refuses beyond its own conflicts, and which review gates and needs a
re-submit changes (the second half of this module), decided the same way by ``Ledger.admit``
and by ``afc plan`` (so the plan says what the submit will do).

A key whose request changed is refused as an ``IDEMPOTENCY_CONFLICT`` and keeps its admitted
request. A job the same admission would add that needs such a key (in ``needs``, or through a
``job`` input) is refused with it, and so, in turn, is every job that needs a job refused that
way: admitted, it would wait for the admitted request the manifest has just edited away, and a
``job`` input would send that request's stored output while its own request hash names the
refused one (an image it was never rendered from).

Jobs come in the manifest's order. A need is decided before its dependents when it comes
first (a ``job`` input always does: ``manifest.resolve_deferred``); a job whose need comes
later in the list (an explicit ``need`` may name any key) is held and decided by ``settle``
once every job has been seen. The manifest has no cycle and no unknown key, so every held
job is decided.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from afc_cli.errors import first_named


class _Held:
    def __repr__(self) -> str:
        return "HELD"


HELD: Any = _Held()  # ``Refusals.check``: a need is not decided yet; ``settle`` returns the job


class Refusals:
    def __init__(self) -> None:
        self.refused: dict[str, str | None] = {}  # key -> the refused need (None: its own)
        self.decided: set[str] = set()
        self.held: list[tuple[str, tuple[str, ...], Any]] = []

    def admitted_already(self, item: Any) -> bool:
        """Whether ``item`` is a job the ledger holds already (``Gates``: a re-gated one): a
        refused need cannot refuse it, and its dependents are not refused on its account."""
        return False

    def conflict(self, key: str) -> None:
        """``key``'s own request changed: it is refused."""
        self.refused[key] = None
        self.decided.add(key)

    def accept(self, key: str) -> None:
        self.decided.add(key)

    def check(self, key: str, needs: tuple[str, ...], item: Any) -> str | None:
        """A job that would be admitted, with its needs: the refused need that refuses it,
        None (it is admitted), or ``HELD`` (a need not decided yet; ``settle`` returns
        ``item``)."""
        for need in needs:
            if need in self.refused:
                if not self.admitted_already(item):
                    self.refused[key] = need
                self.decided.add(key)
                return need
        if any(need not in self.decided for need in needs):
            self.held.append((key, needs, item))
            return HELD
        self.decided.add(key)
        return None

    def settle(self) -> list[tuple[Any, str | None]]:
        """Each held job's ``item`` with the refused need that refuses it, or None.

        In dependency order, each held job once: a job is decided when the last of its
        undecided needs is (a count per job, and each need's held dependents), so a long
        chain listed in reverse costs one pass, not one pass per link (a review measured a
        20,000-job chain at 247 s with the pass-per-level way)."""
        from collections import deque

        held, self.held = self.held, []
        entries = {}
        undecided: dict[str, int] = {}
        dependents: dict[str, list[str]] = {}
        ready: deque[str] = deque()
        for key, needs, item in held:
            entries[key] = (needs, item)
            pending = {need for need in needs if need not in self.decided}
            undecided[key] = len(pending)
            for need in pending:
                dependents.setdefault(need, []).append(key)
            if not pending:
                ready.append(key)
        out: list[tuple[Any, str | None]] = []
        while ready:
            key = ready.popleft()
            needs, item = entries.pop(key)
            cause = next((need for need in needs if need in self.refused), None)
            if cause is not None and not self.admitted_already(item):
                self.refused[key] = cause
            self.decided.add(key)
            out.append((item, cause))
            for dependent in dependents.pop(key, ()):
                undecided[dependent] -= 1
                if undecided[dependent] == 0:
                    ready.append(dependent)
        # never, for a manifest that loaded (no cycle, no unknown key): admitted as they are
        out.extend((item, None) for _needs, item in entries.values())
        return out


def refused_dependent(job: Any, stored_hash: str | None, need: str) -> dict[str, Any]:
    """The conflict entry of a job refused because a job it needs was refused: the fields of
    every conflict (README, Idempotency), ``status`` null (a new job: never admitted), and
    ``refused_need``."""
    return {
        "key": job.key,
        "stored_hash": stored_hash,
        "new_hash": job.request_hash,
        "changes": [],
        "status": None,
        "inputs_changed": [],
        "refused_need": need,
    }


# --- review and needs at a re-submit ---------------------------------------------------------
#
# Neither ``review`` nor ``needs`` is part of the request: they are gates, not what is
# rendered. So a re-submit with the same request applies the manifest's gates to a job that
# has not started rendering (``not_started``), and says, per job and field, when it cannot:
# the job has been rendered (attempts), is being rendered, or has ended. A job whose new needs
# name a refused key keeps its admitted needs (a warning: it was admitted, and runs as
# admitted; its dependents are not refused on its account); new needs that would wait,
# through needs kept as admitted, for the job itself are not applied either (a cycle the
# manifest alone cannot show).

NOT_STARTED = ("queued", "blocked", "waiting")


def not_started(status: str, attempts: int, held: bool = False) -> bool:
    """A job no run has rendered (no attempt) nor holds (``held``: a live lease; a run reads
    the job's review flag when it claims it): its gates may still change."""
    return status in NOT_STARTED and not attempts and not held


@dataclass
class Regate:
    """A replayed job whose manifest gates differ from the admitted ones."""

    job: Any
    job_id: str
    status: str
    attempts: int
    review: bool  # as admitted
    needs: tuple[str, ...]  # as admitted
    stored_hash: str | None = None  # the admitted request hash
    webhook: str | None = None  # the admitted webhook (``Ledger.admit``)
    held: bool = False  # a live run holds its lease (``owner.lease_held``)
    owner: str | None = None  # the lease's owner as read (``Ledger._regate`` guards on it)

    @property
    def key(self) -> str:
        return self.job.key

    @property
    def fields(self) -> list[str]:
        return changed_gates(self.review, self.needs, self.job.review, self.job.needs)


@dataclass
class Change:
    """The gates a re-submit writes on a job: each None when it stays as admitted."""

    review: bool | None = None
    needs: tuple[str, ...] | None = None


def changed_gates(
    review: Any, needs: tuple[str, ...], new_review: Any, new_needs: tuple[str, ...]
) -> list[str]:
    fields = []
    if bool(review) != bool(new_review):
        fields.append("review")
    if set(needs) != set(new_needs):
        fields.append("needs")
    return fields


class Gates(Refusals):
    """``Refusals`` plus the gates of replayed jobs. ``stored``: the batch's needs as the
    ledger has them (key -> need keys)."""

    def __init__(self, stored: dict[str, tuple[str, ...]]) -> None:
        super().__init__()
        self.stored = stored
        self.graph: dict[str, set[str]] = {}  # key -> its needs, as the ledger will have them
        self.needed_by: dict[str, set[str]] = {}  # the same edges the other way
        for key, needs in stored.items():
            self._set_needs(key, needs)
        self.kept: list[dict[str, Any]] = []  # the changes that cannot take effect, why
        # the jobs found the same request as admitted by ``manifest.same_request``'s rule for
        # an earlier afc's body (hash now -> admitted hash), for the jobs using their outputs
        self.restates: dict[str, str] = {}

    def refused_request(self, regate: Regate) -> None:
        """An admitted job whose changed request is refused as a conflict (``conflict``):
        its admitted request runs with the gates it was admitted with, and a gate the same
        edit changed is said kept, not dropped unseen (a review asked for with a new prompt,
        the admitted request then rendered and used without one)."""
        self.conflict(regate.key)
        self.kept.extend(gate_kept(regate, name, None, conflict=True) for name in regate.fields)

    def fresh(self, key: str, needs: tuple[str, ...], item: Any) -> str | None:
        """A new job: as ``Refusals.check``."""
        cause = self.check(key, needs, item)
        if cause is None and needs:
            self._set_needs(key, needs)
        return cause

    def replay(self, regate: Regate) -> Change | str | None:
        """A replayed job whose gates may differ: the ``Change`` to write, None (nothing to
        write; a change that cannot take effect is in ``kept``), the refused need that
        refuses it, or ``HELD`` (``settle`` returns it)."""
        fields = regate.fields
        if not fields:
            self.accept(regate.key)
            return None
        if not not_started(regate.status, regate.attempts, regate.held):
            self.kept.extend(gate_kept(regate, name, None) for name in fields)
            self.accept(regate.key)
            return None
        if "needs" not in fields:
            self.accept(regate.key)
            return Change(review=bool(regate.job.review))
        cause = self.check(regate.key, regate.job.needs, regate)
        if cause is HELD:
            return cause
        if cause is not None:
            return self._refused_need(regate, cause)
        return self._change(regate)

    def admitted_already(self, item: Any) -> bool:
        return isinstance(item, Regate)

    def _refused_need(self, regate: Regate, need: str) -> Change | None:
        """New needs of an admitted job that name a refused key: the job is admitted already
        (refusing it now would not stop it: it runs as admitted), so its needs stay as
        admitted, said as a warning; a review change still applies."""
        self.kept.append(gate_kept(regate, "needs", None, refused=need))
        if "review" in regate.fields:
            return Change(review=bool(regate.job.review))
        return None

    def _change(self, regate: Regate) -> Change | None:
        needs = tuple(regate.job.needs)
        change = Change(review=bool(regate.job.review) if "review" in regate.fields else None)
        loop = self._waits_for(regate.key, needs)
        if loop is not None:
            self.kept.append(gate_kept(regate, "needs", loop))
            return change if change.review is not None else None
        change.needs = needs
        self._set_needs(regate.key, needs)
        return change

    def _set_needs(self, key: str, needs: Any) -> None:
        for need in self.graph.pop(key, ()):
            self.needed_by[need].discard(key)
        if needs:
            self.graph[key] = set(needs)
            for need in needs:
                self.needed_by.setdefault(need, set()).add(key)

    def _waits_for(self, key: str, needs: tuple[str, ...]) -> str | None:
        """The need through which ``key`` would wait for itself, else None.

        Whether any path leads from the needs to ``key`` is searched from both ends at once
        (the needs' needs forward, the jobs that need ``key`` backward), always widening the
        smaller side (in turn when equal): on a chain of needs one side is nearly empty
        whichever order the list comes in, so re-gating a long chain costs a step a job, not
        a walk of the chain (a review measured a 10,000-job chain at 9.7 s with a walk from
        each need)."""
        forward, ahead = set(needs), list(needs)
        backward, behind = {key}, [key]
        found = key in forward
        turn = True  # frontiers of one size widen in turn
        while not found and ahead and behind:
            if len(ahead) < len(behind) or (len(ahead) == len(behind) and turn):
                ahead = self._widen(ahead, forward, self.graph)
            else:
                behind = self._widen(behind, backward, self.needed_by)
            turn = not turn
            found = not forward.isdisjoint(backward)
        if not found:
            return None
        for need in needs:  # a loop exists (rare): name the need it goes through
            stack, seen = [need], set()
            while stack:
                at = stack.pop()
                if at == key:
                    return need
                if at not in seen:
                    seen.add(at)
                    stack.extend(self.graph.get(at, ()))
        return None

    @staticmethod
    def _widen(frontier: list[str], seen: set[str], edges: dict[str, set[str]]) -> list[str]:
        """One step of a search: the nodes next to ``frontier`` not seen yet (added to it)."""
        out = []
        for at in frontier:
            for nxt in edges.get(at, ()):
                if nxt not in seen:
                    seen.add(nxt)
                    out.append(nxt)
        return out

    def settle_all(self) -> list[tuple[Any, Any]]:
        """``settle``, each held item with its outcome: for a new job the refused need or
        None; for a ``Regate`` the refused need or its ``Change`` (or None)."""
        out = []
        for item, cause in self.settle():
            if isinstance(item, Regate):
                change = self._change(item) if cause is None else self._refused_need(item, cause)
                out.append((item, change))
            else:  # a new job
                if cause is None and item.needs:
                    self._set_needs(item.key, item.needs)
                out.append((item, cause))
        return out


def gate_kept(
    regate: Regate,
    name: str,
    loop: str | None,
    refused: str | None = None,
    conflict: bool = False,
) -> dict[str, Any]:
    """A gate change that cannot take effect, and why."""
    job = regate.job
    if name == "review":
        admitted, manifest = bool(regate.review), bool(job.review)
    else:
        admitted, manifest = sorted(regate.needs), sorted(job.needs)
    if conflict:
        why = (
            "its changed request was refused as a conflict, and the request admitted for the "
            "key runs as admitted"
        )
    elif refused is not None:
        why = (
            f"it names {refused!r}, whose change this submit refused (a conflict): the job "
            "was admitted before and runs as admitted ('afc cancel' stops it)"
        )
    elif loop is not None:
        why = (
            f"it would wait for {loop!r}, which waits for {job.key!r} through needs kept as "
            "admitted (a job already rendered keeps its needs)"
        )
    elif regate.attempts:
        why = f"the job has been rendered ({regate.attempts} attempt(s); now {regate.status})"
    elif regate.status == "running" or regate.held:
        why = "a run holds the job"
    else:
        why = f"the job is {regate.status}"
    return {
        "key": job.key,
        "field": name,
        "admitted": admitted,
        "manifest": manifest,
        "status": regate.status,
        "why": why,
    } | ({"conflict": True} if conflict else {})


def kept_message(kept: dict[str, Any]) -> str:
    """A gate change that does not take effect, as a warning."""

    def shown(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return "[" + ", ".join(value) + "]"

    if kept.get("conflict"):
        return (
            f"warning: key {kept['key']!r}: {kept['field']}: {shown(kept['manifest'])} in the "
            f"manifest does not take effect: {kept['why']}; it keeps {kept['field']}: "
            f"{shown(kept['admitted'])} as admitted. A new key renders the changed request "
            "under the new gates."
        )
    if kept["status"] == "awaiting_review" and kept["field"] == "review":
        # (a decision settles whether the output is used; a rendered job's needs stay as
        # admitted whatever is decided)
        from afc_cli.review import command

        then = f"'{command('approve', kept['key'])}' (or reject) decides it"
    else:
        then = "a new key renders the request again under the new gates"
    return (
        f"warning: key {kept['key']!r}: {kept['field']}: {shown(kept['manifest'])} in the "
        f"manifest does not take effect: {kept['why']}; it keeps {kept['field']}: "
        f"{shown(kept['admitted'])} as admitted. Gates change only on a job not yet "
        f"rendered; {then}."
    )


def changed_message(changed: list[dict[str, Any]], verb: str = "changed") -> str:
    """The jobs whose gates a re-submit changed (each ``{"key", "review"?, "needs"?}``)."""
    parts = [
        f"{c['key']} ({', '.join(name for name in ('review', 'needs') if name in c)})"
        for c in changed
    ]
    return f"gates {verb} on jobs not yet rendered: " + first_named(parts, 10)
