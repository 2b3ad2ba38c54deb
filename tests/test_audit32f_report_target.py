"""Outside audit 32f: 'afc report --html' given a file that is not a regular file.

A script that wanted the report on its stdout (``afc report --html /dev/stdout | mail ...``),
or a named pipe a consumer reads (``mkfifo report.html``), made afc read the target's head to
see whether it was an HTML report it may replace (``_is_html``): a read of the command's own
output pipe, or of a FIFO no one writes, that never returned. The command hung for ever (a
cron job until its timeout), writing nothing and saying nothing. And with stdout an HTML file
(``>> report.html``) the head read as a report: the new report, written beside the target and
renamed over it, replaced the /dev/stdout link itself (as root, /dev is writable) with a
regular file, for every program on the machine. A file descriptor's name, and a target that
is not a regular file, are refused now, exit 2, before anything is read or written."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from conftest import jobs, manifest


def _report(afc, target: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(
        afc.command("report", "--html", target),
        cwd=afc.cwd,
        env=afc.env,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"afc report --html {target} hung")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture
def rendered(afc):
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    return afc


def test_a_report_to_stdout_as_a_pipe_is_refused_not_hung(rendered):
    result = _report(rendered, "/dev/stdout")
    assert result.returncode == 2, result
    assert "--html /dev/stdout: names a device or a file descriptor" in result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr


def test_a_report_to_a_named_pipe_is_refused_not_hung(rendered):
    fifo = rendered.cwd / "report.html"
    os.mkfifo(fifo)
    result = _report(rendered, "report.html")
    assert result.returncode == 2, result
    assert "is not a regular file" in result.stderr, result.stderr
    assert not fifo.is_file()  # still the FIFO, not replaced
    assert not list(rendered.cwd.glob(".report.html.*.part"))


def test_a_report_to_a_regular_file_is_still_written(rendered):
    result = _report(rendered, "report.html")
    assert result.returncode == 0, result.stderr
    assert (rendered.cwd / "report.html").read_text().lstrip().lower().startswith("<!doctype")


def test_a_report_to_stdout_as_an_html_file_leaves_dev_stdout_alone(rendered, tmp_path):
    """Run in a mount namespace of its own, with a /dev of its own: without the fix the
    report replaced /dev/stdout, which must not happen to the machine running the tests."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private /dev")
    old = rendered.cwd / "old.html"
    old.write_text("<!doctype html><p>an earlier report</p>\n")
    dev = tmp_path / "dev"
    dev.mkdir()
    command = " ".join(rendered.command("report", "--html", "/dev/stdout"))
    script = (
        "mount --make-rprivate / && "
        f"mount -t tmpfs tmpfs {dev} && cp -a /dev/null /dev/urandom {dev}/ && "
        f"ln -s /proc/self/fd/1 {dev}/stdout && mount --bind {dev} /dev || exit 99; "
        f"{command} >> old.html; rc=$?; "
        "if [ -L /dev/stdout ]; then echo link-kept >&2; fi; exit $rc"
    )
    result = subprocess.run(
        ["unshare", "-m", "sh", "-c", script],
        cwd=rendered.cwd,
        env=rendered.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if result.returncode == 99:
        pytest.skip(f"no private /dev here: {result.stderr}")
    assert result.returncode == 2, result
    assert "names a device or a file descriptor" in result.stderr, result.stderr
    assert "link-kept" in result.stderr, result.stderr
    assert old.read_text() == "<!doctype html><p>an earlier report</p>\n"


def test_a_report_to_dash_is_refused_not_written_as_a_file_named_dash(rendered):
    """'-' names stdout to most commands: afc wrote a file named '-' in the current folder,
    and the script reading its stdout for the report got one summary line."""
    result = _report(rendered, "-")
    assert result.returncode == 2, result
    assert "--html -: afc writes the report to a file, not to stdout" in result.stderr
    assert result.stdout == ""
    assert not (rendered.cwd / "-").exists()
