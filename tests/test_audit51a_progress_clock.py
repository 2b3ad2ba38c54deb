"""Outside audit 51a: the progress panel's 'next try' after the wall clock steps mid-wait."""

from __future__ import annotations

import time

from afc_cli.progress import RunProgress


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def _waiting(progress: RunProgress) -> str:
    return progress.waiting_summary() or ""


def test_the_next_try_does_not_move_when_the_wall_clock_steps_during_the_wait():
    """A job waits out a 20 s Retry-After; NTP steps the wall clock back an hour two seconds
    in (or a laptop's clock is corrected). The panel said 'next try 07:41:20 (in 3618s)': an
    hour's wait for what the run sleeps 18 s more, the very 'hang' the panel is there to rule
    out; stepped forward an hour, it said 'in 0s' for the rest of the wait. The wait's end is
    kept on the monotonic clock, which the run's sleep follows."""
    mono, wall = Clock(1000.0), Clock(1_800_000_000.0)
    progress = RunProgress(2, clock=mono, wall=wall)
    progress.event({"id": "a", "batch": "b", "key": "a"}, "started", "probe")
    progress.event(
        {"id": "a", "batch": "b", "key": "a"},
        "waiting",
        "20.00s after rate_limited",
        reason="rate_limited",
        until=wall() + 20,
    )
    mono.now += 2
    wall.now += 2 - 3600  # set back an hour
    said = _waiting(progress)
    assert said.endswith("(in 18s)"), said
    assert time.strftime("%H:%M:%S", time.localtime(wall() + 18)) in said, said
    wall.now += 2 * 3600  # and forward an hour past where it was
    said = _waiting(progress)
    assert said.endswith("(in 18s)"), said
