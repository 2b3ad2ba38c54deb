"""Outside audit 63b: a YAML integer thousands of digits long (a seed pasted from a hash, a
key or batch written as a long hex or octal number) is a manifest error naming its line,
exit 2, nothing written. It stopped afc with "unexpected error: ValueError: Exceeds the limit
(4300 digits) for integer string conversion ... (a bug in afc)", exit 1: Python reads, or
writes as text, no integer of more than 4,300 decimal digits, and PyYAML read a plain
scalar of more digits (and afc wrote a long hex one back in its message) so."""

from __future__ import annotations

from conftest import manifest


def _submit(afc, replace: dict[str, str], name: str = "manifest.yaml"):
    data = manifest(
        [
            {"key": "KEYNUMBER", "prompt": "p"},
            {"key": "b", "prompt": "p", "params": {"seed": "SEEDNUMBER"}},
        ]
    )
    text = afc.write_manifest(data, name).read_text()
    for old, new in replace.items():
        text = text.replace(old, new)
    (afc.cwd / name).write_text(text)
    return afc("submit", name, "--no-run")


def test_an_integer_of_thousands_of_digits_is_a_manifest_error_at_its_line(afc):
    for replace in (
        {"SEEDNUMBER": "9" * 5000},  # decimal: PyYAML's int() refused it
        {"SEEDNUMBER": "0" + "7" * 6000},  # YAML 1.1 octal: afc's own check read it as decimal
        {"SEEDNUMBER": ":".join(["59"] * 3000)},  # base 60, written back in afc's message
        {"KEYNUMBER": "0x" + "f" * 5000},  # hex: the key's message wrote it back as decimal
        {"b1": "0x" + "f" * 5000},  # the batch's
    ):
        result = _submit(afc, replace)
        said = result.stderr
        assert result.returncode == 2, said
        assert "unexpected error" not in said and "Traceback" not in said, said
        assert "int_max_str_digits" not in said, said
        assert "invalid manifest manifest.yaml" in said, said
        assert "characters long; write it in quotes to keep it as text" in said, said
        assert not (afc.cwd / "afc.db").exists()
        assert not (afc.cwd / "afc-outputs").exists()


def test_the_line_and_column_of_the_long_number_are_named(afc):
    result = _submit(afc, {"SEEDNUMBER": "9" * 5000})
    assert result.returncode == 2, result.stderr
    line = next(
        n
        for n, text in enumerate((afc.cwd / "manifest.yaml").read_text().splitlines(), 1)
        if "9999" in text
    )
    assert f"line {line}, column " in result.stderr, result.stderr


def test_a_long_number_in_the_rate_file_is_named_as_that_file(afc):
    (afc.cwd / "rates.yaml").write_text(
        "rates:\n  - {provider: local, model: m1, per_image: " + "1" * 5000 + "}\n"
    )
    data = manifest([{"key": "a", "prompt": "p"}])
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "--no-run", env={"AFC_CONFIG": "rates.yaml"})
    said = result.stderr
    assert result.returncode == 2, said
    assert "unexpected error" not in said, said
    assert "AFC_CONFIG rate file" in said and "characters long" in said, said
    assert not (afc.cwd / "afc.db").exists()


def test_a_number_of_ordinary_length_is_read_as_before(afc):
    # a seed of 16 digits is a number (refused past JSON's safe integers, as before)
    result = _submit(afc, {"SEEDNUMBER": "1234567890123456"})
    assert result.returncode == 0, result.stderr
    result = _submit(afc, {"SEEDNUMBER": "9" * 40}, name="other.yaml")
    assert result.returncode == 2, result.stderr
    assert "exceeds safe integer domain" in result.stderr, result.stderr


def test_a_local_size_with_a_side_thousands_of_digits_long_is_a_param_problem(afc):
    """The local provider's ``size`` ('WxH') was read with int() before its range was checked:
    a side of 5,000 digits stopped 'afc plan' as 'unexpected error', exit 1."""
    for size in ("9" * 5000 + "x64", "64x" + "1" * 5000):
        result = _submit(afc, {"seed: SEEDNUMBER": f"size: '{size}'"})
        said = result.stderr
        assert result.returncode == 2, said
        assert "unexpected error" not in said, said
        assert "field 'params.size': must be WxH with sides 1..1024" in said, said
        assert not (afc.cwd / "afc.db").exists()
    result = _submit(afc, {"seed: SEEDNUMBER": "size: '0064x00032'"})
    assert result.returncode == 0, result.stderr
