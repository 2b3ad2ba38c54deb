"""A worker's claims look for blocked jobs whose needs have ended on a schedule of their own
(afc_cli/worker.py ``Settle``): the look reads every blocked job, so it is made at most once
per twenty times its last duration, and always before ``--until-idle`` says it is idle."""

from __future__ import annotations

from conftest import jobs, manifest
from test_issue17_review import style_manifest

from afc_cli import worker as worker_mod
from afc_cli.ledger import Ledger
from afc_cli.worker import SETTLE_AT_ONCE, SETTLE_SHARE, Settle, work


class _Book:
    """A ledger whose look takes ``took`` seconds of the test's clock."""

    def __init__(self, clock: list[float], took: float, settled: int = 0):
        self.clock, self.took, self.settled = clock, took, settled
        self.looks: list[tuple[float, str | None]] = []

    def settle_ready_blocked(
        self, batch: str | None = None, limit: int = 1000, failed: list | None = None
    ) -> int:
        self.looks.append((self.clock[0], batch))
        self.clock[0] += self.took
        return self.settled


def test_a_look_is_made_again_only_once_twenty_times_its_duration_has_passed():
    clock = [100.0]
    book = _Book(clock, took=0.01, settled=3)
    settle = Settle(book, "b1", clock=lambda: clock[0])
    assert settle() == 3  # the first claim looks at once
    assert book.looks == [(100.0, "b1")]
    clock[0] = 100.0 + 0.01 / SETTLE_SHARE - 0.001  # 0.199 s after the look began
    assert settle() == 0 and len(book.looks) == 1  # not due: no look, nothing settled
    assert settle(force=True) == 3 and len(book.looks) == 2  # forced: looks whenever asked
    began = book.looks[-1][0]
    clock[0] = began + 0.01 / SETTLE_SHARE + 1e-6
    assert settle() == 3 and len(book.looks) == 3  # due again


def test_a_look_that_settled_as_many_as_it_may_is_made_again_at_the_next_claim():
    """A style frame approved before 100,000 shots: each look settles a thousand of them and
    takes a while doing so; the next claim looks again, until a look leaves none behind."""
    clock = [0.0]
    book = _Book(clock, took=0.3, settled=SETTLE_AT_ONCE)
    settle = Settle(book, None, clock=lambda: clock[0])
    for _ in range(3):
        assert settle() == SETTLE_AT_ONCE
    assert len(book.looks) == 3
    book.settled = 10  # the last of them
    assert settle() == 10 and len(book.looks) == 4
    assert settle() == 0 and len(book.looks) == 4  # not due again for 20 x 0.3 s


def test_a_quick_look_is_made_at_every_claim():
    clock = [5.0]
    book = _Book(clock, took=0.0)  # a small ledger's look: well under a millisecond
    settle = Settle(book, None, clock=lambda: clock[0])
    for _ in range(4):
        settle()
    assert len(book.looks) == 4


def _slow_looks(monkeypatch) -> list[str | None]:
    """Every look of a worker's claims takes a second of a clock nothing else moves: after the
    first, a look is made only when forced. The looks' batches are returned as they happen."""
    clock = [0.0]
    looks: list[str | None] = []
    real = Ledger.settle_ready_blocked

    def timed(self, batch=None, limit=1000, failed=None):
        looks.append(batch)
        clock[0] += 1.0
        return real(self, batch, limit, failed)

    class Clocked(Settle):
        def __init__(self, ledger, batch, failed=None):
            super().__init__(ledger, batch, clock=lambda: clock[0], failed=failed)

    monkeypatch.setattr(Ledger, "settle_ready_blocked", timed)
    monkeypatch.setattr(worker_mod, "Settle", Clocked)
    return looks


def _beside_a_review(afc, ledger_url, monkeypatch, tmp_path, n: int) -> list[str | None]:
    """A style frame awaiting review with jobs blocked behind it, and ``n`` instant jobs of
    batch 'plain' admitted; the looks are timed as ``_slow_looks``'s."""
    looks = _slow_looks(monkeypatch)
    monkeypatch.setenv("AFC_SPOOL_DIR", str(tmp_path / "spool"))
    afc.env["AFC_LEDGER"] = ledger_url
    style_manifest(afc)
    assert afc("submit", "manifest.yaml").returncode == 0  # the style frame awaits review
    afc.write_manifest(manifest(jobs(n), batch="plain"), "plain.yaml")
    assert afc("submit", "plain.yaml", "--no-run").returncode == 0
    return looks


def test_until_idle_looks_before_it_says_idle_and_runs_the_chain_to_its_end(
    afc, ledger_url, monkeypatch, tmp_path
):
    """style -> two shots that take it as input -> a title card that needs both: each level
    becomes runnable only by a look made after the one before ended. With no look due, the
    worker's forced look before going idle finds each level ready and runs it; without it,
    the worker said idle with the shots blocked though their need had succeeded."""
    looks = _slow_looks(monkeypatch)
    monkeypatch.setenv("AFC_SPOOL_DIR", str(tmp_path / "spool"))
    afc.env["AFC_LEDGER"] = ledger_url
    style_manifest(afc, review=False)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    result = work(ledger_path=ledger_url, concurrency=2, claim=2, grace_s=5, until_idle=True)
    assert result.idle and result.finished == 4 and result.blocked == 0, result
    # the first claim's look, then one forced look per level made runnable (the shots, the
    # title card), and the last, which finds nothing: no claim in between looked
    assert looks == [None] * 4
    ledger = Ledger(ledger_url)
    try:
        statuses = dict(ledger.db.execute("SELECT key, status FROM jobs").fetchall())
    finally:
        ledger.close()
    assert statuses == dict.fromkeys(("style", "shot-1", "shot-2", "title"), "succeeded")


def test_a_busy_worker_does_not_look_at_blocked_jobs_at_every_claim(
    afc, ledger_url, monkeypatch, tmp_path
):
    """Twelve instant jobs claimed three at a time beside jobs blocked behind a style frame
    awaiting review: five claims, and only the first and the idle one look."""
    looks = _beside_a_review(afc, ledger_url, monkeypatch, tmp_path, 12)
    result = work(ledger_path=ledger_url, concurrency=1, claim=3, grace_s=5, until_idle=True)
    assert (result.claimed, result.rounds, result.finished) == (12, 4, 12)
    assert (result.awaiting_review, result.blocked) == (1, 3)
    assert looks == [None, None]


def test_until_idle_waiting_for_another_process_s_jobs_does_not_look_at_every_poll(
    afc, ledger_url, monkeypatch, tmp_path
):
    """A worker told --until-idle whose batch's jobs another live process holds polls until
    that process lets them go. Its look before saying idle was made at every poll, however
    many blocked jobs it read (a quarter of a second a poll behind 100,000): it is made once
    the worker would otherwise say idle."""
    import time

    from afc_cli.ledger import open_ledger

    looks = _beside_a_review(afc, ledger_url, monkeypatch, tmp_path, 2)
    held = "UPDATE jobs SET lease_owner = ?, lease_expires = ? WHERE batch = 'plain'"
    ledger = open_ledger(ledger_url)  # another host's live worker holds the plain jobs
    try:
        with ledger.tx():
            ledger.db.execute(held, ("render-02:4242:777", time.time() + 3600))
    finally:
        ledger.close()
    polls = []
    wait = worker_mod.Stop.wait

    def poll(self, timeout):
        polls.append(timeout)
        if len(polls) == 5:  # that worker lets them go
            book = open_ledger(ledger_url)
            try:
                with book.tx():
                    book.db.execute(held, (None, None))
            finally:
                book.close()
        return wait(self, 0)

    monkeypatch.setattr(worker_mod.Stop, "wait", poll)
    result = work(ledger_path=ledger_url, concurrency=1, poll_s=0.01, grace_s=5, until_idle=True)
    assert result.idle and result.finished == 2, result
    assert len(polls) >= 5, polls
    # the first claim's look and the one before saying idle; was one more at every poll
    assert looks == [None, None], looks
