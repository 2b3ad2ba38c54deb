"""README ("Running on several machines"): a worker runs jobs "as 'afc resume' does", its line
counts the jobs that ended failed (`2 finished (1 failed)`, ``--json`` ``failed``) and
``--until-idle`` exits 1 when one did. The jobs that a worker's claims fail with
DEPENDENCY_FAILED (``Settle``: their need ended badly) were failed in silence: a style frame
failing in a worker left its shots failed with no line in the worker's journal, its line
counting the frame alone, and a worker that failed only such jobs (retried alone while their
need stayed rejected) said "0 finished" and exited 0, where 'afc resume' says each "ended
failed" and exits 1."""

from __future__ import annotations

from conftest import manifest


def test_a_worker_says_the_dependents_it_failed_and_counts_them(afc):
    afc.write_manifest(
        manifest(
            [
                {"key": "frame", "prompt": "a frame", "params": {"fail": ["auth"]}},
                {"key": "shot", "prompt": "a shot", "needs": ["frame"]},
                {"key": "plain", "prompt": "plain"},
            ]
        )
    )
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    ran = afc("worker", "--until-idle", "--json")
    assert ran.returncode == 1, ran.stderr
    assert "b1/shot: ended failed: DEPENDENCY_FAILED: need 'frame' ended failed" in ran.stderr
    assert '"failed": 2' in ran.stdout, ran.stdout
    assert dict(afc.rows("SELECT key, status FROM jobs")) == {
        "frame": "failed",
        "shot": "failed",
        "plain": "succeeded",
    }


def test_a_worker_that_failed_only_retried_dependents_exits_1_as_resume_does(afc):
    afc.write_manifest(
        manifest(
            [
                {"key": "style", "prompt": "a style frame", "review": True},
                {"key": "shot", "prompt": "a shot", "needs": ["style"]},
            ]
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc("review", "reject", "style", "--reason", "too dark").returncode == 0
    assert afc("retry", "shot").returncode == 0  # said: the next run fails it again

    ran = afc("worker", "--until-idle")
    assert dict(afc.rows("SELECT key, status FROM jobs"))["shot"] == "failed"
    assert "b1/shot: ended failed: DEPENDENCY_FAILED: need 'style' ended rejected" in ran.stderr
    assert "1 finished (1 failed)" in ran.stderr, ran.stderr
    assert ran.returncode == 1, ran.stderr
