"""Outside audit 31c: a name or text YAML reads as a date or as true/false is refused saying
so and how to keep it as written, as a number already is. 'batch: 2026-12-04' (a nightly
batch named by its date) was refused "field 'batch': Input should be a valid string", and a
job keyed by its date was named '(key datetime.date(2026, 12, 4))', Python's words."""

from __future__ import annotations

from conftest import manifest


def test_a_date_or_a_yes_no_where_text_goes_is_named_with_the_fix(afc):
    data = manifest(
        [
            {"key": "KEYDATE", "prompt": "p"},
            {"key": "b", "prompt": "PROMPTNO"},
            {"key": "c", "prompt": "p", "needs": ["NEEDON"]},
        ]
    )
    data["batch"] = "BATCHDATE"
    text = afc.write_manifest(data).read_text()
    text = (
        text.replace("KEYDATE", "2026-12-04")
        .replace("PROMPTNO", "no")
        .replace("NEEDON", "on")
        .replace("BATCHDATE", "2026-12-04")
    )
    (afc.cwd / "manifest.yaml").write_text(text)
    result = afc("submit", "manifest.yaml", "--no-run")
    assert result.returncode == 2, result.stderr
    said = result.stderr
    assert "datetime" not in said and "Traceback" not in said, said
    assert (
        "field 'batch': Input should be a valid string: YAML read the date 2026-12-04 here; "
        'write it in quotes to keep it as text ("2026-12-04")'
    ) in said, said
    assert (
        "job 0 (key 2026-12-04): field 'key': Input should be a valid string: YAML read the date"
        in said
    ), said
    assert (
        "job 1 (key 'b'): field 'prompt': Input should be a valid string: YAML read false here "
        "(it reads yes, no, on, off, true and false so); write the text in quotes"
    ) in said, said
    assert (
        "job 2 (key 'c'): field 'needs[0]': Input should be a valid string: YAML read true" in said
    )
    assert not (afc.cwd / "afc.db").exists()
