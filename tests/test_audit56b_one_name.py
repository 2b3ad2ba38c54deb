"""Output keys a case-insensitive file system takes for one name, found by outside audit 56b.

``Shot1.png`` and ``shot1.png`` are two keys to afc and to S3, one file on macOS (APFS and
HFS+ as set up by default), on a Windows or SMB share and on FAT or exFAT drives. This
machine's file systems tell them apart and a casefold mount needs root, so the ``afc`` child
runs on a file system made case-insensitive under ``$AFC_TEST_FOLD`` at the wire: its
sitecustomize looks each name up as such a file system does (an existing name in another case
or accents composed otherwise is the one found), for every call afc's file storage makes."""

from __future__ import annotations

import os

import pytest
from conftest import manifest

# Every path under $AFC_TEST_FOLD is looked up as a case- and normalisation-insensitive
# (case-preserving) file system does: each part of it that does not exist as spelt is the
# entry of its folder equal to it under casefold and NFC, where there is one.
FOLDING = """
import builtins
import io
import os
import unicodedata

_root = os.environ.get("AFC_TEST_FOLD")
_lstat, _listdir = os.lstat, os.listdir


_case = os.environ.get("AFC_TEST_FOLD_CASE", "1") == "1"  # "0": macOS's case-sensitive APFS


def _fold(name):
    name = unicodedata.normalize("NFC", name)
    return unicodedata.normalize("NFC", name.casefold()) if _case else name


def _spelt(path):
    if not _root or isinstance(path, int):
        return path
    text = os.path.abspath(os.fsdecode(path))
    if not text.startswith(_root + os.sep):
        return path
    at = _root
    for part in text[len(_root) + 1 :].split(os.sep):
        exact = os.path.join(at, part)
        try:
            _lstat(exact)
        except OSError:
            try:
                names = _listdir(at)
            except OSError:
                names = []
            found = [name for name in names if _fold(name) == _fold(part)]
            if found:
                exact = os.path.join(at, found[0])
        at = exact
    return os.fsencode(at) if isinstance(path, bytes) else at


def _one(call):
    def wrapped(path, *args, **kwargs):
        return call(_spelt(path), *args, **kwargs)

    return wrapped


def _link(src, dst, *args, **kwargs):
    if kwargs.get("src_dir_fd") is None and kwargs.get("dst_dir_fd") is None:
        src, dst = _spelt(src), _spelt(dst)
    return _os_link(src, dst, *args, **kwargs)


def _replace(src, dst, *args, **kwargs):
    return _os_replace(_spelt(src), _spelt(dst), *args, **kwargs)


_os_link, _os_replace = os.link, os.replace
os.stat, os.lstat, os.open, os.unlink, os.mkdir = map(
    _one, (os.stat, os.lstat, os.open, os.unlink, os.mkdir)
)
os.link, os.replace = _link, _replace
builtins.open = io.open = _one(io.open)
"""


def _site(afc, case: bool = True) -> dict[str, str]:
    site = afc.cwd / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(FOLDING)
    return {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
        "AFC_TEST_FOLD": str(afc.outputs()),
        "AFC_TEST_FOLD_CASE": "1" if case else "0",
    }


@pytest.mark.parametrize(
    ("first", "second", "case"),
    [
        ("b1/Shot1.png", "b1/shot1.png", True),
        ("b1/caf\u00e9.png", "b1/cafe\u0301.png", True),
        ("b1/caf\u00e9.png", "b1/cafe\u0301.png", False),
    ],
    ids=["case", "accents", "accents-only"],
)
def test_two_keys_one_file_are_refused_before_any_render(afc, first, second, case):
    """Two jobs whose output keys (a job's own ``output``) differ only by case (or by accents composed or not, as macOS
    takes them) on such a file system: both renders were paid for, then the second store met
    the first's file and the job failed OUTPUT_KEY_CONFLICT. The submit is refused (exit 2),
    naming both keys, before anything is admitted or rendered; on a file system that tells them
    apart the same batch runs. ``accents-only``: a file system that tells case apart but not
    accents composed or not (macOS's case-sensitive APFS), whose refusal no test saw (a mutant
    dropping ``FileStorage.name_of``'s NFC where case is told apart passed)."""
    afc.write_manifest(
        manifest(
            [
                {"key": "one", "prompt": "p", "output": first},
                {"key": "two", "prompt": "q", "output": second},
            ]
        )
    )
    afc.outputs().mkdir()
    calls = afc.cwd / "calls.log"
    env = {**_site(afc, case), "AFC_LOCAL_CALL_LOG": str(calls)}
    result = afc("submit", "manifest.yaml", "--concurrency", "4", env=env)
    assert "Traceback" not in result.stderr
    assert not calls.exists() or calls.read_text() == "", "a render was paid for"
    assert result.returncode == 2, result.stderr
    assert repr(first) in result.stderr and repr(second) in result.stderr
    assert "does not tell" in result.stderr
    assert not (afc.cwd / "afc.db").exists()
    # where names in another case are other names (this machine's file system), it runs
    result = afc("submit", "manifest.yaml", env={"AFC_LOCAL_CALL_LOG": str(calls)})
    assert result.returncode == 0, result.stderr
    assert len(calls.read_text().splitlines()) == 2


def test_the_probe_reads_this_file_system(tmp_path):
    """On this machine's file system (case-sensitive, names kept as bytes) the probe finds no
    folding, and leaves nothing behind; where it cannot probe it says so (None)."""
    from afc_cli.storage.file import FileStorage

    storage = FileStorage(tmp_path)
    assert storage.name_folds() == (False, False)
    assert list(tmp_path.iterdir()) == []
    storage.check_keys(["b/Shot1.png", "b/shot1.png", "b/caf\u00e9.png", "b/cafe\u0301.png"])
    # a folder not there (yet) is not probed, and nothing is taken from that
    assert FileStorage(tmp_path / "missing").name_folds() is None
