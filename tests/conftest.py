"""Shared fixtures. End-to-end tests run the real ``afc`` command in a child process, in a
temporary working directory, with no AFC_* variables leaking in from the environment."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

# A suite started in the background by a non-interactive shell (`make test &`, `(make test &)`
# in a script, some CI runners) inherits SIGINT ignored, and so did every afc child: the tests
# that stop afc with SIGINT (Ctrl-C) saw it go on, exit 0 or time out. Handled here, exec'd
# children get SIGINT's default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The suite's servers are on loopback: a proxy in the environment (a CI machine's) would be
# asked for them (afc's provider calls, webhooks and S3 honour HTTP_PROXY / HTTPS_PROXY)
for _name in [k for k in os.environ if k.lower() in ("http_proxy", "https_proxy", "all_proxy")]:
    del os.environ[_name]


def _environ() -> dict[str, str]:
    """A copy of this process's environment. Iterating ``os.environ`` runs Python code, so a
    thread of the test process that sets a variable meanwhile (moto's server thread, a
    library's import) made a test fail now and then with "dictionary changed size during
    iteration"; the copy is taken again then."""
    while True:
        try:
            return dict(os.environ)
        except RuntimeError:
            continue


class Afc:
    def __init__(self, cwd: Path):
        self.cwd = cwd
        self.env = {k: v for k, v in _environ().items() if not k.startswith("AFC_")}
        self.env["PYTHONUNBUFFERED"] = "1"

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "afc_cli", *args]

    def __call__(self, *args: str, env: dict[str, str] | None = None, timeout: float = 120):
        return subprocess.run(
            self.command(*args),
            cwd=self.cwd,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def popen(
        self, *args: str, env: dict[str, str] | None = None, stdout: int = subprocess.DEVNULL
    ) -> subprocess.Popen:
        return subprocess.Popen(
            self.command(*args),
            cwd=self.cwd,
            env={**self.env, **(env or {})},
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
        )

    def json(self, *args: str, expect: int | None = 0, env: dict[str, str] | None = None) -> Any:
        result = self(*args, "--json", env=env)
        if expect is not None:
            assert result.returncode == expect, result.stderr
        return json.loads(result.stdout)

    def write_manifest(self, data: dict[str, Any], name: str = "manifest.yaml") -> Path:
        path = self.cwd / name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    def rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        conn = sqlite3.connect(self.cwd / "afc.db")
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    def outputs(self) -> Path:
        return self.cwd / "afc-outputs"


@pytest.fixture
def afc(tmp_path: Path) -> Afc:
    return Afc(tmp_path)


def manifest(jobs: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    """A small valid manifest on the local provider; tests override what they need."""
    data: dict[str, Any] = {
        "version": 1,
        "batch": "b1",
        "defaults": {
            "chain": [
                {
                    "provider": "local",
                    "model": "m1",
                    "attempts": 3,
                    "backoff": {"base": 0.01, "cap": 0.05},
                }
            ]
        },
        "rates": [{"provider": "local", "model": "m1", "per_image": "0.05"}],
        "jobs": jobs,
    }
    data.update(top)
    return data


def jobs(n: int, **params: Any) -> list[dict[str, Any]]:
    return [
        {
            "key": f"shot-{i:03d}",
            "prompt": f"prompt number {i}",
            **({"params": params} if params else {}),
        }
        for i in range(1, n + 1)
    ]


class Loopback:
    """A test's own HTTP server (a fake provider or receiver of its own): ``handler`` served
    on 127.0.0.1, a port of its own, each request in a thread; ``base`` its URL (with ``path``),
    ``stop`` ends it and frees its socket. A class holding a server's counters subclasses it,
    defining its handler in ``__init__`` before calling ``super().__init__``."""

    def __init__(self, handler: type, path: str = "") -> None:
        import threading
        from http.server import ThreadingHTTPServer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def wait_for(afc, sql: str, threshold: int, timeout: float = 30) -> None:
    """Poll the ledger until ``sql`` (a COUNT) reaches ``threshold``."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if (afc.cwd / "afc.db").exists() and afc.rows(sql)[0][0] >= threshold:
                return
        except Exception:  # the schema may still be in the making
            pass
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {sql} >= {threshold}")


def ledger_count(afc, ledger_url: str, sql: str) -> int:
    """``sql`` (a COUNT) on the test's ledger: SQLite's afc.db, or the PostgreSQL
    ``ledger_url``; 0 while the SQLite ledger is not made yet."""
    if ledger_url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(ledger_url) as conn:
            return conn.execute(sql).fetchone()[0]
    try:
        return afc.rows(sql)[0][0]
    except sqlite3.OperationalError:  # the ledger not made yet
        return 0


def waits_on_a_lock(look, thread) -> bool:
    """Whether a session of ``look``'s database (a psycopg connection) waits for a lock
    before ``thread`` ends (30 s at most)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and thread.is_alive():
        waiting = look.execute(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND datname = current_database()"
        ).fetchone()[0]
        if waiting:
            return True
    return False


def race_on_a_lock(pg_url: str, first, second, held, proceed) -> None:
    """Two threads racing on a PostgreSQL ledger's locks: ``first`` starts and holds (it sets
    ``held``, then waits for ``proceed``), ``second`` starts and runs until it waits for a lock
    (or 30 s pass), then ``first`` proceeds and both are joined."""
    import psycopg

    try:
        first.start()
        assert held.wait(30)
        second.start()
        with psycopg.connect(pg_url, autocommit=True) as look:
            waits_on_a_lock(look, second)
        proceed.set()
        first.join(60)
        second.join(60)
    finally:
        proceed.set()


def resubmitting(path, ledger_url: str, outcome: dict[str, str]):
    """A thread's target: ``afc submit --no-run`` of the manifest ``path`` again, its outcome
    written to ``outcome['submit']`` ('admitted', or 'error: ...')."""
    from afc_cli.run import submit

    def resubmit() -> None:
        try:
            submit(str(path), ledger_path=ledger_url, storage=None, concurrency=1, run=False)
            outcome["submit"] = "admitted"
        except Exception as exc:
            outcome["submit"] = f"error: {exc}"

    return resubmit


def wait_for_ledger(afc, ledger_url: str, sql: str, timeout: float = 60, proc=None) -> None:
    """Poll ``ledger_count`` until it is not 0; ``proc``, a child that must not end first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if ledger_count(afc, ledger_url, sql):
            return
        assert proc is None or proc.poll() is None, proc.stderr.read()
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {sql}")


def frozen_at(proc, timeout: float = 30) -> None:
    """Wait until ``proc`` froze itself at its stall point (AFC_STALL_POINT: its /proc state
    'T')."""
    deadline = time.time() + timeout
    state = None
    while state != "T" and time.time() < deadline:
        time.sleep(0.02)
        state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    assert state == "T", "the stall point was not reached"


def stop_between_writes(afc, proc, attempts: int = 200) -> None:
    """SIGSTOP ``proc`` at a moment it holds no write transaction on the test's SQLite ledger,
    so the commands the test runs next do not wait out the busy timeout behind a frozen
    writer (a worker polling every 0.1 s writes often: stopped inside a claim, it kept the
    lock and 'afc cancel' failed, CI stop 66). Stopped holding the lock, it is resumed for a
    moment and stopped again."""
    for _ in range(attempts):
        proc.send_signal(signal.SIGSTOP)
        frozen_at(proc)
        probe = sqlite3.connect(afc.cwd / "afc.db", timeout=0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:  # the frozen process holds the write lock
            proc.send_signal(signal.SIGCONT)
            time.sleep(0.01)
        finally:
            probe.close()
    raise AssertionError("the process held the ledger's write lock at every stop")


def need_mount_namespace() -> None:
    """Skip where this user cannot have a user and mount namespace of its own (not Linux, no
    ``unshare``, or unprivileged namespaces turned off)."""
    import shutil

    if sys.platform != "linux" or not shutil.which("unshare"):
        pytest.skip("needs unshare (Linux)")
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("unprivileged mount namespaces are not available")


def read_only_binds(folders: Any) -> str:
    """The ``sh`` commands that mount each of ``folders`` read-only over itself."""
    import shlex

    quoted = [shlex.quote(str(folder)) for folder in folders]
    return " && ".join(f"mount --bind {q} {q} && mount -o remount,bind,ro {q}" for q in quoted)


def in_mount_namespace(afc: Any, script: str, env: dict[str, str] | None = None, timeout=120):
    """``script`` (sh) run in the test's folder as root of a user and mount namespace of its
    own (``unshare -rm``): the mounts it makes (read-only binds, a small tmpfs) are its own.
    Skips where such namespaces, or the mounts (the script exits 9 when one fails), are not
    available."""
    need_mount_namespace()
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        cwd=afc.cwd,
        env=afc.env if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if result.returncode == 9:
        pytest.skip(f"the mounts are not available here: {result.stderr}")
    return result


def recorded_statements(ledger: Any, monkeypatch) -> list[tuple[str, list]]:
    """The statements ``ledger`` sends from now on, with their values (the plan tests ask the
    server for the plan of a statement a ledger operation really sends)."""
    sent: list[tuple[str, list]] = []
    execute = ledger.db.execute

    def recording(sql, params=(), **kw):
        sent.append((sql, list(params)))
        return execute(sql, params, **kw)

    monkeypatch.setattr(ledger.db, "execute", recording)
    return sent


# --- PostgreSQL (tests/pg_server.py): one server per session, one database per test ----------


@pytest.fixture(scope="session")
def pg_server():
    from pg_server import Server

    server = Server()
    yield server
    server.stop()


@pytest.fixture
def pg_url(pg_server) -> str:
    """A fresh PostgreSQL ledger database (afc's schema applied, no rows)."""
    return pg_server.database()


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_url(request, tmp_path: Path) -> str:
    """The contract tests' ledger: each runs once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        return str(tmp_path / "afc.db")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def fake(afc):
    """Fake provider servers speaking each provider's wire format (tests/fakeproviders.py),
    with ``afc`` pointed at them."""
    from fakeproviders import FakeProviders

    server = FakeProviders().start()
    afc.env.update(server.env())
    yield server
    server.stop()


def old_build(commit: str, into: Path) -> Path:
    """afc's package as ``commit`` of this repository's history had it, unpacked into the
    new folder ``into`` (run it with ``PYTHONPATH=into``): CI runs on a whole clone; without
    that commit here (a shallow clone) the test skips."""
    repo = Path(__file__).resolve().parent.parent
    found = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True
    )
    if found.returncode != 0:
        pytest.skip(f"commit {commit} is not in this clone's history")
    into.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", commit, "afc_cli"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


@pytest.fixture(scope="module")
def moto_server():
    """moto's S3 server over real HTTP on 127.0.0.1, one per test module (a module may
    define its own, as the older ones do)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    yield server.get_host_and_port()
    server.stop()


@pytest.fixture
def s3(moto_server, afc):
    """A new bucket behind a fault proxy (``ProxiedBucket``), the ``afc`` fixture pointed at it."""
    from s3fake import FaultPlan, ProxiedBucket

    plan = FaultPlan()
    ctx = ProxiedBucket(moto_server, afc, plan, "renders")
    yield ctx
    plan.release()  # requests a "stall" fault holds
    ctx.proxy.shutdown()
