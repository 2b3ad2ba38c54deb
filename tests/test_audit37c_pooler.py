"""A PostgreSQL ledger reached through a connection pooler (audit 37c).

PgBouncer in ``pool_mode = transaction`` hands one server session to its clients a
transaction at a time. afc keeps session state (``synchronous_commit = off``, ``jit = off``,
a ``lock_timeout``, psycopg's prepared statements): through such a pooler a plain client
of the same database saw afc's ``off`` and ``30s`` after a mere 'afc status', the next afc
read the server's ``synchronous_commit`` as ``off`` (its attempt rows before paid calls
committed without waiting for the disk), and workers and submits stopped with
"DuplicatePreparedStatement: prepared statement "_pg3_0" already exists (a bug in afc)".
afc now refuses such a pooler (exit 2, before it sets or writes anything); a pooler in
session mode, which gives each client a session of its own, is used as the server is.

PgBouncer is not needed here: ``FakePooler`` speaks just enough of the wire protocol to pool
a real server's sessions as PgBouncer does (its own cancel key to each client; in
transaction mode a session released at each transaction's end, the last released taken
first), over the tests' own server.
"""

from __future__ import annotations

import socket
import struct
import threading

import psycopg
import pytest
from conftest import manifest
from test_postgres_e2e import PgAfc

REFUSED = "connection pooler that shares server sessions"


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _message(sock: socket.socket) -> tuple[bytes, bytes]:
    kind = _read(sock, 1)
    (length,) = struct.unpack("!i", _read(sock, 4))
    return kind, _read(sock, length - 4)


def _packet(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


class FakePooler:
    """A pooler on a loopback port in front of ``host:port``: ``mode`` is ``session`` (a
    server session per client, for as long as it is connected) or ``transaction``.
    ``reset=False``: in session mode, a session a client left is handed to the next one as
    it is (PgBouncer with an empty ``server_reset_query``); else it is closed."""

    def __init__(self, host: str, port: int, mode: str, reset: bool = True) -> None:
        self.upstream, self.mode, self.reset = (host, port), mode, reset
        self.idle: list[socket.socket] = []  # sessions released to the next client, LIFO
        self.lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.params: list[bytes] = []
        self.startup = b""
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()
        for server in self.idle:
            server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _server(self) -> socket.socket:
        with self.lock:
            if self.idle:
                return self.idle.pop()
        server = socket.create_connection(self.upstream)
        server.sendall(self.startup)
        params = []
        while True:
            kind, body = _message(server)
            if kind == b"S":
                params.append(_packet(kind, body))
            if kind == b"E":
                raise ConnectionError(body)
            if kind == b"Z":
                break
        self.params = self.params or params
        return server

    def _serve(self, client: socket.socket) -> None:
        server = None
        try:
            while True:
                (length,) = struct.unpack("!i", _read(client, 4))
                body = _read(client, length - 4)
                if struct.unpack("!i", body[:4])[0] in (80877103, 80877104):
                    client.sendall(b"N")  # no SSL, no GSS encryption
                    continue
                # the client's user and database, nothing else of its startup
                fields = body[4:].split(b"\0")
                wanted = dict(zip(fields[0::2], fields[1::2], strict=False))
                keep = b"".join(
                    k + b"\0" + wanted[k] + b"\0" for k in (b"user", b"database") if k in wanted
                )
                startup = struct.pack("!i", 196608) + keep + b"\0"
                self.startup = struct.pack("!i", len(startup) + 4) + startup
                break
            if self.mode == "session" or not self.params:
                server = self._server()
                if self.mode == "transaction":
                    with self.lock:
                        self.idle.append(server)
                    server = None
            client.sendall(
                _packet(b"R", struct.pack("!i", 0))
                + b"".join(self.params)
                # the pooler's own cancel key, as PgBouncer's
                + _packet(b"K", struct.pack("!ii", 424242, 1))
                + _packet(b"Z", b"I")
            )
            while True:
                kind, body = _message(client)
                if kind == b"X":
                    return
                if server is None:
                    server = self._server()
                server.sendall(_packet(kind, body))
                if kind not in (b"S", b"Q"):
                    continue
                while True:
                    reply, answer = _message(server)
                    client.sendall(_packet(reply, answer))
                    if reply == b"Z":
                        break
                if self.mode == "transaction" and answer == b"I":
                    with self.lock:
                        self.idle.append(server)
                    server = None
        except (ConnectionError, OSError):
            return
        finally:
            client.close()
            if server is not None and not self.reset:
                with self.lock:
                    self.idle.append(server)
            elif server is not None:
                server.close()


def _through(url: str, pooler: FakePooler) -> str:
    database = url.rsplit("/", 1)[1]
    return f"postgresql://afc@127.0.0.1:{pooler.port}/{database}"


def _pooler(url: str, mode: str, reset: bool = True) -> FakePooler:
    from psycopg.conninfo import conninfo_to_dict

    where = conninfo_to_dict(url)
    return FakePooler(where["host"], int(where["port"]), mode, reset)


def _settings(url: str) -> tuple:
    with psycopg.connect(url, autocommit=True) as conn:
        return tuple(
            conn.execute(f"SHOW {name}").fetchone()[0]
            for name in ("synchronous_commit", "jit", "lock_timeout")
        )


def test_a_ledger_behind_a_transaction_pooler_is_refused_before_anything_is_set(tmp_path, pg_url):
    pooler = _pooler(pg_url, "transaction")
    try:
        url = _through(pg_url, pooler)
        before = _settings(url)
        pg = PgAfc(tmp_path, url)
        status = pg("status")
        assert status.returncode == 2, status.stdout + status.stderr
        assert REFUSED in status.stderr, status.stderr
        assert "pool_mode = session" in status.stderr, status.stderr
        assert "Traceback" not in status.stderr and "bug in afc" not in status.stderr
        # another client of the pooler, handed the session afc used, finds it as it was
        assert _settings(url) == before
    finally:
        pooler.close()


def test_a_submit_through_a_transaction_pooler_writes_nothing(tmp_path, pg_server):
    empty = pg_server.database(migrated=False)
    pooler = _pooler(empty, "transaction")
    try:
        pg = PgAfc(tmp_path, _through(empty, pooler))
        pg.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
        submit = pg("submit", "manifest.yaml")
        assert submit.returncode == 2, submit.stdout + submit.stderr
        assert REFUSED in submit.stderr, submit.stderr
        with psycopg.connect(empty, autocommit=True) as conn:
            assert conn.execute("SELECT to_regclass('jobs')").fetchone()[0] is None
        assert not list(tmp_path.glob("**/*.png"))
    finally:
        pooler.close()


@pytest.mark.parametrize("command", [["status"], ["costs", "report"]])
def test_a_pooler_in_session_mode_is_used_as_the_server_is(tmp_path, pg_url, command):
    pooler = _pooler(pg_url, "session")
    try:
        pg = PgAfc(tmp_path, _through(pg_url, pooler))
        pg.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
        submit = pg("submit", "manifest.yaml")
        assert submit.returncode == 0, submit.stdout + submit.stderr
        done = pg(*command)
        assert done.returncode == 0, done.stdout + done.stderr
        assert pg.rows("SELECT status FROM jobs") == [("succeeded",)]
    finally:
        pooler.close()


def test_a_session_pool_that_hands_sessions_on_unreset_is_refused_at_the_next_command(
    tmp_path, pg_url
):
    pooler = _pooler(pg_url, "session", reset=False)
    try:
        url = _through(pg_url, pooler)
        pg = PgAfc(tmp_path, url)
        first = pg("status")  # a session no client used before: afc's own
        assert first.returncode == 0, first.stdout + first.stderr
        # the session it left, with afc's settings in it, goes to the next client
        again = pg("status")
        assert again.returncode == 2, again.stdout + again.stderr
        assert "server_reset_query = DISCARD ALL" in again.stderr, again.stderr
        assert "Traceback" not in again.stderr and "bug in afc" not in again.stderr
    finally:
        pooler.close()
