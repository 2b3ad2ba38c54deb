"""A PostgreSQL ledger that cannot be reached is exit 1, as a storage that cannot be reached
and a connection lost mid-run are, not 2, a usage error (outside audit 28b)."""

from __future__ import annotations

import shutil
import socket

import pytest
from conftest import jobs, manifest
from test_cron import run_wrapper


def _down() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"postgresql://afc:s3cret@127.0.0.1:{port}/afc"


def test_a_ledger_server_that_is_down_is_not_a_usage_error(afc):
    """The database restarting, or a network outage, at the moment cron started afc: exit 2,
    which README and the cron wrapper call 'a usage problem: a bad AFC_* value' (nothing to
    retry, a configuration to fix), where the same outage a minute later, mid-run, was exit
    1, and so was a storage endpoint down before the run."""
    afc.write_manifest(manifest(jobs(1)))
    down = _down()
    for args in (("submit", "manifest.yaml"), ("resume",), ("status",), ("queue", "stats")):
        result = afc(*args, "--ledger", down)
        assert result.returncode == 1, (args, result.stderr)
        assert "cannot connect to the ledger postgresql://" in result.stderr, result.stderr
        assert "s3cret" not in result.stderr + result.stdout
    assert sorted(p.name for p in afc.cwd.iterdir()) == ["manifest.yaml"]  # nothing written
    # what the URL itself gets wrong is still a usage error, before any connection
    bad = afc("status", "--ledger", "postgresql://bob:a@b@127.0.0.1:1/afc")
    assert bad.returncode == 2, bad.stderr


@pytest.mark.skipif(shutil.which("flock") is None, reason="needs flock(1)")
def test_the_cron_wrapper_passes_an_unreachable_ledger_on_as_exit_1(afc):
    result = run_wrapper(afc, AFC_LEDGER=_down())
    assert result.returncode == 1, result.stdout + result.stderr
    assert "cannot connect to the ledger" in result.stderr
