"""What a run's live progress shows, kept apart from how it is drawn.

``RunProgress`` folds the pipeline's events (``afc_cli/run.py`` lists them) into figures: jobs
succeeded, failed, waiting (why, and when the next try is), in flight and queued; the spend so
far against the budget; the rate and an ETA. ``lines`` turns them into a few lines of text
for a terminal of a given width; ``take`` hands back the messages to print above the live
lines once each (a failure as it happens), with repeats of the same message collapsed. Pure
apart from the injected clocks, so tests drive it without a terminal and without sleeping.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from afc_cli.costs import format_usd

FAILED = ("failed", "dead")
# how a job a claim found held by another afc process ends in this run (``pipeline._run_job``)
LEFT_ELSEWHERE = "here: left to another afc process"
# Distinct messages remembered to collapse their repeats (``RunProgress._say``), the least
# recently seen forgotten first: a message that names its job (a spool file, an output path)
# is a new one every time, and a worker on a terminal remembered each for as long as it ran.
SEEN_MESSAGES = 1024
_FIGURES = re.compile(r"\d+(\.\d+)?")


def same_message(text: str) -> str:
    """Two messages that differ only in their figures (a spend, an attempt number) repeat
    each other: a budget stop says the same thing for every job it stops."""
    return _FIGURES.sub("#", text)


def duration(seconds: float) -> str:
    seconds = max(int(round(seconds)), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def job_reason(job: dict[str, Any]) -> str:
    """Why a job ended where it did, in one line."""
    if job.get("error_message"):
        code = job.get("error_code")
        return f"{code}: {job['error_message']}" if code else job["error_message"]
    return job.get("waiting_reason") or paused_reason(job)


def paused_reason(job: dict[str, Any]) -> str:
    """Why a job rests for a person (a review) or for other jobs (its needs), else ''."""
    if job.get("status") == "awaiting_review":
        return "its output is stored; 'afc review approve KEY' (or reject) decides"
    if job.get("status") == "blocked":
        return "it waits for the jobs it needs ('afc show KEY' names them)"
    return ""


@dataclass
class _Active:
    waiting: bool = False
    reason: str | None = None
    until: float | None = None  # when the wait ends, on RunProgress.clock (monotonic)


class RunProgress:
    def __init__(
        self,
        total: int,
        cap_micros: int | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ):
        self.total = total
        self.cap_micros = cap_micros
        self.clock = clock
        self.wall = wall
        self.started_at = clock()
        self.succeeded = 0
        self.failed = 0
        self.left_waiting = 0  # ended this run still waiting (budget, storage): a later run
        self.other = 0  # cancelled, left blocked, or already taken by another run
        # told ended blocked, or left to another process: they may end again
        self._left_blocked: set[str] = set()
        self.active: dict[str, _Active] = {}
        self.spent_micros = 0
        self.unpriced = 0
        self.run_state: str | None = None
        self._messages: list[str] = []
        self._seen: dict[str, None] = {}  # message shapes, least recently seen first
        self._repeats = 0
        self._lock = threading.Lock()  # events come from the run's loop, drawing from rich's

    # --- what happened -------------------------------------------------------------------

    def event(self, job: dict[str, Any], event: str, detail: str, **info: Any) -> None:
        with self._lock:
            self._event(job, event, detail, info)

    def _event(self, job: dict[str, Any], event: str, detail: str, info: dict[str, Any]):
        job_id = job.get("id") or f"{job.get('batch')}/{job.get('key')}"
        if event in ("started", "attempt"):
            self.active[job_id] = _Active()
        elif event == "waiting":
            until = info.get("until")  # the wall clock's, as the run computed it just now
            if until is not None:
                # kept on the monotonic clock: an NTP step or a suspend of the wall clock
                # during the wait does not move the next try it shows
                until = self.clock() + (until - self.wall())
            self.active[job_id] = _Active(True, info.get("reason") or detail, until)
        elif event in ("attempt_failed", "rendered"):
            if "cost_micros" in info:
                cost = info["cost_micros"]
                if cost is None:
                    self.unpriced += 1
                else:
                    self.spent_micros += cost
        elif event == "ended":
            self.active.pop(job_id, None)
            if job_id in self._left_blocked:
                # told ended blocked, then run at the run's end (a need decided meanwhile), or
                # left to another afc process that let go of it meanwhile
                # (``run._take_released``): one job, counted once, by its last end
                self._left_blocked.discard(job_id)
                self.other -= 1
            if detail in ("blocked", LEFT_ELSEWHERE):
                self._left_blocked.add(job_id)
            if detail == "succeeded":
                self.succeeded += 1
            elif detail in FAILED:
                self.failed += 1
                self._say(f"{job['batch']}/{job['key']}: {detail}: {job_reason(job)}")
            elif detail == "waiting":
                self.left_waiting += 1
                self._say(f"{job['batch']}/{job['key']}: left waiting: {job_reason(job)}")
            else:
                self.other += 1

    def _say(self, message: str) -> None:
        """Queue a message once; a repeat (same up to its figures and its job) is counted."""
        shape = same_message(message.split(": ", 1)[1] if ": " in message else message)
        if shape in self._seen:
            self._repeats += 1
            del self._seen[shape]  # seen again: the last to be forgotten
            self._seen[shape] = None
            return
        if len(self._seen) >= SEEN_MESSAGES:
            del self._seen[next(iter(self._seen))]
        self._seen[shape] = None
        self._messages.append(message)

    def state(self, message: str | None) -> None:
        with self._lock:
            self.run_state = message

    def take(self) -> list[str]:
        """Messages not yet shown, each once."""
        with self._lock:
            out, self._messages = self._messages, []
            return out

    @property
    def repeats(self) -> int:
        return self._repeats

    # --- figures ---------------------------------------------------------------------------

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed + self.left_waiting + self.other

    def rate(self) -> float | None:
        elapsed = self.clock() - self.started_at
        if self.finished == 0 or elapsed <= 0:
            return None
        return self.finished / elapsed

    def eta(self) -> float | None:
        rate = self.rate()
        if rate is None:
            return None
        return (self.total - self.finished) / rate

    def waiting_summary(self) -> str | None:
        """``waiting 3: rate_limited ×2, budget reached; next try 07:41:02 (in 18s)``"""
        waits = [a for a in self.active.values() if a.waiting]
        if not waits:
            return None
        reasons: dict[str, int] = {}
        for a in waits:
            reasons[a.reason or "?"] = reasons.get(a.reason or "?", 0) + 1
        listed = ", ".join(f"{r} ×{n}" if n > 1 else r for r, n in reasons.items())
        text = f"waiting {len(waits)}: {listed}"
        times = [a.until for a in waits if a.until is not None]
        if times:
            left = max(min(times) - self.clock(), 0)
            clock = time.strftime("%H:%M:%S", time.localtime(self.wall() + left))
            text += f"; next try {clock} (in {left:.0f}s)"
        return text

    def lines(self) -> list[str]:
        """Below the bar: the counts; the spend against the budget, rate and ETA; then why
        jobs wait, the run's state and how many repeats were collapsed, when there are any."""
        with self._lock:
            working = sum(1 for a in self.active.values() if not a.waiting)
            waiting = sum(1 for a in self.active.values() if a.waiting) + self.left_waiting
            queued = max(self.total - self.finished - len(self.active), 0)
            counts = (
                f"ok {self.succeeded}  failed {self.failed}  waiting {waiting}  "
                f"in flight {working}  queued {queued}"
            )
            spent = f"spent {format_usd(self.spent_micros)}"
            if self.cap_micros is not None:
                spent += f" of {format_usd(self.cap_micros)}"
            spent += " USD"
            if self.unpriced:
                spent += f" + {self.unpriced} unpriced"
            rate, eta = self.rate(), self.eta()
            timing = [spent]
            timing.append(f"{rate:.1f} jobs/s" if rate is not None else "- jobs/s")
            timing.append(f"ETA {duration(eta)}" if eta is not None else "ETA -")
            out = [counts, "  ".join(timing)]
            summary = self.waiting_summary()
            if summary:
                out.append(summary)
            if self.run_state:
                out.append(self.run_state)
            if self.repeats:
                out.append(
                    f"({self.repeats} repeated message{'s' if self.repeats != 1 else ''} not shown again)"
                )
            return out

    def head(self) -> str:
        """Beside the bar: ``37/120 0:00:09``."""
        return f"{self.finished}/{self.total} {duration(self.clock() - self.started_at)}"
