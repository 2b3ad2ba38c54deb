"""PostgreSQL ledger benchmark: 10,000 instant jobs through one PostgreSQL ledger, drained by 1
and by 3 ``afc worker`` processes, and what claiming and leasing cost per job.

- workers: ``afc submit --no-run`` admits 10,000 jobs on the instant ``local`` provider with
  ``file://`` storage (admission timed apart), then N ``afc worker --until-idle`` processes
  start together; the figure is 10,000 / the wall time from their start to the last one's exit
  (start-up included). Aggregate target: >= 1,000 jobs/s with 3 workers.
- claim/lease: in one process, 10,000 admitted jobs claimed in rounds of 64
  (``Ledger.claim_runnable``), then one ``renew_leases`` over all of them; per job, on
  PostgreSQL and, for comparison, on SQLite.

The server is started by tests/pg_server.py (the suite's own, here with the server's default
durability: fsync and synchronous commit on), or ``AFC_TEST_PG_URL`` names one.
"""

from __future__ import annotations

import os
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
    assert codes == [0] * workers, codes
    import psycopg

    with psycopg.connect(url) as conn:
        done = conn.execute("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'").fetchone()[0]
        attempts = conn.execute("SELECT COUNT(*) FROM attempts").fetchone()[0]
    assert done == N and attempts == N, (done, attempts)
    return {"admit_s": admitted, "wall_s": wall, "jobs_per_s": N / wall}


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
            print(
                f"{workers} worker(s): {figures['jobs_per_s']:,.0f} jobs/s"
                f" ({figures['wall_s']:.1f} s; admission {figures['admit_s']:.1f} s)",
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
