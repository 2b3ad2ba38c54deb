"""Group commit on the PostgreSQL ledger (afc_cli/ledger/postgres.py ``tx``): in a run loop the
blocks of many jobs share one transaction, committed every few milliseconds or when a job
awaits ``committed()``; what money depends on is synced before it is acted on; a failure takes
back everything since the last commit and stops the run; advisory locks are held by one block."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.errors import LedgerWriteError
from afc_cli.ledger import BudgetExhausted, Ledger
from afc_cli.manifest import load_manifest


@pytest.fixture
def pg_book(afc, pg_url):
    path = afc.write_manifest(manifest(jobs(3)))
    ledger = Ledger(pg_url)
    m = load_manifest(path)
    ledger.admit(m, "file:///tmp/x", RateCards())
    jobs_ = [ledger.claim(j.job_id, 60) for j in m.jobs]
    yield ledger, jobs_, pg_url
    ledger.close()


def _seen(url: str, sql: str):
    """What another connection (another worker) sees: only what was committed."""
    with psycopg.connect(url, autocommit=True) as other:
        return other.execute(sql).fetchone()[0]


def _statements(ledger) -> list[str]:
    """Record the first word of every statement and command the ledger sends."""
    sent: list[str] = []
    raw = ledger.db.raw
    original = raw.execute

    def execute(query, params=None, **kw):
        sent.append(str(query).split()[0].upper())
        return original(query, params, **kw)

    raw.execute = execute
    db_execute = ledger.db.execute

    def statement(sql, params=()):
        sent.append(str(sql).split()[0].upper())
        return db_execute(sql, params)

    ledger.db.execute = statement
    return sent


def _refused_by_budget(ledger, job) -> None:
    """An attempt of ``job`` the budget of run "r" refuses (its estimate over the cap)."""
    with pytest.raises(BudgetExhausted):
        ledger.start_attempt(
            job, 0, "local", "m1", None, durable=False, run_id="r", reserve_micros=5, cap_micros=1
        )


def test_many_jobs_changes_share_one_commit_in_a_run_loop(pg_book):
    ledger, (a, b, c), url = pg_book
    sent = _statements(ledger)

    async def run() -> tuple[int, int]:
        with ledger.grouped(asyncio.get_running_loop()):
            for job in (a, b, c):
                ledger.note(job, "hello")
            before = _seen(url, "SELECT COUNT(*) FROM events WHERE kind = 'hello'")
            await ledger.committed()
            after = _seen(url, "SELECT COUNT(*) FROM events WHERE kind = 'hello'")
        return before, after

    before, after = asyncio.run(run())
    assert (before, after) == (0, 3)  # invisible to other workers until the shared commit
    assert sent.count("BEGIN") == 1 and sent.count("COMMIT") == 1


def test_changes_are_committed_within_a_few_milliseconds_without_anyone_waiting(pg_book):
    ledger, (a, _, _), url = pg_book

    async def run() -> int:
        with ledger.grouped(asyncio.get_running_loop()):
            ledger.note(a, "hello")
            for _ in range(200):  # the scheduled commit (GROUP_COMMIT_S), not a fixed sleep
                await asyncio.sleep(0.005)
                if not ledger._in_tx:
                    break
            return _seen(url, "SELECT COUNT(*) FROM events WHERE kind = 'hello'")

    assert asyncio.run(run()) == 1


def test_a_paid_attempt_row_is_on_disk_before_the_call_under_group_commit(pg_book):
    """The attempt row of a paid call (``sync_on_commit``) makes the shared commit wait for the
    server's disk (the server's synchronous_commit, here set ``on`` as in production); a
    group without one commits asynchronously."""
    ledger, (a, b, _), url = pg_book
    with psycopg.connect(url, autocommit=True) as admin:
        name = admin.execute("SELECT current_database()").fetchone()[0]
        admin.execute(f"ALTER DATABASE {name} SET synchronous_commit = on")
    ledger.close()
    ledger = Ledger(url)
    settings: list[str] = []
    raw = ledger.db.raw
    original = raw.execute

    def execute(query, params=None, **kw):
        if str(query) == "COMMIT":
            settings.append(original("SHOW synchronous_commit").fetchone()[0])
        return original(query, params, **kw)

    raw.execute = execute

    async def run() -> None:
        with ledger.grouped(asyncio.get_running_loop()):
            ledger.note(a, "checkpoint-like")
            await ledger.committed()
            number = ledger.start_attempt(a, 0, "openai", "m1", None, durable=True)
            assert number == 1
            ledger.note(b, "beside it")
            await ledger.committed()

    try:
        asyncio.run(run())
    finally:
        ledger.close()
    assert settings == ["off", "on"]
    assert _seen(url, "SELECT COUNT(*) FROM attempts WHERE status = 'started'") == 1


def test_a_refusal_that_wrote_nothing_leaves_the_shared_transaction_alone(pg_book):
    ledger, (a, b, _), url = pg_book

    async def run() -> None:
        with ledger.grouped(asyncio.get_running_loop()):
            ledger.note(a, "kept")
            _refused_by_budget(ledger, b)
            await ledger.committed()

    asyncio.run(run())
    assert _seen(url, "SELECT COUNT(*) FROM events WHERE kind = 'kept'") == 1
    assert _seen(url, "SELECT COUNT(*) FROM attempts") == 0


def test_a_failed_statement_takes_back_the_group_and_stops_the_run(pg_book):
    """A PostgreSQL transaction is aborted by any failed statement: the other jobs' changes
    since the last commit go with it, the jobs awaiting that commit are told, and every later
    write refuses (the run stops; the next one resumes from the last commit)."""
    ledger, (a, b, _), url = pg_book

    async def run() -> None:
        with ledger.grouped(asyncio.get_running_loop()):
            ledger.note(a, "lost")
            with pytest.raises(psycopg.Error), ledger.tx():
                ledger.db.execute("UPDATE no_such_table SET x = 1")
            with pytest.raises(LedgerWriteError):
                ledger.note(b, "refused")

    asyncio.run(run())
    assert _seen(url, "SELECT COUNT(*) FROM events WHERE kind IN ('lost', 'refused')") == 0


def test_a_failed_append_sent_without_waiting_fails_the_commit_its_jobs_await(pg_book):
    """An ``INSERT`` nobody reads is pipelined (not waited for): its error surfaces at the
    commit, which the jobs awaiting it are told about (none goes on to its provider call);
    the group is rolled back and the run stops."""
    ledger, (a, b, _), url = pg_book

    async def run() -> None:
        with ledger.grouped(asyncio.get_running_loop()):
            assert ledger.start_attempt(a, 0, "local", "m1", None, durable=True) == 1
            with ledger.tx():
                ledger.db.execute("INSERT INTO no_such_table VALUES (1)")
            with pytest.raises(LedgerWriteError):
                await ledger.committed()
            with pytest.raises(LedgerWriteError):
                ledger.note(b, "refused")

    asyncio.run(run())
    assert _seen(url, "SELECT COUNT(*) FROM attempts") == 0
    assert _seen(url, "SELECT COUNT(*) FROM events WHERE kind = 'refused'") == 0


def test_a_failed_statement_alone_rolls_back_only_itself(pg_book):
    ledger, (a, _, _), url = pg_book

    async def run() -> None:
        with ledger.grouped(asyncio.get_running_loop()):
            await ledger.committed()
            with pytest.raises(psycopg.Error), ledger.tx():
                ledger.db.execute("UPDATE no_such_table SET x = 1")
            ledger.note(a, "after")  # nothing else was lost: the run goes on
            await ledger.committed()

    asyncio.run(run())
    assert _seen(url, "SELECT COUNT(*) FROM events WHERE kind = 'after'") == 1


def test_a_budget_lock_is_held_by_its_block_alone_under_group_commit(pg_book):
    """Other jobs' changes are committed before the budget's advisory lock is taken, and the
    block that took it commits at its end: another worker can take the lock at once."""
    ledger, (a, b, _), url = pg_book
    from afc_cli.ledger.postgres import BUDGET_LOCK

    async def run() -> None:
        with ledger.grouped(asyncio.get_running_loop()):
            ledger.note(a, "before")
            number = ledger.start_attempt(
                b,
                0,
                "local",
                "m1",
                None,
                durable=False,
                run_id="r",
                reserve_micros=1,
                cap_micros=100,
            )
            assert number == 1
            assert not ledger._in_tx  # committed at the block's end
            assert _seen(url, "SELECT COUNT(*) FROM events WHERE kind = 'before'") == 1
            with psycopg.connect(url, autocommit=True) as other:
                got = other.execute(
                    "SELECT pg_try_advisory_lock(%s, hashtext('r'))", (BUDGET_LOCK,)
                ).fetchone()[0]
            assert got

    asyncio.run(run())


@pytest.mark.parametrize("refusal", ["budget", "limit"])
def test_a_refused_check_releases_its_lock_at_once_under_group_commit(pg_book, refusal):
    """A limit or budget check that refuses (ProviderBusy, BudgetExhausted) ends the
    transaction that took the advisory lock. An outside audit found it left open until the
    group's next commit: three workers under 'concurrency: 1' waited on each other, the
    holder's finished calls unrecorded, 2 of 15 jobs rendered in 90 s."""
    from afc_cli.ledger import ProviderBusy
    from afc_cli.ledger.postgres import BUDGET_LOCK, LIMIT_LOCK

    ledger, (a, b, c), url = pg_book

    async def run() -> None:
        with ledger.grouped(asyncio.get_running_loop()):
            if refusal == "limit":
                assert ledger.start_attempt(
                    a, 0, "local", "m1", None, durable=False, limit=(1, None)
                )
                await ledger.committed()
                with pytest.raises(ProviderBusy):
                    ledger.start_attempt(b, 0, "local", "m1", None, durable=False, limit=(1, None))
                key = (LIMIT_LOCK, "local")
            else:
                _refused_by_budget(ledger, b)
                key = (BUDGET_LOCK, "r")
            assert not ledger._in_tx  # the refusing block's transaction ended with it
            with psycopg.connect(url, autocommit=True) as other:
                got = other.execute(
                    "SELECT pg_try_advisory_lock(%s, hashtext(%s))", key
                ).fetchone()[0]
            assert got, "another worker can take the lock at once"
            ledger.note(c, "after")  # and the run goes on
            await ledger.committed()

    asyncio.run(run())
    assert _seen(url, "SELECT COUNT(*) FROM events WHERE kind = 'after'") == 1


def test_the_lease_clock_is_the_servers_without_a_round_trip_per_claim(pg_book):
    ledger, _, url = pg_book
    sent = _statements(ledger)
    first = ledger.lease_clock()
    server = _seen(url, "SELECT EXTRACT(EPOCH FROM clock_timestamp())")
    assert abs(first - float(server)) < 2
    for _ in range(50):
        ledger.lease_clock()
    assert sent.count("SELECT") <= 1
    ledger._clock = (ledger._clock[0] - 1000, ledger._clock[1])  # as if this host drifted
    ledger._clock = (ledger._clock[0], ledger._clock[1] - 60)  # ... and the sample aged
    assert abs(ledger.lease_clock() - float(server)) < 60  # sampled again from the server


def test_the_lease_clock_holds_through_a_resample_a_little_behind_and_follows_a_step(pg_book):
    ledger = pg_book[0]
    read = ledger.lease_clock()
    # the next sample came back 0.2 s behind this reading (its round trip's error)
    ledger._clock = (ledger._clock[0] - 0.2, ledger._clock[1], ledger._clock[2])
    assert ledger.lease_clock() >= read
    # the server's clock was stepped back by 1000 s: followed
    ledger._clock = (ledger._clock[0] - 1000, ledger._clock[1], ledger._clock[2])
    assert ledger.lease_clock() < read - 999


def test_a_delivery_is_due_at_once_on_the_clock_claims_compare_it_with(afc, pg_url, monkeypatch):
    # The host's clock (``clock``) was ahead of the server's sampled one (``lease_clock``) by
    # the sample's error: a delivery scheduled on the first was not due on the second, and a
    # run's last webhook pass, right after the job ended, left it for the next run.
    monkeypatch.setenv("HOOK_SECRET", "whsec_" + "A" * 32)
    path = afc.write_manifest(
        manifest(jobs(1), webhook={"url": "http://127.0.0.1:9/h", "secret_env": "HOOK_SECRET"})
    )
    ledger = Ledger(pg_url)
    try:
        m = load_manifest(path)
        ledger.admit(m, "file:///tmp/x", RateCards())
        job = ledger.claim(m.jobs[0].job_id, 60)
        ledger._clock = (ledger._clock[0] - 0.5, ledger._clock[1], ledger._clock[2])
        ledger._clock_offset = 0.0
        assert ledger.finish(job, "succeeded", step="finish") is True
        (delivery,) = ledger.deliveries()
        assert [row["id"] for row in ledger.claim_deliveries(10)] == [delivery["id"]]
    finally:
        ledger.close()


def test_a_claim_round_is_one_statement_and_takes_at_most_its_limit(afc, pg_url):
    path = afc.write_manifest(manifest(jobs(10)))
    ledger = Ledger(pg_url)
    try:
        ledger.admit(load_manifest(path), "file:///tmp/x", RateCards())
        ledger.lease_clock()
        sent = _statements(ledger)
        taken = ledger.claim_runnable(4, 60)
        assert [j["key"] for j in taken] == [f"shot-{i:03d}" for i in range(1, 5)]
        writes = [s for s in sent if s in ("UPDATE", "WITH", "INSERT")]
        assert writes == ["WITH"]  # the claim itself: one statement for the round
        assert _seen(pg_url, "SELECT COUNT(*) FROM jobs WHERE lease_owner IS NOT NULL") == 4
    finally:
        ledger.close()


def test_a_failed_append_found_by_a_read_outside_any_block_stops_the_run(pg_book):
    ledger, (a, b, _), url = pg_book

    async def run() -> None:
        with ledger.grouped(asyncio.get_running_loop()):
            ledger.note(a, "lost")
            with ledger.tx():
                ledger.db.execute("INSERT INTO no_such_table VALUES (1)")
            with pytest.raises(LedgerWriteError):
                ledger.job(b["id"])  # the read waits for the group's answers
            with pytest.raises(LedgerWriteError):
                ledger.note(b, "refused")

    asyncio.run(run())
    assert _seen(url, "SELECT COUNT(*) FROM events WHERE kind IN ('lost', 'refused')") == 0


def test_two_runs_claiming_the_same_jobs_in_opposite_orders_never_deadlock(afc, pg_url):
    """Two runs (two hosts' ``afc resume``) each claim a job in their open group transaction,
    then the job the other just claimed. A claim that waited for the other's row lock while its
    own group held the first row would deadlock (PostgreSQL aborts one run: seen as a resume
    stopping with "deadlock detected"); a claim waits alone instead, and each job goes to
    exactly one run."""
    import threading

    path = afc.write_manifest(manifest(jobs(2)))
    m = load_manifest(path)
    Ledger(pg_url).admit(m, "file:///tmp/x", RateCards())
    first, second = (j.job_id for j in m.jobs)
    claimed = {"a": threading.Event(), "b": threading.Event()}
    got: dict[str, list] = {}
    errors: list[BaseException] = []

    def run(me: str, other: str, order: tuple[str, str]) -> None:
        ledger = Ledger(pg_url)
        ledger.owner = f"host-{me}:1:1"
        ledger.db.raw.execute("SET lock_timeout = '20s'")  # a hang fails, never blocks CI

        async def claims() -> list:
            with ledger.grouped(asyncio.get_running_loop()):
                mine = [ledger.claim(order[0], 60)]
                claimed[me].set()
                # blocking, as a busy loop between two jobs: no group commit runs meanwhile
                assert claimed[other].wait(20)
                mine.append(ledger.claim(order[1], 60))
            return mine

        try:
            got[me] = asyncio.run(claims())
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)
        finally:
            ledger.close()

    threads = [
        threading.Thread(target=run, args=("a", "b", (first, second))),
        threading.Thread(target=run, args=("b", "a", (second, first))),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    owners = {who: [job["id"] if job else None for job in taken] for who, taken in got.items()}
    assert owners == {"a": [first, None], "b": [second, None]}
    assert sorted(_seen(pg_url, "SELECT array_agg(lease_owner ORDER BY seq) FROM jobs")) == [
        "host-a:1:1",
        "host-b:1:1",
    ]


def test_a_claim_round_in_a_run_loop_is_a_transaction_of_its_own(afc, pg_url):
    """A worker's claim round commits the group before it and itself at its end. Its ``FOR
    UPDATE SKIP LOCKED`` skips the rows locked when it reaches them, but a row another worker
    claimed and committed while the statement ran is locked, found taken on the re-check and
    skipped *still locked* until the transaction ends: left in the shared transaction, that
    lock made the row's owner wait to start its job, and two workers each holding such a lock
    on a job of the other while writing their own deadlocked (bench-postgres: "deadlock
    detected ... while updating tuple in relation jobs")."""
    path = afc.write_manifest(manifest(jobs(4)))
    ledger = Ledger(pg_url)
    try:
        ledger.admit(load_manifest(path), "file:///tmp/x", RateCards())
        ledger.lease_clock()

        async def run() -> tuple[int, int, list]:
            with ledger.grouped(asyncio.get_running_loop()):
                (first,) = ledger.claim_runnable(1, 60)
                ledger.note(first, "hello")  # the group has a write of its own
                taken = ledger.claim_runnable(2, 60)
                # before any group commit or await: both are already committed, and no lock
                # of the claim is held (another worker may lock the jobs without waiting)
                events = _seen(pg_url, "SELECT COUNT(*) FROM events WHERE kind = 'hello'")
                leased = _seen(pg_url, "SELECT COUNT(*) FROM jobs WHERE lease_owner IS NOT NULL")
                with psycopg.connect(pg_url) as other:
                    other.execute("SET lock_timeout = '2s'")
                    locked = other.execute(
                        "SELECT id FROM jobs WHERE id = ANY(%s) FOR UPDATE NOWAIT",
                        ([job["id"] for job in taken],),
                    ).fetchall()
            return events, leased, locked

        events, leased, locked = asyncio.run(run())
        assert (events, leased, len(locked)) == (1, 3, 2)
    finally:
        ledger.close()
