"""The pictures at a studio's scale: a ledger of ``--jobs`` local-provider jobs (a tenth failed
over three causes, a fifth awaiting review), then ``afc report --html`` (wall time, peak RSS,
file size) and the pages of ``afc serve`` (time and size of each, the server's RSS after).

Run: ``python bench/pictures.py`` (10,000 jobs: about a minute to build on 2 cores).
"""

from __future__ import annotations

import argparse
import re
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

AFC = [sys.executable, "-m", "afc_cli"]
CAUSES = (["invalid"], ["refusal"] * 3, ["auth"])


def manifest(n: int) -> dict:
    jobs = []
    for i in range(1, n + 1):
        job = {"key": f"shot-{i:05d}", "prompt": f"a lighthouse at dawn, frame {i}"}
        params: dict = {"size": "256x256"}
        if i % 10 == 3:
            params["fail"] = CAUSES[(i // 10) % 3]
        elif i % 5 == 1:
            job["review"] = True
        job["params"] = params
        jobs.append(job)
    chain = [{"provider": "local", "model": "m1", "attempts": 3, "backoff": {"base": 0.01}}]
    return {
        "version": 1,
        "batch": "studio",
        "defaults": {"chain": chain},
        "rates": [{"provider": "local", "model": "m1", "per_image": "0.05"}],
        "jobs": jobs,
    }


def rss_mb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) // 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "m.yaml").write_text(yaml.safe_dump(manifest(args.jobs), sort_keys=False))
        run = dict(cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started = time.time()
        subprocess.run([*AFC, "submit", "m.yaml", "--concurrency", "64", "-q"], **run)
        print(f"{args.jobs} jobs submitted in {time.time() - started:.1f} s")
        rows = []
        started = time.time()
        subprocess.run([*AFC, "report", "--html", "r.html"], check=True, **run)
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
        size = (work / "r.html").stat().st_size
        rows.append(
            (
                "afc report --html",
                time.time() - started,
                size,
                f"peak RSS {peak} MB (submit or report)",
            )
        )
        serve = subprocess.Popen(
            [*AFC, "serve", "--port", "0"], cwd=work, stderr=subprocess.PIPE, text=True
        )
        try:
            url = re.search(r"at (http://\S+?/)[ ;]", serve.stderr.readline()).group(1)
            for path in ("", "?page=10000", "failures", "review", "spend"):
                started = time.time()
                with urllib.request.urlopen(url + path) as answer:
                    body = answer.read()
                rows.append((f"GET /{path}", time.time() - started, len(body), ""))
            rows.append(("serve after the pages", 0.0, 0, f"RSS {rss_mb(serve.pid)} MB"))
        finally:
            serve.terminate()
            serve.wait()
    print(f"{'what':24} {'seconds':>8} {'bytes':>12}  note")
    for what, seconds, size, note in rows:
        print(f"{what:24} {seconds:8.2f} {size:12,}  {note}")


if __name__ == "__main__":
    main()
