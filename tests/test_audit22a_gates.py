"""Outside audit 22a (review gates and reference images): through the real ``afc`` command,
on the local provider and fake providers at the wire."""

from __future__ import annotations

import signal

import pytest
from conftest import manifest


def _reviewed() -> dict:
    return manifest(
        [
            {"key": "frame", "prompt": "a style frame", "review": True},
            {"key": "shot", "prompt": "a shot", "inputs": [{"job": "frame"}]},
        ]
    )


@pytest.mark.parametrize("decision", [None, "reject"])
def test_a_reviewed_jobs_spool_file_a_crash_left_is_swept_as_a_successs_is(
    afc, ledger_url, decision
):
    """Found by outside audit 22a: a run killed after a reviewed job's await_review commit,
    before its spool file (a whole copy of the stored output) was removed, left the file; the
    sweep at a run's start removed only the files of succeeded jobs, so once a person rejected
    the output (final: no run ever touches the job again) the file stayed for good on the disk
    AFC_MIN_FREE_MB guards, and until a decision for as long as the review took."""
    afc.write_manifest(_reviewed())
    afc.env["AFC_LEDGER"] = ledger_url
    died = afc("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_terminal"})
    assert died.returncode == -signal.SIGKILL, died.stderr
    spool = afc.cwd / ("afc-spool" if ledger_url.startswith("postgresql") else "afc.db-spool")
    assert len(list(spool.glob("*.spool"))) == 1  # the window was hit
    if decision == "reject":
        decided = afc("review", "reject", "frame", "--reason", "too dark")
        assert decided.returncode == 0, decided.stderr
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert list(spool.glob("*.spool")) == []  # stored and verified: the copy is no one's
    assert (afc.outputs() / "b1" / "frame.png").exists()
    assert afc.json("status", "--all")["counts"] == (
        {"awaiting_review": 1, "blocked": 1} if decision is None else {"rejected": 1, "failed": 1}
    )
