"""Outside audit 32f: a run setting from the environment that is set but blank.

afc's run settings read from the environment (AFC_POLL_S, AFC_LEASE_S, AFC_MAX_INTERRUPTS,
AFC_GRACE_S, AFC_LEDGER, AFC_STORAGE) take a blank value as unset, their default: a template
that leaves a variable empty (a systemd unit's ``Environment=AFC_MIN_FREE_MB=``, a crontab or
wrapper passing ``AFC_MIN_FREE_MB=$MIN_FREE`` with nothing in it) runs as without it.
AFC_MIN_FREE_MB alone refused it ("must be a number of MiB, got ''"): every submit, resume and
worker exited 2 and rendered nothing, and the plan said the submit would be refused."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest


@pytest.mark.parametrize("value", ["", "  "])
def test_a_blank_min_free_is_the_default(afc, value):
    afc.write_manifest(manifest(jobs(2)))
    env = {"AFC_MIN_FREE_MB": value}
    assert afc.json("plan", "manifest.yaml", env=env)["environment"] == []
    submit = afc("submit", "manifest.yaml", env=env)
    assert submit.returncode == 0, submit.stderr
    assert "AFC_MIN_FREE_MB" not in submit.stderr
    assert afc.json("status", env=env)["counts"] == {"succeeded": 2}


def test_a_blank_min_free_is_the_default_for_resume_and_worker(afc):
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    env = {"AFC_MIN_FREE_MB": ""}
    resume = afc("resume", env=env)
    assert resume.returncode == 0, resume.stderr
    assert afc("worker", "--until-idle", env=env).returncode == 0
    assert afc.json("status")["counts"] == {"succeeded": 2}


def test_a_min_free_that_is_not_a_number_is_still_refused(afc):
    afc.write_manifest(manifest(jobs(1)))
    submit = afc("submit", "manifest.yaml", env={"AFC_MIN_FREE_MB": "lots"})
    assert submit.returncode == 2, submit
    assert "AFC_MIN_FREE_MB must be a number of MiB, got 'lots'" in submit.stderr
    assert not (afc.cwd / "afc.db").exists()
