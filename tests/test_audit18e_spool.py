"""The spool's mark of its PostgreSQL ledger, reviewed (outside audit 18e): a ledger restored
into a new database keeps its spool."""

from __future__ import annotations

import json

from conftest import manifest
from test_postgres_e2e import PgAfc


def test_a_ledger_restored_into_a_new_database_keeps_its_spool(tmp_path, pg_server):
    """A PostgreSQL ledger's run marks ./afc-spool as its own by the database's oid and when
    afc's schema was applied. A ledger moved to a new database of the same name (pg_dump and
    restore, a server upgrade by dump, a managed database restored) has another oid: every
    run of it from its folder was refused (exit 2) as 'another ledger's', though the mark
    named its own URL, and the message said to move the spooled renders away (to pay for
    them again). The same URL and the same schema's date are the same ledger: its resume
    stores the render its run spooled before it died, without paying again."""
    a = PgAfc(tmp_path, pg_server.database())
    a.write_manifest(manifest([{"key": "k", "prompt": "a cat"}]), "a.yaml")
    died = a("submit", "a.yaml", env={"AFC_CRASH_POINT": "after_spool"})
    assert died.returncode != 0
    [spooled] = a.spool().glob("*.spool")
    paid = spooled.read_bytes()

    # restored: the same rows in a new database that takes the old one's name
    name = a.url.rsplit("/", 1)[1]
    pg_server._admin(f"CREATE DATABASE {name}_restored TEMPLATE {name}")
    pg_server._admin(f"ALTER DATABASE {name} RENAME TO {name}_old")
    pg_server._admin(f"ALTER DATABASE {name}_restored RENAME TO {name}")

    resumed = a("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert a.rows("SELECT number, status FROM attempts") == [(1, "succeeded")]  # not paid again
    assert (a.outputs() / "b1" / "k.png").read_bytes() == paid

    # the database it was copied from, named by another URL, is another ledger now
    before = PgAfc(tmp_path, f"{a.url}_old")
    refused = before("resume")
    assert refused.returncode == 2, refused.stderr
    assert "another ledger" in refused.stderr and "Traceback" not in refused.stderr
    assert before.rows("SELECT number, status FROM attempts") == [(1, "started")]


def test_a_ledger_does_not_mark_as_its_own_a_spool_holding_another_ledgers_renders(
    tmp_path, pg_server
):
    """The spool's mark is made by the first run that finds none: a folder two PostgreSQL
    ledgers ran from before afc marked spools (or one whose mark a person removed) holds
    ledger A's paid render, spooled by a run that died. Ledger B's run (another batch) marked
    it as B's and ran; A's resume was then refused as another ledger's run, told to set
    AFC_SPOOL_DIR to a folder of its own, where its render is not: paid again. A run does
    not mark a spool holding files of jobs its ledger does not have: B is refused (exit 2,
    nothing admitted), and A's resume stores its render without paying again."""
    a = PgAfc(tmp_path, pg_server.database())
    b = PgAfc(tmp_path, pg_server.database())
    a.write_manifest(manifest([{"key": "k", "prompt": "a cat"}]), "a.yaml")
    ours = manifest([{"key": "k", "prompt": "a dog"}])
    ours["batch"] = "other"
    b.write_manifest(ours, "b.yaml")
    died = a("submit", "a.yaml", env={"AFC_CRASH_POINT": "after_spool"})
    assert died.returncode != 0
    [spooled] = a.spool().glob("*.spool")
    paid = spooled.read_bytes()
    (a.spool() / ".afc-ledger").unlink()  # as an older afc left it: no mark

    refused = b("submit", "b.yaml", "--storage", f"file://{tmp_path}/out-b")
    assert refused.returncode == 2, refused.stderr
    assert "not this ledger's" in refused.stderr and "AFC_SPOOL_DIR" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert b.rows("SELECT COUNT(*) FROM jobs") == [(0,)]

    resumed = a("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert a.rows("SELECT number, status FROM attempts") == [(1, "succeeded")]  # not paid again
    assert (a.outputs() / "b1" / "k.png").read_bytes() == paid


def test_a_replay_of_a_finished_batch_is_not_refused_for_another_ledgers_spool(tmp_path, pg_server):
    """A run with no job to render leaves another ledger's spool alone (README) and is not
    refused for it, as 'afc resume' is not; 'afc submit' of a batch whose jobs have all
    ended (a cron line that submits the same manifest) was refused exit 2 in a folder whose
    spool another ledger had marked, though it renders nothing. It replays, exit 0, and the
    spool stays the other ledger's."""
    a = PgAfc(tmp_path, pg_server.database())
    b = PgAfc(tmp_path, pg_server.database())
    a.write_manifest(manifest([{"key": "k", "prompt": "a cat"}]), "a.yaml")
    b.write_manifest(manifest([{"key": "k", "prompt": "a dog"}]), "b.yaml")
    ran = a("submit", "a.yaml", "--storage", f"file://{tmp_path}/out-a")
    assert ran.returncode == 0, ran.stderr  # marks ./afc-spool as A's
    mark = (a.spool() / ".afc-ledger").read_bytes()
    own = {"AFC_SPOOL_DIR": str(tmp_path / "b-spool")}
    done = b("submit", "b.yaml", "--storage", f"file://{tmp_path}/out-b", env=own)
    assert done.returncode == 0, done.stderr

    replayed = b("submit", "b.yaml", "--storage", f"file://{tmp_path}/out-b")
    assert replayed.returncode == 0, replayed.stderr
    assert b.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert b.rows("SELECT COUNT(*) FROM attempts") == [(1,)]
    assert (a.spool() / ".afc-ledger").read_bytes() == mark


def test_two_ledgers_with_renders_in_one_unmarked_spool_both_store_theirs(tmp_path, pg_server):
    """Two ledgers' dead runs both left a paid render in one unmarked spool (run there before
    afc marked spools): neither run may mark it as its own, and neither is refused for the
    other's file (each would be, for ever): each stores its own render, paying nothing
    again. Once a ledger's files are stored, the other's next run marks the spool."""
    a = PgAfc(tmp_path, pg_server.database())
    b = PgAfc(tmp_path, pg_server.database())
    a.write_manifest(manifest([{"key": "k", "prompt": "a cat"}]), "a.yaml")
    ours = manifest([{"key": "k", "prompt": "a dog"}])
    ours["batch"] = "other"
    b.write_manifest(ours, "b.yaml")
    died = a("submit", "a.yaml", env={"AFC_CRASH_POINT": "after_spool"})
    assert died.returncode != 0
    apart = tmp_path / "b-spool"
    died = b(
        "submit", "b.yaml", env={"AFC_CRASH_POINT": "after_spool", "AFC_SPOOL_DIR": str(apart)}
    )
    assert died.returncode != 0
    [spooled] = apart.glob("*.spool")
    spooled.rename(a.spool() / spooled.name)  # both in ./afc-spool, as an older afc left them
    (a.spool() / ".afc-ledger").unlink()
    assert len(list(a.spool().glob("*.spool"))) == 2

    for afc in (a, b):
        resumed = afc("resume")
        assert resumed.returncode == 0, resumed.stderr
        assert afc.rows("SELECT number, status FROM attempts") == [(1, "succeeded")]
    assert not list(a.spool().glob("*.spool"))
    assert b.url in (a.spool() / ".afc-ledger").read_text()  # B's run, alone there, marked it


def test_a_copy_between_postgresql_ledgers_does_not_ask_to_move_a_spool_into_itself(
    tmp_path, pg_server
):
    """'afc ledger copy' from one PostgreSQL ledger to another run from the same folder hands
    the spool over (its files are the destination's jobs'), but said '1 file waits in
    ./afc-spool: ... move them into ./afc-spool', the folder they are in. It says they wait
    there for the destination's next run."""
    a = PgAfc(tmp_path, pg_server.database())
    a.write_manifest(manifest([{"key": "k", "prompt": "a cat"}]), "a.yaml")
    died = a("submit", "a.yaml", env={"AFC_CRASH_POINT": "after_spool"})
    assert died.returncode != 0
    copied = a("ledger", "copy", a.url, pg_server.database())
    assert copied.returncode == 0, copied.stderr
    spool = str(a.spool())
    assert f"1 file waits in {spool}" in copied.stdout
    assert f"move them into {spool}" not in copied.stdout
    assert "the destination's next run here stores or polls them" in copied.stdout


def test_afc_plan_says_a_submit_would_be_refused_for_another_ledgers_spool(tmp_path, pg_server):
    """'afc plan' says what this environment lacks for the submit (an API key, a webhook
    secret: exit 0, the submit refuses on its own). The spool of another ledger in the
    working folder refuses the submit (exit 2) as surely, but the plan said nothing of it. It
    is said with them, in --json 'environment' too; a plan with nothing to render, as the
    submit, is not concerned."""
    a = PgAfc(tmp_path, pg_server.database())
    b = PgAfc(tmp_path, pg_server.database())
    a.write_manifest(manifest([{"key": "k", "prompt": "a cat"}]), "a.yaml")
    b.write_manifest(manifest([{"key": "k", "prompt": "a dog"}]), "b.yaml")
    ran = a("submit", "a.yaml", "--storage", f"file://{tmp_path}/out-a")
    assert ran.returncode == 0, ran.stderr  # marks ./afc-spool as A's

    planned = b("plan", "b.yaml", "--json", "--storage", f"file://{tmp_path}/out-b")
    assert planned.returncode == 0, planned.stderr
    [said] = json.loads(planned.stdout)["environment"]
    assert "another ledger" in said and "AFC_SPOOL_DIR" in said, said
    assert "would be refused (exit 2)" in planned.stderr
    refused = b("submit", "b.yaml", "--storage", f"file://{tmp_path}/out-b")
    assert refused.returncode == 2 and said in refused.stderr, refused.stderr

    mine = a("plan", "a.yaml", "--json")  # A's own spool; its job ended
    assert mine.returncode == 0, mine.stderr
    assert json.loads(mine.stdout)["environment"] == []
    assert b.rows("SELECT COUNT(*) FROM jobs") == [(0,)]  # a plan writes nothing
