"""Ledger schema, as sqlite-utils migrations applied whenever a ledger is opened.

Migrations are named, append-only and never edited once shipped: a fresh ledger and an old one
walk the same path to the same schema (tests/test_migrations.py compares them).

The list is kept here without sqlite-utils (``STEPS``, ``names()``), so a command that finds
nothing pending never imports it (about 0.15 s of CPU); ``migrations``, sqlite-utils'
``Migrations`` with every step registered in order, is built on first use, to apply them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MIGRATION_SET = "afc"
STEPS: list[Callable[[Any], None]] = []


def _step(fn: Callable[[Any], None]) -> Callable[[Any], None]:
    STEPS.append(fn)
    return fn


def names() -> list[str]:
    """Every migration's name, in order (sqlite-utils names a migration after its function)."""
    return [fn.__name__ for fn in STEPS]


_built: Any = None


def __getattr__(name: str) -> Any:
    """``migrations``: sqlite-utils' ``Migrations`` for these steps (imported on first use)."""
    global _built
    if name != "migrations":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _built is None:
        from sqlite_utils import Migrations

        built = Migrations(MIGRATION_SET)
        for fn in STEPS:
            built()(fn)
        _built = built
    return _built


@_step
def m001_initial(db):
    db.executescript(
        """
        CREATE TABLE batches (
            name TEXT PRIMARY KEY,
            storage TEXT NOT NULL,
            rates_json TEXT NOT NULL,
            manifest_path TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        );
        CREATE TABLE jobs (
            id TEXT PRIMARY KEY NOT NULL,
            batch TEXT NOT NULL REFERENCES batches(name),
            key TEXT NOT NULL,
            seq INTEGER NOT NULL,
            request_hash TEXT NOT NULL,
            request_json TEXT NOT NULL,
            output_key TEXT NOT NULL,
            status TEXT NOT NULL,
            step TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            lease_owner TEXT,
            lease_expires REAL,
            takeovers INTEGER NOT NULL DEFAULT 0,
            store_failures INTEGER NOT NULL DEFAULT 0,
            output_sha256 TEXT,
            output_size INTEGER,
            outcome TEXT,
            error_code TEXT,
            error_class TEXT,
            error_provider TEXT,
            error_http_status INTEGER,
            error_message TEXT,
            waiting_reason TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            finished_at REAL,
            UNIQUE (batch, key)
        ) WITHOUT ROWID;
        CREATE TABLE steps (
            job_id TEXT NOT NULL REFERENCES jobs(id),
            step TEXT NOT NULL,
            completed_at REAL NOT NULL,
            detail_json TEXT,
            PRIMARY KEY (job_id, step)
        ) WITHOUT ROWID;
        CREATE TABLE attempts (
            id INTEGER PRIMARY KEY,
            job_id TEXT NOT NULL REFERENCES jobs(id),
            number INTEGER NOT NULL,
            chain_index INTEGER NOT NULL,
            provider TEXT NOT NULL,
            model TEXT NOT NULL,
            status TEXT NOT NULL,
            error_class TEXT,
            http_status INTEGER,
            error_message TEXT,
            provider_request_id TEXT,
            owner TEXT,
            wait_s REAL,
            started_at REAL NOT NULL,
            ended_at REAL,
            duration_s REAL,
            usage_json TEXT,
            cost_micros INTEGER,
            cost_source TEXT,
            UNIQUE (job_id, provider, number)
        );
        CREATE TABLE events (
            id INTEGER PRIMARY KEY,
            job_id TEXT,
            batch TEXT,
            at REAL NOT NULL,
            kind TEXT NOT NULL,
            detail_json TEXT
        );
        CREATE INDEX events_job ON events (job_id, id);
        """
    )


@_step
def m002_status_index(db):
    # Runs pick a batch's non-terminal jobs by status.
    db.executescript("CREATE INDEX jobs_batch_status ON jobs (batch, status);")


@_step
def m003_budget_and_avoided(db):
    # run_id and reserved_micros let a run's budget hold under concurrency: an attempt's
    # estimated cost is reserved in the transaction that commits its row. retry_after_s keeps a
    # provider's Retry-After across runs. avoided records renders that stored outputs saved.
    db.executescript(
        """
        ALTER TABLE attempts ADD COLUMN run_id TEXT;
        ALTER TABLE attempts ADD COLUMN reserved_micros INTEGER;
        ALTER TABLE attempts ADD COLUMN retry_after_s REAL;
        CREATE INDEX attempts_run ON attempts (run_id);
        CREATE TABLE avoided (
            id INTEGER PRIMARY KEY,
            job_id TEXT NOT NULL REFERENCES jobs(id),
            batch TEXT NOT NULL,
            at REAL NOT NULL,
            reason TEXT NOT NULL,
            provider TEXT,
            model TEXT,
            cost_micros INTEGER,
            cost_source TEXT
        );
        """
    )


@_step
def m004_batch_limits(db):
    # per-provider call limits (concurrency, per_minute) as the batch's manifest set them
    db.execute("ALTER TABLE batches ADD COLUMN limits_json TEXT")


@_step
def m005_webhook_outbox(db):
    # The transactional outbox: a delivery row is inserted in the same transaction as the
    # terminal update that produced it; its id is "<job id>:<event>", so inserting it again
    # does nothing. The envelope is the exact body every (re)delivery sends.
    db.executescript(
        """
        ALTER TABLE jobs ADD COLUMN webhook_json TEXT;
        CREATE TABLE deliveries (
            id TEXT PRIMARY KEY NOT NULL,
            job_id TEXT NOT NULL REFERENCES jobs(id),
            batch TEXT NOT NULL,
            event TEXT NOT NULL,
            url TEXT NOT NULL,
            secret_env TEXT NOT NULL,
            timeout_s REAL NOT NULL,
            envelope TEXT NOT NULL,
            status TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at REAL NOT NULL,
            last_status INTEGER,
            last_error TEXT,
            lease_owner TEXT,
            lease_expires REAL,
            created_at REAL NOT NULL,
            delivered_at REAL
        ) WITHOUT ROWID;
        CREATE INDEX deliveries_due ON deliveries (status, next_attempt_at);
        CREATE TABLE endpoints (
            url TEXT PRIMARY KEY NOT NULL,
            disabled_at REAL,
            reason TEXT
        ) WITHOUT ROWID;
        """
    )


@_step
def m006_retry_and_interrupts(db):
    # attempt_base: the attempts numbered up to it happened before the job's last `afc retry`;
    # they stay in its history and its costs, but no longer count toward its chain. retries
    # counts those decisions (a retried job's next terminal event gets a delivery id of its own).
    # Attempts cut off by afc's own end get the class "interrupted" (attempts.py), so they never
    # use up a model's attempts; earlier ledgers marked them unknown with no class.
    db.executescript(
        """
        ALTER TABLE jobs ADD COLUMN attempt_base INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE jobs ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;
        UPDATE attempts SET error_class = 'interrupted'
            WHERE status = 'unknown' AND error_class IS NULL
            AND error_message LIKE 'the process running this attempt ended%';
        """
    )


@_step
def m007_review_needs_inputs(db):
    # Review gates, dependencies and reference images (afc_cli/review.py, docs/pipeline.md).
    # jobs.review: the job pauses in `awaiting_review` after verify; review_at: since when.
    # jobs.inputs_json: where its reference images are read from (a path's absolute location
    # and SHA-256, or the job whose output it uses); the request body carries what the hash
    # covers. job_needs: the jobs a job waits for (`blocked` until each has succeeded).
    # reviews: each decision, who made it, when and why. attempts.inputs_json: the inputs an
    # attempt actually sent, with their SHA-256.
    db.executescript(
        """
        ALTER TABLE jobs ADD COLUMN review INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE jobs ADD COLUMN review_at REAL;
        ALTER TABLE jobs ADD COLUMN inputs_json TEXT;
        ALTER TABLE attempts ADD COLUMN inputs_json TEXT;
        CREATE TABLE job_needs (
            job_id TEXT NOT NULL REFERENCES jobs(id),
            need_id TEXT NOT NULL,
            need_key TEXT NOT NULL,
            PRIMARY KEY (job_id, need_id)
        );
        CREATE INDEX job_needs_need ON job_needs (need_id);
        CREATE TABLE reviews (
            id INTEGER PRIMARY KEY,
            job_id TEXT NOT NULL REFERENCES jobs(id),
            batch TEXT NOT NULL,
            decision TEXT NOT NULL,
            decided_by TEXT NOT NULL,
            note TEXT,
            decided_at REAL NOT NULL
        );
        CREATE INDEX reviews_job ON reviews (job_id);
        """
    )


@_step
def m008_status_age_index(db):
    # The (batch, status) index gains created_at, so the age of a batch's oldest queued,
    # running or waiting job is one index lookup per status (`afc queue stats`), not a read of
    # every job row; every query on (batch, status) uses its first two columns as before, and
    # an admission still writes one entry of it per job (a second index would cost a third
    # more insert time).
    db.executescript(
        """
        DROP INDEX jobs_batch_status;
        CREATE INDEX jobs_batch_status_age ON jobs (batch, status, created_at);
        """
    )


@_step
def m009_lease_mono(db):
    # jobs.lease_mono: the lease's expiry on its owner's host's monotonic clock (Linux's
    # CLOCK_MONOTONIC, one clock for every process of a host, never stepped, standing still
    # while the host sleeps), written with lease_expires by each claim and renewal. The other
    # processes of that host judge a live owner's lease by it (owner.lease_held), so a step of
    # the wall clock or a suspend does not hand a live run's jobs to them; other hosts, and
    # every judgement of a dead owner, go by lease_expires as before.
    db.executescript(
        """
        ALTER TABLE jobs ADD COLUMN lease_mono REAL;
        """
    )


@_step
def m010_ledger_moves(db):
    # ledger_moves: a row per 'afc ledger copy' that moved this ledger's work elsewhere (its
    # destination, as messages name it: never a password; and when). A moved ledger keeps its
    # history for reading and runs nothing: submit, resume and worker refuse it, and the copy
    # leased its unfinished jobs to MOVED_OWNER for good, so a claim already waiting when it
    # committed takes none of them (Ledger.refuse_moved, afc_cli/ledger/copy.py). Not copied.
    db.executescript(
        """
        CREATE TABLE ledger_moves (
            destination TEXT NOT NULL,
            moved_at REAL NOT NULL
        );
        """
    )


@_step
def m011_output_key_holders(db):
    # An index of the jobs that hold their output key: rendering it (running) or having stored
    # an output under it. Two jobs of one key (batches of one storage whose output template
    # leaves out {batch}) run by two processes at once both found the key free and both paid;
    # each attempt now looks here first (Ledger._check_output). Partial: an admission writes
    # no entry of it (its jobs are queued), a job one as it runs and one as it ends.
    db.executescript(
        """
        CREATE INDEX jobs_output_holders ON jobs (output_key)
            WHERE status IN ('running', 'succeeded', 'awaiting_review', 'rejected');
        """
    )


@_step
def m012_batch_storage_endpoint(db):
    # batches.storage_endpoint: the S3 endpoint a batch's storage was reached through when it
    # was admitted (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL: a MinIO, an R2 account), '' for
    # none (AWS's own, and every file:// storage). One bucket name on two endpoints is two
    # stores: a run that reaches the batch's through another is refused as another storage is
    # (Ledger.check_storage). NULL for a batch admitted before: recorded by its next run.
    db.executescript(
        """
        ALTER TABLE batches ADD COLUMN storage_endpoint TEXT;
        """
    )


@_step
def m013_output_key_rendering(db):
    # The waiting jobs by output key: a job whose job-style provider (Replicate, fal) renders
    # its request is ``waiting`` ("provider still rendering") while it is polled, and holds
    # its key as a running job does (Ledger._check_output); m011's index has no waiting job.
    # Partial: an admission writes no entry of it.
    db.executescript(
        """
        CREATE INDEX jobs_output_rendering ON jobs (output_key) WHERE status = 'waiting';
        """
    )


@_step
def m014_output_key_spooled(db):
    # The jobs whose paid render of their output key is spooled and not stored, that no run
    # holds: dead-lettered at the store step (STORE_FAILED, SPOOL_MISSING), or queued there
    # again by 'afc retry'. Such a job holds its key against another job of the key, which
    # would pay for a render the store step then refuses (Ledger._check_output); m011's and
    # m013's indexes have no queued or dead job. Partial: only such jobs have an entry.
    db.executescript(
        """
        CREATE INDEX jobs_output_spooled ON jobs (output_key)
            WHERE step = 'store' AND status IN ('queued', 'dead');
        """
    )


@_step
def m015_attempt_answer_url(db):
    # attempts.answer_url: the output URL a synchronous provider's paid answer named (an
    # OpenAI-compatible gateway's, valid about an hour), committed with the render's known
    # cost before its download begins (Ledger.record_answer_url). A run stopped or killed
    # during the download leaves it to the next run, which fetches it free while the provider
    # keeps it (pipeline._resumable), where it paid for a new render. The whole URL (a signed
    # one's query too, or it could not be fetched): never shown in a log line or --json.
    db.executescript(
        """
        ALTER TABLE attempts ADD COLUMN answer_url TEXT;
        """
    )


@_step
def m016_output_key_poll_left(db):
    # The jobs dead-lettered at their render step by output key: one whose last attempt is a
    # request the provider may still have holds its key (Ledger._check_output,
    # OUTPUT_POLL_LEFT_SQL). Found before through the (batch, status) index, with an EXISTS on
    # attempts beside it; on PostgreSQL a plan made while ``attempts`` was nearly empty (a
    # worker's first jobs: psycopg prepares a statement at its fifth use, and the server keeps
    # its plan) drove from a scan of every attempt, once a job: 10,000 instant jobs cost the
    # server 3 ms of CPU a job, where 1 ms had been measured. Partial: only such jobs have an
    # entry, so the lookup starts from the few dead jobs of the key.
    db.executescript(
        """
        CREATE INDEX jobs_output_poll_left ON jobs (output_key)
            WHERE status = 'dead' AND step = 'render';
        """
    )


@_step
def m017_claim_order(db):
    # The free runnable jobs in the order a worker claims them (Ledger.claim_runnable: by batch
    # in code point order, then admission): each claim read the first 64 entries here, where it
    # sorted every free runnable job of the ledger, once a claim (12-16 ms a claim of 64 with
    # 10,000 jobs queued on PostgreSQL, growing with the queue). Partial, in the words of the
    # claim's WHERE (ACTIVE_SQL): a claimed, finished or blocked job has no entry. BINARY is
    # SQLite's code point order, translated to PostgreSQL's "C" (ledger/postgres.translate_ddl).
    db.executescript(
        """
        CREATE INDEX jobs_claim_order ON jobs (batch COLLATE BINARY, seq)
            WHERE lease_owner IS NULL AND status IN ('queued', 'running', 'waiting');
        """
    )


@_step
def m018_leased_and_blocked(db):
    # A worker's claim with no batch named (Ledger.claim_runnable, settle_ready_blocked) looked
    # for leases to take over, this host's dead runs' jobs and blocked jobs whose needs ended
    # through the (batch, status) index, one look-up per batch and status ever admitted: on a
    # ledger of 500 batches (cron every few minutes, a few weeks) an idle poll cost 2.5 ms of
    # SQLite and 7.5 ms of PostgreSQL server time, growing by the batch. Partial, over the few
    # jobs a claim looks at: runnable jobs some owner holds, and blocked jobs. Keyed by the claim
    # order alone: a lease's renewal (lease_expires) changes no entry.
    db.executescript(
        """
        CREATE INDEX jobs_leased_order ON jobs (batch COLLATE BINARY, seq)
            WHERE lease_owner IS NOT NULL AND status IN ('queued', 'running', 'waiting');
        CREATE INDEX jobs_blocked_order ON jobs (batch COLLATE BINARY, seq)
            WHERE status = 'blocked';
        """
    )


# What a run's budget counts (Ledger.run_spend): each attempt's known cost, else its
# reservation, summed by run id, kept by triggers in the transaction of every change to an
# attempt's run id, cost or reservation, whichever statement makes it (a report's upsert, a
# reopening, a ledger copy's inserts). The check before each paid call read the sum over all
# the run's attempts, once a call, under the budget's lock: 10,000 jobs under --max-spend took
# twice as long as without it (17 s → 36 s), growing with the square of the batch, and a
# shared budget of 300,000 attempts held every worker's attempt start 55 ms on PostgreSQL.
SPEND = "COALESCE({row}.cost_micros, {row}.reserved_micros, 0)"
SPEND_CHANGED = (
    "old.run_id IS NOT new.run_id OR " + SPEND.format(row="old") + " <> " + SPEND.format(row="new")
)
RUN_SPEND_SQLITE = f"""
CREATE TRIGGER attempts_spend_insert AFTER INSERT ON attempts WHEN new.run_id IS NOT NULL
BEGIN
    INSERT INTO run_spend (run_id, spend_micros) VALUES (new.run_id, {SPEND.format(row="new")})
        ON CONFLICT (run_id) DO UPDATE SET spend_micros = spend_micros + excluded.spend_micros;
END;
CREATE TRIGGER attempts_spend_update AFTER UPDATE OF run_id, cost_micros, reserved_micros
    ON attempts WHEN {SPEND_CHANGED}
BEGIN
    UPDATE run_spend SET spend_micros = spend_micros - {SPEND.format(row="old")}
        WHERE run_id = old.run_id;
    INSERT INTO run_spend (run_id, spend_micros)
        SELECT new.run_id, {SPEND.format(row="new")} WHERE new.run_id IS NOT NULL
        ON CONFLICT (run_id) DO UPDATE SET spend_micros = spend_micros + excluded.spend_micros;
END;
CREATE TRIGGER attempts_spend_delete AFTER DELETE ON attempts WHEN old.run_id IS NOT NULL
BEGIN
    UPDATE run_spend SET spend_micros = spend_micros - {SPEND.format(row="old")}
        WHERE run_id = old.run_id;
END;
"""
# every run's sum of the attempts already there: m019's first fill, and a copy's into
# PostgreSQL (PostgresLedger.after_copy), which puts the attempts in without the insert trigger
RUN_SPEND_SUMMED = (
    "INSERT INTO run_spend (run_id, spend_micros)"
    " SELECT run_id, SUM(COALESCE(cost_micros, reserved_micros, 0)) FROM attempts"
    " WHERE run_id IS NOT NULL GROUP BY run_id"
)
# PostgreSQL's triggers call a function; its search_path is the one it was created under (the
# ledger's schema), whatever a later session's is
RUN_SPEND_POSTGRES = (
    f"""
CREATE FUNCTION afc_run_spend() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.run_id IS NOT NULL THEN
        UPDATE run_spend SET spend_micros = spend_micros - {SPEND.format(row="OLD")}
            WHERE run_id = OLD.run_id;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.run_id IS NOT NULL THEN
        INSERT INTO run_spend AS s (run_id, spend_micros)
            VALUES (NEW.run_id, {SPEND.format(row="NEW")})
            ON CONFLICT (run_id) DO UPDATE SET spend_micros = s.spend_micros + excluded.spend_micros;
    END IF;
    RETURN NULL;
END $$
""",
    "CREATE TRIGGER attempts_spend_insert AFTER INSERT ON attempts FOR EACH ROW"
    " WHEN (NEW.run_id IS NOT NULL) EXECUTE FUNCTION afc_run_spend()",
    "CREATE TRIGGER attempts_spend_update AFTER UPDATE OF run_id, cost_micros, reserved_micros"
    " ON attempts FOR EACH ROW WHEN ("
    + SPEND_CHANGED.replace(" IS NOT new.run_id", " IS DISTINCT FROM new.run_id")
    + ") EXECUTE FUNCTION afc_run_spend()",
    "CREATE TRIGGER attempts_spend_delete AFTER DELETE ON attempts FOR EACH ROW"
    " WHEN (OLD.run_id IS NOT NULL) EXECUTE FUNCTION afc_run_spend()",
)


@_step
def m019_run_spend(db):
    # RUN_SPEND above: the table, its sums of the attempts already there, and its triggers
    db.executescript(
        "CREATE TABLE run_spend (run_id TEXT PRIMARY KEY, spend_micros INTEGER NOT NULL);"
        f" {RUN_SPEND_SUMMED};"
    )
    if getattr(db, "dialect", "sqlite") == "postgresql":
        for statement in RUN_SPEND_POSTGRES:
            db.raw.execute(statement)
    else:
        db.executescript(RUN_SPEND_SQLITE)


@_step
def m020_attempts_in_flight(db):
    # A job the budget refused asks what the run's own calls in flight, and a shared budget's
    # other workers' calls, still reserve (Ledger.reserved_in_flight, reserved_elsewhere:
    # pipeline._may_make_room), once a refusal: both read every attempt of the run through
    # attempts_run. A workers' budget is never reset: at 300,000 attempts the two took 90 ms a
    # refused job, and the 600 jobs a worker had claimed past its cap held its loop 54 s (its
    # last 1,000 renders took 63 s, not 6). Partial, over the attempts in flight of unknown
    # cost: as many as the calls in flight, whatever the run's history.
    db.executescript(
        """
        CREATE INDEX attempts_in_flight ON attempts (run_id, owner)
            WHERE status = 'started' AND cost_micros IS NULL;
        """
    )


# A copy into PostgreSQL (PostgresLedger.before_copy) puts its attempts in with afc.copying set
# for its transaction alone, and sums each run once after (RUN_SPEND_SUMMED)
COPYING = "afc.copying"
SPEND_INSERT_POSTGRES = (
    "CREATE TRIGGER attempts_spend_insert AFTER INSERT ON attempts FOR EACH ROW"
    f" WHEN (NEW.run_id IS NOT NULL AND current_setting('{COPYING}', true)"
    " IS DISTINCT FROM 'on') EXECUTE FUNCTION afc_run_spend()"
)


@_step
def m021_copy_without_spend_trigger(db):
    # m019's insert trigger added each attempt a copy put in to its run's run_spend row, in the
    # copy's one transaction, where each update of a row leaves a version the next walks past:
    # a run's n attempts cost n²/2 (a 300,000-attempt budget copied in 10 min 52 s). Only the
    # table's owner could switch the trigger off (ALTER TABLE, which also locks the table
    # until the copy commits); any role may set afc.copying for its own transaction, which
    # the trigger's WHEN now reads. SQLite's triggers update a row in place: nothing to do.
    if getattr(db, "dialect", "sqlite") == "postgresql":
        db.raw.execute("DROP TRIGGER attempts_spend_insert ON attempts")
        db.raw.execute(SPEND_INSERT_POSTGRES)


@_step
def m022_attempts_started(db):
    # A provider's ``concurrency`` across the ledger (Ledger._check_limit) reads its calls in
    # flight, the attempts ``started``, at each call's start, under the ledger's write lock:
    # no index picked them out (attempts_in_flight is by run), and each read scanned every
    # attempt of the ledger, 33 ms at 300,000 attempts, a ceiling of some 30 calls started a
    # second for a ledger grown over months. Partial, over the calls in flight alone.
    db.executescript(
        """
        CREATE INDEX attempts_started ON attempts (provider) WHERE status = 'started';
        """
    )


@_step
def m023_attempts_per_minute(db):
    # A provider's ``per_minute`` across the ledger (Ledger._check_limit) counts the attempts it
    # started in the last minute, at each call's start, under the ledger's write lock: no
    # index had their start time, and each count read every attempt of the ledger, 0.68 s a
    # start on SQLite and 0.77 s on PostgreSQL at 3,000,000 attempts (a 10,000-job batch
    # under a per_minute limit would have run for two hours). Read here: the starts of the
    # last minute alone, the provider compared in the index. By time first: led by the
    # provider, SQLite read a whole ledger's 'afc costs report' (grouped by provider) in its
    # order, a table look-up an attempt (27 s where the scan took 10 s at 3,000,000 attempts).
    # Every attempt writes an entry, at the index's end (its start is the latest).
    db.executescript(
        """
        CREATE INDEX attempts_per_minute ON attempts (started_at, provider);
        """
    )


@_step
def m024_jobs_lease_owner(db):
    # The jobs a run holds, by its owner id: its lease renewal (Ledger.renew_leases, every
    # third of the lease, under the ledger's write lock) and its release at an interrupted
    # end (release_all) found them by scanning every job of the ledger: at 1,000,000 jobs a
    # renewal held the write lock 1.1 s on SQLite (every other run's claim and attempt
    # waiting behind it), 1 s on PostgreSQL. Partial: only a held job has an entry (a claim
    # writes it, the release or the end of the job removes it); a renewal, which changes
    # only the expiry, changes none.
    db.executescript(
        """
        CREATE INDEX jobs_lease_owner ON jobs (lease_owner) WHERE lease_owner IS NOT NULL;
        """
    )


@_step
def m025_avoided_job(db):
    # The avoided renders by job: a job's first row (what ``afc costs report`` counts) and the
    # model a stored output's row names (Ledger._stored_models: ``afc outputs``, ``afc report
    # --html``, review). The table had no index but its row id: a batch's report grouped every
    # row of the ledger by job (0.66 s on SQLite, 2.9-4.3 s on PostgreSQL at 317,000 rows, three
    # times over in ``afc report --html --batch``), and each chunk of 500 jobs read the whole
    # table (10.5 s of a 10,000-job batch's report on SQLite). A row is written at an
    # admission's replay or when a probe finds the output stored, not at a render.
    db.executescript(
        """
        CREATE INDEX avoided_job ON avoided (job_id, id);
        """
    )


@_step
def m026_deliveries_job(db):
    # A job's webhook deliveries (Ledger.job_deliveries: ``afc show KEY``) were found by
    # scanning the whole outbox, which keeps a row per job event of every batch that posts
    # webhooks, delivered or not: at 500,000 rows 0.24 s on SQLite (2 s with the file not in
    # the page cache) and 0.26-0.7 s on PostgreSQL for one job, growing with every batch. A
    # delivery writes an entry, once, when its job's event is queued.
    db.executescript(
        """
        CREATE INDEX deliveries_job ON deliveries (job_id);
        """
    )


@_step
def m027_avoided_batch(db):
    # A batch's avoided renders (Ledger._record_replays_avoided, at every admission round of a
    # re-submit: the jobs already counted, and the renders found stored) were found by
    # scanning the whole table, which keeps a row per replayed or found job of every batch:
    # 27-44 ms a statement, two a 5,000-job round, at 384,000 rows on SQLite; 0.3-5 ms
    # with the index. A row is written at an admission's replay or a probe's find, not at a
    # render.
    db.executescript(
        """
        CREATE INDEX avoided_batch ON avoided (batch);
        """
    )


@_step
def m028_batch_storage_mark(db):
    # batches.storage_mark: the mark of the file:// folder the batch's runs store in (the
    # folder's .afc-folder file, afc_cli/storage/file.py FileStorage.folder_mark), and
    # storage_mark_host the host (owner.host_id) whose run recorded it. A folder of the same
    # path on another host (a share not mounted there, each host's own disk) has another
    # mark: a run there is refused (run.hold_folder), where it stored its part of the batch on
    # its own disk, every job said to have succeeded. NULL for S3, and for a batch no run has
    # stored for since m028: recorded by its next run.
    db.executescript(
        """
        ALTER TABLE batches ADD COLUMN storage_mark TEXT;
        ALTER TABLE batches ADD COLUMN storage_mark_host TEXT;
        """
    )
