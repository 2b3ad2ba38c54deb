"""Outside audit 63b: a number written with an exponent where afc takes a number
(``window_s: 1e3``, ``backoff: {base: 5e-1}``, ``attempts: 1e1``, a webhook's
``timeout_s: 1.5e1``) was refused "Input should be a valid number" (or "integer"), naming
the field of a value the user wrote as a number, as JSON, Python and YAML 1.2 read it (the
same job in a JSON Lines list is read so): PyYAML reads YAML 1.1, where an exponent needs a
point before it and a sign (``1.0e+3``), and anything else is text. The problem now says
what YAML read and how to write the number."""

from __future__ import annotations

from conftest import manifest


def test_a_number_with_an_exponent_yaml_reads_as_text_is_named_with_the_fix(afc):
    data = manifest(
        [
            {
                "key": "a",
                "prompt": "p",
                "webhook": {"url": "https://x.example/h", "timeout_s": "TIMEOUT"},
            }
        ]
    )
    chain = data["defaults"]["chain"][0]
    chain.update({"window_s": "WINDOW", "attempts": "ATTEMPTS"})
    chain["backoff"] = {"base": "BASE", "cap": 5}
    text = afc.write_manifest(data).read_text()
    for old, new in {
        "WINDOW": "1e3",
        "ATTEMPTS": "1e1",
        "BASE": "5e-1",
        "TIMEOUT": "1.5e1",
    }.items():
        text = text.replace(old, new)
    (afc.cwd / "manifest.yaml").write_text(text)
    result = afc("submit", "manifest.yaml", "--no-run")
    said = result.stderr
    assert result.returncode == 2, said
    for field, kind, written, plain in (
        ("defaults.chain[0].window_s", "number", "1e3", "1000"),
        ("defaults.chain[0].attempts", "integer", "1e1", "10"),
        ("defaults.chain[0].backoff.base", "number", "5e-1", "0.5"),
    ):
        assert (
            f"field '{field}': Input should be a valid {kind}: YAML 1.1 reads {written} as text "
            f"(its exponent needs a point before it and a sign: 1.0e+3); write {plain}"
        ) in said, said
    assert (
        "job 0 (key 'a'): field 'webhook.timeout_s': Input should be a valid number: YAML 1.1 "
        "reads 1.5e1 as text" in said
    ), said
    assert "write 15" in said, said
    assert not (afc.cwd / "afc.db").exists()


def test_a_word_where_a_number_goes_is_refused_as_before(afc):
    data = manifest([{"key": "a", "prompt": "p"}])
    data["defaults"]["chain"][0]["window_s"] = "soon"
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "--no-run")
    assert result.returncode == 2, result.stderr
    assert "field 'defaults.chain[0].window_s': Input should be a valid number" in result.stderr
    assert "YAML 1.1 reads" not in result.stderr
