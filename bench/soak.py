"""Soak: one overnight-sized batch over HTTP, stopped twice, then reconciled and measured.

Run it (after ``make bytecode``)::

    .venv/bin/python bench/soak.py [--jobs 2000] [--concurrency 64] [--latency 0.2,2.0]
    .venv/bin/python bench/soak.py --jobs 10000 --keep /tmp/soak   # the overnight size

One batch of ``--jobs`` jobs spread over the four fake providers of ``tests/fakeproviders.py``
(with bench/chaos.py's manifest: failure prompts, fallback chains, ``needs``, ``inputs``), each
generation request held ``--latency`` seconds (uniform) at the fake, Replicate and fal polled
every ``AFC_POLL_S``, ``file://`` storage (``--s3``: S3 on moto's server, with bench/chaos.py's
SlowDown and 500 faults at the wire). The real ``afc`` command runs it:

1. ``afc submit --concurrency N``, sent SIGTERM when ``--term-at`` of the jobs are terminal;
2. ``afc resume``, sent SIGKILL at ``--kill-at``;
3. ``afc resume`` to the end.

Each run is watched through /proc (resident memory, its peak, open fds, threads) and its
stderr counted. Then the read commands are timed on the finished ledger (``status``, ``costs
report``, ``show``, ``outputs``, ``queue stats``, ``report --html``), their agreement checked,
and bench/chaos.py's reconciliation run from outside (every billed request has an attempt row,
no job paid twice but for calls in flight at the kill, reports equal the attempt rows, each
succeeded job has its one object, replays pay nothing). It prints a table of figures and every
problem, and exits 1 if there was any.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chaos  # noqa: E402
from chaos import TERMINAL, Round  # noqa: E402
from fakeproviders import FakeProviders  # noqa: E402


class LatentFakes(FakeProviders):
    """The fakes, each generation request (a POST that is not a cancel) held a while first,
    as a provider renders: uniform in ``latency`` seconds."""

    def __init__(self, latency: tuple[float, float], seed: int) -> None:
        super().__init__()
        self.latency = latency
        self.rng = random.Random(seed)
        self.arrival = threading.local()

    def route(self, h, method: str) -> None:
        path = h.path.split("?")[0]
        self.arrival.at = time.time()
        if method == "POST" and not path.endswith("/cancel"):
            with self.lock:
                hold = self.rng.uniform(*self.latency)
            time.sleep(hold)
        return super().route(h, method)

    def record(self, provider: str, prompt: str, billed: bool, at: float | None = None) -> None:
        """Logged at the request's arrival, before its hold: what the reconciliation matches
        with the attempt in flight (a request held past a kill was still sent by it)."""
        super().record(provider, prompt, billed, self.arrival.at)


def proc_figures(pid: int) -> dict | None:
    """Resident memory and its peak (MiB), open fds and threads of a live process."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)

    def mib(name: str) -> float:
        return int(fields.get(name, "0 kB").split()[0]) / 1024

    return {
        "rss": mib("VmRSS"),
        "hwm": mib("VmHWM"),
        "fds": fds,
        "threads": int(fields.get("Threads", "0")),
    }


class Soak(Round):
    GATES = False  # no review gates, no webhook: the batch of the earlier sessions' figures

    def __init__(self, args, s3=None):
        self.latency = tuple(float(x) for x in args.latency.split(","))
        # chaos.Round starts the plain fakes: ours hold each render a while
        real = chaos.FakeProviders
        chaos.FakeProviders = lambda: LatentFakes(self.latency, args.seed)
        try:
            super().__init__(args, 0, "s3" if s3 else "file", None, False, s3)
        finally:
            chaos.FakeProviders = real
        self.env["AFC_POLL_S"] = args.poll
        self.samples: list[dict] = []

    def terminal(self) -> int:
        counts = self.statuses()
        return sum(n for s, n in counts.items() if s in TERMINAL)

    def watched(self, argv: list[str], stop_at: float | None, sig) -> dict:
        """Run ``afc argv``; send ``sig`` once ``stop_at`` of the jobs are terminal."""
        n = len(self.runs)
        errlog = open(self.dir / f"run{n}.err", "w")
        started = time.time()
        proc = chaos.spawn(argv, self.dir, self.env, errlog)
        peak: dict = Counter()
        sent, series = [], []
        done_at_start = self.terminal()
        last_db = 0.0
        while proc.poll() is None:
            time.sleep(0.25)
            fig = proc_figures(proc.pid)
            if fig:
                for k, v in fig.items():
                    peak[k] = max(peak[k], v)
            if time.time() - last_db >= 2:
                last_db = time.time()
                done = self.terminal()
                series.append((round(time.time() - started, 1), done, fig))
                if stop_at is not None and not sent and done >= stop_at * self.args.jobs:
                    proc.send_signal(sig)
                    sent.append(sig.name)
        proc.wait()
        errlog.close()
        err = Path(errlog.name).read_text(errors="replace")
        run = {
            "argv": argv,
            "cap": None,
            "signals": [s.removeprefix("SIG") for s in sent],
            "rc": proc.returncode,
            "seconds": round(time.time() - started, 1),
            "said": bool(err.strip()),
            "stderr_lines": err.count("\n"),
            "stderr_bytes": len(err.encode()),
            "peak": dict(peak),
            "done": self.terminal() - done_at_start,
            "series": series,
        }
        (self.dir / f"run{n}.json").write_text(json.dumps(run, indent=1))
        return run

    def drive(self) -> None:
        c = ["--concurrency", str(self.args.concurrency)]
        plan = [
            (
                ["submit", "manifest.yaml", "--storage", self.storage, *c],
                self.args.term_at,
                signal.SIGTERM,
            ),
            (["resume", *c], self.args.kill_at, signal.SIGKILL),
            (["resume", *c], None, None),
        ]
        for argv, at, sig in plan:
            run = self.watched(argv, at, sig)
            self.runs.append(run)
            while not self.statuses() and len(self.runs) < 8:
                # refused before admitting (--s3: the first HEADs answer 500): again
                run = self.watched(argv, at, sig)
                self.runs.append(run)
            if run["signals"] and run["signals"] != ["KILL"] and run["rc"] not in (130,):
                self.problems.append(f"{argv[0]} after {run['signals']}: exit {run['rc']}")
        counts = self.statuses()
        if not set(counts) <= TERMINAL:
            self.problems.append(f"not terminal after the last resume: {dict(counts)}")
        if self.runs[-1]["rc"] not in (0, 1):
            self.problems.append(f"last resume exit {self.runs[-1]['rc']}")

    def afc(self, *argv: str, timeout: float = 1800) -> subprocess.CompletedProcess:
        # the reconciliation's replays and fresh-ledger submit go over the whole batch
        return super().afc(*argv, timeout=timeout)

    def timed(self, *argv: str) -> tuple[float, subprocess.CompletedProcess]:
        started = time.time()
        out = self.afc(*argv)
        return time.time() - started, out

    def read_commands(self) -> dict:
        """Each read command on the finished ledger: seconds, exit, lines of output."""
        figures = {}
        key = self.manifest["jobs"][-1]["key"]
        commands = {
            "status": ["status"],
            "status --json --all": ["status", "--json", "--all"],
            "costs report": ["costs", "report"],
            "costs report --json": ["costs", "report", "--json"],
            f"show {key}": ["show", key],
            "outputs --json": ["outputs", "--json"],
            "queue stats": ["queue", "stats"],
            "report --html": ["report", "--html", "report.html"],
        }
        outs = {}
        for name, argv in commands.items():
            seconds, out = self.timed(*argv)
            outs[name] = out
            figures[name] = (seconds, out.returncode, out.stdout.count("\n"), len(out.stderr))
        html = self.dir / "report.html"
        figures["report.html MiB"] = html.stat().st_size / 2**20 if html.exists() else None
        self.agree(outs)
        return figures

    def agree(self, outs: dict) -> None:
        """``status --json``, ``outputs --json`` and ``queue stats`` tell the same batch."""
        counts = self.statuses()
        try:
            status = json.loads(outs["status --json --all"].stdout)
            outputs = json.loads(outs["outputs --json"].stdout)
        except ValueError as e:
            self.problems.append(f"a --json output is not JSON: {e}")
            return
        keys = Counter(j["status"] for j in status["jobs"])
        if keys != counts:
            self.problems.append(f"status --json --all jobs {dict(keys)} vs ledger {dict(counts)}")
        listed = outputs["outputs"] if isinstance(outputs, dict) else outputs
        if len(listed) != counts["succeeded"]:
            self.problems.append(f"outputs --json {len(listed)} vs {counts['succeeded']} succeeded")
        self.queue_stats = outs["queue stats"].stdout
        self.status_json = {k: v for k, v in status.items() if k != "jobs"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--latency", default="0.2,2.0", help="a render's seconds at the fake: lo,hi")
    ap.add_argument("--poll", default="0.3", help="AFC_POLL_S (Replicate and fal polls)")
    ap.add_argument("--term-at", type=float, default=0.25, help="SIGTERM the submit at this share")
    ap.add_argument("--kill-at", type=float, default=0.6, help="SIGKILL the resume at this share")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", help="folder for the work (kept); default a temp dir")
    ap.add_argument("--s3", action="store_true", help="S3 storage (moto's server, SlowDown faults)")
    args = ap.parse_args()
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
    s3 = chaos.S3() if args.s3 else None
    soak = Soak(args, s3)
    started = time.time()
    try:
        soak.drive()
        batch_s = time.time() - started
        reads = soak.read_commands()
        print("read commands " + json.dumps(reads), flush=True)
        figures = soak.reconcile()
    finally:
        soak.close()
        if s3 is not None:
            s3.stop()
    lo, hi = soak.latency
    ideal = args.jobs * (lo + hi) / 2 / args.concurrency
    rows = [("jobs", args.jobs), ("concurrency", args.concurrency)]
    rows.append(("batch wall s (3 runs)", f"{batch_s:.0f}"))
    rows.append(("ideal s (jobs x mean latency / concurrency)", f"{ideal:.0f}"))
    for i, r in enumerate(soak.runs):
        p = r["peak"]
        rows.append(
            (
                f"run {i} {r['argv'][0]} {'/'.join(r['signals']) or '-'}",
                f"{r['seconds']}s exit {r['rc']} jobs {r['done']} peak RSS {p.get('hwm', 0):.0f} MiB "
                f"fds {p.get('fds')} threads {p.get('threads')} stderr {r['stderr_lines']} lines",
            )
        )
    db = soak.dir / "afc.db"
    size = sum(f.stat().st_size for f in soak.dir.glob("afc.db*") if f.is_file())
    rows.append(("ledger MiB (afc.db*)", f"{size / 2**20:.1f}"))
    for name, value in reads.items():
        if isinstance(value, tuple):
            s, rc, lines, err = value
            rows.append((f"afc {name}", f"{s:.2f}s exit {rc} {lines} lines stderr {err} B"))
        else:
            rows.append((name, f"{value:.1f}" if value is not None else "-"))
    for k in ("attempts", "requests", "billed", "unknown", "objects", "extra_billed"):
        rows.append((k, figures.get(k, 0)))
    rows.append(("statuses", json.dumps(figures.get("statuses"))))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    print("other figures " + json.dumps(figures, sort_keys=True, default=str))
    for problem in soak.problems:
        print("PROBLEM " + problem)
    if not args.keep and not soak.problems:
        shutil.rmtree(soak.dir, ignore_errors=True)
    else:
        print(f"work kept in {soak.dir} (ledger {db})")
    return 1 if soak.problems else 0


if __name__ == "__main__":
    sys.exit(main())
