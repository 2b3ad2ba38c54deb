"""Outside audit 44c: a problem of the defaults' ``needs`` or ``inputs`` (an unknown key, a
reference image missing) is said once, where it is written, as one of ``defaults.chain`` or
``defaults.params`` is (tests/test_audit21a_cli.py). Every job taking them was named with it,
at a field its line does not have: ``jobs.jsonl line 1 (key 'shot-0'): field
'inputs[0].path': no such file 'palette.png'``, then line 2, 3 ..., the 25 problems shown
of a 100,000-line list all this one (a line's own problem hidden behind them). A job's own
``needs`` and ``inputs`` are still named as the job's."""

from __future__ import annotations

import json

from conftest import manifest


def _problems(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("  - ")]


def test_a_missing_default_reference_image_is_named_once_where_it_is_written(afc):
    data = manifest(
        [
            {"key": "own", "prompt": "p", "inputs": [{"path": "gone.png"}]},
            {"key": "plain", "prompt": "p"},
        ],
        jobs_from="shots.jsonl",
    )
    data["defaults"]["inputs"] = [{"path": "palette.png"}]
    afc.write_manifest(data)
    lines = [{"key": f"shot-{i}", "prompt": f"p {i}"} for i in range(40)]
    lines.insert(30, {"key": "bad key", "prompt": "p"})  # a line's own problem
    (afc.cwd / "shots.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    for command in (("plan", "manifest.yaml"), ("submit", "manifest.yaml")):
        result = afc(*command)
        assert result.returncode == 2, result.stderr
        assert _problems(result) == [
            "  - job 0 (key 'own'): field 'inputs[0].path': no such file 'gone.png'",
            "  - field 'defaults.inputs[0].path': no such file 'palette.png'",
            "  - shots.jsonl line 31 (key 'bad key'): field 'key': must use ASCII letters "
            "(A-Z, a-z), digits and . _ - : only, not ' ' (it names files and objects)",
        ], result.stderr
    assert not (afc.cwd / "afc.db").exists()


def test_an_unknown_key_in_the_default_needs_and_inputs_is_named_once(afc):
    data = manifest(
        [
            {"key": "style", "prompt": "s"},
            *({"key": f"shot-{i}", "prompt": "p"} for i in range(30)),
            {"key": "own", "prompt": "p", "needs": ["nope"]},
        ]
    )
    data["defaults"]["needs"] = ["stlye"]
    data["defaults"]["inputs"] = [{"job": "other/style"}]
    afc.write_manifest(data)
    result = afc("plan", "manifest.yaml")
    assert result.returncode == 2, result.stderr
    assert _problems(result) == [
        "  - field 'defaults.needs[0]': unknown key 'stlye' (did you mean 'style'?); needs and "
        "inputs name jobs of this manifest",
        "  - field 'defaults.inputs[0].job': 'other/style' is a job of another batch "
        "('other'); a job can only wait for jobs of its own batch ('b1')",
        "  - job 31 (key 'own'): field 'needs[0]': unknown key 'nope'; needs and inputs name "
        "jobs of this manifest",
    ], result.stderr
