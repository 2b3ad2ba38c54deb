"""The ledger's contract, on both backends: every test here runs once on SQLite and once on
PostgreSQL (a real server the session starts: tests/pg_server.py), through ``Ledger(url)``."""

from __future__ import annotations

import datetime as dt
import json
import socket
import sqlite3
import time

import pytest
from conftest import jobs, manifest, recorded_statements

from afc_cli.costs import RateCards
from afc_cli.costs_report import costs_report
from afc_cli.errors import LedgerError
from afc_cli.ledger import BudgetExhausted, JobLost, Ledger, open_ledger
from afc_cli.ledger.postgres import PostgresLedger, translate
from afc_cli.ledger.sqlite import SqliteLedger
from afc_cli.manifest import load_manifest


@pytest.fixture
def book(afc, ledger_url):
    """A ledger on the backend under test, with a batch of three admitted jobs."""
    path = afc.write_manifest(manifest(jobs(3)))
    ledger = Ledger(ledger_url)
    m = load_manifest(path)
    ledger.admit(m, "file:///tmp/x", RateCards())
    yield ledger, [ledger.job(j.job_id) for j in m.jobs], m
    ledger.close()


def test_a_polled_request_makes_the_job_waiting_until_its_provider_answers(book):
    """A job-style request's id recorded: the job waits on its provider (``waiting``, the
    request named); its answer, good or bad, makes it the run's again (``running``), in the
    ledger and in the run's own copy of the row. Both engines (PostgreSQL reads the row
    count of each conditional update inside a group)."""
    ledger, (job, *_), _ = book
    job = ledger.claim(job["id"], 60)
    common = {"chain_index": 0, "provider": "replicate", "model": "m1"}
    for status in ("failed", "succeeded"):
        number = ledger.start_attempt(job, 0, "replicate", "m1", None, durable=False)
        with ledger.tx():
            ledger.record_request_id(job, number, "replicate", f"p{number}")
        for row in (job, ledger.job(job["id"])):
            assert (row["status"], row["waiting_reason"]) == (
                "waiting",
                f"provider still rendering: replicate request p{number}",
            )
        ledger.end_attempt(job, number, **common, status=status, error_class=None)
        for row in (job, ledger.job(job["id"])):
            assert (row["status"], row["waiting_reason"]) == ("running", None)


def test_a_report_without_a_cost_never_erases_a_known_one(book):
    """A render's cost written on its attempt as it became known (``hold_known_cost``: the
    answer said what it billed, its output is still being fetched) stays when the attempt
    then ends at a cost reported unknown (the run's limit on the call, an answer afc could
    not read): it was overwritten with NULL, the paid render left unpriced in ``afc costs
    report``. A later report that knows a cost still replaces it."""
    ledger, (job, other, *_), _ = book
    common = {"chain_index": 0, "provider": "openai", "model": "gpt-image-1"}
    job = ledger.claim(job["id"], 60)
    number = ledger.start_attempt(job, 0, "openai", "gpt-image-1", None, durable=False)
    ledger.hold_known_cost(job, number, "openai", 40_000, "derived")
    ledger.end_attempt(
        job, number, **common, status="failed", error_class="window_expired", usage=None
    )
    (row,) = ledger.attempts(job["id"])
    assert (row["status"], row["error_class"]) == ("failed", "window_expired")
    assert (row["cost_micros"], row["cost_source"]) == (40_000, "derived")

    other = ledger.claim(other["id"], 60)
    number = ledger.start_attempt(other, 0, "openai", "gpt-image-1", None, durable=False)
    ledger.hold_known_cost(other, number, "openai", 40_000, "derived")
    ledger.end_attempt(
        other, number, **common, status="succeeded", cost_micros=52_000, cost_source="derived"
    )
    (row,) = ledger.attempts(other["id"])
    assert (row["status"], row["cost_micros"]) == ("succeeded", 52_000)


def test_a_request_the_provider_no_longer_has_leaves_no_job_still_rendering_it(book):
    """A polled request the provider says it no longer has (``RequestGone``: pipeline.render
    ends the attempt ``unknown``) is the provider's answer too: the job is the run's again.
    It stayed ``waiting``, "provider still rendering" a request that is gone, through the
    next attempt's wait for a provider limit (which writes no status) and after a stop there,
    and README's status table then told the user the next run polls it, paying nothing: it
    pays for a new render."""
    from afc_cli.providers.base import GONE_PREFIX

    ledger, (job, *_), _ = book
    job = ledger.claim(job["id"], 60)
    number = ledger.start_attempt(job, 0, "fal", "m1", None, durable=False)
    with ledger.tx():
        ledger.record_request_id(job, number, "fal", "r1")
    assert ledger.job(job["id"])["status"] == "waiting"
    ledger.end_attempt(
        job,
        number,
        chain_index=0,
        provider="fal",
        model="m1",
        status="unknown",
        error_message=f"{GONE_PREFIX} r1 (fal); it may have been paid for",
    )
    for row in (job, ledger.job(job["id"])):
        assert (row["status"], row["waiting_reason"]) == ("running", None)


def test_the_batches_a_worker_may_run_are_those_with_jobs_left(book):
    """``unfinished_batches``: a batch with a queued, running, waiting or blocked job; none
    once every job of it has ended (afc worker checks its --storage against these)."""
    ledger, listed, _ = book
    assert ledger.unfinished_batches() == ["b1"]
    with ledger.tx():
        ledger.db.execute("UPDATE jobs SET status = 'blocked' WHERE id = ?", (listed[0]["id"],))
        ledger.db.execute(
            "UPDATE jobs SET status = 'succeeded' WHERE id IN (?, ?)",
            (listed[1]["id"], listed[2]["id"]),
        )
    assert ledger.unfinished_batches() == ["b1"]
    with ledger.tx():
        ledger.db.execute("UPDATE jobs SET status = 'cancelled' WHERE id = ?", (listed[0]["id"],))
    assert ledger.unfinished_batches() == []


def _ghost(ledger, job, expires: str = "9e18") -> str:
    """Make ``job`` held by an owner on another host with one attempt in flight."""
    ghost = "another-host:4242:1"
    with ledger.tx():
        ledger.db.execute(
            f"UPDATE jobs SET lease_owner = ?, lease_expires = {expires}, attempts = 1"
            " WHERE id = ?",
            (ghost, job["id"]),
        )
        ledger.db.execute(
            "INSERT INTO attempts (job_id, number, chain_index, provider, model, status, owner,"
            " started_at) VALUES (?, 1, 0, 'local', 'm1', 'started', ?, 0)",
            (job["id"], ghost),
        )
    return ghost


def test_the_url_picks_the_backend(tmp_path, pg_url):
    assert type(open_ledger(tmp_path / "a.db")) is SqliteLedger
    assert type(Ledger(f"sqlite:///{tmp_path}/b.db")) is SqliteLedger
    pg = Ledger(pg_url)
    assert type(pg) is PostgresLedger
    pg.close()


def test_placeholders_are_translated_outside_quoted_text():
    assert translate("SELECT '?', \"a?\" FROM t WHERE x = ? AND y LIKE 'p%'") == (
        "SELECT '?', \"a?\" FROM t WHERE x = %s AND y LIKE 'p%%'"
    )


def test_first_terminal_state_wins(book):
    ledger, (job, *_), _ = book
    assert ledger.finish(job, "cancelled", step="render") is True
    assert ledger.finish(job, "succeeded", step="finish") is False
    row = ledger.job(job["id"])
    assert row["status"] == "cancelled"
    with pytest.raises(JobLost):
        ledger.checkpoint(row, [("probe", None)], "render", outcome="rendered")
    assert ledger.steps(job["id"]) == [], "the refused checkpoint wrote nothing"
    assert [e["kind"] for e in ledger.events(job["id"])].count("cancelled") == 1


def test_attempt_upsert_keeps_the_first_outcome(book):
    ledger, (job, *_), _ = book
    job = ledger.claim(job["id"], 60)
    number = ledger.start_attempt(job, 0, "local", "m1", None, durable=True)
    common = {"chain_index": 0, "provider": "local", "model": "m1"}
    ledger.end_attempt(job, number, **common, status="failed", error_class="timeout",
                       error_message="first", started_at=100.0, ended_at=101.0)  # fmt: skip
    ledger.end_attempt(job, number, **common, status="succeeded", error_message="second",
                       usage={"seconds": 3.2}, cost_micros=3840, cost_source="derived",
                       started_at=200.0, ended_at=205.0)  # fmt: skip
    (row,) = ledger.attempts(job["id"])
    assert (row["status"], row["error_message"], row["ended_at"]) == ("failed", "first", 101.0)
    assert (row["cost_micros"], row["cost_source"]) == (3840, "derived")
    assert row["usage_json"] == '{"seconds":3.2}'


def test_a_live_lease_of_another_host_is_not_taken(book):
    ledger, (job, *_), _ = book
    _ghost(ledger, job, expires="9e18")
    assert ledger.claim(job["id"], 60) is None
    assert [a["status"] for a in ledger.attempts(job["id"])] == ["started"]


def test_an_expired_lease_is_taken_over_and_its_attempts_marked_unknown_at_once(book):
    ledger, (job, *_), _ = book
    ghost = _ghost(ledger, job, expires="1")
    claimed = ledger.claim(job["id"], 60)
    assert claimed is not None and claimed["lease_owner"] == ledger.owner
    assert claimed["takeovers"] == 1
    (attempt,) = ledger.attempts(job["id"])
    assert (attempt["status"], attempt["error_class"]) == ("unknown", "interrupted")
    takeover = [e for e in ledger.events(job["id"]) if e["kind"] == "takeover"]
    assert len(takeover) == 1 and ghost in takeover[0]["detail_json"]
    # the lease is measured by the ledger's clock
    assert abs(claimed["lease_expires"] - (ledger.lease_clock() + 60)) < 5


def test_a_cancel_marks_a_call_of_no_live_run_unknown_and_counts_every_left_call(afc, book):
    """A cancelled job is taken over by no run: the cancel itself marks a call whose run's
    lease expired ``unknown`` (possibly paid), as a takeover would, and leaves a live run's
    call to that run, a call in flight (no cost yet, known or unknown) until that run is gone
    (outside audit 31b: it was counted unpriced while its run was about to record its cost).
    A call of unknown outcome is counted: unpriced, never as zero."""
    ledger, (expired, live, _), _ = book
    _ghost(ledger, expired, expires="1")
    ghost = _ghost(ledger, live, expires="9e18")
    assert ledger.cancel(expired, "stop") and ledger.cancel(live, "stop")
    (attempt,) = ledger.attempts(expired["id"])
    assert (attempt["status"], attempt["error_class"]) == ("unknown", "interrupted")
    assert [e["kind"] for e in ledger.events(expired["id"])].count("attempt_unknown") == 1
    (attempt,) = ledger.attempts(live["id"])
    assert (attempt["status"], attempt["owner"]) == ("started", ghost)  # its run records it
    url = ledger_url_of(ledger, afc)
    for unpriced_live in (0, 1):
        status = {row["key"]: row for row in ledger.status_rows("b1")}
        for key, unpriced in (("shot-001", 1), ("shot-002", unpriced_live)):
            row = status[key]
            assert (row["cost_micros"], row["unpriced_attempts"], row["attempts_made"]) == (
                None,
                unpriced,
                1,
            ), key
        total = costs_report(url, batch=None, since=None, by="batch")["total"]
        assert (total["unpriced_attempts"], total["unknown_attempts"]) == (1 + unpriced_live,) * 2
        with ledger.tx():  # that run's lease runs out: it is gone, its call left unknown
            ledger.db.execute("UPDATE jobs SET lease_expires = 1 WHERE id = ?", (live["id"],))


def test_a_worker_that_lost_its_lease_writes_nothing_more(book):
    ledger, (job, *_), _ = book
    job = ledger.claim(job["id"], 60)
    with ledger.tx():  # another worker took it over (the owner id is the fencing token)
        ledger.db.execute(
            "UPDATE jobs SET lease_owner = 'elsewhere:1:1' WHERE id = ?", (job["id"],)
        )
    assert ledger.start_attempt(job, 0, "local", "m1", None, durable=False) is None
    with pytest.raises(JobLost):
        ledger.checkpoint(job, [("probe", None)], "render")
    assert ledger.attempts(job["id"]) == [] and ledger.steps(job["id"]) == []


def test_the_budget_refuses_an_attempt_that_does_not_fit_and_writes_nothing(book):
    ledger, (a, b, _), _ = book
    a, b = ledger.claim(a["id"], 60), ledger.claim(b["id"], 60)
    assert ledger.start_attempt(a, 0, "local", "m1", None, durable=False, run_id="r",
                                reserve_micros=60_000, cap_micros=100_000) == 1  # fmt: skip
    with pytest.raises(BudgetExhausted):
        ledger.start_attempt(b, 0, "local", "m1", None, durable=False, run_id="r",
                             reserve_micros=60_000, cap_micros=100_000)  # fmt: skip
    assert ledger.attempts(b["id"]) == []
    assert ledger.run_spend("r") == 60_000
    # a call in flight has no cost yet, known or not (another worker's, under a shared
    # budget, was counted as this worker's unknown-cost attempt: an outside audit)
    assert ledger.run_money("r") == {"priced": 0, "unknown_cost": 0, "reserved": 60_000}
    ledger.end_attempt(a, 1, chain_index=0, provider="local", model="m1", status="unknown")
    assert ledger.run_money("r") == {"priced": 0, "unknown_cost": 1, "reserved": 60_000}


def test_a_terminal_write_queues_one_delivery_with_a_stable_id(afc, ledger_url, monkeypatch):
    monkeypatch.setenv("HOOK_SECRET", "whsec_" + "A" * 32)
    path = afc.write_manifest(
        manifest(jobs(1), webhook={"url": "http://127.0.0.1:9/h", "secret_env": "HOOK_SECRET"})
    )
    ledger = Ledger(ledger_url)
    try:
        m = load_manifest(path)
        ledger.admit(m, "file:///tmp/x", RateCards())
        job = ledger.claim(m.jobs[0].job_id, 60)
        assert ledger.webhook_secret_names([job["id"]]) == {"HOOK_SECRET"}
        assert ledger.finish(job, "succeeded", step="finish") is True
        assert ledger.finish(job, "failed", step="finish") is False
        (delivery,) = ledger.deliveries()
        assert delivery["id"] == f"{job['id']}:job.succeeded"
        assert [row["id"] for row in ledger.claim_deliveries(10)] == [delivery["id"]]
        assert ledger.claim_deliveries(10) == []
        assert ledger.delivery_ids_starting(job["id"][:6]) == [delivery["id"]]
    finally:
        ledger.close()


def test_costs_report_and_reads_agree_on_both_engines(afc, book):
    ledger, (a, b, c), m = book
    a = ledger.claim(a["id"], 60)
    n = ledger.start_attempt(a, 0, "local", "m1", None, durable=False, run_id="r")
    ledger.end_attempt(a, n, chain_index=0, provider="local", model="m1", status="succeeded",
                       cost_micros=50_000, cost_source="rate_card")  # fmt: skip
    b = ledger.claim(b["id"], 60)
    n = ledger.start_attempt(b, 0, "local", "m1", None, durable=False, run_id="r")
    ledger.end_attempt(b, n, chain_index=0, provider="local", model="m1", status="failed")
    ledger.finish(a, "succeeded", step="finish")
    url = ledger_url_of(ledger, afc)
    by_day = costs_report(url, batch=None, since=None, by="day")
    started = ledger.attempts(a["id"])[0]["started_at"]
    day = dt.datetime.fromtimestamp(started, dt.UTC).strftime("%Y-%m-%d")
    assert [r["day"] for r in by_day["rows"]] == [day]
    assert by_day["total"]["priced"] == "0.050000"
    assert by_day["total"]["unpriced_attempts"] == 1
    by_model = costs_report(url, batch="b1", since=None, by="model")
    assert [r["model"] for r in by_model["rows"]] == ["local/m1"]
    status = {row["key"]: row for row in ledger.status_rows("b1")}
    assert status["shot-001"]["cost_micros"] == 50_000
    assert status["shot-002"]["cost_micros"] is None
    assert status["shot-002"]["unpriced_attempts"] == 1
    assert ledger.batches_of([a["id"], c["id"]]) == ["b1"]
    assert sorted(ledger.output_keys("b1", [a["id"], b["id"]])) == [
        "b1/shot-001.png",
        "b1/shot-002.png",
    ]
    assert [r["key"] for r in ledger.output_rows()] == ["shot-001"]
    stats = ledger.queue_stats()
    assert (stats["queued"], stats["in_flight"]) == (1, 1)


def test_a_costs_report_looks_for_calls_in_flight_only_when_it_counted_any(book, monkeypatch):
    """The calls in flight (``status = 'started'``) are counted by the report's first
    statement; the second, which tells a live run's from a gone one's, is sent only then (it
    took 26-31 ms on a 5,000-job batch with none)."""
    ledger, (a, b, _), _ = book
    a = ledger.claim(a["id"], 60)
    n = ledger.start_attempt(a, 0, "local", "m1", None, durable=False, run_id="r")
    ledger.end_attempt(a, n, chain_index=0, provider="local", model="m1", status="succeeded",
                       cost_micros=50_000, cost_source="rate_card")  # fmt: skip

    def started_lookups() -> int:
        sent = recorded_statements(ledger, monkeypatch)
        try:
            ledger.cost_groups("batch", batch="b1", since=None)
        finally:
            monkeypatch.undo()
        return sum("a.status = 'started' AND" in sql for sql, _ in sent)

    assert started_lookups() == 0
    _ghost(ledger, b, expires="1")  # a call whose run is gone
    assert started_lookups() == 1
    assert ledger.cost_groups("batch", batch="b1", since=None)["b1"]["unknown_attempts"] == 1


def ledger_url_of(ledger, afc) -> str:
    return ledger.url if isinstance(ledger, PostgresLedger) else str(ledger.path)


# --- schema ---------------------------------------------------------------------------------


def _sqlite_columns(path) -> dict[str, list[str]]:
    conn = sqlite3.connect(path)
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
                " AND name != '_sqlite_migrations'"
            )
        ]
        return {t: sorted(r[1] for r in conn.execute(f"PRAGMA table_info({t})")) for t in tables}
    finally:
        conn.close()


def _pg_columns(ledger) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for table, column in ledger.db.execute(
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = 'public' AND table_name <> 'afc_migrations'"
    ):
        out.setdefault(table, []).append(column)
    return {t: sorted(c) for t, c in out.items()}


def test_both_engines_end_at_the_same_tables_and_columns(tmp_path, pg_server):
    Ledger(tmp_path / "a.db").close()
    url = pg_server.database(migrated=False)  # an empty database: the migrations run here
    pg = Ledger(url)
    try:
        assert _pg_columns(pg) == _sqlite_columns(tmp_path / "a.db")
        applied = [r[0] for r in pg.db.execute("SELECT name FROM afc_migrations ORDER BY name")]
        from afc_cli.ledger_file import known_migrations

        assert applied == sorted(known_migrations())
    finally:
        pg.close()
    Ledger(url).close()  # opening again applies nothing and fails on nothing


def test_a_postgresql_ledger_with_a_newer_schema_is_refused(pg_url):
    ledger = Ledger(pg_url)
    ledger.db.execute(
        "INSERT INTO afc_migrations (migration_set, name, applied_at)"
        " VALUES ('afc', 'm099_from_the_future', 0)"
    )
    ledger.close()
    with pytest.raises(LedgerError, match="m099_from_the_future"):
        Ledger(pg_url)


def test_an_empty_postgresql_database_is_no_ledger_for_a_reading_command(pg_server):
    url = pg_server.database(migrated=False)
    with pytest.raises(LedgerError, match="no ledger at"):
        Ledger(url, create=False)


def test_a_password_never_reaches_a_message(pg_server):
    url = pg_server.prefix.replace("afc@", "afc:hunter2@") + "/no_such_database"
    with pytest.raises(LedgerError) as refused:
        Ledger(url)
    assert "hunter2" not in str(refused.value) and "127.0.0.1" in str(refused.value)


@pytest.mark.parametrize(
    "password", ["Hunter2 with spaces", "Hunter2%ZZsecret", "Hunter2%00secret", "Hunter2%"]
)
def test_a_password_libpq_cannot_parse_never_reaches_a_message(pg_server, afc, password):
    """libpq quotes a password it cannot read ("unexpected spaces found in ...", "invalid
    percent-encoded token: ...") in its error: the real ``afc`` never shows it."""
    url = pg_server.prefix.replace("afc@", f"afc:{password}@") + "/afc"
    for command in (["status"], ["queue", "stats"], ["worker", "--until-idle"]):
        refused = afc(*command, env={"AFC_LEDGER": url})
        assert refused.returncode == 2, refused.stderr
        # refused before connecting (check_url), or by libpq (%00): neither quotes it
        said = ("cannot connect to the ledger", "must percent-encode")
        assert any(words in refused.stderr for words in said), refused.stderr
        assert "Hunter2" not in refused.stderr + refused.stdout, refused.stderr


def test_the_owner_is_this_host_and_process(book):
    ledger, _, _ = book
    assert ledger.owner.startswith(socket.gethostname() + ":")


# --- claims for afc worker ----------------------------------------------------------------------


def test_claims_come_in_rounds_in_admission_order_and_take_expired_leases(book):
    ledger, (a, b, c), _ = book
    _ghost(ledger, c, expires="1")  # another host's lease on the third job, expired
    first = ledger.claim_runnable(2, 60)
    assert [j["key"] for j in first] == ["shot-001", "shot-002"]
    assert all(j["lease_owner"] == ledger.owner for j in first)
    second = ledger.claim_runnable(2, 60)
    assert [j["key"] for j in second] == ["shot-003"]
    assert [a["status"] for a in ledger.attempts(c["id"])] == ["unknown"]
    assert ledger.claim_runnable(2, 60) == []  # nothing free: ours are held by us


def test_a_claim_skips_rows_another_worker_has_locked(pg_url, afc):
    import psycopg

    path = afc.write_manifest(manifest(jobs(3)))
    ledger = Ledger(pg_url)
    try:
        m = load_manifest(path)
        ledger.admit(m, "file:///tmp/x", RateCards())
        with psycopg.connect(pg_url) as other:  # another worker, mid-claim on the first job
            other.execute("SELECT id FROM jobs WHERE key = 'shot-001' FOR UPDATE")
            taken = ledger.claim_runnable(1, 60)  # does not wait for it
            assert [j["key"] for j in taken] == ["shot-002"]
    finally:
        ledger.close()


def test_only_the_commits_money_depends_on_wait_for_the_disk_on_postgresql(pg_url):
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as admin:  # as a production server has it
        name = admin.execute("SELECT current_database()").fetchone()[0]
        admin.execute(f"ALTER DATABASE {name} SET synchronous_commit = on")
    ledger = Ledger(pg_url)
    try:

        def setting() -> str:
            return ledger.db.execute("SHOW synchronous_commit").fetchone()[0]

        with ledger.tx():
            assert setting() == "off"  # a checkpoint, an event: asynchronous
        with ledger.tx(durable=True):
            assert setting() == "on"  # the attempt row before a paid call
        with ledger.tx():
            with ledger.tx(sync_on_commit=True):  # joins, and makes the whole commit wait
                pass
            assert setting() == "on"
        with ledger.tx():
            assert setting() == "off"
    finally:
        ledger.close()


def test_a_provider_limit_counts_every_process_of_the_ledger(book):
    """``limits: {local: {concurrency: 1}}`` holds across processes: another host's call in
    flight (a live lease) takes the one slot; its lease expiring frees it. ``per_minute``
    counts the attempts every process started in the last 60 s. A refusal writes nothing."""
    from afc_cli.ledger import ProviderBusy

    ledger, (a, b, c), _ = book
    _ghost(ledger, a, expires="9e18")  # another host's call to local, in flight
    b = ledger.claim(b["id"], 60)
    with pytest.raises(ProviderBusy) as busy:
        ledger.start_attempt(b, 0, "local", "m1", None, durable=False, limit=(1, None))
    assert "1 call in flight" in busy.value.reason and busy.value.retry_after > 0
    assert ledger.attempts(b["id"]) == [] and ledger.job(b["id"])["attempts"] == 0
    assert ledger.start_attempt(b, 0, "local", "m1", None, durable=False, limit=(2, None)) == 1
    with ledger.tx():  # the other host died: its lease expires, its call no longer counts
        ledger.db.execute("UPDATE jobs SET lease_expires = 1 WHERE id = ?", (a["id"],))
    c = ledger.claim(c["id"], 60)
    assert ledger.start_attempt(c, 0, "local", "m1", None, durable=False, limit=(2, None)) == 1

    # per minute: b's and c's attempts started within the minute (the ghost's at 0: long ago)
    with pytest.raises(ProviderBusy) as busy:
        ledger.start_attempt(c, 0, "local", "m1", None, durable=False, limit=(None, 2))
    assert "in the last minute" in busy.value.reason
    assert 0 < busy.value.retry_after <= 60
    # another provider's limit is its own
    assert ledger.start_attempt(c, 0, "other", "m1", None, durable=False, limit=(1, 1)) == 2


@pytest.mark.parametrize(
    "ended, left, base",
    [
        ("dead", ("unknown", "pred-1", None), 0),  # polled after the retry
        ("cancelled", ("unknown", "pred-1", None), 1),  # the cancel asked it to stop
        ("dead", ("unknown", "pred-1", "the provider no longer has request pred-1"), 1),
        ("dead", ("unknown", None, None), 1),  # nothing to poll
        ("failed", ("failed", "pred-1", None), 1),  # it ended
    ],
)
def test_a_retry_keeps_a_request_left_polling_after_its_base(book, ended, left, base):
    """``afc retry`` moves the chain's base past the job's attempts, except a last one left
    polling at a job-style provider (found by bench/chaos.py: dead-lettered by takeovers
    while it polled, the retried job paid for a new prediction)."""
    ledger, (job, *_), _ = book
    _ghost(ledger, job)
    status, request_id, message = left
    with ledger.tx():
        ledger.db.execute(
            "UPDATE attempts SET status = ?, provider_request_id = ?, error_message = ?"
            " WHERE job_id = ?",
            (status, request_id, message, job["id"]),
        )
    assert ledger.finish(ledger.job(job["id"]), ended, step="render")
    assert ledger.retry(ledger.job(job["id"]), "me")
    assert ledger.job(job["id"])["attempt_base"] == base


def _held_here(ledger, job, owner: str, expires: str) -> None:
    with ledger.tx():
        ledger.db.execute(
            f"UPDATE jobs SET lease_owner = ?, lease_expires = {expires} WHERE id = ?",
            (owner, job["id"]),
        )


def test_a_claim_takes_this_hosts_dead_owners_job_first_once_its_lease_expired(book):
    """A worker back on its host after its predecessor's lease ran out (a slow restart, a
    reboot) still adopts that predecessor's job (its render may be in this host's spool
    alone) before free jobs: another host may take it over now, and would pay again."""
    from afc_cli.owner import host_id

    ledger, (a, b, c), _ = book
    _held_here(ledger, c, f"{host_id()}:999999999:1", expires="1")  # dead, lease run out
    assert [j["key"] for j in ledger.claim_runnable(1, 60)] == ["shot-003"]


def test_a_claim_finds_this_hosts_dead_owners_job_behind_a_live_workers(book):
    """The dead owner's job is found though another live worker on this host holds jobs
    admitted before it (the lookup was limited before the dead were picked out)."""
    import os

    from afc_cli.owner import _start_ticks, host_id

    ledger, (a, b, c), _ = book
    parent = os.getppid()
    _held_here(ledger, a, f"{host_id()}:{parent}:{_start_ticks(parent)}", expires="9e18")
    _held_here(ledger, b, f"{host_id()}:999999999:1", expires="9e18")  # dead, lease running
    assert [j["key"] for j in ledger.claim_runnable(1, 60)] == ["shot-002"]


def test_a_stalled_owners_interrupt_does_not_end_the_attempt_another_process_polls(
    book, ledger_url
):
    """A process stalled while it polled, its job taken over and the attempt reopened by the
    new owner; it woke into a stopping run (SIGTERM meanwhile), abandoned its poll and marked
    the attempt ``unknown`` (``interrupt_attempt``) on the row the new owner polls: the
    poller's success then changed nothing (an outcome is written only while ``started``), and
    the job succeeded with no succeeded attempt, the path report_attempt's owner check closed."""
    import time

    ledger, (a, _, _), _ = book
    stalled = Ledger(ledger_url)
    stalled.owner = "host-b:4242:1"
    try:
        model = "black-forest-labs/flux-1.1-pro"
        job = stalled.claim(a["id"], 0.01)
        assert stalled.start_attempt(job, 0, "replicate", model, None, durable=False) == 1
        stalled.record_request_id(job, 1, "replicate", "pred-1")
        time.sleep(0.05)
        job = ledger.claim(a["id"], 60)  # the takeover: unknown, then reopened to poll
        (attempt,) = ledger.attempts(job["id"])
        assert attempt["status"] == "unknown" and ledger.reopen_attempt(job, attempt)
        stalled.interrupt_attempt(job, 1)  # the stalled process wakes, stopping
        ledger.end_attempt(
            job,
            1,
            chain_index=0,
            provider="replicate",
            model=model,
            status="succeeded",
            cost_micros=40_000,
            cost_source="derived",
        )
        (attempt,) = ledger.attempts(job["id"])
        assert (attempt["status"], attempt["owner"]) == ("succeeded", ledger.owner)
    finally:
        stalled.close()


def test_a_job_leased_to_its_spools_host_is_taken_there_at_once_and_elsewhere_only_later(
    book, ledger_url, monkeypatch
):
    """A job waiting for storage with its output in this host's spool is leased to the host
    (``set_waiting(here_for_s=...)``, owner ``host:0:0``): a worker on another host leaves it
    alone while the lease runs; any process here takes it at once, with no takeover counted;
    once the lease ran out, another host takes it over as any other."""
    from afc_cli.owner import host_id, host_lease

    ledger, (a, _, _), _ = book
    home, hold = host_id(), host_lease()  # host:0:0, and this machine's fingerprint
    job = ledger.claim(a["id"], 60)
    ledger.set_waiting(job, "storage: down", here_for_s=60)
    assert (job["lease_owner"], ledger.job(a["id"])["lease_owner"]) == (hold,) * 2
    elsewhere = Ledger(ledger_url)
    elsewhere.owner = "host-b:4242:1"
    here = Ledger(ledger_url)
    here.owner = f"{home}:4243:1"  # another process of this host (a worker's next run)
    try:
        monkeypatch.setenv("AFC_HOST_ID", "host-b")  # what host-b's processes see
        assert elsewhere.claim(a["id"], 60) is None
        assert [j["key"] for j in elsewhere.claim_runnable(3, 60)] == ["shot-002", "shot-003"]
        monkeypatch.setenv("AFC_HOST_ID", home)
        taken = here.claim(a["id"], 60)
        assert taken is not None and taken["takeovers"] == 0
        assert [e for e in here.events(a["id"]) if e["kind"] == "takeover"] == []
        here.set_waiting(taken, "storage: down", here_for_s=0.01)
        time.sleep(0.05)
        monkeypatch.setenv("AFC_HOST_ID", "host-b")
        taken = elsewhere.claim(a["id"], 60)  # the host never came back for it
        assert taken is not None and taken["lease_owner"] == "host-b:4242:1"
        # a move between hosts, told as any takeover (afc show)
        [moved] = [e for e in here.events(a["id"]) if e["kind"] == "takeover"]
        assert json.loads(moved["detail_json"]) == {"previous_owner": hold}
        assert taken["takeovers"] == 1
    finally:
        elsewhere.close()
        here.close()


def test_a_claim_never_takes_a_job_this_loop_still_runs(book):
    """A worker's run loop tells its claims which jobs it still runs (``skip``). Its task of
    a job it stalled on, taken over by another process and released again, must not become
    the lease holder again through its own process's claim: its view of the job is stale (it
    finished a job on a request the other process had taken over, leaving that attempt
    ``unknown``). Free, expired or held by a dead process here: a skipped job is not taken."""
    from afc_cli.owner import host_id

    ledger, (a, b, c), _ = book
    _held_here(ledger, b, "another-host:4242:1", expires="1")  # expired elsewhere
    _held_here(ledger, c, f"{host_id()}:999999999:1", expires="9e18")  # dead here
    skip = {a["id"], b["id"], c["id"]}
    assert ledger.claim_runnable(3, 60, skip=skip) == []
    assert [j["key"] for j in ledger.claim_runnable(3, 60, skip={b["id"]})] == [
        "shot-001",
        "shot-003",
    ]
    assert ledger.job(b["id"])["lease_owner"] == "another-host:4242:1"


def test_a_job_released_with_its_output_in_this_hosts_spool_goes_to_this_host(
    book, tmp_path, monkeypatch
):
    """A run gives back a job whose rendered output is in this host's spool (a worker whose
    round could not start with storage down; a stopping run): it goes to this host
    (``host:0:0``) for what is left of the run's lease, not to every host, whose workers find
    no spool file (SPOOL_MISSING). Any run here takes it at once; a job with no spool file
    here is freed as before."""
    from afc_cli.owner import host_lease

    monkeypatch.setenv("AFC_SPOOL_DIR", str(tmp_path / "spool"))  # PostgreSQL's spool
    ledger, (a, b, c), _ = book
    root = ledger.spool_root()
    root.mkdir(parents=True, exist_ok=True)
    for job in (a, b):
        (root / f"{job['id']}.spool").write_bytes(b"paid")
    home = host_lease()  # host:0:0 and this machine's fingerprint
    taken = {j["key"]: j for j in ledger.claim_runnable(3, 60)}
    ledger.release(taken["shot-001"])
    row = ledger.job(a["id"])
    assert row["lease_owner"] == home
    assert row["lease_expires"] == pytest.approx(taken["shot-001"]["lease_expires"])
    ledger.release_all()  # the end of an interrupted run
    assert ledger.job(b["id"])["lease_owner"] == home
    assert ledger.job(c["id"])["lease_owner"] is None  # nothing of it here
    again = ledger.claim(a["id"], 60)  # any process here takes it at once
    assert again is not None and again["takeovers"] == 0


def test_a_run_says_a_job_left_to_the_host_whose_spool_holds_its_output(book):
    """A job leased to another host (its output in that host's spool) is not "being run by
    another afc process (pid 0 ...)": the run says where its output waits."""
    from afc_cli.run import note_held_elsewhere

    ledger, _, _ = book
    rows = [
        {"status": "queued", "lease_owner": "render-2:0:0", "lease_expires": 9e18},
        {"status": "queued", "lease_owner": "render-2:4242:1", "lease_expires": 9e18},
    ]
    note_held_elsewhere(ledger, rows)
    assert "in the spool of host render-2" in rows[0]["waiting_reason"]
    assert "pid 4242 on render-2" in rows[1]["waiting_reason"]
