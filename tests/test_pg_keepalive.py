"""A PostgreSQL ledger's connection finds a vanished database host within about a minute.

Without TCP keepalives of its own, a worker whose database host disappeared (no reset sent: a
power cut, a network cut) waits on its socket for as long as the kernel's default keepalive,
over two hours. afc sets libpq's keepalive parameters unless the URL sets them
(``afc_cli/ledger/postgres.py``, ``KEEPALIVE_DEFAULTS``). A partition cannot be made on
loopback without root, so these tests read what the kernel was told: the socket options of
the ledger's own connection.
"""

from __future__ import annotations

import socket

import pytest

pytest.importorskip("psycopg")

from afc_cli.ledger.postgres import PostgresLedger  # noqa: E402


def _socket_options(ledger: PostgresLedger) -> dict[str, int]:
    fd = ledger.db.raw.pgconn.socket
    sock = socket.socket(fileno=socket.dup(fd))
    try:
        return {
            "keepalive": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            "idle": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            "interval": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            "count": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            "user_timeout": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        }
    finally:
        sock.close()


def _tcp(url: str) -> None:
    if "@127.0.0.1" not in url and "@localhost" not in url:
        pytest.skip("the given server is not reached over TCP on loopback")


def test_ledger_connection_probes_a_silent_server_within_a_minute(pg_url):
    _tcp(pg_url)
    ledger = PostgresLedger(pg_url)
    try:
        options = _socket_options(ledger)
    finally:
        ledger.close()
    assert options == {
        "keepalive": 1,
        "idle": 30,
        "interval": 10,
        "count": 3,
        "user_timeout": 60000,
    }


def test_a_url_keeps_its_own_keepalive_settings(pg_url):
    _tcp(pg_url)
    ledger = PostgresLedger(f"{pg_url}?keepalives_idle=7&tcp_user_timeout=9000")
    try:
        options = _socket_options(ledger)
    finally:
        ledger.close()
    assert options["idle"] == 7
    assert options["user_timeout"] == 9000
    assert options["interval"] == 10  # the ones it does not set are still afc's
