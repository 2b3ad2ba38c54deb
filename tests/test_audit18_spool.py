"""The spool and storage identity, found by an outside audit: a spool holds one ledger's paid
renders, and no run of another ledger takes them, overwrites them or sweeps them away."""

from __future__ import annotations

from conftest import manifest
from test_postgres_e2e import PgAfc
from test_webhooks import SECRET


def _two_ledgers_one_folder(tmp_path, pg_server) -> tuple[PgAfc, PgAfc]:
    """Two PostgreSQL ledgers run from one folder, with a batch and key alike (so alike job
    ids) and storages of their own."""
    a = PgAfc(tmp_path, pg_server.database())
    b = PgAfc(tmp_path, pg_server.database())
    a.write_manifest(manifest([{"key": "k", "prompt": "a cat"}]), "a.yaml")
    b.write_manifest(manifest([{"key": "k", "prompt": "a dog"}]), "b.yaml")
    return a, b


def test_a_second_ledger_run_from_the_same_folder_does_not_take_the_first_ones_spool(
    tmp_path, pg_server
):
    """Every PostgreSQL ledger run without AFC_SPOOL_DIR spools to ./afc-spool, each job's
    file named after its batch and key. Ledger A's run died with its paid render spooled;
    ledger B's run of a job of the same batch and key, from the same folder, wrote its own
    render over A's file and, succeeded, removed it: A's resume found nothing and paid for
    the render again (attempt 1 unknown, attempt 2 paid). B's run is refused (exit 2,
    nothing admitted or paid) naming the other ledger and AFC_SPOOL_DIR; with a spool of its
    own it runs, and A's resume stores its spooled render without paying again."""
    a, b = _two_ledgers_one_folder(tmp_path, pg_server)
    died = a(
        "submit",
        "a.yaml",
        "--storage",
        f"file://{tmp_path}/out-a",
        env={"AFC_CRASH_POINT": "after_spool"},
    )
    assert died.returncode != 0
    [spooled] = a.spool().glob("*.spool")
    paid = spooled.read_bytes()

    refused = b("submit", "b.yaml", "--storage", f"file://{tmp_path}/out-b")
    assert refused.returncode == 2, refused.stderr
    assert "another ledger" in refused.stderr and "AFC_SPOOL_DIR" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert b.rows("SELECT COUNT(*) FROM jobs") == [(0,)]  # nothing admitted
    assert b.rows("SELECT COUNT(*) FROM attempts") == [(0,)]
    assert spooled.read_bytes() == paid

    own = {"AFC_SPOOL_DIR": str(tmp_path / "b-spool")}
    done = b("submit", "b.yaml", "--storage", f"file://{tmp_path}/out-b", env=own)
    assert done.returncode == 0, done.stderr
    assert spooled.read_bytes() == paid

    resumed = a("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert a.rows("SELECT number, status FROM attempts") == [(1, "succeeded")]  # not paid again
    assert (tmp_path / "out-a" / "b1" / "k.png").read_bytes() == paid
    assert (tmp_path / "out-b" / "b1" / "k.png").read_bytes() != paid


def test_a_resume_with_nothing_to_run_leaves_another_ledgers_spool_alone(tmp_path, pg_server):
    """A run's first act is a sweep of spool files whose jobs succeeded. Ledger B ran with a
    spool of its own (AFC_SPOOL_DIR) and its job succeeded, its webhook event left in the
    outbox; a cron line of B without the variable ran 'afc resume' in the folder where ledger
    A's run had died with its render spooled and, to drain the outbox, swept A's paid render
    away as B's own (A paid again). A resume with no job to run on another ledger's spool
    leaves it as it is (exit 0: there was nothing to render)."""
    a, b = _two_ledgers_one_folder(tmp_path, pg_server)
    # B's webhook receiver is down: its event waits in the outbox, which every run drains
    data = manifest([{"key": "k", "prompt": "a dog"}])
    data["webhook"] = {"url": "http://127.0.0.1:9/hook", "secret_env": "AFC_HOOK_SECRET"}
    b.write_manifest(data, "b.yaml")
    b.env["AFC_HOOK_SECRET"] = SECRET
    own = {"AFC_SPOOL_DIR": str(tmp_path / "b-spool")}
    done = b("submit", "b.yaml", "--storage", f"file://{tmp_path}/out-b", env=own)
    assert done.returncode == 0, done.stderr
    assert b.rows("SELECT status FROM deliveries") == [("pending",)]
    died = a(
        "submit",
        "a.yaml",
        "--storage",
        f"file://{tmp_path}/out-a",
        env={"AFC_CRASH_POINT": "after_spool"},
    )
    assert died.returncode != 0
    [spooled] = a.spool().glob("*.spool")

    idle = b("resume")
    assert idle.returncode == 0, idle.stderr
    assert spooled.exists()

    resumed = a("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert a.rows("SELECT number, status FROM attempts") == [(1, "succeeded")]


def test_a_postgresql_ledger_moved_to_another_keeps_its_spool_for_the_destination(
    tmp_path, pg_server
):
    """'afc ledger copy' of a PostgreSQL ledger into another database, both run from one
    folder: the source's spool (./afc-spool) is the destination's spool too, and the files
    in it are the destination's jobs' now. The destination's resume is not refused as
    another ledger's run: it stores the render the source's run spooled before it died,
    without paying for it again."""
    a = PgAfc(tmp_path, pg_server.database())
    a.write_manifest(manifest([{"key": "k", "prompt": "a cat"}]), "a.yaml")
    died = a("submit", "a.yaml", env={"AFC_CRASH_POINT": "after_spool"})
    assert died.returncode != 0
    [spooled] = a.spool().glob("*.spool")
    paid = spooled.read_bytes()
    destination = pg_server.database()
    copied = a("ledger", "copy", a.url, destination)
    assert copied.returncode == 0, copied.stderr
    b = PgAfc(tmp_path, destination)
    resumed = b("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert b.rows("SELECT number, status FROM attempts") == [(1, "succeeded")]
    assert (a.outputs() / "b1" / "k.png").read_bytes() == paid


def test_a_worker_of_another_ledger_gives_back_what_it_claimed_and_pays_nothing(
    tmp_path, pg_server
):
    """A worker is refused as a run is: its claim's jobs go back at once, unpaid, for a
    worker of that ledger started with a spool of its own."""
    a, b = _two_ledgers_one_folder(tmp_path, pg_server)
    ran = a("submit", "a.yaml", "--storage", f"file://{tmp_path}/out-a")
    assert ran.returncode == 0, ran.stderr  # A's run marks ./afc-spool as A's
    admitted = b("submit", "b.yaml", "--no-run", "--storage", f"file://{tmp_path}/out-b")
    assert admitted.returncode == 0, admitted.stderr
    refused = b("worker", "--until-idle", "--poll", "0.2")
    assert refused.returncode == 2, refused.stderr
    assert "another ledger" in refused.stderr and "Traceback" not in refused.stderr
    assert b.rows("SELECT status, lease_owner FROM jobs") == [("queued", None)]
    assert b.rows("SELECT COUNT(*) FROM attempts") == [(0,)]
    own = {"AFC_SPOOL_DIR": str(tmp_path / "b-spool")}
    done = b("worker", "--until-idle", "--poll", "0.2", env=own)
    assert done.returncode == 0, done.stderr
    assert b.rows("SELECT status FROM jobs") == [("succeeded",)]
