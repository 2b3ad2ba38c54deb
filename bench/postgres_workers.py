"""PostgreSQL ledger benchmark: 10,000 instant jobs through one PostgreSQL ledger, drained by 1
and by 3 ``afc worker`` processes, and what claiming and leasing cost per job.

- workers: ``afc submit --no-run`` admits 10,000 jobs on the instant ``local`` provider with
  ``file://`` storage (admission timed apart), then N ``afc worker --until-idle`` processes
  start together; the figure is 10,000 / the wall time from their start to the last one's exit
  (start-up included). Aggregate target: >= 1,000 jobs/s with 3 workers. Beside it, the CPU
  time per job of the worker processes (start-up included) and of the server's processes
  (from /proc), which say where the time goes on a machine shared with other work.
- claim/lease: in one process, 10,000 admitted jobs claimed in rounds of 64
  (``Ledger.claim_runnable``), then one ``renew_leases`` over all of them; per job, on
  PostgreSQL and, for comparison, on SQLite.

The server is started by tests/pg_server.py (the suite's own, here with the server's default
durability: fsync and synchronous commit on), or ``AFC_TEST_PG_URL`` names one.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent / "tests"))
sys.path.insert(0, str(ROOT))

from pg_server import Server  # noqa: E402
from run import write_manifest  # noqa: E402

N = int(os.environ.get("AFC_BENCH_JOBS", "10000"))


def afc(*args: str) -> list[str]:
    return [sys.executable, "-m", "afc_cli", *args]


def server_cpu(server: Server) -> float | None:
    """CPU seconds the server's processes have used so far (its backends, live or ended, and
    the postmaster's helpers), from /proc; None for a server this bench did not start."""
    if server.root is None:
        return None
    clock = os.sysconf("SC_CLK_TCK")
    postmaster = int((server.root / "data" / "postmaster.pid").read_text().split()[0])
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry.name), int(fields[1])
        if pid == postmaster:  # its own, and its ended children's (cutime, cstime)
            total += sum(int(f) for f in fields[11:15])
        elif ppid == postmaster:
            total += int(fields[11]) + int(fields[12])
    return total / clock


def drain(server: Server, workers: int, work: Path) -> dict[str, float]:
    url = server.database()
    folder = work / f"workers-{workers}"
    folder.mkdir(parents=True)
    write_manifest(folder / "manifest.yaml", N)
    env = {**os.environ, "AFC_LEDGER": url}
    started = time.perf_counter()
    subprocess.run(
        afc("submit", "manifest.yaml", "--no-run", "-q"), cwd=folder, env=env, check=True
    )
    admitted = time.perf_counter() - started
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_before = server_cpu(server)
    started = time.perf_counter()
    procs = [
        subprocess.Popen(
            afc("worker", "--until-idle", "-q", "--poll", "0.2", "--concurrency", "16"),
            cwd=folder,
            env=env,
        )
        for _ in range(workers)
    ]
    codes = [p.wait() for p in procs]
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_after = server_cpu(server)
    worker_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert codes == [0] * workers, codes
    import psycopg

    with psycopg.connect(url) as conn:
        done = conn.execute("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'").fetchone()[0]
        attempts = conn.execute("SELECT COUNT(*) FROM attempts").fetchone()[0]
    assert done == N and attempts == N, (done, attempts)
    figures = {"admit_s": admitted, "wall_s": wall, "jobs_per_s": N / wall}
    figures["worker_cpu_ms_per_job"] = worker_cpu / N * 1e3
    if server_before is not None:
        figures["server_cpu_ms_per_job"] = (server_after - server_before) / N * 1e3
    return figures


def claim_costs(url: str, work: Path) -> dict[str, float]:
    from afc_cli.costs import RateCards
    from afc_cli.ledger import Ledger
    from afc_cli.manifest import load_manifest

    folder = work / f"claims-{'pg' if '://' in url else 'sqlite'}"
    folder.mkdir(parents=True)
    write_manifest(folder / "manifest.yaml", N)
    ledger = Ledger(url)
    try:
        ledger.admit(load_manifest(folder / "manifest.yaml"), "file:///tmp/x", RateCards())
        started = time.perf_counter()
        claimed = 0
        while True:
            round_ = ledger.claim_runnable(64, 300)
            if not round_:
                break
            claimed += len(round_)
        claim_s = time.perf_counter() - started
        started = time.perf_counter()
        ledger.renew_leases(300)
        renew_s = time.perf_counter() - started
    finally:
        ledger.close()
    assert claimed == N, claimed
    return {"claim_us_per_job": claim_s / N * 1e6, "renew_us_per_job": renew_s / N * 1e6}


def main() -> None:
    work = ROOT / "work" / "postgres"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    server = Server(durable=True)
    try:
        rows = []
        for workers in (1, 3):
            figures = drain(server, workers, work)
            rows.append((f"{N:,} instant jobs, {workers} worker(s)", figures))
            server_ms = figures.get("server_cpu_ms_per_job")
            print(
                f"{workers} worker(s): {figures['jobs_per_s']:,.0f} jobs/s"
                f" ({figures['wall_s']:.1f} s; admission {figures['admit_s']:.1f} s);"
                f" CPU per job: workers {figures['worker_cpu_ms_per_job']:.2f} ms"
                + ("" if server_ms is None else f", server {server_ms:.2f} ms")
                + f"; load average {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        pg = claim_costs(server.database(), work)
        lite = claim_costs(str(work / "claims.db"), work)
        print(
            f"claim in rounds of 64: {pg['claim_us_per_job']:.0f} us/job on PostgreSQL,"
            f" {lite['claim_us_per_job']:.0f} us/job on SQLite; renew: "
            f"{pg['renew_us_per_job']:.1f} / {lite['renew_us_per_job']:.1f} us/job"
        )
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
