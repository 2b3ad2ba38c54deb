"""The test extra installs on every Python that pyproject.toml's requires-python admits.

`make run` and `make test` install ``.[test,web]`` first. pgserver (PostgreSQL server binaries
in a wheel, for the PostgreSQL tests) has published wheels for CPython 3.8 to 3.12 only, and no
source package: on Python 3.13 (Debian 13, Fedora, a current python:3 image) pip found no
version of it, and `make run` stopped before afc was installed ("No matching distribution
found for pgserver>=0.1.4"). The test extra asks for pgserver only where it has a wheel; on a
later Python the PostgreSQL tests use a PostgreSQL installed on the machine (tests/pg_server.py).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent

# The CPython versions pgserver (its newest release, 0.1.4) publishes wheels for; it publishes
# no source package, so pip can install it nowhere else.
PGSERVER_WHEELS = {"3.8", "3.9", "3.10", "3.11", "3.12"}


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


def test_the_test_extra_installs_on_this_python():
    this = f"{sys.version_info.major}.{sys.version_info.minor}"
    if _asks_for("pgserver", this):
        assert this in PGSERVER_WHEELS
