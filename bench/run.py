"""afc benchmarks: `make bench` prints a table.

- fresh: `afc submit` of a new 10,000-job manifest on the instant `local` provider with
  `file://` storage; jobs per second over the whole command, start-up included.
- replay: the same `afc submit` again once everything is stored; wall time, start-up included.

Targets (issue 2): >= 1,000 jobs/s fresh, <= 1.5 s for the 10,000-job replay.
Each figure is the command's wall time measured from outside, as a user would see it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml


def write_manifest(path: Path, n: int) -> None:
    data = {
        "version": 1,
        "batch": "bench",
        "defaults": {"chain": [{"provider": "local", "model": "instant"}]},
        "rates": [{"provider": "local", "model": "instant", "per_image": "0.01"}],
        "jobs": [{"key": f"shot-{i:05d}", "prompt": f"benchmark prompt {i}"} for i in range(n)],
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def timed(cmd: list[str], cwd: Path) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AFC_")}
    start = time.perf_counter()
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stderr[-2000:]}")
    return elapsed


def storage_floor(n: int, threads: int) -> float:
    """Jobs/s of afc's file work alone (spool write, create-only store with metadata), no
    ledger, no provider: the ceiling this machine's file system puts on a fresh run."""
    from concurrent.futures import ThreadPoolExecutor

    from afc_cli.providers.local import render_png
    from afc_cli.spool import Spool
    from afc_cli.storage.file import FileStorage

    work = Path(tempfile.mkdtemp(prefix="afc-floor-"))
    try:
        spool, storage = Spool(work / "spool"), FileStorage(work / "out")
        data = render_png("floor", 64, 64)

        def one(i: int) -> None:
            spool.write(f"job{i}", data)
            meta = {"job_id": f"job{i}", "request_hash": "h"}
            storage.put_if_absent(f"bench/k{i}.png", spool.path(f"job{i}"), meta)

        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, range(n)))
        return n / (time.perf_counter() - start)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    afc = [sys.executable, "-m", "afc_cli"]
    work = Path(tempfile.mkdtemp(prefix="afc-bench-"))
    try:
        write_manifest(work / "manifest.yaml", args.jobs)
        submit = [*afc, "submit", "manifest.yaml", "-q", "--concurrency", str(args.concurrency)]
        fresh = timed(submit, work)
        replay = timed(submit, work)
        help_s = timed([*afc, "--help"], work)
        floor = storage_floor(args.jobs, args.concurrency)
        stored = sum(1 for p in (work / "afc-outputs" / "bench").iterdir() if p.suffix == ".png")
        assert stored == args.jobs, stored
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows = [
        (
            "fresh submit",
            f"{args.jobs} jobs",
            f"{fresh:.2f} s",
            f"{args.jobs / fresh:,.0f} jobs/s",
            ">= 1,000 jobs/s",
            args.jobs / fresh >= 1000,
        ),
        (
            "replay (all stored)",
            f"{args.jobs} jobs",
            f"{replay:.2f} s",
            "-",
            "<= 1.5 s",
            replay <= 1.5,
        ),
        ("afc --help", "-", f"{help_s:.2f} s", "-", "-", True),
        (
            "file work alone (no ledger)",
            f"{args.jobs} jobs",
            "-",
            f"{floor:,.0f} jobs/s",
            "ceiling for fresh",
            True,
        ),
    ]
    header = ("benchmark", "size", "wall", "rate", "target", "met")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join("{:<" + str(w) + "}" for w in widths)
    print(line.format(*header))
    for row in rows:
        print(
            line.format(
                *[str(c) if not isinstance(c, bool) else ("yes" if c else "NO") for c in row]
            )
        )


if __name__ == "__main__":
    main()
