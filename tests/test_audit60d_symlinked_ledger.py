"""Outside audit 60d (the spool): a SQLite ledger's spool is the folder beside its file. A
ledger reached through a symbolic link (``~/afc.db -> /srv/afc/afc.db``: a person's shell
beside a cron line that names the file itself) is the same database, SQLite opening the file
the link names, but its spool was named after the link: ``~/afc.db-spool``, another folder.
A render that one run spooled and did not record (killed between its spool write and its
checkpoint) was in the other folder for the run through the link, which found no file and
paid for the render again; the file stayed behind until a run through the other name. The
spool is now beside the file the ledger is (``spool.spool_beside``), whichever name reaches
it."""

from __future__ import annotations

import sys

from conftest import manifest, old_build

RATES = [{"provider": "local", "model": "m1", "per_image": "0.05"}]
KEYS = ("a", "b", "c")


def _calls(log) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_a_run_through_a_link_to_the_ledger_adopts_what_a_killed_run_spooled(afc):
    log = afc.cwd / "calls.log"
    afc.write_manifest(manifest([{"key": k, "prompt": k} for k in KEYS], rates=RATES))
    (afc.cwd / "srv").mkdir()
    (afc.cwd / "home").mkdir()
    env = {"AFC_LOCAL_CALL_LOG": str(log)}
    killed = afc(
        "submit",
        "manifest.yaml",
        "--ledger",
        "srv/afc.db",
        env={**env, "AFC_CRASH_POINT": "after_spool"},
    )
    assert killed.returncode == -9, killed.stderr
    spool = afc.cwd / "srv" / "afc.db-spool"
    # killed as the first render was spooled: the others spooled beside it, or not yet (a
    # render in memory at the kill is the paid window that remains, paid again by any run)
    spooled, paid = len(list(spool.glob("*.spool"))), _calls(log)
    assert spooled >= 1 and paid >= spooled, (spooled, paid)
    (afc.cwd / "home" / "afc.db").symlink_to(afc.cwd / "srv" / "afc.db")

    resumed = afc("resume", "--ledger", "home/afc.db", env=env)
    assert resumed.returncode == 0, resumed.stderr
    # the resume paid for the jobs with nothing in the spool, and for no spooled render
    assert _calls(log) == paid + 3 - spooled, "renders in the spool were paid for again"
    assert sorted(p.name for p in (afc.outputs() / "b1").glob("*.png")) == [
        f"{k}.png" for k in KEYS
    ]
    assert list(spool.iterdir()) == []  # adopted, stored, removed
    assert not (afc.cwd / "home" / "afc.db-spool").exists()


def test_a_spool_named_after_the_link_by_an_earlier_afc_is_still_stored_from(afc, tmp_path):
    """Renders an earlier afc left waiting at their store step in the folder beside the link
    (its checkpoint names that folder) are stored from there, not SPOOL_MISSING."""
    old = old_build("81a7e58afee4e058eb9faae968ce38c1bf8557ad", tmp_path / "before-60d")
    log = afc.cwd / "calls.log"
    afc.write_manifest(manifest([{"key": k, "prompt": k} for k in KEYS], rates=RATES))
    (afc.cwd / "srv").mkdir()
    (afc.cwd / "home").mkdir()
    (afc.cwd / "home" / "afc.db").symlink_to(afc.cwd / "srv" / "afc.db")
    env = {"AFC_LOCAL_CALL_LOG": str(log)}
    import subprocess

    first = subprocess.run(
        [sys.executable, "-m", "afc_cli", "submit", "manifest.yaml", "--ledger", "home/afc.db"],
        cwd=afc.cwd,
        env={**afc.env, **env, "PYTHONPATH": str(old), "AFC_FAIL_POINT": "spooled"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert first.returncode == 1, first.stderr
    left = afc.cwd / "home" / "afc.db-spool"
    assert len(list(left.glob("*.spool"))) == 3

    resumed = afc("resume", "--ledger", "home/afc.db", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert "SPOOL_MISSING" not in resumed.stderr
    assert _calls(log) == 3
    assert len(list((afc.outputs() / "b1").glob("*.png"))) == 3
    # no run uses the folder named after the link any more: nothing left in either
    assert list(left.glob("*.spool")) == []
    assert list((afc.cwd / "srv" / "afc.db-spool").glob("*.spool")) == []
