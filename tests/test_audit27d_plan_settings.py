"""Outside audit 27d: 'afc plan' / 'afc submit --dry-run' against the submit they plan.

README ("Plan") and README ("Money: know before you pay"): the plan says what the submit would be
refused for in this environment ("a submit in this environment would be refused (exit 2):
..."), so a script or a person that plans first learns it before the night's run. A run
setting the submit refuses before it writes anything (run.submit: AFC_MAX_INTERRUPTS,
AFC_LEASE_S, AFC_MIN_FREE_MB, AFC_POLL_S, and a --concurrency the open-file limit cannot
hold) was not looked at by the plan: it said the run would render its jobs, exit 0, and the
submit then refused with exit 2."""

from __future__ import annotations

import resource

import pytest
from conftest import jobs, manifest

REFUSED = "a submit in this environment would be refused (exit 2): "


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("AFC_POLL_S", "0"),
        ("AFC_LEASE_S", "1"),
        ("AFC_MIN_FREE_MB", "lots"),
        ("AFC_MAX_INTERRUPTS", "0"),
    ],
)
def test_the_plan_names_a_run_setting_the_submit_refuses(afc, variable, value):
    afc.write_manifest(manifest(jobs(2)))
    env = {variable: value}
    submit = afc("submit", "manifest.yaml", env=env)
    assert submit.returncode == 2, submit
    refusal = submit.stderr.strip().removeprefix("afc: ")
    assert variable in refusal, submit.stderr
    assert not (afc.cwd / "afc.db").exists()

    for command in (("plan", "manifest.yaml"), ("submit", "--dry-run", "manifest.yaml")):
        shown = afc(*command, env=env)
        # said as the environment's other problems are, and not a refusal of the plan
        assert shown.returncode == 0, shown
        assert REFUSED + refusal in shown.stdout, shown.stdout
        assert afc.json(*command, env=env)["environment"] == [refusal]
    # where the setting is fine, nothing is said
    assert afc.json("plan", "manifest.yaml")["environment"] == []


def test_a_dry_run_names_a_concurrency_the_open_file_limit_cannot_hold(afc):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no finite open-file limit on this host")
    afc.write_manifest(manifest(jobs(1)))
    wide = str(hard)  # a socket per call, and afc's own files beside them: past the limit
    submit = afc("submit", "manifest.yaml", "--concurrency", wide)
    assert submit.returncode == 2, submit
    refusal = submit.stderr.strip().removeprefix("afc: ")
    assert "open files" in refusal, submit.stderr

    planned = afc("submit", "--dry-run", "manifest.yaml", "--concurrency", wide)
    assert planned.returncode == 0, planned
    assert REFUSED + refusal in planned.stdout, planned.stdout
    # the submit's default concurrency fits: nothing said
    assert afc.json("submit", "--dry-run", "manifest.yaml")["environment"] == []
    assert not (afc.cwd / "afc.db").exists()


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_the_plan_names_a_grace_the_submit_refuses(afc, value):
    """AFC_GRACE_S is the submit's --grace from the environment, which 'afc plan' does not
    take: a value the submit refuses (exit 2, nothing written) was not looked at by the plan.
    'nan' passed the option's own check (min=0) and abandoned every call in flight at the
    first Ctrl-C (a timer of nan seconds fires at once): refused now, by the run as well."""
    afc.write_manifest(manifest(jobs(2)))
    env = {"AFC_GRACE_S": value}
    submit = afc("submit", "manifest.yaml", env=env)
    assert submit.returncode == 2, submit
    assert "grace" in submit.stderr.lower(), submit.stderr
    assert not (afc.cwd / "afc.db").exists()
    shown = afc.json("plan", "manifest.yaml", env=env)
    assert [p for p in shown["environment"] if "AFC_GRACE_S" in p], shown["environment"]
    if value != "nan":  # the submit's own option parsing refuses these, --dry-run too
        dry = afc("submit", "--dry-run", "manifest.yaml", env=env)
        assert dry.returncode == 2 and "AFC_GRACE_S" in dry.stderr, dry
    assert afc.json("plan", "manifest.yaml", env={"AFC_GRACE_S": "inf"})["environment"] == []
