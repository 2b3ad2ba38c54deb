"""Outside audit 59d, the command line: ``afc webhooks list`` at an 80-column terminal (the
default size of most terminals) named its deliveries' ids, statuses and tries, and dropped
``last_error`` with the URL and the event ("not shown at 80 columns: event, url,
last_error"): why an event is still pending or went dead (a receiver refusing connections, a
certificate this host does not trust, a 301 naming where it points) was not on the screen at
all, the one thing the view is read for. ``afc status`` prints a reason that finds no room
under its table (``KEY: reason``); the list now does the same with ``ID: last_error``.
Through the real afc command on a pseudo-terminal (tests/terminal.py)."""

from __future__ import annotations

import socket

from conftest import manifest
from terminal import on_pipe, on_pty


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def submitted_to_a_refusing_receiver(afc, *keys: str) -> None:
    """A submit of jobs ``keys`` whose webhook's receiver refuses connections: each event
    stays pending, its ``last_error`` saying so."""
    afc.env["AFC_HOOK_SECRET"] = "whsec_" + "c2VjcmV0IGZvciB0aGUgc2NyZWVuIHRlc3RzISEh"
    data = manifest([{"key": key, "prompt": key} for key in keys])
    data["webhook"] = {
        "url": f"http://127.0.0.1:{_closed_port()}/hook",  # nothing listens: refused
        "secret_env": "AFC_HOOK_SECRET",
        "timeout_s": 2,
    }
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0


def test_a_pending_deliverys_last_error_is_on_an_80_column_screen(afc):
    submitted_to_a_refusing_receiver(afc, "k1")
    [delivery] = afc.json("webhooks", "list")["deliveries"]
    assert delivery["status"] == "pending" and delivery["last_error"], delivery
    reason = delivery["last_error"]
    for columns in (80, 40):
        shown = on_pty(afc.command("webhooks", "list"), cwd=afc.cwd, env=afc.env, columns=columns)
        assert shown.returncode == 0, shown.output
        flat = " ".join(shown.output.split())  # wrapped at the terminal's width
        assert delivery["id"] in shown.output
        assert f"{delivery['id']}: {' '.join(reason.split())}" in flat, shown.output
        # said under the table, so not named again among the columns not shown
        assert "last_error" not in shown.output, shown.output
    # a pipe's rows are as they were: every field a column of its own
    piped = on_pipe(afc.command("webhooks", "list"), cwd=afc.cwd, env=afc.env)
    header, row = piped.stdout.splitlines()
    assert header.split("\t") == [
        "id",
        "status",
        "attempts",
        "last_status",
        "last_error",
        "url",
        "event",
    ]
    assert row.split("\t")[4] == reason
