"""Hostile and mistaken manifests (issue 12): each is refused with one clear message naming the
file, job and field, exit 2, and nothing written — never a traceback."""

from __future__ import annotations

import pytest
import yaml
from conftest import jobs, manifest

from afc_cli.errors import ManifestError
from afc_cli.manifest import MAX_ALIAS_NODES, load_manifest

CHAIN = "defaults:\n  chain: [{provider: local, model: m1}]\n"


def refused(tmp_path, text: str, name: str = "m.yaml") -> list[str]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert caught.value.path == str(path)
    assert str(path) in caught.value.message
    return caught.value.problems


def one_job(params: str = "{}", extra: str = "", top: str = "") -> str:
    return (
        f"version: 1\nbatch: b\n{top}{CHAIN}"
        f"jobs:\n  - {{key: a, prompt: p, params: {params}{extra}}}\n"
    )


def test_a_complex_yaml_key_is_refused_with_its_line(tmp_path):
    text = (
        "version: 1\nbatch: b\n"
        + CHAIN
        + ("jobs:\n  - key: a\n    prompt: p\n    params:\n      ? [a, b]\n      : 1\n")
    )
    [problem] = refused(tmp_path, text)
    assert problem.startswith("line 9:") and "plain value" in problem


def test_an_alias_bomb_is_refused_before_it_is_expanded(tmp_path):
    levels = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        levels.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    params = "\n".join("      " + line for line in levels)
    text = (
        "version: 1\nbatch: b\n"
        + CHAIN
        + f"jobs:\n  - key: a\n    prompt: p\n    params:\n{params}\n"
    )
    assert len(text) < 1000
    [problem] = refused(tmp_path, text)
    assert f"more than {MAX_ALIAS_NODES} values" in problem


def test_a_few_aliases_are_still_fine(tmp_path):
    text = (
        "version: 1\nbatch: b\ndefaults:\n  chain: &c [{provider: local, model: m1}]\n"
        "jobs:\n  - {key: a, prompt: p, chain: *c}\n  - {key: b, prompt: p, chain: *c}\n"
    )
    path = tmp_path / "m.yaml"
    path.write_text(text)
    assert [j.key for j in load_manifest(path).jobs] == ["a", "b"]


def test_recursive_aliases_and_deep_nesting_are_refused(tmp_path):
    [problem] = refused(tmp_path, "version: 1\nbatch: b\njobs: &x\n  - {key: a, prompt: *x}\n")
    assert "contains it" in problem
    deep = "version: 1\nbatch: b\njobs: " + "[" * 200 + "]" * 200 + "\n"
    [problem] = refused(tmp_path, deep)
    assert "deep" in problem


def test_yaml_errors_name_the_line_not_a_unicode_string(tmp_path):
    [problem] = refused(tmp_path, "version: 1\nbatch: b\njobs: [\n")
    assert "<unicode string>" not in problem
    assert problem.startswith("line 4, column 1: not valid YAML")


def test_unicode_digits_in_a_size_are_a_manifest_error(tmp_path):
    problems = refused(tmp_path, one_job('{size: "²x²"}'))
    assert problems == [
        "job 0 (key 'a'): field 'params.size': must be WxH with sides 1..1024, got '²x²'"
    ]


@pytest.mark.parametrize("amount", ["1e22", "1E+30", "1000000", "12345678901234567890123"])
def test_rates_and_budgets_beyond_the_ledger_range_are_refused(tmp_path, amount):
    rate = f'rates: [{{provider: local, model: m1, per_image: "{amount}"}}]\n'
    [problem] = refused(tmp_path, one_job(top=rate))
    assert "rates[0].per_image" in problem and "below 1000000" in problem
    [problem] = refused(tmp_path, one_job(top=f'budget: "{amount}"\n'))
    assert "'budget'" in problem and "below 1000000" in problem


@pytest.mark.parametrize("amount", ["0_1", "\u0660.\u0661", "\uff10.5", "1_000"])
def test_amounts_in_other_digits_or_with_underscores_are_refused(afc, amount):
    """Decimal reads "0_1" as 1 and Arabic-Indic digits as digits: an outside audit was
    charged 1.000000 a picture for a card that said "0_1"."""
    rate = f'rates: [{{provider: local, model: m1, per_image: "{amount}"}}]\n'
    [problem] = refused(afc.cwd, one_job(top=rate))
    assert "rates[0].per_image" in problem and "must be a decimal string" in problem
    [problem] = refused(afc.cwd, one_job(top=f'budget: "{amount}"\n'))
    assert "'budget'" in problem and "must be a decimal string" in problem
    afc.write_manifest(manifest(jobs(1)))
    result = afc("submit", "manifest.yaml", "--max-spend", amount)
    assert result.returncode == 2 and "must be a decimal string" in result.stderr
    assert not (afc.cwd / "afc.db").exists()


def test_a_limits_key_does_not_shadow_the_manifest_path(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(one_job(params="{sise: 1}", top="limits: {local: {concurrency: 2}}\n"))
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert caught.value.message.startswith(f"invalid manifest {path}:")


def test_unknown_fields_and_params_say_what_was_meant(tmp_path):
    text = (
        "version: 1\nbatch: b\nlimits: {local: {concurency: 2}}\n"
        "defaults:\n  chain: [{provider: local, model: m1, attemps: 2}]\n"
        "jobs:\n  - {key: a, promt: p}\n"
    )
    problems = refused(tmp_path, text)
    assert "field 'defaults.chain[0].attemps': unknown field (did you mean 'attempts'?)" in problems
    assert (
        "field 'limits.local.concurency': unknown field (did you mean 'concurrency'?)" in problems
    )
    assert "job 0 (key 'a'): field 'promt': unknown field (did you mean 'prompt'?)" in problems
    [problem] = refused(tmp_path, one_job("{sise: 64x64}"))
    assert problem == (
        "job 0 (key 'a'): field 'params.sise': not a parameter of local (did you mean 'size'?)"
    )


def test_params_passed_through_to_the_model_are_not_checked(tmp_path):
    data = manifest([{"key": "a", "prompt": "p", "params": {"num_inference_steps": 28}}])
    data["defaults"]["chain"] = [{"provider": "replicate", "model": "o/m"}]
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_manifest(path).jobs[0].params == {"num_inference_steps": 28}


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('batch: "a/b"\n', "field 'batch'"),
        ('batch: "shots-🎬"\n', "field 'batch'"),
    ],
)
def test_batch_names_use_the_documented_alphabet(tmp_path, line, field):
    text = one_job().replace("batch: b\n", line)
    [problem] = refused(tmp_path, text)
    assert problem.startswith(field) and "ASCII letters (A-Z, a-z), digits" in problem


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (one_job().replace("version: 1", "version: true"), "field 'version'"),
        (one_job().replace("model: m1}", 'model: m1, attempts: "2"}'), "attempts"),
        (one_job("{retry_after_s: -5}"), "field 'params.retry_after_s'"),
        (one_job("{latency_s: .inf}"), "field 'params.latency_s'"),
        (one_job(extra=', output: "x/a\\u0007.png"'), "control"),
        (one_job(extra=', output: "x/a\\u200b.png"'), "control"),
        (one_job(extra=', output: "' + "x" * 300 + '.png"'), "255 bytes"),
        (one_job().replace("prompt: p", "prompt: " + "p" * 32_001), "field 'prompt'"),
        (one_job().replace("model: m1}", "model: m1, backoff: {base: .nan}}"), "base"),
    ],
)
def test_validation_gaps_are_closed(tmp_path, text, expected):
    problems = refused(tmp_path, text)
    assert any(expected in p for p in problems), problems


def test_one_output_key_inside_another_is_refused(tmp_path):
    data = manifest(
        [
            {"key": "a", "prompt": "p", "output": "x/a.png"},
            {"key": "b", "prompt": "p", "output": "x/a.png/b.png"},
            {"key": "c", "prompt": "p", "output": "x/c.png"},
        ]
    )
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert caught.value.problems == [
        "job 1 (key 'b'): field 'output': output key 'x/a.png/b.png' lies inside job 0's "
        "output key 'x/a.png'; one output key cannot be a folder of another"
    ]


def test_a_huge_or_binary_manifest_is_refused_unread(tmp_path, monkeypatch):
    import afc_cli.manifest as manifest_mod

    monkeypatch.setattr(manifest_mod, "MAX_MANIFEST_BYTES", 1024)
    [problem] = refused(tmp_path, one_job() + "#" * 2000)
    assert "larger than" in problem
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"version: 1\n\xff\xfe")
    with pytest.raises(ManifestError, match="not UTF-8"):
        load_manifest(path)
    with pytest.raises(ManifestError, match="cannot read"):
        load_manifest(tmp_path)  # a folder


# --- through the real command: exit 2, one message, no ledger ------------------------------


def test_hostile_manifests_through_the_command_write_nothing(afc):
    bomb = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for i, name in enumerate("bcdefghij"):
        bomb.append(f"{name}: &{name} [" + ",".join([f"*{'abcdefghij'[i]}"] * 9) + "]")
    cases = {
        "bomb.yaml": "version: 1\nbatch: b\n"
        + CHAIN
        + "jobs:\n  - key: a\n    prompt: p\n    params:\n"
        + "\n".join("      " + line for line in bomb)
        + "\n",
        "complex.yaml": one_job("{? [a, b] : 1}"),
        "digits.yaml": one_job('{size: "²x²"}'),
        "rate.yaml": one_job(top='rates: [{provider: local, model: m1, per_image: "1e22"}]\n'),
        "nested.yaml": "version: 1\nbatch: b\n"
        + CHAIN
        + "jobs:\n  - {key: a, prompt: p, output: x/a.png}\n"
        + "  - {key: b, prompt: p, output: x/a.png/b.png}\n",
    }
    for name, text in cases.items():
        (afc.cwd / name).write_text(text, encoding="utf-8")
        for command in (["submit", name], ["plan", name]):
            result = afc(*command, timeout=30)
            assert result.returncode == 2, (name, result.stderr)
            assert "Traceback" not in result.stderr
            assert result.stderr.startswith(f"afc: invalid manifest {name}:"), result.stderr
            assert not (afc.cwd / "afc.db").exists()
            assert not (afc.cwd / "afc-outputs").exists()
    afc.write_manifest(manifest(jobs(1)))
    result = afc("submit", "manifest.yaml", "--max-spend", "1e22")
    assert result.returncode == 2 and "below 1000000" in result.stderr, result.stderr
    assert not (afc.cwd / "afc.db").exists()


def test_resume_with_an_oversized_max_spend_is_a_usage_error(afc):
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    result = afc("resume", "--max-spend", "1e22")
    assert result.returncode == 2
    assert result.stderr.strip().endswith("got '1e22'"), result.stderr


def test_a_huge_rate_admitted_by_an_older_afc_stops_resume_cleanly(afc):
    import json
    import sqlite3

    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    conn = sqlite3.connect(afc.cwd / "afc.db")
    cards = [{"provider": "local", "model": "m1", "prices": {"per_image": "1e22"}}]
    conn.execute("UPDATE batches SET rates_json = ?", (json.dumps(cards),))
    conn.commit()
    conn.close()
    result = afc("resume")
    assert result.returncode == 2, result.stderr
    assert "batch 'b1' has the rate card local/m1 per_image that must be below" in result.stderr
    assert afc.rows("SELECT status FROM jobs") == [("queued",)]


@pytest.mark.parametrize("version", ["1.0", "true", '"1"'])
def test_a_version_that_only_equals_1_is_refused(tmp_path, version):
    text = one_job().replace("version: 1\n", f"version: {version}\n")
    [problem] = refused(tmp_path, text)
    assert problem.startswith("field 'version': "), problem
