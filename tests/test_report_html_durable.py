"""``afc report --html FILE`` replaces a report by renaming a temporary file over it. The file is
fsynced before the rename and its folder after, as the spool does (afc_cli/spool.py): else a
machine losing power just after could leave an empty or cut file where the last good report
was (the rename reaches the disk before the data)."""

from __future__ import annotations

import os
import stat

import pytest
from conftest import jobs, manifest

pytest.importorskip("jinja2", reason="the web extra: pip install 'afc-cli[web]'")


def test_the_report_is_durable_before_it_takes_its_name(afc, monkeypatch):
    from afc_cli.web.html import write_report

    afc.write_manifest(manifest(jobs(2, size="16x16")))
    assert afc("submit", "manifest.yaml", "-q").returncode == 0
    target = afc.cwd / "report.html"
    target.write_text("<!doctype html><p>last night's report</p>")
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        mode = os.fstat(fd).st_mode
        events.append(("fsync", "folder" if stat.S_ISDIR(mode) else "file"))
        return real_fsync(fd)

    def replace(src, dst):
        if str(dst) == str(target):
            events.append(("replace", "report"))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    made = write_report(str(afc.cwd / "afc.db"), str(target), batch=None, since=None)
    assert made["jobs"] == 2
    assert "last night" not in target.read_text()
    at = events.index(("replace", "report"))
    assert ("fsync", "file") in events[:at], events  # the data, before its name
    assert ("fsync", "folder") in events[at + 1 :], events  # the name itself
