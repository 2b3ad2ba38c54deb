"""Outside audit 65c: the command a run gives for the jobs that wait for a person.

``afc resume`` names the failed and dead-lettered jobs of earlier runs and says how to queue
them again: "'afc retry KEY' (or 'afc retry --batch B --failed')". ``--failed`` selects the
failed jobs alone: run as said for a batch whose jobs were dead-lettered (STORE_FAILED: their
renders paid for and kept in the spool, the storage down through five runs, as across an
upgrade of afc in the middle of a batch), it answered 'no job to retry', exit 0, and the
jobs stayed dead; and ``B`` was not the batch's name. The run now writes the command for the
jobs it names: each batch by its name, with ``--failed``, ``--dead`` or both, as they are."""

from __future__ import annotations

import re
import shlex

from conftest import manifest
from s3fake import Fault


def _stuck_line(stderr: str) -> str:
    [line] = [line for line in stderr.splitlines() if "wait for a person" in line]
    return line


def test_the_retry_command_a_run_gives_queues_its_dead_and_failed_jobs(afc, s3):
    log = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(log)}
    data = manifest(
        [
            {"key": "kept", "prompt": "a render its storage refuses"},
            {
                "key": "broken",
                "prompt": "a render that fails once",
                "params": {"fail": ["server"]},
                "chain": [{"provider": "local", "model": "m1", "attempts": 1}],
            },
        ],
        storage=s3.url,
    )
    afc.write_manifest(data)
    s3.plan.add(Fault("PUT", r"/", "500", -1, retry_after="0"))
    assert afc("submit", "manifest.yaml", env=env).returncode == 1
    for _ in range(5):  # the store fails run after run: dead-lettered, its render spooled
        afc("resume", env=env)
    assert sorted(afc.rows("SELECT key, status, error_code FROM jobs")) == [
        ("broken", "failed", "CHAIN_FAILED"),
        ("kept", "dead", "STORE_FAILED"),
    ]
    s3.plan.clear()
    rendered = len(log.read_text().splitlines())  # kept's one render, broken's failed one

    resumed = afc("resume", env=env)
    assert resumed.returncode == 1, resumed.stderr
    line = _stuck_line(resumed.stderr)
    assert "b1/kept (dead, STORE_FAILED)" in line and "b1/broken (failed, CHAIN_FAILED)" in line
    [given] = [c for c in re.findall(r"'(afc retry [^']*)'", line) if "--batch" in c]
    assert given == "afc retry --batch b1 --failed --dead", line

    retried = afc(*shlex.split(given)[1:], "--yes", env=env)
    assert retried.returncode == 0, retried.stderr
    assert "no job to retry" not in retried.stderr, retried.stderr
    assert sorted(afc.rows("SELECT key, status FROM jobs")) == [
        ("broken", "queued"),
        ("kept", "queued"),
    ]
    done = afc("resume", env=env)
    assert done.returncode == 0, done.stderr
    assert sorted(afc.rows("SELECT key, status FROM jobs")) == [
        ("broken", "succeeded"),
        ("kept", "succeeded"),
    ]
    # kept's render stored from the spool, not paid again; broken rendered once more
    assert len(log.read_text().splitlines()) == rendered + 1


def test_one_status_gets_its_own_flag_and_several_batches_a_command_each():
    from afc_cli.cli import _retry_commands

    rows = [
        {"batch": "b2", "status": "dead"},
        {"batch": "b1", "status": "failed"},
        {"batch": "b2", "status": "dead"},
    ]
    assert _retry_commands(rows) == [
        "afc retry --batch b1 --failed",
        "afc retry --batch b2 --dead",
    ]
