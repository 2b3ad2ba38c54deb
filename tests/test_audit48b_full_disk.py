"""Outside audit 48b: a full or hostile disk under a paid batch."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest
from conftest import manifest
from test_full_disk import afc_line, in_namespace, namespace, write_manifest  # noqa: F401


def test_renders_kept_as_the_ledger_disk_fills_are_not_said_of_unknown_cost(
    afc,
    namespace,  # noqa: F811
):
    """The ledger and the file:// storage on one disk that fills while 8 priced renders
    ($0.05 each) are in flight (the spool on a disk of its own): the run stops, the renders
    kept in the spool with their cost beside them (``.about``), and the next run records
    them at $0.40 without paying again. The run's notice said 'their cost is unknown', which
    sent a user to the provider's bill for renders afc knew the price of."""
    write_manifest(afc, 8)
    ledger = "disk/afc.db"
    submit = afc_line(
        afc,
        "submit",
        "manifest.yaml",
        "--ledger",
        ledger,
        "--storage",
        "file://./disk/out",
        min_free="0",
    )
    resume = afc_line(afc, "resume", "--ledger", ledger, min_free="0")
    script = "\n".join(
        [
            "mkdir -p disk && mount -t tmpfs -o size=2m tmpfs disk || exit 9",
            "mkdir -p disk/afc.db-spool && mount -t tmpfs -o size=20m tmpfs disk/afc.db-spool"
            " || { umount disk; exit 9; }",
            f"AFC_LOCAL_RELEASE=$PWD/release {submit} > first.out 2> first.err &",
            "pid=$!",
            "n=0; while [ $(cat calls.log 2>/dev/null | wc -l) -lt 8 ] && [ $n -lt 3000 ]; do"
            " sleep 0.01; n=$((n+1)); done",
            "head -c 4000000 /dev/zero > disk/filler 2>/dev/null",
            "touch release",
            "wait $pid; echo $? > first.rc",
            "rm disk/filler",
            f"{resume} > second.out 2> second.err; echo $? > second.rc",
            "cp disk/afc.db ledger-copy.db; cp disk/afc.db-wal ledger-copy.db-wal 2>/dev/null",
            "umount disk/afc.db-spool; umount disk",
            "exit 0",
        ]
    )
    result = in_namespace(afc, script)
    assert result.returncode == 0, result.stderr
    first_err = (afc.cwd / "first.err").read_text()
    assert (afc.cwd / "first.rc").read_text().strip() == "1", first_err
    kept = [line for line in first_err.splitlines() if "the ledger could not record kept" in line]
    assert kept and kept[0].startswith("afc: 8 paid renders"), first_err
    assert "unknown" not in kept[0], kept[0]
    assert "each at the cost its answer made known" in kept[0], kept[0]
    second_err = (afc.cwd / "second.err").read_text()
    assert (afc.cwd / "second.rc").read_text().strip() == "0", second_err
    assert len((afc.cwd / "calls.log").read_text().split()) == 16  # 8 calls, none paid again
    with sqlite3.connect(afc.cwd / "ledger-copy.db") as db:
        costs = db.execute("SELECT status, cost_micros FROM attempts").fetchall()
    assert costs == [("succeeded", 50_000)] * 8  # recorded at the price the notice knew


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_decision_whose_json_result_meets_a_full_disk_is_said_made(afc):
    """A review decision, a cancel or a retry whose ``--json`` result goes to a file on a full
    disk (``/dev/full`` here) is committed before its result is written. The command said
    '[Errno 28] No space left on device; every job stays resumable: fix it, then run 'afc
    resume'', a run's words, which read as nothing done: the approval made again was refused
    (exit 2, not awaiting review), and 'afc resume' mends no decision."""
    data = manifest([{"key": "r1", "prompt": "one"}, {"key": "q1", "prompt": "two"}])
    data["jobs"][0]["review"] = True
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    afc.write_manifest(manifest([{"key": "q2", "prompt": "three"}]), "more.yaml")
    assert afc("submit", "more.yaml", "--no-run").returncode == 0
    for args in (("review", "approve", "r1"), ("cancel", "q2"), ("retry", "q2")):
        with open("/dev/full", "w") as full:
            result = subprocess.run(
                afc.command(*args, "--json"),
                cwd=afc.cwd,
                env=afc.env,
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                timeout=120,
            )
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr
        said = result.stderr.strip().splitlines()[-1]
        assert "the --json result could not be written to stdout" in said, said
        assert "what this command did is done and recorded in the ledger" in said, said
        assert "afc resume" not in said, said
    decided = afc.rows("SELECT key, status FROM jobs ORDER BY key")
    assert decided == [("q1", "succeeded"), ("q2", "queued"), ("r1", "succeeded")]


def test_a_read_only_ledger_a_killed_run_left_says_to_copy_its_wal_and_spool(
    afc,
    namespace,  # noqa: F811
):
    """A run SIGKILLed (the OOM killer, a power cut) leaves the ledger's latest transactions
    in ``afc.db-wal``; its folder then read-only (a volume remounted so), 'afc resume' said
    to 'copy it somewhere writable and point --ledger there'. Done as said (``cp afc.db``),
    the copy lacked the killed run's whole batch, its admission and its 8 attempts in flight
    (possibly paid), and its resume paid for them again. The message names the -wal file to
    take with it, and the spool folder beside it, and a copy made so holds the batch."""
    write_manifest(afc, 8)
    submit = afc_line(afc, "submit", "manifest.yaml", "--ledger", "disk/afc.db", min_free="0")
    resume = afc_line(afc, "resume", "--ledger", "disk/afc.db", min_free="0")
    script = "\n".join(
        [
            "mkdir -p disk elsewhere",
            f"AFC_LOCAL_RELEASE=$PWD/release {submit} > first.out 2> first.err &",
            "pid=$!",
            "n=0; while [ $(cat calls.log 2>/dev/null | wc -l) -lt 8 ] && [ $n -lt 3000 ]; do"
            " sleep 0.01; n=$((n+1)); done",
            "kill -9 $pid; wait $pid",
            # a paid render a store left waiting there (its bytes are the spool's only copy)
            "mkdir -p disk/afc.db-spool && echo render > disk/afc.db-spool/left.spool",
            "mount --bind disk disk && mount -o remount,bind,ro disk || exit 9",
            f"{resume} > second.out 2> second.err; echo $? > second.rc",
            "cp disk/afc.db disk/afc.db-wal elsewhere/",
            "umount disk",
            "exit 0",
        ]
    )
    result = in_namespace(afc, script)
    if result.returncode == 9:
        pytest.skip(f"the mounts are not available here: {result.stderr}")
    assert result.returncode == 0, result.stderr
    said = (afc.cwd / "second.err").read_text()
    assert (afc.cwd / "second.rc").read_text().strip() == "2", said
    assert "is read-only" in said and "Traceback" not in said
    assert "take afc.db-wal (it holds the ledger's latest transactions)" in said, said
    assert "the folder afc.db-spool (paid renders not yet stored)" in said, said
    status = afc("status", "--ledger", "elsewhere/afc.db", "--json")
    assert status.returncode == 0, status.stderr
    assert len(json.loads(status.stdout)["jobs"]) == 8  # the killed run's batch, all of it


def test_paid_renders_neither_kept_nor_recorded_as_the_disk_fills_are_named(
    afc,
    namespace,  # noqa: F811
):
    """The ledger and its spool on one disk (the default: the spool beside the ledger), full
    while 8 priced renders are in flight: their bytes cannot be spooled, nor their attempts
    recorded. The run's stop said only that the ledger could not be written, and the next run
    paid for each of the 8 again; the stop now names them and says they are paid again."""
    write_manifest(afc, 8)
    ledger = "disk/afc.db"
    submit = afc_line(afc, "submit", "manifest.yaml", "--ledger", ledger, min_free="0")
    resume = afc_line(afc, "resume", "--ledger", ledger, min_free="0")
    script = "\n".join(
        [
            "mkdir -p disk && mount -t tmpfs -o size=2m tmpfs disk || exit 9",
            f"AFC_LOCAL_RELEASE=$PWD/release {submit} > first.out 2> first.err &",
            "pid=$!",
            "n=0; while [ $(cat calls.log 2>/dev/null | wc -l) -lt 8 ] && [ $n -lt 3000 ]; do"
            " sleep 0.01; n=$((n+1)); done",
            "head -c 4000000 /dev/zero > disk/filler 2>/dev/null",
            "touch release",
            "wait $pid; echo $? > first.rc",
            "rm disk/filler",
            f"{resume} > second.out 2> second.err; echo $? > second.rc",
            "umount disk",
            "exit 0",
        ]
    )
    result = in_namespace(afc, script)
    assert result.returncode == 0, result.stderr
    first_err = (afc.cwd / "first.err").read_text()
    assert (afc.cwd / "first.rc").read_text().strip() == "1", first_err
    assert "Traceback" not in first_err
    assert (afc.cwd / "second.rc").read_text().strip() == "0"
    calls = (afc.cwd / "calls.log").read_text().split()[0::2]
    paid_twice = len(calls) - len(set(calls))
    assert paid_twice, calls  # the disk took none of the 8 renders' bytes
    said = [line for line in first_err.splitlines() if "could not be kept in the spool" in line]
    assert said, first_err
    # 'more' only beside renders said kept before it (suspected by outside audit 49b)
    more = " more" if "the ledger could not record kept in" in first_err else ""
    assert f"{paid_twice}{more} paid render" in said[0], said[0]
    assert "nor recorded: the next run renders them again (paid again)" in said[0], said[0]


def test_a_large_output_is_spooled_where_the_disk_has_room_for_it_once(
    afc,
    fake,
    namespace,  # noqa: F811
):
    """A download larger than the in-memory limit is spilled to a file in the spool's folder
    as it arrives; its spool step copied that file into the spool file, needing the output's
    size twice on the spool's disk, where the check before a render counts it once. A 20 MiB
    render on a disk with about 36 MiB free failed 'No space left on device', and so did each
    resume's fetch of it again: never stored, while the disk had room for it. The spilled
    file is now linked into place, and the output stored, paid once."""
    from test_output_spill import write

    write(afc, ["big-out-20 shot"])
    ledger = "disk/afc.db"
    script = "\n".join(
        [
            "mkdir -p disk && mount -t tmpfs -o size=36m tmpfs disk || exit 9",
            f"{afc_line(afc, 'submit', 'manifest.yaml', '--ledger', ledger, min_free='1')}"
            " > first.out 2> first.err; echo $? > first.rc",
            f"{afc_line(afc, 'resume', '--ledger', ledger, min_free='1')}"
            " > second.out 2> second.err; echo $? > second.rc",
            "umount disk",
            "exit 0",
        ]
    )
    result = in_namespace(afc, script)
    if result.returncode == 9:
        pytest.skip(f"the mounts are not available here: {result.stderr}")
    assert result.returncode == 0, result.stderr
    first_err = (afc.cwd / "first.err").read_text()
    assert (afc.cwd / "first.rc").read_text().strip() == "0", first_err
    assert (afc.cwd / "second.rc").read_text().strip() == "0"
    assert (afc.outputs() / "b1" / "j0.png").stat().st_size == 20 << 20
    assert fake.counts["replicate_submit"] == 1


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_json_result_a_full_disk_refuses_ends_in_afcs_own_exit_code_when_buffered(afc):
    """Outside a test's ``PYTHONUNBUFFERED=1`` (a crontab's, a script's), stdout to a file is
    buffered: the ``--json`` result it refused stayed in the buffer, and Python's own flush of
    it at exit failed again after afc's line, 'Exception ignored in: <_io.TextIOWrapper
    name='<stdout>'...> OSError: [Errno 28] No space left on device', exit 120 (a code README
    does not document) where README says 1: a decision's, a cancel's, a retry's, and a
    read's ('afc status --json') alike."""
    data = manifest([{"key": "r1", "prompt": "one"}, {"key": "q1", "prompt": "two"}])
    data["jobs"][0]["review"] = True
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    afc.write_manifest(manifest([{"key": "q2", "prompt": "three"}]), "more.yaml")
    assert afc("submit", "more.yaml", "--no-run").returncode == 0
    buffered = {k: v for k, v in afc.env.items() if k != "PYTHONUNBUFFERED"}
    for args in (("review", "approve", "r1"), ("cancel", "q2"), ("retry", "q2"), ("status",)):
        with open("/dev/full", "w") as full:
            result = subprocess.run(
                afc.command(*args, "--json"),
                cwd=afc.cwd,
                env=buffered,
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                timeout=120,
            )
        assert "Exception ignored" not in result.stderr, (args, result.stderr)
        assert result.returncode == 1, (args, result.stderr)
        said = result.stderr.strip().splitlines()[-1]
        assert "No space left on device" in said, said


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_table_a_full_disk_refuses_ends_in_afcs_own_line_and_exit_code(afc):
    """As a --json result's (above), a listing or table written to a file on a full disk by a
    crontab or a script (stdout buffered) failed at Python's own flush after the command:
    'Exception ignored in: <_io.TextIOWrapper name='<stdout>'...>', exit 120 (suspected by
    outside audit 49b)."""
    afc.write_manifest(manifest([{"key": "r1", "prompt": "one"}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    buffered = {k: v for k, v in afc.env.items() if k != "PYTHONUNBUFFERED"}
    for args in (("status",), ("outputs",), ("costs", "report")):
        with open("/dev/full", "w") as full:
            result = subprocess.run(
                afc.command(*args),
                cwd=afc.cwd,
                env=buffered,
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                timeout=120,
            )
        assert "Exception ignored" not in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr, (args, result.stderr)
        assert result.returncode == 1, (args, result.stderr)
        said = result.stderr.strip().splitlines()[-1]
        assert "No space left on device" in said, said


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_help_a_full_disk_refuses_ends_in_afcs_own_line_and_exit_code(afc):
    """As a table's (above): 'afc --help > file' on a full disk, stdout buffered (a script's),
    said afc's line and then Python's own flush of what was left, 'Exception ignored in:
    <_io.TextIOWrapper name='<stdout>'...> OSError', exit 120 where README says 1."""
    buffered = {k: v for k, v in afc.env.items() if k != "PYTHONUNBUFFERED"}
    for args in (("--help",), ("status", "--help"), ("review", "--help")):
        with open("/dev/full", "w") as full:
            result = subprocess.run(
                afc.command(*args),
                cwd=afc.cwd,
                env=buffered,
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                timeout=120,
            )
        assert "Exception ignored" not in result.stderr, (args, result.stderr)
        assert result.returncode == 1, (args, result.stderr)
        said = result.stderr.strip().splitlines()
        assert len(said) == 1 and "No space left on device" in said[0], said


def test_a_stdout_refused_otherwise_than_full_is_not_told_to_free_space(afc):
    """A stdout opened for reading only (``1</dev/null``: EBADF) was told to free space where
    it goes (suspected by outside audit 50a)."""
    afc.write_manifest(manifest([{"key": "r1", "prompt": "one"}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    buffered = {k: v for k, v in afc.env.items() if k != "PYTHONUNBUFFERED"}
    with open(os.devnull) as read_only:
        result = subprocess.run(
            afc.command("status"),
            cwd=afc.cwd,
            env=buffered,
            stdout=read_only,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert "Exception ignored" not in result.stderr and "Traceback" not in result.stderr
    assert result.returncode == 1, result.stderr
    said = result.stderr.strip().splitlines()[-1]
    assert "Bad file descriptor" in said and "mend where it goes" in said, said
    assert "free space" not in said, said
