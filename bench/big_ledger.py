"""A ledger after months of use, and what afc's read commands take on it.

Runs one real 100-job batch on the instant ``local`` provider with ``file://`` storage (88
jobs succeed at once, 10 after a ``server`` failure, 2 fail for good: 110 attempts), then
copies its rows in SQL into ``--batches`` batches (``seed-1``, ``seed-2``, ...; the copies'
outputs are not on disk, which only ``afc report --html``'s thumbnails notice), and measures
each read command's wall time and peak RSS (``os.wait4``), its output sent to /dev/null.

    python bench/big_ledger.py --batches 1001            # 100,100 jobs
    python bench/big_ledger.py --batches 101 --keep DIR  # 10,100 jobs, the folder kept
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = [
    ["status"],
    ["status", "--json"],
    ["status", "--all"],
    ["outputs"],
    ["outputs", "--json"],
    ["report", "--html", "report.html"],
    ["queue", "stats"],
    ["costs", "report", "--by", "day"],
]


def seed_manifest(path: Path) -> None:
    jobs = []
    for i in range(100):
        job = {"key": f"shot-{i:03d}", "prompt": f"a month of shots, number {i}"}
        if i % 10 == 3:
            job["params"] = {"fail": ["server"]}
        if i in (47, 91):
            job["params"] = {"fail": ["invalid"]}
        jobs.append(job)
    data = {
        "version": 1,
        "batch": "seed",
        "defaults": {"chain": [{"provider": "local", "model": "instant", "attempts": 2}]},
        "rates": [{"provider": "local", "model": "instant", "per_image": "0.01"}],
        "jobs": jobs,
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def afc_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AFC_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def build(work: Path, batches: int) -> None:
    seed_manifest(work / "manifest.yaml")
    subprocess.run(
        [sys.executable, "-m", "afc_cli", "submit", "manifest.yaml", "-q"],
        cwd=work,
        env=afc_env(),
        check=False,  # the two jobs that fail for good make it exit 1
    )
    conn = sqlite3.connect(work / "afc.db")
    with conn:
        copies = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
        many = (batches - 1,)
        conn.execute(
            copies + "INSERT INTO batches SELECT b.name || '-' || n.i, b.storage, b.rates_json,"
            " b.manifest_path, b.created_at + n.i * 3600, b.updated_at + n.i * 3600,"
            " b.limits_json, b.storage_endpoint, b.storage_mark, b.storage_mark_host"
            " FROM batches b, n WHERE b.name = 'seed'",
            many,
        )
        columns = [row[1] for row in conn.execute("PRAGMA table_info(jobs)")]
        shifted = {
            "id": "j.id || '-' || n.i",
            "batch": "j.batch || '-' || n.i",
            "output_key": "j.batch || '-' || n.i || substr(j.output_key, 5)",
            "created_at": "j.created_at + n.i * 3600",
            "updated_at": "j.updated_at + n.i * 3600",
            "finished_at": "j.finished_at + n.i * 3600",
        }
        picked = ", ".join(shifted.get(c, f"j.{c}") for c in columns)
        conn.execute(
            copies + f"INSERT INTO jobs ({', '.join(columns)}) SELECT {picked}"
            " FROM jobs j, n WHERE j.batch = 'seed'",
            many,
        )
        columns = [row[1] for row in conn.execute("PRAGMA table_info(attempts)") if row[1] != "id"]
        shifted = {"job_id": "a.job_id || '-' || n.i", "started_at": "a.started_at + n.i * 3600"}
        picked = ", ".join(shifted.get(c, f"a.{c}") for c in columns)
        conn.execute(
            copies + f"INSERT INTO attempts ({', '.join(columns)}) SELECT {picked}"
            " FROM attempts a JOIN jobs j ON j.id = a.job_id, n WHERE j.batch = 'seed'",
            many,
        )
        conn.execute(
            copies + "INSERT INTO steps SELECT s.job_id || '-' || n.i, s.step,"
            " s.completed_at + n.i * 3600, s.detail_json"
            " FROM steps s JOIN jobs j ON j.id = s.job_id, n WHERE j.batch = 'seed'",
            many,
        )
    jobs, attempts = conn.execute(
        "SELECT (SELECT COUNT(*) FROM jobs), (SELECT COUNT(*) FROM attempts)"
    ).fetchone()
    conn.execute("ANALYZE")
    conn.close()
    print(f"ledger: {jobs:,} jobs in {batches:,} batches, {attempts:,} attempts", flush=True)


def measure(work: Path, args: list[str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB, exit code) of ``afc ARGS``, its stdout discarded."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "afc_cli", *args],
        cwd=work,
        env=afc_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=1001)
    parser.add_argument("--keep", help="build (or reuse) the ledger in this folder, kept")
    parser.add_argument("--only", nargs="*", help="commands whose first words match")
    args = parser.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="big-ledger-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if not (work / "afc.db").exists():
            started = time.perf_counter()
            build(work, args.batches)
            print(f"built in {time.perf_counter() - started:.1f} s", flush=True)
        for command in COMMANDS:
            if args.only and not any(" ".join(command).startswith(o) for o in args.only):
                continue
            wall, rss, code = measure(work, command)
            print(f"afc {' '.join(command):<32} {wall:6.2f} s  {rss:6.0f} MiB  exit {code}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
