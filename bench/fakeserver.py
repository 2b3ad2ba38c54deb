"""A fake provider server for the HTTP benchmarks, in its own process: a raw asyncio HTTP/1.1
server (keep-alive, Content-Length bodies) speaking two wire formats.

- OpenAI Images: ``POST /v1/images/generations`` answers after ``--latency`` seconds with
  ``data[0].b64_json`` (a tiny PNG) and token ``usage``.
- Replicate predictions: ``POST /v1/models/{owner}/{name}/predictions`` answers at once with a
  prediction id; ``GET /v1/predictions/{id}`` says ``processing`` until ``--predict`` seconds
  have passed since the submit, then ``succeeded`` with an output URL; ``GET /files/{id}.png``
  serves the image.

It counts requests by kind and the peak of connections open at once; ``GET /stats`` answers
them as JSON and ``POST /reset`` clears them. Run: ``python bench/fakeserver.py --port 0``; it
prints ``listening on PORT`` once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import time
import uuid
import zlib
from collections import Counter


def tiny_png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")

    ihdr = (1).to_bytes(4, "big") * 2 + bytes([8, 0, 0, 0, 0])
    raw = zlib.compress(b"\x00\x80")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", raw) + chunk(b"IEND", b"")


PNG = tiny_png()
PNG_B64 = base64.b64encode(PNG).decode()


class Server:
    def __init__(self, latency: float, predict: float) -> None:
        self.latency = latency
        self.predict = predict
        self.counts: Counter[str] = Counter()
        self.open = 0
        self.peak_open = 0
        self.connections = 0
        self.predictions: dict[str, float] = {}
        self.polls: dict[str, list[float]] = {}
        self.downloads: dict[str, float] = {}
        self.first = 0.0
        self.last = 0.0
        self.first_wall = self.last_wall = 0.0  # the same, by the wall clock (the ledger's)
        self.base = ""

    def polling(self) -> dict:
        """How the predictions were polled: per prediction, its submit, its polls and its
        download (the server's clock). ``gap``: the mean time between two polls of one
        prediction; ``first``: the mean time from the submit to the first poll; ``span``: the
        summed time from each submit to its last poll (what one poll per interval is counted
        against); ``after``: the mean time from the last poll to the output's download."""
        gaps, firsts, spans, afters, polls = [], [], 0.0, [], 0
        for prediction_id, submitted in self.predictions.items():
            times = self.polls.get(prediction_id, [])
            if not times:
                continue
            polls += len(times)
            firsts.append(times[0] - submitted)
            gaps += [b - a for a, b in zip(times, times[1:], strict=False)]
            spans += times[-1] - submitted
            if prediction_id in self.downloads:
                afters.append(self.downloads[prediction_id] - times[-1])

        def mean(values: list[float]) -> float:
            return sum(values) / len(values) if values else 0.0

        return {
            "predictions": len(firsts),
            "polls": polls,
            "gap": mean(gaps),
            "max_gap": max(gaps, default=0.0),
            "min_gap": min(gaps, default=0.0),
            "first": mean(firsts),
            "span": spans,
            "after": mean(afters),
        }

    def stats(self) -> dict:
        return {
            "polling": self.polling(),
            "counts": dict(self.counts),
            "peak_open": self.peak_open,
            "connections": self.connections,
            "first": self.first,
            "last": self.last,
            "first_wall": self.first_wall,
            "last_wall": self.last_wall,
        }

    def reset(self) -> None:
        self.counts.clear()
        self.peak_open = self.open
        self.connections = 0
        self.predictions.clear()
        self.polls.clear()
        self.downloads.clear()
        self.first = self.last = 0.0
        self.first_wall = self.last_wall = 0.0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        self.connections += 1
        self.peak_open = max(self.peak_open, self.open)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _version = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                body = await reader.readexactly(length) if length else b""
                status, payload, ctype = await self.route(method, target.split("?")[0], body)
                writer.write(
                    f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\n"
                    f"Content-Length: {len(payload)}\r\n\r\n".encode()
                    + payload
                )
                await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open -= 1
            writer.close()

    def _count(self, kind: str) -> None:
        now = time.monotonic()
        self.first = self.first or now
        self.last = now
        self.last_wall = time.time()
        self.first_wall = self.first_wall or self.last_wall
        self.counts[kind] += 1

    async def route(self, method: str, path: str, body: bytes) -> tuple[int, bytes, str]:
        if path == "/stats":
            return 200, json.dumps(self.stats()).encode(), "application/json"
        if path == "/reset":
            self.reset()
            return 200, b"{}", "application/json"
        if method == "POST" and path.endswith("/images/generations"):
            self._count("openai")
            await asyncio.sleep(self.latency)
            answer = {
                "created": int(time.time()),
                "data": [{"b64_json": PNG_B64}],
                "usage": {"input_tokens": 10, "output_tokens": 100},
            }
            return 200, json.dumps(answer).encode(), "application/json"
        if method == "POST" and path.endswith("/predictions"):
            self._count("submit")
            prediction_id = uuid.uuid4().hex
            self.predictions[prediction_id] = time.monotonic()
            return (
                201,
                json.dumps({"id": prediction_id, "status": "starting"}).encode(),
                "application/json",
            )
        if method == "GET" and path.startswith("/v1/predictions/"):
            self._count("poll")
            prediction_id = path.rsplit("/", 1)[-1]
            started = self.predictions.get(prediction_id)
            self.polls.setdefault(prediction_id, []).append(time.monotonic())
            if started is None:
                return 404, b'{"detail": "not found"}', "application/json"
            if time.monotonic() - started < self.predict:
                answer = {"id": prediction_id, "status": "processing"}
            else:
                answer = {
                    "id": prediction_id,
                    "status": "succeeded",
                    "output": [f"{self.base}/files/{prediction_id}.png"],
                    "metrics": {"predict_time": self.predict},
                }
            return 200, json.dumps(answer).encode(), "application/json"
        if method == "GET" and path.startswith("/files/"):
            self._count("download")
            self.downloads[path.rsplit("/", 1)[-1].split(".")[0]] = time.monotonic()
            return 200, PNG, "image/png"
        return 404, b'{"error": {"message": "no route"}}', "application/json"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--predict", type=float, default=5.0)
    args = parser.parse_args()
    server = Server(args.latency, args.predict)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", args.port, backlog=4096)
    port = listener.sockets[0].getsockname()[1]
    server.base = f"http://127.0.0.1:{port}"
    print(f"listening on {port}", flush=True)
    async with listener:
        await listener.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
