"""HTTP at width: afc against a fake provider server in its own process (bench/fakeserver.py).

Cases (each run ``--runs`` times, medians reported, with ``uptime``'s load beside them):

- 1,000 OpenAI calls of 1 s at ``--concurrency 500`` and 200 at 100: ``afc submit`` of a
  manifest of ``openai`` jobs; the figure is the batch (the ledger's first attempt start to its
  last attempt end) and the whole command. The floor is a bare asyncio client (raw HTTP/1.1 on
  asyncio streams, one keep-alive connection per in-flight call) sending the same calls in the
  same run.
- 1,000 Replicate-style predictions of 5 s polled at once (``--concurrency 1000``): the polls
  the run sent against the ideal one per prediction per interval of its time at the provider
  (from its submit to the poll that saw it finished, by the fake server's clock; also against
  each attempt's whole time, as first counted, and the mean time between two polls of one
  prediction), requests per second, and the run's peak RSS.
- Beside the two HTTP cases, afc's own HTTP client alone (``afc_cli.providers.http.new_client``:
  httpx's API over afc's aiohttp pool, sized to the width) sending the same calls and doing
  nothing else with the answers: what any run loop built on that client cannot go below.
- ``--transports``: the httpx client alone with httpx's default transport and with the
  httpx-aiohttp transport, pool sized to the width (how the transport was chosen).

Run: ``python bench/http_calls.py`` (``make bench-http``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
AFC = str(Path(sys.executable).parent / "afc")
KEYS = {"OPENAI_API_KEY": "sk-bench", "REPLICATE_API_TOKEN": "r8_bench"}


def uptime() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


class FakeServer:
    def __init__(self, latency: float = 1.0, predict: float = 5.0) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "fakeserver.py"),
                "--latency",
                str(latency),
                "--predict",
                str(predict),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        self.port = int(line.split()[-1])
        self.base = f"http://127.0.0.1:{self.port}"

    def call(self, path: str) -> dict:
        import urllib.request

        method = "POST" if path == "/reset" else "GET"
        request = urllib.request.Request(
            self.base + path, method=method, data=b"" if method == "POST" else None
        )
        with urllib.request.urlopen(request) as response:
            return json.loads(response.read())

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()


# --- the floor: a bare asyncio client -------------------------------------------------------


async def bare_calls(port: int, calls: int, width: int) -> float:
    body = json.dumps({"model": "gpt-image-1", "prompt": "p", "n": 1}).encode()
    request = (
        f"POST /v1/images/generations HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(calls):
        queue.put_nowait(i)

    async def worker() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while not queue.empty():
            queue.get_nowait()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            json.loads(await reader.readexactly(length))
        writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(width)))
    return time.perf_counter() - start


def floor(port: int, calls: int, width: int) -> float:
    return asyncio.run(bare_calls(port, calls, width))


# --- httpx alone, by transport --------------------------------------------------------------


async def httpx_calls(base: str, calls: int, width: int, transport: str) -> float:
    import httpx

    limits = httpx.Limits(max_connections=width, max_keepalive_connections=width)
    kwargs: dict = {"limits": limits, "timeout": 60}
    if transport == "aiohttp":
        from httpx_aiohttp import AiohttpTransport

        kwargs["transport"] = AiohttpTransport(limits=limits)
    sem = asyncio.Semaphore(width)
    async with httpx.AsyncClient(**kwargs) as client:

        async def one() -> None:
            async with sem:
                response = await client.post(
                    f"{base}/v1/images/generations", json={"model": "m", "prompt": "p", "n": 1}
                )
                response.json()

        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(calls)))
        return time.perf_counter() - start


async def afc_client_calls(base: str, calls: int, width: int) -> float:
    """afc's own client (the one its adapters use, pool sized as a run sizes it), alone."""
    sys.path.insert(0, str(HERE.parent))
    from afc_cli.providers.http import new_client

    sem = asyncio.Semaphore(width)
    async with new_client(read_s=60.0, connections=width) as client:

        async def one() -> None:
            async with sem:
                response = await client.post(
                    f"{base}/v1/images/generations",
                    json={"model": "gpt-image-1", "prompt": "p", "n": 1},
                    headers={"Authorization": "Bearer sk-bench"},
                )
                response.json()

        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(calls)))
        return time.perf_counter() - start


# --- afc itself -----------------------------------------------------------------------------


def manifest(path: Path, provider: str, model: str, jobs: int) -> None:
    lines = [
        "version: 1",
        "batch: http",
        "defaults:",
        f"  chain: [{{provider: {provider}, model: {model}, attempts: 1}}]",
        "rates:",
        f"  - {{provider: {provider}, model: {model}, per_image: '0.01', per_second: '0.001'}}",
        "jobs:",
    ]
    lines += [f"  - {{key: j{i}, prompt: 'shot {i}'}}" for i in range(jobs)]
    path.write_text("\n".join(lines) + "\n")


def afc_run(server: FakeServer, provider: str, jobs: int, width: int, poll: float = 2.0) -> dict:
    model = "gpt-image-1" if provider == "openai" else "owner/model"
    with tempfile.TemporaryDirectory(dir=HERE / "work") as tmp:
        work = Path(tmp)
        manifest(work / "m.yaml", provider, model, jobs)
        env = {
            **os.environ,
            **KEYS,
            "OPENAI_BASE_URL": f"{server.base}/v1",
            "REPLICATE_BASE_URL": f"{server.base}/v1",
            "AFC_POLL_S": str(poll),
        }
        command = [
            AFC,
            "submit",
            str(work / "m.yaml"),
            "--ledger",
            str(work / "afc.db"),
            "--storage",
            f"file://{work}/out",
            "--concurrency",
            str(width),
            "-q",
        ]
        server.call("/reset")
        began = time.monotonic()  # the server's clock too (CLOCK_MONOTONIC is system-wide)
        start = time.perf_counter()
        proc = subprocess.run(
            ["/usr/bin/time", "-f", "%M", *command], env=env, capture_output=True, text=True
        )
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"afc failed ({proc.returncode}): {proc.stderr[-2000:]}")
        peak_kib = int(proc.stderr.strip().splitlines()[-1])
        stats = server.call("/stats")
        db = sqlite3.connect(work / "afc.db")
        first, last, done, busy = db.execute(
            "SELECT MIN(started_at), MAX(ended_at), COUNT(*), SUM(ended_at - started_at)"
            " FROM attempts WHERE status = 'succeeded'"
        ).fetchone()
        db.close()
        if done != jobs:
            raise SystemExit(f"afc rendered {done} of {jobs}")
        return {
            "wall": wall,
            "batch": last - first,
            "rss_mib": peak_kib / 1024,
            "stats": stats,
            "first_call": stats["first"] - began,  # start-up: launch to first provider request
            "busy": busy,  # the seconds attempts were in flight, summed
        }


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--transports", action="store_true")
    parser.add_argument("--only", choices=["start", "wide", "narrow", "poll"], default=None)
    # fewer predictions show the polling schedule apart from a run loop short of CPU
    parser.add_argument("--predictions", type=int, default=1000)
    args = parser.parse_args()
    (HERE / "work").mkdir(exist_ok=True)
    print(f"load before: {uptime()}")
    server = FakeServer(latency=1.0, predict=5.0)
    try:
        if args.transports:
            for calls, width in ((200, 100), (1000, 500)):
                for transport in ("httpx", "aiohttp"):
                    times = [
                        asyncio.run(httpx_calls(server.base, calls, width, transport))
                        for _ in range(args.runs)
                    ]
                    floors = [floor(server.port, calls, width) for _ in range(args.runs)]
                    print(
                        f"httpx client, {transport} transport, {calls} x 1 s at {width}: "
                        f"{', '.join(f'{t:.2f}' for t in times)} s; bare asyncio floor "
                        f"{', '.join(f'{t:.2f}' for t in floors)} s"
                    )
        if args.only in (None, "start"):
            starts = [afc_run(server, "openai", 1, 1)["first_call"] for _ in range(args.runs)]
            print(
                f"start-up, one-job submit: launch to the first provider request "
                f"{median(starts):.2f} s (runs {', '.join(f'{t:.2f}' for t in starts)}); "
                f"load {uptime()}"
            )
        for calls, width, name in ((1000, 500, "wide"), (200, 100, "narrow")):
            if args.only and args.only != name:
                continue
            floors, clients, batches, walls, rss = [], [], [], [], []
            for _ in range(args.runs):
                floors.append(floor(server.port, calls, width))
                clients.append(asyncio.run(afc_client_calls(server.base, calls, width)))
                run = afc_run(server, "openai", calls, width)
                batches.append(run["batch"])
                walls.append(run["wall"])
                rss.append(run["rss_mib"])
            ideal = calls / width * 1.0
            print(
                f"openai {calls} x 1 s at {width}: bare asyncio floor {median(floors):.2f} s "
                f"(runs {', '.join(f'{t:.2f}' for t in floors)}); afc's HTTP client alone "
                f"{median(clients):.2f} s = {median(clients) / ideal:.2f} x ideal (runs "
                f"{', '.join(f'{t:.2f}' for t in clients)}); afc batch "
                f"{median(batches):.2f} s = {median(batches) / ideal:.2f} x ideal {ideal:.0f} s, "
                f"{median(batches) / median(floors):.2f} x floor (runs "
                f"{', '.join(f'{t:.2f}' for t in batches)}); whole command "
                f"{median(walls):.2f} s; peak RSS {median(rss):.0f} MiB; load {uptime()}"
            )
        if args.only in (None, "poll"):
            predictions, interval, predict = args.predictions, 2.0, 5.0
            results = [
                afc_run(server, "replicate", predictions, predictions, poll=interval)
                for _ in range(args.runs)
            ]
            for run in results:
                counts = run["stats"]["counts"]
                polling = run["stats"]["polling"]
                span = run["stats"]["last"] - run["stats"]["first"]
                run["polls"] = counts.get("poll", 0)
                # one poll per prediction per interval of its time at the provider: from its
                # submit to the poll that saw it finished (the server's clock)
                run["ideal_polls"] = polling["span"] / interval
                run["ratio"] = run["polls"] / run["ideal_polls"]
                # the same against each attempt's whole time (from its row, before the submit,
                # to its download's end), as this benchmark first counted it
                run["attempt_ratio"] = run["polls"] / (run["busy"] / interval)
                run["rate"] = sum(counts.values()) / span if span else 0.0
            ratios = ", ".join(f"{r['ratio']:.2f}" for r in results)
            peaks = ", ".join(f"{r['rss_mib']:.0f}" for r in results)
            gaps = ", ".join(f"{r['stats']['polling']['gap']:.2f}" for r in results)
            print(
                f"replicate {predictions} predictions of {predict:.0f} s at once, polled every "
                f"{interval:.0f} s: {median([r['polls'] for r in results]):.0f} polls where one "
                f"per prediction per interval at the provider (submit to last poll) is "
                f"{median([r['ideal_polls'] for r in results]):.0f} (ratio "
                f"{median([r['ratio'] for r in results]):.2f}, runs {ratios}; against whole "
                f"attempts {median([r['attempt_ratio'] for r in results]):.2f}); mean time "
                f"between two polls of one prediction {gaps} s, submit to first poll "
                f"{median([r['stats']['polling']['first'] for r in results]):.2f} s, last poll "
                f"to download {median([r['stats']['polling']['after'] for r in results]):.2f} "
                f"s; "
                f"{median([r['rate'] for r in results]):.0f} requests/s sent in all; batch "
                f"{median([r['batch'] for r in results]):.2f} s; peak RSS "
                f"{median([r['rss_mib'] for r in results]):.0f} MiB (runs "
                f"{peaks}); load {uptime()}"
            )
    finally:
        server.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"(bench process peak RSS {peak / 1024:.0f} MiB)")


if __name__ == "__main__":
    main()
