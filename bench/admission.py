"""Admitting a 100,000-job list from JSON Lines: ``afc submit --no-run`` on a fresh ledger
(wall time and peak RSS, start-up included), then ``afc queue stats`` on that ledger.

The floor, measured in the same run: reading the list and parsing each line with ``json.loads``
in this process (what any admission must at least do). Each case runs ``--runs`` times; the
medians are printed with the machine's load. Run: ``python bench/admission.py``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
AFC = str(Path(sys.executable).parent / "afc")


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def timed(command: list[str], cwd: Path) -> tuple[float, float, float]:
    """Wall time, peak RSS (MiB) and CPU time (user + system): on a shared machine the CPU
    time says what the command cost, the wall time also what it waited for."""
    start = time.perf_counter()
    proc = subprocess.run(
        ["/usr/bin/time", "-f", "%M %U %S", *command], cwd=cwd, capture_output=True, text=True
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{command} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    peak, user, system = proc.stderr.strip().splitlines()[-1].split()
    return wall, int(peak) / 1024, float(user) + float(system)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = HERE / "work" / "admission"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "manifest.yaml").write_text(
        "version: 1\nbatch: catalogue\n"
        "defaults:\n  params: {size: 64x64}\n  chain: [{provider: local, model: demo-v1}]\n"
        "rates:\n  - {provider: local, model: demo-v1, per_image: '0.01'}\n"
        "jobs_from: jobs.jsonl\n"
    )
    with open(work / "jobs.jsonl", "w") as handle:
        for i in range(args.jobs):
            row = {"key": f"sku-{i:07d}", "prompt": f"product photo of item {i}, white background"}
            handle.write(json.dumps(row) + "\n")
    print(f"load before: {load()}")

    floors, walls, rss, stats, cpus, stat_cpus = [], [], [], [], [], []
    for run in range(args.runs):
        start = time.perf_counter()
        with open(work / "jobs.jsonl") as handle:
            for line in handle:
                json.loads(line)
        floors.append(time.perf_counter() - start)
        ledger = work / f"afc-{run}.db"
        wall, peak, cpu = timed(
            [AFC, "submit", "manifest.yaml", "--no-run", "-q", "--ledger", str(ledger)], work
        )
        walls.append(wall)
        rss.append(peak)
        cpus.append(cpu)
        wall, _peak, cpu = timed([AFC, "queue", "stats", "--ledger", str(ledger)], work)
        stats.append(wall)
        stat_cpus.append(cpu)
    print(
        f"admission of {args.jobs:,} jobs from JSON Lines (submit --no-run): "
        f"{statistics.median(walls):.2f} s (runs {', '.join(f'{w:.2f}' for w in walls)}), "
        f"{args.jobs / statistics.median(walls):,.0f} jobs/s, peak RSS "
        f"{statistics.median(rss):.0f} MiB, CPU {statistics.median(cpus):.2f} s; "
        "floor (read + json.loads) "
        f"{statistics.median(floors):.2f} s, ratio {statistics.median(walls) / statistics.median(floors):.1f}; "
        f"target 4 s ({statistics.median(walls) / 4:.2f} x); load {load()}"
    )
    print(
        f"afc queue stats on that ledger: {statistics.median(stats):.2f} s "
        f"(runs {', '.join(f'{s:.2f}' for s in stats)}), CPU {statistics.median(stat_cpus):.2f} s, "
        "start-up included; target 0.5 s; "
        f"load {load()}"
    )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
