"""``afc serve`` on a PostgreSQL ledger keeps its read connections between requests
(``Pages.reading``, afc_cli/web/server.py): it opened one for every page, thumbnail and 304
(a connection and seven statements each: 28 ms on this machine's own server, a dozen round
trips to a remote one). A kept connection is checked before each use: a newer afc's migration
is still refused as an open refuses it, and a session the server ended is opened afresh."""

from __future__ import annotations

import re

import httpx
import psycopg
import pytest
from browser import Served
from conftest import jobs, manifest

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")

SERVE_SESSIONS = (
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
    " AND application_name = 'afc' AND pid <> pg_backend_pid()"
)


def sessions(url: str) -> set[int]:
    """The server processes of afc's sessions on the ledger's database now."""
    with psycopg.connect(url, autocommit=True, application_name="observer") as conn:
        return {row[0] for row in conn.execute(SERVE_SESSIONS)}


def submitted(afc, pg_url: str, n: int) -> None:
    afc.env["AFC_LEDGER"] = pg_url
    afc.write_manifest(manifest(jobs(n, size="48x32")))
    done = afc("submit", "manifest.yaml")
    assert done.returncode == 0, done.stderr


def test_thumbnails_and_their_304s_reuse_the_pages_connection(afc, pg_url):
    submitted(afc, pg_url, 4)
    served = Served(afc)
    try:
        sheet = httpx.get(served.url)
        assert sheet.status_code == 200
        thumbs = sorted(set(re.findall(r'/thumb/[^"\']+', sheet.text)))
        assert len(thumbs) == 4
        kept = sessions(pg_url)
        assert kept, "the page's connection was closed, not kept for the next read"
        for _ in range(5):
            for path in thumbs:
                first = httpx.get(served.url.rstrip("/") + path)
                assert first.status_code == 200
                again = httpx.get(
                    served.url.rstrip("/") + path, headers={"If-None-Match": first.headers["etag"]}
                )
                assert again.status_code == 304
        # forty requests one after another: the same session answered every one
        assert sessions(pg_url) == kept
    finally:
        code, stderr = served.stop()
    assert code == 0 and "Traceback" not in stderr
    assert not sessions(pg_url)  # closed when the server stopped


def test_a_kept_connection_is_checked_before_each_read(afc, pg_url):
    submitted(afc, pg_url, 2)
    served = Served(afc)
    try:
        assert httpx.get(served.url).status_code == 200
        kept = sessions(pg_url)
        assert kept
        # the server ended the kept session (a restart, idle_session_timeout, an operator's
        # pg_terminate_backend): the next page opens the ledger afresh, not a 503
        with psycopg.connect(pg_url, autocommit=True) as conn:
            for pid in kept:
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        page = httpx.get(served.url)
        assert page.status_code == 200 and "shot-001" in page.text
        # a newer afc migrated the ledger meanwhile: refused as an open refuses it (503,
        # saying what to do), and served again once it is not so
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO afc_migrations (migration_set, name, applied_at)"
                " VALUES ('afc', 'm999_newer', 0)"
            )
        refused = httpx.get(served.url)
        assert refused.status_code == 503
        assert "m999_newer" in refused.text and "Upgrade afc" in refused.text
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DELETE FROM afc_migrations WHERE name = 'm999_newer'")
        assert httpx.get(served.url).status_code == 200
    finally:
        code, stderr = served.stop()
    assert code == 0 and "Traceback" not in stderr
