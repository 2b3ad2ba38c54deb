"""What one admission refuses beyond its own conflicts, decided the same way by
``Ledger.admit`` and by ``afc plan`` (so the plan says what the submit will do).

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

from typing import Any


class _Held:
    def __repr__(self) -> str:
        return "HELD"


HELD: Any = _Held()  # ``Refusals.check``: a need is not decided yet; ``settle`` returns the job


class Refusals:
    def __init__(self) -> None:
        self.refused: dict[str, str | None] = {}  # key -> the refused need (None: its own)
        self.decided: set[str] = set()
        self.held: list[tuple[str, tuple[str, ...], Any]] = []

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
                self.refused[key] = need
                self.decided.add(key)
                return need
        if any(need not in self.decided for need in needs):
            self.held.append((key, needs, item))
            return HELD
        self.decided.add(key)
        return None

    def settle(self) -> list[tuple[Any, str | None]]:
        """Each held job's ``item`` with the refused need that refuses it, or None."""
        held, self.held = self.held, []
        out: list[tuple[Any, str | None]] = []
        while held:
            rest = []
            for key, needs, item in held:
                cause = next((need for need in needs if need in self.refused), None)
                if cause is not None:
                    self.refused[key] = cause
                elif any(need not in self.decided for need in needs):
                    rest.append((key, needs, item))
                    continue
                self.decided.add(key)
                out.append((item, cause))
            if len(rest) == len(held):  # never, for a manifest that loaded (no cycle)
                out.extend((item, None) for _, _, item in rest)
                break
            held = rest
        return out


def refused_dependent(job: Any, stored_hash: str | None, need: str) -> dict[str, Any]:
    """The conflict entry of a job refused because a job it needs was refused."""
    return {
        "key": job.key,
        "stored_hash": stored_hash,
        "new_hash": job.request_hash,
        "changes": [],
        "refused_need": need,
    }
