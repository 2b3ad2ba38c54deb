"""Outside audit 21a: the command line and the manifest as a user meets them, through the real
``afc`` command: storage URLs, messages, hints, money options, what tables show."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.request import url2pathname

from conftest import manifest


def test_a_file_url_is_percent_encoded_both_ways_and_what_afc_prints_reads_back(afc):
    """RFC 8089 file URLs are percent-encoded. afc took the text after 'file://' as the path
    as it was: 'file:///tmp/my%20renders' made a folder literally named 'my%20renders', and a
    folder with a space or '#' was printed as 'file:///tmp/my renders#1/b1/frame.png' (in
    'outputs --json', 'show', the submit's storage line), which no URL reader takes for that
    file ('#1/b1/frame.png' is a fragment). Now a file URL's escapes are decoded, and every
    URL afc prints is encoded, and names the same folder when given back."""
    afc.write_manifest(manifest([{"key": "frame", "prompt": "p"}]))
    folder = afc.cwd / "my renders #1 100%"
    given = "file://" + str(afc.cwd).replace("%", "%25") + "/my%20renders%20%231%20100%25"
    done = afc("submit", "manifest.yaml", "--storage", given, "--json")
    assert done.returncode == 0, done.stderr
    assert (folder / "b1" / "frame.png").is_file(), sorted(p.name for p in afc.cwd.iterdir())
    shown = json.loads(done.stdout)["storage"]
    assert url2pathname(shown[len("file://") :]) == str(folder), shown

    [listed] = afc.json("outputs")["outputs"]
    assert listed["path"] == str(folder / "b1" / "frame.png"), listed
    url = listed["url"]
    assert " " not in url and "#" not in url, url
    assert url2pathname(url[len("file://") :]) == listed["path"], url
    story = afc("show", "frame")
    assert f"output        {url}" in story.stdout, story.stdout

    # what afc printed is the batch's storage: given back, the job is found stored, not paid
    again = afc("submit", "manifest.yaml", "--storage", shown, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["admitted"]["replayed"] == 1, again.stdout
    # the same folder written as it is (a space, a '#') is the same storage too
    raw = afc("submit", "manifest.yaml", "--storage", f"file://{folder}".replace("%", "%25"))
    assert raw.returncode == 0, raw.stderr
    # and a folder literally named with '%20' is another folder, refused for this batch
    other = afc("submit", "manifest.yaml", "--storage", f"file://{afc.cwd}/my%2520renders")
    assert other.returncode == 2, other.stderr
    assert "my%2520renders" in other.stderr and not Path(afc.cwd / "my%20renders").exists()


def test_a_relative_file_url_with_escapes_in_a_manifest_is_its_folder_s(afc):
    """The manifest's 'storage:' is decoded as --storage is, relative to the manifest."""
    afc.write_manifest(
        manifest([{"key": "frame", "prompt": "p"}], storage="file://./r%C3%A9sultats%20v2")
    )
    done = afc("submit", "manifest.yaml")
    assert done.returncode == 0, done.stderr
    assert (afc.cwd / "résultats v2" / "b1" / "frame.png").is_file()
    # a letter of another script is kept readable (an IRI); the space is escaped
    assert "storage file://" in done.stderr and "/résultats%20v2" in done.stderr, done.stderr


def test_a_file_url_whose_escapes_are_not_utf8_is_refused_as_a_usage_error(afc):
    afc.write_manifest(manifest([{"key": "frame", "prompt": "p"}]))
    done = afc("submit", "manifest.yaml", "--storage", f"file://{afc.cwd}/bad%FF")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "UTF-8" in done.stderr, done.stderr
    nul = afc("submit", "manifest.yaml", "--storage", f"file://{afc.cwd}/bad%00")
    assert nul.returncode == 2, nul.stderr
    assert "Traceback" not in nul.stderr and "NUL" in nul.stderr, nul.stderr


def test_a_ledger_url_s_masked_password_keeps_the_colon_that_follows_it(afc):
    """The scrubber masked a '?password=' value up to the next blank, and a message is
    scrubbed where it is made and again where it leaves: the second pass took the ':' after
    the masked URL with it ('...db?password=<redacted> connection failed'). The mask is kept
    as the mask alone; the password never shows, in any of its forms."""
    for url in (
        "postgresql://u:pw-one-secret@127.0.0.1:1/db?password=two-secret",
        "postgresql:///db?host=127.0.0.1&port=1&password=two-secret",
        "postgresql://127.0.0.1:1/db?sslmode=disable&password=two%3Asecret:",
    ):
        for args in ((), ("--json",)):
            done = afc("status", "--ledger", url, *args)
            assert done.returncode != 0, done.stdout
            said = done.stderr + done.stdout
            assert "secret" not in said, said
            assert "password=<redacted>: " in said, said


NUMBERS = """\
version: 1
batch: 2024
defaults:
  chain: [{provider: local, model: m1}]
jobs:
  - key: 001
    prompt: p
  - key: 12:30
    prompt: p
  - key: b
    prompt: p
    inputs: [{job: 001}]
"""


def test_a_yaml_number_as_batch_or_key_is_told_to_be_quoted_as_money_is(afc):
    """'key: 001' is the number 1 to YAML, '12:30' is 750; afc said only 'Input should be a
    valid string', where a money field given a number is told to write it in quotes. The same
    hint now names what YAML read and says to quote it, for the batch and a job's key."""
    (afc.cwd / "manifest.yaml").write_text(NUMBERS)
    done = afc("plan", "manifest.yaml")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    for where, number in (
        ("field 'batch'", 2024),
        ("job 0 (key 1): field 'key'", 1),
        ("job 1 (key 750): field 'key'", 750),
        ("job 2 (key 'b'): field 'inputs[0].job'", 1),
    ):
        [line] = [line for line in lines if f"- {where}:" in line]
        assert f"YAML read the number {number} here" in line, line
        assert 'write it in quotes to keep it as written ("001"' in line, line


def test_an_empty_jobs_list_is_said_to_be_empty_not_missing(afc):
    """'jobs: []' was refused as 'required field is missing', with the field right there."""
    for text, said in (
        ("jobs: []\n", "field 'jobs': the list is empty: a manifest names at least one job"),
        ("jobs:\n", "field 'jobs': it is empty (null): a manifest names at least one job"),
        ("", "field 'jobs': required field is missing"),
    ):
        (afc.cwd / "manifest.yaml").write_text("version: 1\nbatch: b1\n" + text)
        done = afc("plan", "manifest.yaml")
        assert done.returncode == 2, done.stderr
        assert said in done.stderr, done.stderr


def test_a_spending_cap_afc_cannot_hold_as_written_is_refused(afc):
    """afc counts money in whole micro-USD. '--max-spend 1e-20' was taken as a cap of 0 (the
    plan said budget 0.000000, the submit stopped by the budget, exit 4), '1.0000001' as
    1.000000, and '-0' as 0: each a cap other than the one written. They are refused as any
    bad amount is (exit 2, nothing written), on the command line and as a manifest's budget;
    six decimals, trailing zeros and exponents that name whole micro-USD are kept."""
    data = manifest([{"key": "a", "prompt": "p"}])
    afc.write_manifest(data)
    for cap in ("1e-20", "0.0000001", "1.0000001", "1e-999999999", "1." + "0" * 30 + "1"):
        for command in ("plan", "submit"):
            done = afc(command, "manifest.yaml", "--max-spend", cap)
            assert done.returncode == 2, (cap, done.stderr)
            assert "whole number of micro-USD (at most 6 decimals" in done.stderr, done.stderr
            assert repr(cap) in done.stderr, done.stderr
    for cap in ("-0", "-0.0"):
        done = afc("submit", "manifest.yaml", "--max-spend", cap)
        assert done.returncode == 2 and "non-negative" in done.stderr, (cap, done.stderr)
    assert not (afc.cwd / "afc.db").exists()
    for cap, budget in (("0.0000010", "0.000001"), ("1e-6", "0.000001"), ("2.5", "2.500000")):
        assert afc.json("plan", "manifest.yaml", "--max-spend", cap)["budget"] == budget
    afc.write_manifest({**data, "budget": "0.00000001"})
    done = afc("plan", "manifest.yaml")
    assert done.returncode == 2, done.stderr
    assert "field 'budget'" in done.stderr and "whole number of micro-USD" in done.stderr
    worker = afc("worker", "--until-idle", "--max-spend", "1e-20")
    assert worker.returncode == 2 and "micro-USD" in worker.stderr, worker.stderr


def test_bidi_overrides_and_invisible_characters_in_a_reviewer_s_words_are_shown_escaped(afc):
    """afc writes the control characters a terminal acts on as '\\xNN', but a reviewer's
    rejection reason or name with a right-to-left override (U+202E) or a zero-width space
    was shown raw: 'too dark \\u202egnol\\u202c ok' read 'too dark long ok' in 'afc status',
    'afc show' (its error, decision and event lines) on a pipe and on a terminal. They are
    now written as '\\uNNNN' there too; a zero-width joiner (an emoji's) and another
    script's letters are kept."""
    from terminal import on_pty

    afc.write_manifest(manifest([{"key": "frame", "prompt": "p", "review": True}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    reason = "too dark \u202egnol\u202c ok \U0001f469\u200d\U0001f52c 暗い"
    by = "Jo\u200bse\u2066"
    rejected = afc("review", "reject", "frame", "--reason", reason, "--by", by)
    assert rejected.returncode == 0, rejected.stderr
    shown_reason = "too dark \\u202egnol\\u202c ok \U0001f469\u200d\U0001f52c 暗い"
    env = {"PYTHONIOENCODING": "utf-8"}
    story = afc("show", "frame", env=env).stdout
    status = afc("status", env=env).stdout
    screen = on_pty(afc.command("status"), cwd=afc.cwd, env={**afc.env, **env}, columns=200)
    for said in (story, status, screen.output):
        assert "\u202e" not in said and "\u200b" not in said and "\u2066" not in said, said
        assert shown_reason in said, said
        assert "Jo\\u200bse\\u2066" in said, said
    assert len([line for line in story.splitlines() if shown_reason in line]) == 3, story


def test_the_costs_table_sets_its_total_apart_from_a_batch_named_total(afc):
    """'afc costs report --by batch' on a terminal: a batch named 'total' (a valid name) and
    the total row were two alike rows, 'total 0.050000' and 'total 0.100000', where --csv
    (its 'row' column) and --json (rows, total) tell them apart. The table's total is now
    its footer, under a rule; the batch's row is one of the rows above it."""
    from terminal import on_pty

    for batch in ("total", "b1"):
        afc.write_manifest(manifest([{"key": "a", "prompt": "p"}], batch=batch), f"{batch}.yaml")
        assert afc("submit", f"{batch}.yaml").returncode == 0
    for no_color in (False, True):
        shown = on_pty(
            afc.command("costs", "report", "--by", "batch"),
            cwd=afc.cwd,
            env=afc.env,
            columns=160,
            no_color=no_color,
        )
        assert shown.returncode == 0, shown.output
        lines = shown.lines
        rule = [i for i, line in enumerate(lines) if line.strip() and set(line.strip()) == {"─"}]
        assert len(rule) == 2, lines  # under the header, and over the total
        above, below = lines[rule[0] + 1 : rule[1]], lines[rule[1] + 1 :]
        assert [line.split()[:2] for line in above] == [["b1", "0.050000"], ["total", "0.050000"]]
        assert below[0].split()[:2] == ["total", "0.100000"], lines
    # a pipe keeps its rows as they were (the total last, as scripts read it)
    piped = afc("costs", "report", "--by", "batch").stdout.splitlines()
    assert [line.split("\t")[:2] for line in piped[1:]] == [
        ["b1", "0.050000"],
        ["total", "0.050000"],
        ["total", "0.100000"],
    ]


def test_a_plan_where_its_storage_cannot_be_read_says_so_and_plans(afc):
    """README: a plan is often made where the submit is not (CI checking manifests without
    secrets); what this environment lacks is said ('a submit in this environment would be
    refused (exit 2)', --json 'environment') and the plan exits 0. A storage the plan could
    not read stopped it instead, exit 1, nothing planned: an S3 manifest planned where no
    AWS credentials are ('cannot read s3://...: no AWS credentials found'), or a file
    storage where an output key's folder is a file. It is now said as the environment's
    problems are; the jobs are counted as to render (the estimate then the most a run
    could cost), and the submit still refuses, exit 2."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}, {"key": "b", "prompt": "p"}]))
    (afc.cwd / "here").mkdir()
    (afc.cwd / "here" / "b1").write_text("a file where a folder should be")
    for name in [name for name in afc.env if name.startswith("AWS_")]:
        del afc.env[name]  # where the plan is made: no AWS credentials at all
    bare = {
        "AWS_CONFIG_FILE": str(afc.cwd / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(afc.cwd / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    for storage, said in (
        (f"file://{afc.cwd}/here", "Not a directory"),
        ("s3://bucket/renders", "no AWS credentials"),
    ):
        planned = afc("plan", "manifest.yaml", "--storage", storage, "--json", env=bare)
        assert planned.returncode == 0, planned.stderr
        result = json.loads(planned.stdout)
        [problem] = result["environment"]
        assert said in problem and "counted as to render" in problem, problem
        assert result["to_render"] == 2 and result["estimated_spend"] == "0.100000", result
        assert [job["action"] for job in result["jobs"]] == ["render", "render"], result
        assert "a submit in this environment would be refused (exit 2)" in planned.stderr
        submitted = afc("submit", "manifest.yaml", "--storage", storage, env=bare)
        assert submitted.returncode == 2, submitted.stderr
    assert not (afc.cwd / "afc.db").exists()


def test_a_line_break_in_a_reviewer_s_reason_cannot_forge_a_line_of_afc_show(afc):
    """'afc show' prints one field a line ('error', 'decision'), and wrote a reason's line
    break as it was: a rejection reason 'too dark\\ndecision      approved by boss ...' showed
    a second decision line, an approval nobody made, under the rejection. A line break in a
    value is now written as '\\n' on its line."""
    afc.write_manifest(manifest([{"key": "frame", "prompt": "p", "review": True}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    forged = "decision      approved by boss at 2026-12-01T00:00:00Z"
    rejected = afc("review", "reject", "frame", "--reason", f"too dark\n{forged}", "--by", "ann")
    assert rejected.returncode == 0, rejected.stderr
    lines = afc("show", "frame").stdout.splitlines()
    assert not any(line.startswith("decision      approved") for line in lines), lines
    [decision] = [line for line in lines if line.startswith("decision      ")]
    assert decision.endswith(f": too dark\\n{forged}"), decision
    [error] = [line for line in lines if line.startswith("error         ")]
    assert error.endswith(f"too dark\\n{forged}"), error


def test_an_unknown_provider_in_the_defaults_chain_is_named_once_where_it_is_written(afc):
    """README ("Exit codes"): a manifest error names the job and the field. An unknown provider in
    'defaults.chain' was said for every job without a chain of its own, each named with a
    field it does not have ('job 0 (key 'a'): field 'chain[0].provider'', then job 1, 2...,
    the 25 problems shown all this one), and a job's own params were called 'not a
    parameter of nope (known: )'. It is said once, at 'defaults.chain[0].provider', inline
    jobs and a job list alike; a job's own chain is still named as the job's."""
    data = manifest(
        [{"key": f"shot-{i:02d}", "prompt": "p"} for i in range(30)]
        + [
            {"key": "own", "prompt": "p", "chain": [{"provider": "nope", "model": "m"}]},
            {"key": "sized", "prompt": "p", "params": {"size": "1024x1024"}},
        ],
        jobs_from="list.csv",
    )
    data["defaults"]["chain"] = [{"provider": "nope", "model": "m1"}]
    (afc.cwd / "list.csv").write_text("key,prompt\nfrom-list,p\n")
    afc.write_manifest(data)
    done = afc("plan", "manifest.yaml")
    assert done.returncode == 2, done.stderr
    problems = [line for line in done.stderr.splitlines() if line.startswith("  - ")]
    assert problems == [
        "  - field 'defaults.chain[0].provider': unknown provider 'nope' (did you mean 'openai'?)",
        "  - job 30 (key 'own'): field 'chain[0].provider': unknown provider 'nope' (did you "
        "mean 'openai'?)",
    ], problems


def test_a_mistyped_parameter_in_defaults_params_is_named_once_where_it_is_written(afc):
    """The same for 'defaults.params': 'sise' was said for every job, as the job's
    'params.sise'; a job with params of its own is still named with its own."""
    data = manifest([{"key": f"shot-{i}", "prompt": "p"} for i in range(5)])
    data["defaults"]["params"] = {"sise": "8x8"}
    afc.write_manifest(data)
    done = afc("plan", "manifest.yaml")
    assert done.returncode == 2, done.stderr
    problems = [line for line in done.stderr.splitlines() if line.startswith("  - ")]
    assert problems == [
        "  - field 'defaults.params.sise': not a parameter of local (did you mean 'size'?)"
    ], problems


def test_a_manifest_s_storage_that_is_no_usable_url_names_the_manifest_and_its_field(afc):
    """README ("Exit codes"): a manifest error names the file and the field. A manifest's 'storage:' that is
    no usable URL was said as 'afc: storage 'ftp://x': the ftp:// scheme is not supported',
    the words of --storage: nothing said it came from the manifest (rather than --storage or
    AFC_STORAGE, which a cron job may set). It is an invalid manifest now, exit 2, naming the
    file and 'field 'storage''; nothing is written, and --storage still wins over it."""
    for storage, said in (
        ("ftp://x", "'ftp://x': the ftp:// scheme is not supported"),
        ("renders", "'renders' is not a URL"),
        ("file://", "'file://' names no directory"),
        ("s3://key:secret-value@bucket", "an s3:// URL carries no credentials"),
    ):
        afc.write_manifest(manifest([{"key": "a", "prompt": "p"}], storage=storage))
        for command in ("plan", "submit"):
            done = afc(command, "manifest.yaml")
            assert done.returncode == 2, done.stderr
            assert done.stderr.startswith("afc: invalid manifest manifest.yaml:\n"), done.stderr
            assert f"  - field 'storage': {said}" in done.stderr, done.stderr
            assert "secret-value" not in done.stderr
    assert not (afc.cwd / "afc.db").exists()
    assert afc("submit", "manifest.yaml", "--storage", "file://./elsewhere").returncode == 0


def test_a_job_named_as_afc_prints_it_batch_slash_key_is_told_how_to_name_it(afc):
    """afc prints a job as BATCH/KEY ('afc: b1/frame: ended failed', show's first line), and
    a person copies that into 'afc show b1/frame', 'afc retry', 'afc cancel' or 'afc review':
    each said only 'no job with key 'b1/frame'' (a key has no '/'). They now say how to name
    it: 'frame --batch b1'. Nothing is done (exit 2), as before."""
    afc.write_manifest(manifest([{"key": "frame", "prompt": "p", "params": {"fail": ["invalid"]}}]))
    done = afc("submit", "manifest.yaml")
    assert done.returncode == 1 and "afc: b1/frame: ended failed" in done.stderr, done.stderr
    hint = "(afc prints a job as BATCH/KEY; name it as KEY --batch BATCH: frame --batch b1)"
    for args in (
        ("show", "b1/frame"),
        ("retry", "b1/frame", "--yes"),
        ("cancel", "b1/frame", "--yes"),
        ("review", "approve", "b1/frame"),
    ):
        refused = afc(*args)
        assert refused.returncode == 2, refused.stderr
        assert "'b1/frame'" in refused.stderr and hint in refused.stderr, refused.stderr
    assert afc("show", "frame", "--batch", "b1").returncode == 0
    assert afc.json("status")["counts"] == {"failed": 1}
