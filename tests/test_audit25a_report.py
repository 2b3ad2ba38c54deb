"""Outside audit 25a (interruptions of the commands that write): 'afc report --html' stopped
while it writes its file, by Ctrl-C or by SIGTERM (a cron job's timeout), through a real
``afc`` child process and real signals."""

from __future__ import annotations

import signal
import time

import pytest
from conftest import jobs, manifest


def _stopped_report(afc, sig: int):
    """A report of 300 stored 512x512 outputs, stopped by ``sig`` while it makes its
    thumbnails (its temporary file open beside the target): the finished process."""
    afc.write_manifest(manifest(jobs(300, size="512x512")))
    assert afc("submit", "manifest.yaml", "--concurrency", "32").returncode == 0
    proc = afc.popen("report", "--html", "r.html")
    deadline = time.time() + 60
    while not list(afc.cwd.glob(".r.html.*.part")) and time.time() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.01)
    time.sleep(0.2)  # well inside the writing (its thumbnails take seconds), past mkstemp
    proc.send_signal(sig)
    proc.wait(timeout=120)
    return proc


def test_a_report_stopped_by_ctrl_c_says_it_changed_nothing_not_to_run_a_resume(afc):
    """Found by outside audit 25a: Ctrl-C to 'afc report --html' (or to any command that only
    reads the ledger: status, show, outputs, plan, costs report, ...) said 'interrupted;
    every job stays resumable (run 'afc resume')', the advice of a run: a resume starts the
    ledger's unfinished jobs, paid renders, which the person who stopped a report never
    asked for."""
    proc = _stopped_report(afc, signal.SIGINT)
    err = proc.stderr.read()
    assert proc.returncode == 130, err
    assert "afc resume" not in err, err
    assert "this command changed nothing: run it again: afc report --html r.html" in err, err
    assert list(afc.cwd.glob(".r.html*")) == [] and not (afc.cwd / "r.html").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_report_stopped_by_sigterm_or_sighup_leaves_no_temporary_file(afc, sig):
    """Found by outside audit 25a: 'afc report --html' had no handler for SIGTERM or SIGHUP
    (a cron job's timeout, a closed terminal): it died by the signal (-15) with its temporary
    file, a partial copy of the report up to the whole of it, left for good beside the target
    (a hidden '.NAME.xxxx.part', one more at every timed-out run), where README says an
    interrupted report leaves no half file; now it stops as at Ctrl-C."""
    proc = _stopped_report(afc, sig)
    err = proc.stderr.read()
    assert proc.returncode == 130, err
    assert "this command changed nothing: run it again" in err, err
    assert list(afc.cwd.glob(".r.html*")) == [] and not (afc.cwd / "r.html").exists()
