"""Outside audit 63b: a number thousands of digits long in a job list (``jobs_from``) is
refused at its line as it is in the manifest's YAML (tests/test_audit63b_long_numbers.py).
A JSON Lines line's was refused "not valid JSON: Exceeds the limit (4300 digits) for integer
string conversion ...; use sys.set_int_max_str_digits() to increase the limit", Python's
words telling the user to change Python, not the file; a CSV ``params.NAME`` cell's, which
README says is read as JSON when it is a JSON number, was read as text, admitted and sent to
the provider as a string of 5,000 characters (one of 4,000 digits was refused as a number)."""

from __future__ import annotations

import json

from conftest import manifest

LONG = "9" * 5000


def _submit(afc, name: str, text: str):
    (afc.cwd / name).write_text(text)
    data = manifest([])
    del data["jobs"]
    data["jobs_from"] = name
    afc.write_manifest(data)
    return afc("submit", "manifest.yaml", "--no-run")


def _refused(afc, result, where: str) -> None:
    said = result.stderr
    assert result.returncode == 2, said
    assert "int_max_str_digits" not in said and "unexpected error" not in said, said
    assert where in said, said
    assert "a number 5,000 characters long; write it in double quotes" in said, said
    assert not (afc.cwd / "afc.db").exists()


def test_a_long_number_in_a_json_lines_line_is_named_without_pythons_words(afc):
    lines = [json.dumps({"key": f"k{i}", "prompt": "p"}) for i in range(10)]
    lines[8] = '{"key": "k8", "prompt": "p", "params": {"seed": ' + LONG + "}}"
    _refused(afc, _submit(afc, "jobs.jsonl", "\n".join(lines) + "\n"), "jobs.jsonl line 9")


def test_a_long_number_in_a_csv_param_cell_is_refused_not_sent_as_text(afc):
    rows = ["key,prompt,params.seed", *(f"k{i},p,{i}" for i in range(10))]
    rows[9] = f"k8,p,{LONG}"
    result = _submit(afc, "jobs.csv", "\n".join(rows) + "\n")
    _refused(afc, result, "jobs.csv line 10 (key 'k8'): column 'params.seed'")


def test_a_long_number_in_a_csv_json_column_is_named(afc):
    text = 'key,prompt,params\na,p,"{""seed"": ' + LONG + '}"\n'
    _refused(afc, _submit(afc, "jobs.csv", text), "jobs.csv line 2 (key 'a'): column 'params'")


def test_numbers_of_ordinary_length_and_long_text_read_as_before(afc):
    rows = ["key,prompt,params.seed,params.note", "a,p,42,x", f'b,p,"""{LONG}""",y']
    result = _submit(afc, "jobs.csv", "\n".join(rows) + "\n")
    # 'note' is no param of the local provider: the list is read, its params checked
    assert result.returncode == 2, result.stderr
    assert "characters long" not in result.stderr, result.stderr
    assert "field 'params.note': not a parameter of local" in result.stderr, result.stderr
    rows = ["key,prompt,params.seed", "a,p,42", f'b,p,"""{LONG}"""']
    (afc.cwd / "afc.db").unlink(missing_ok=True)
    result = _submit(afc, "jobs.csv", "\n".join(rows) + "\n")
    assert result.returncode == 0, result.stderr
    seeds = {
        key: json.loads(text)["params"]["seed"]
        for key, text in afc.rows("SELECT key, request_json FROM jobs")
    }
    assert seeds == {"a": 42, "b": LONG}
