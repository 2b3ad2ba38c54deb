"""Manifests, job lists and re-submits, end to end through ``afc`` (outside audit 23f)."""

from __future__ import annotations

import base64
import json

import pytest
from conftest import jobs, ledger_count, manifest


@pytest.mark.parametrize("first", ["x/a.png", "x/a.png/b.png"])
def test_a_second_manifest_nesting_an_output_key_in_an_admitted_one_is_refused(
    afc, ledger_url, first
):
    """Found by outside audit 23f: one manifest giving two jobs ``x/a.png`` and
    ``x/a.png/b.png`` is refused (a file cannot also be a folder: one render would be paid
    for and never stored), but two manifests of one batch did it unrefused: the second
    submit ran both jobs, paid for both renders, and one ended OUTPUT_KEY_CONFLICT at store,
    its paid render never stored. Now refused at admission as an output key shared with an
    admitted job is (exit 2, naming the file, the job and the field, nothing admitted), and
    by ``afc plan`` alike, either way round."""
    afc.env["AFC_LEDGER"] = ledger_url
    second = "x/a.png/b.png" if first == "x/a.png" else "x/a.png"
    afc.write_manifest(manifest([{"key": "a", "prompt": "one", "output": first}]), "one.yaml")
    assert afc("submit", "one.yaml", "--no-run").returncode == 0
    afc.write_manifest(
        manifest(
            [{"key": "c", "prompt": "three"}, {"key": "b", "prompt": "two", "output": second}]
        ),
        "two.yaml",
    )

    plan = afc("plan", "two.yaml")
    assert plan.returncode == 2, plan.stdout + plan.stderr
    result = afc("submit", "two.yaml")
    assert result.returncode == 2, result.stderr
    said = "lies inside job 'a''s" if first == "x/a.png" else "is a folder of job 'a''s"
    assert "two.yaml" in result.stderr, result.stderr
    assert f"job 'b': field 'output': output key {second!r} {said}" in result.stderr
    assert said in plan.stderr, plan.stderr
    assert "Traceback" not in result.stderr
    assert ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM jobs") == 1, "nothing admitted"
    assert ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM attempts") == 0, "nothing paid"

    # a job of its own output key elsewhere is admitted beside it, and both run
    afc.write_manifest(
        manifest(
            [{"key": "c", "prompt": "three"}, {"key": "b", "prompt": "two", "output": "y/b.png"}]
        ),
        "two.yaml",
    )
    assert afc("submit", "two.yaml").returncode == 0
    assert ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM attempts") == 3


def test_a_yaml_merge_key_s_fields_are_overridden_not_duplicates(afc):
    """Found by outside audit 23f: YAML's merge key (``<<: *shot``, the way a YAML file
    shares fields between mappings) with a field overridden (the job's own ``key``, as each
    job needs) was refused as "duplicate key 'key'" at the line of the only ``key`` the job
    has, exit 2: PyYAML's own loaders read it as YAML says, the mapping's keys over the
    merged ones. Now read so; a key a mapping gives twice itself is still refused."""
    text = (
        "version: 1\nbatch: b1\n"
        "defaults:\n  chain: [{provider: local, model: m1, backoff: {base: 0.01, cap: 0.05}}]\n"
        "jobs:\n"
        "  - &shot {key: a, prompt: harbour, params: {seed: 7}}\n"
        "  - <<: *shot\n    key: b\n"
        "  - {<<: *shot, key: c, prompt: gulls}\n"
    )
    (afc.cwd / "manifest.yaml").write_text(text)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    rows = afc.rows("SELECT key, request_json FROM jobs ORDER BY key")
    bodies = {key: json.loads(body) for key, body in rows}
    assert {key: (b["prompt"], b["params"]) for key, b in bodies.items()} == {
        "a": ("harbour", {"seed": 7}),
        "b": ("harbour", {"seed": 7}),
        "c": ("gulls", {"seed": 7}),
    }
    assert afc("submit", "manifest.yaml").returncode == 0, "a replay"

    (afc.cwd / "twice.yaml").write_text(text + "  - {<<: *shot, key: d, prompt: x, prompt: y}\n")
    result = afc("submit", "twice.yaml", "--ledger", "other.db")
    assert result.returncode == 2, result.stderr
    assert "line 10: duplicate key 'prompt'" in result.stderr, result.stderr
    assert not (afc.cwd / "other.db").exists()


def test_a_submit_running_unlisted_jobs_needs_their_webhook_secrets_as_resume_does(afc):
    """Found by outside audit 23f: a submit runs the batch's unfinished jobs that its manifest
    does not list, as 'afc resume' runs them, and checks their API keys and prices first, but
    not their webhooks' secrets: where 'afc resume' refused to run them (exit 2, the variable
    named), a second manifest's submit rendered and paid for them, their events left
    undeliverable. Now refused alike before anything is admitted or rendered."""
    secret = "whsec_" + base64.b64encode(b"k" * 32).decode()
    hook = {"url": "http://127.0.0.1:9/hooks", "secret_env": "AFC_TEST_HOOK_SECRET"}
    afc.write_manifest(manifest([{"key": "a", "prompt": "one"}], webhook=hook), "one.yaml")
    first = afc("submit", "one.yaml", "--no-run", env={"AFC_TEST_HOOK_SECRET": secret})
    assert first.returncode == 0, first.stderr
    assert afc("resume").returncode == 2, "resume refuses to run it without the secret"
    afc.write_manifest(manifest([{"key": "b", "prompt": "two"}]), "two.yaml")

    result = afc("submit", "two.yaml")
    assert result.returncode == 2, result.stderr
    assert "AFC_TEST_HOOK_SECRET" in result.stderr and "not in two.yaml" in result.stderr
    assert "(a)" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert afc.rows("SELECT key, status FROM jobs") == [("a", "queued")], "nothing admitted"
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(0,)], "nothing paid"

    result = afc("submit", "two.yaml", env={"AFC_TEST_HOOK_SECRET": secret})
    assert result.returncode == 0, result.stderr
    assert afc.rows("SELECT key, status FROM jobs ORDER BY key") == [
        ("a", "succeeded"),
        ("b", "succeeded"),
    ]


def test_a_plan_naming_another_storage_for_a_batch_says_it_as_the_submit_does(afc):
    """Found by outside audit 23f: where a submit naming another storage for a batch is
    refused with both URLs as afc prints them (percent-encoded, so each reads back as its
    folder) and what to do, 'afc plan' said the URL it was given decoded
    ('file:///.../my out', which as --storage names another folder) and nothing more. Now it
    says what the submit says."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "one"}]))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    other = "file://./my%20out"
    submit = afc("submit", "manifest.yaml", "--storage", other)
    plan = afc("plan", "manifest.yaml", "--storage", other)
    assert submit.returncode == plan.returncode == 2, plan.stderr
    said = submit.stderr.strip()
    assert "my%20out; a batch keeps the storage it was first admitted with" in said, said
    assert plan.stderr.strip() == said


def test_a_conflict_over_a_request_not_rendered_yet_says_the_next_run_renders_it(afc):
    """Found by outside audit 23f: a key admitted with --no-run and submitted again with its
    prompt changed is refused as a conflict, and afc says to use a new key; a user who did
    so then had the edited-away request rendered and paid for by the very next submit (the
    old key, left out of the manifest, runs with it) or by cron's 'afc resume', with nothing
    in the conflict saying that the admitted request was still waiting to be rendered. Now
    the conflict says so, and how to drop it (submit and plan; --json ``status``)."""
    data = manifest([{"key": "a", "prompt": "one"}, {"key": "b", "prompt": "two"}])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    data["jobs"][0]["prompt"] = "one, at dusk"
    afc.write_manifest(data)

    plan = afc("plan", "manifest.yaml")
    assert "its admitted request is queued, and the next run renders it" in plan.stdout
    assert "'afc cancel a' drops it" in plan.stdout, plan.stdout
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 3, result.stderr
    assert "Its admitted request has not finished (queued)" in result.stderr, result.stderr
    assert "unless 'afc cancel a' drops it" in result.stderr
    result = afc("submit", "manifest.yaml", "--json")
    assert result.returncode == 3, result.stderr
    assert json.loads(result.stdout)["conflicts"][0]["status"] == "queued"

    # once it is rendered, nothing more is said: its output is what stays
    assert afc("cancel", "a").returncode == 0
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 3, result.stderr
    assert "has not finished" not in result.stderr
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(1,)], "only b was rendered"


def test_an_admission_under_a_budget_says_the_run_that_renders_its_jobs_is_not_capped(afc):
    """Found by outside audit 23f: a manifest's ``budget`` (or ``--max-spend``) caps a
    submit's own run; with --no-run (admit here, run with 'afc resume' or workers, as README
    shows for several machines) it capped nothing, and the run that rendered the jobs spent
    past it, with nothing said: the --json even reported the budget. Now the admission says
    that the cap does not go with the jobs (on stderr, with -q and --json too)."""
    afc.write_manifest(manifest(jobs(3), budget="0.10"))
    result = afc("submit", "manifest.yaml", "--no-run", "-q")
    assert result.returncode == 0, result.stderr
    assert "the manifest's budget of 0.100000 USD caps a submit's own run" in result.stderr
    assert "'afc resume' and 'afc worker' run these jobs under their own --max-spend" in (
        result.stderr
    )
    result = afc("submit", "manifest.yaml", "--no-run", "--max-spend", "1", "--json")
    assert result.returncode == 0, result.stderr
    json.loads(result.stdout)
    assert "--max-spend of 1.000000 USD caps a submit's own run" in result.stderr
    # the run that renders them is not capped by it (3 x 0.05 > 0.10), as said
    assert afc("resume").returncode == 0
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(3,)]
    # a submit that runs is capped, and says nothing of it
    afc.write_manifest(manifest(jobs(3), batch="b2", budget="0.10"))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 4, result.stderr
    assert "caps a submit's own run" not in result.stderr


def test_a_csv_param_cell_that_only_python_reads_as_a_number_is_its_text(afc):
    """Found by outside audit 23f: a job list's ``params.NAME`` cell is read as JSON when it
    is a JSON value and as text otherwise (README), but ``-Infinity`` (and ``[NaN]``), which
    no JSON reader but Python's takes, was read as a float and the whole list refused,
    exit 2, with 'cannot be canonicalised (-inf is not representable in JCS)'. Now each is
    its text, as ``NaN`` and ``Infinity`` were."""
    data = manifest([], jobs_from="jobs.csv")
    del data["jobs"]
    afc.write_manifest(data)
    (afc.cwd / "jobs.csv").write_text(
        "key,prompt,params.seed\na,one,-Infinity\nb,two,[NaN]\nc,three,Infinity\nd,four,-7\n"
    )
    result = afc("submit", "manifest.yaml", "--no-run")
    assert result.returncode == 0, result.stderr
    seeds = {
        key: json.loads(body)["params"]["seed"]
        for key, body in afc.rows("SELECT key, request_json FROM jobs")
    }
    assert seeds == {"a": "-Infinity", "b": "[NaN]", "c": "Infinity", "d": -7}
