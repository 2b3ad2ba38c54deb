"""Audit 65f: a worker whose connection to the PostgreSQL server is black-holed (a network
path that drops its packets one way, a proxy or a NAT that stops forwarding while the
sockets stay open, a backend stopped while the server goes on answering the other hosts)
waits on its statement until ``StallWatch`` cuts it: ``AFC_PG_STALL_S``, 300 s, as long as
the default lease (``AFC_LEASE_S``, 300 s). The wait holds the run's event loop, so no
lease is renewed meanwhile: the leases of its jobs ran out first, another worker took them
over and paid for every one again, and the stalled worker's own renders, paid, were stored
too late for that worker's probe and stayed ``unknown`` attempts without their cost.

Measured here with the same ratio (a 30 s lease, a 60 s stall limit), 4 jobs whose calls
were in flight: 8 renders paid for 4 jobs, 4 paid attempts left without a cost ($0.16
unrecorded). Now a run loop cuts a wait at a third of its lease (at least 5 s): the
stalled worker stops with two thirds of a lease still its own, its renders stored under
their output keys, and the other worker's takeover finds them stored and records them at
their cost: 4 renders paid for 4 jobs."""

from __future__ import annotations

import socket
import threading
import time

import psycopg
from conftest import manifest

JOBS = 4
LEASE_S = 30


class BlackHole:
    """A TCP proxy to the server at 127.0.0.1:``port``; once ``held`` is set it forwards
    nothing more either way, its sockets left open (no reset, no end of stream)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.held = threading.Event()
        self.sockets: list[socket.socket] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.addr = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.port))
            self.sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        while True:
            try:
                data = a.recv(65536)
            except OSError:
                return
            if not data:
                return
            while self.held.is_set():
                time.sleep(0.05)
            try:
                b.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self.listener.close()
        for sock in self.sockets:
            sock.close()


def _one(url: str, sql: str):
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql).fetchone()


def test_a_blackholed_worker_stops_before_its_leases_run_out(afc, fake, pg_url):
    port = int(pg_url.rsplit(":", 1)[1].split("/")[0])
    hole = BlackHole(port)
    through = pg_url.replace(f":{port}/", f":{hole.addr}/")
    data = manifest([{"key": f"k{i}", "prompt": f"slow-3s p{i}"} for i in range(JOBS)])
    data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1", "attempts": 1}]
    data["rates"] = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]
    afc.write_manifest(data)
    # the defaults' ratio: a wait is cut past twice the lease (300 s each, 300 s renewed
    # every 100 s); 60 s keeps the test short before the fix
    env = {"AFC_LEDGER": pg_url, "AFC_LEASE_S": str(LEASE_S), "AFC_PG_STALL_S": "60"}
    assert afc("submit", "manifest.yaml", "--no-run", env=env).returncode == 0
    first = afc.popen(
        "worker",
        "--until-idle",
        "--concurrency",
        str(JOBS),
        env={**env, "AFC_LEDGER": through, "AFC_SPOOL_DIR": str(afc.cwd / "spool-a")},
    )
    second = None
    try:
        deadline = time.monotonic() + 60
        while _one(pg_url, "SELECT COUNT(*) FROM attempts")[0] < JOBS:
            assert first.poll() is None, first.stderr.read()
            assert time.monotonic() < deadline, "the calls never started"
            time.sleep(0.05)
        time.sleep(0.5)  # their attempt rows committed, the calls in flight (3 s each)
        hole.held.set()
        # another host's worker, its connection whole, waits for the jobs' leases
        second = afc.popen(
            "worker",
            "--until-idle",
            "--poll",
            "0.5",
            env={**env, "AFC_SPOOL_DIR": str(afc.cwd / "spool-b")},
        )
        _, first_err = first.communicate(timeout=150)
        _, second_err = second.communicate(timeout=150)
    finally:
        hole.close()
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert first.returncode == 1, first_err
    assert "Traceback" not in first_err + second_err, first_err + second_err
    assert second.returncode == 0, second_err
    assert _one(pg_url, "SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'")[0] == JOBS
    # each render paid once (8 before), and every paid attempt carries its cost
    assert fake.counts["openai_billed"] == JOBS, second_err
    unpriced = _one(pg_url, "SELECT COUNT(*) FROM attempts WHERE cost_micros IS NULL")[0]
    assert unpriced == 0, first_err + second_err
    total = _one(pg_url, "SELECT SUM(cost_micros) FROM attempts")[0]
    assert total == JOBS * 40_000
    assert f"{JOBS} of them stored under their output keys too" in first_err, first_err
    # the cut says why it came before AFC_PG_STALL_S
    assert "a third of its lease, AFC_LEASE_S = 30 s" in first_err, first_err
