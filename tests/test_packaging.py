"""The source distribution carries what building afc needs, and not half of the test suite.

A release is built by setuptools from pyproject.toml (``python -m build``); pip builds the
wheel from the sdist wherever no wheel fits. From setuptools 68, the floor in pyproject.toml's
``[build-system]``, an sdist adds ``tests/test*.py`` by default and nothing else of tests/: no
``conftest.py``, no helpers, no fixtures under ``tests/help``, none of the examples and docs the
tests read, so the suite it carried could not run. MANIFEST.in leaves tests/ out.

Built here from a copy of the files setuptools reads, with this environment's setuptools (the
test extra asks for at least that floor), without build isolation or the network.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = "import sys, setuptools.build_meta as b; print(b.build_sdist(sys.argv[1]))"
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


def _package_files() -> set[str]:
    return {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "afc_cli").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def test_sdist_carries_afc_cli_and_its_templates_and_no_tests(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "MANIFEST.in"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, source / name)
    for folder in ("afc_cli", "tests"):
        shutil.copytree(ROOT / folder, source / folder, ignore=SKIP)
    out = tmp_path / "dist"
    out.mkdir()
    built = subprocess.run(
        [sys.executable, "-c", BUILD, str(out)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (sdist,) = out.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        # each name under the one top folder (afc_cli-0.1.0/; afc-cli-0.1.0/ from an older
        # setuptools)
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}

    assert {"pyproject.toml", "README.md", "PKG-INFO"} <= names
    assert sorted(_package_files() - names) == []  # the templates under afc_cli/web too
    assert sorted(n for n in names if n == "tests" or n.startswith("tests/")) == []
    assert sorted(n for n in names if "__pycache__" in n or n.endswith(".pyc")) == []
