"""Outside audit 25e: 'afc ledger copy' from SQLite into a PostgreSQL ledger that workers on
other machines already poll (started first, so they take the work the moment it lands)."""

from __future__ import annotations

import collections
import os
import signal

from conftest import Afc, jobs, manifest, wait_for_ledger

# the copy pauses between its commit into the destination and its marking of the source, as
# a slow disk or a loaded machine makes it pause there; the file says when it got there
SITECUSTOMIZE = """
import os, pathlib, time

import afc_cli.ledger.copy as copy

_mark = copy._mark_moved


def _slow_mark(src, dst):
    pathlib.Path(os.environ["AFC_TEST_COPY_PAUSED"]).touch()
    time.sleep(1.5)
    return _mark(src, dst)


copy._mark_moved = _slow_mark
"""


def test_a_worker_polling_the_destination_waits_for_the_copy_to_open(tmp_path, pg_url):
    """A worker idle on the new PostgreSQL ledger met the copy in the moment between its
    commit and its marking of the SQLite source moved, when the copy refuses every run: it
    stopped, exit 2, saying the copy 'did not finish' and to run it again, though the copy
    finished a moment later and said so. It now waits (up to worker.COPY_OPEN_WAIT_S) for the
    copy to open, then runs every job, each paid for once."""
    afc = Afc(tmp_path)
    log = tmp_path / "calls.log"
    afc.write_manifest(manifest(jobs(5)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    env = {"AFC_LOCAL_CALL_LOG": str(log)}
    worker = afc.popen("worker", "--poll", "0.05", "--ledger", pg_url, env=env)
    try:
        wait_for_ledger(
            afc,
            pg_url,
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()",
        )
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        paused = tmp_path / "copy-paused"
        path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
        copied = afc(
            "ledger",
            "copy",
            "afc.db",
            pg_url,
            env={"PYTHONPATH": path, "AFC_TEST_COPY_PAUSED": str(paused)},
        )
        assert copied.returncode == 0, copied.stderr
        assert paused.exists()
        assert worker.poll() is None, worker.stderr.read()
        wait_for_ledger(
            afc,
            pg_url,
            "SELECT CASE WHEN COUNT(*) = SUM(CASE WHEN status = 'succeeded' THEN 1"
            " ELSE 0 END) THEN 1 ELSE 0 END FROM jobs",
            proc=worker,
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=60)
    stderr = worker.stderr.read()
    assert code == 0, stderr
    assert "did not finish" not in stderr, stderr
    calls = collections.Counter(line.split()[0] for line in log.read_text().splitlines())
    assert sorted(calls.values()) == [1] * 5
