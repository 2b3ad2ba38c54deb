"""Outside audit 43c: the memory of ``afc webhooks list`` on a ledger after months of use.

A batch that posts webhooks leaves a delivery row per job event, kept once delivered (with its
envelope, for ``replay``). ``afc webhooks list --json`` read every row into a list, built
every entry with its parsed envelope, then encoded and scrubbed one document: on 100,000
deliveries (20,000 jobs' rows copied in SQL) it peaked at 910 MiB and wrote nothing for 35 s;
the table on a pipe peaked at 210 MiB. ``afc status --json`` and ``afc outputs --json`` were
made to stream for the same reason (tests/test_audit29d_listing_memory.py). The deliveries
are now read a chunk at a time (``Ledger.delivery_chunks``) and written as they come: 40 MiB,
the same bytes."""

from __future__ import annotations

import base64
import json
import socket
import sqlite3
from pathlib import Path

from conftest import jobs, manifest
from test_audit29d_listing_memory import _peak

from afc_cli.ledger import Ledger

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _grow(db: Path, copies: int) -> None:
    """Every delivery row copied ``copies`` times in SQL, an hour apart."""
    conn = sqlite3.connect(db)
    names = [row[1] for row in conn.execute("PRAGMA table_info(deliveries)")]
    shifted = {"id": "d.id || '-' || n.i", "created_at": "d.created_at + n.i * 3600"}
    picked = ", ".join(shifted.get(c, f"d.{c}") for c in names)
    with conn:
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
            f"INSERT INTO deliveries ({', '.join(names)}) SELECT {picked} FROM deliveries d, n",
            (copies,),
        )
    conn.close()


def test_webhooks_list_memory_does_not_grow_with_the_deliveries(afc, monkeypatch):
    from afc_cli import cli

    data = manifest(jobs(100))
    data["webhook"] = {
        "url": f"http://127.0.0.1:{_closed_port()}/hooks",
        "secret_env": "AFC_HOOK_SECRET",
    }
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", env={"AFC_HOOK_SECRET": SECRET}).returncode == 0
    small, big = afc.cwd / "small.db", afc.cwd / "big.db"
    for path, copies in ((small, 14), (big, 149)):
        path.write_bytes((afc.cwd / "afc.db").read_bytes())
        _grow(path, copies)
    for options in ({"json_out": True}, {}):  # --json, and the table on a pipe
        _peak(monkeypatch, cli.webhooks_list, small, **options)  # modules imported first
        peak_small, wrote_small = _peak(monkeypatch, cli.webhooks_list, small, **options)
        peak_big, wrote_big = _peak(monkeypatch, cli.webhooks_list, big, **options)
        assert wrote_big > 9 * wrote_small  # every delivery was written
        assert peak_big < 4 * peak_small, (options, peak_small, peak_big)


def test_webhooks_list_streamed_is_every_delivery_in_order(afc):
    """The document is whole: every row, oldest first, each with its envelope; and the table
    on a pipe a line each. An empty list still says there is nothing."""
    data = manifest(jobs(3))
    data["webhook"] = {
        "url": f"http://127.0.0.1:{_closed_port()}/hooks",
        "secret_env": "AFC_HOOK_SECRET",
    }
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", env={"AFC_HOOK_SECRET": SECRET}).returncode == 0
    _grow(afc.cwd / "afc.db", 1)
    listed = afc.json("webhooks", "list")["deliveries"]
    ledger = Ledger(str(afc.cwd / "afc.db"), create=False, reading=True)
    try:
        rows = ledger.deliveries()
    finally:
        ledger.close()
    assert len(rows) == 6
    assert [d["id"] for d in listed] == [r["id"] for r in rows]
    assert [d["envelope"] for d in listed] == [json.loads(r["envelope"]) for r in rows]
    piped = afc("webhooks", "list")
    assert piped.returncode == 0
    assert len(piped.stdout.splitlines()) == 7  # the header line and a line a delivery
    dead = afc("webhooks", "list", "--dead")
    assert dead.returncode == 0 and dead.stdout.splitlines()[1:] == []
    assert "no dead deliveries" in dead.stderr
