"""Output keys of two batches that a case-insensitive folder takes for one name, run by one
``afc resume`` (outside audit 56e). The ``afc`` child runs on a file system made
case-insensitive at the wire, as in tests/test_audit56b_one_name.py."""

from __future__ import annotations

from conftest import manifest
from test_audit56b_one_name import _site


def test_two_batches_whose_keys_differ_by_case_pay_for_one_render(afc):
    """Two films' batches whose output template leaves out {batch}, one with a 'Shot-1', the
    other a 'shot-1', stored in one folder that does not tell case apart (macOS, a Windows
    share), admitted with --no-run and run by one 'afc resume'. A run takes jobs of two
    batches with one output key one after the other (tests/test_audit19d_joblists.py); these
    two keys, one file here, were run side by side: both probes found nothing, both renders
    were paid, and the second store met the first's file (OUTPUT_KEY_CONFLICT), its render
    thrown away. Now they are taken one after the other as equal keys are: one render."""
    afc.outputs().mkdir()
    env = _site(afc)
    for batch, key in (("v1", "Shot-1"), ("v2", "shot-1")):
        data = manifest(
            [{"key": key, "prompt": f"the {batch} lighthouse", "params": {"latency_s": 0.3}}],
            batch=batch,
        )
        data["defaults"]["output"] = "{key}.{ext}"
        afc.write_manifest(data, name=f"{batch}.yaml")
        result = afc("submit", f"{batch}.yaml", "--no-run", "-q", env=env)
        assert result.returncode == 0, result.stderr
    result = afc("resume", env=env)
    assert "Traceback" not in result.stderr
    assert result.returncode == 1, result.stderr
    rows = afc.rows("SELECT j.batch, j.status, j.error_code, j.attempts FROM jobs j ORDER BY 2")
    assert sorted(status for _, status, _, _ in rows) == ["failed", "succeeded"], rows
    failed = next(row for row in rows if row[1] == "failed")
    assert failed[2] == "OUTPUT_KEY_CONFLICT" and failed[3] == 0, rows
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(1,)]


def test_a_key_ending_in_the_metadata_suffix_in_capitals_is_refused(afc):
    """An output key ending '.AFC.JSON' is, on a folder that does not tell case apart, the
    name of the metadata file ('NAME.afc.json') of the output beside it: the suffix was
    refused only as spelt in lower case, so both jobs were rendered (paid) and one store met
    the other's file (OUTPUT_KEY_CONFLICT), one render thrown away. Refused in any case now,
    before anything is admitted or rendered, as '.afc.json' is."""
    afc.outputs().mkdir()
    afc.write_manifest(
        manifest(
            [
                {"key": "one", "prompt": "p", "output": "b1/x.png"},
                {"key": "two", "prompt": "q", "output": "b1/x.png.AFC.JSON"},
            ]
        )
    )
    calls = afc.cwd / "calls.log"
    env = {**_site(afc), "AFC_LOCAL_CALL_LOG": str(calls)}
    result = afc("submit", "manifest.yaml", "--concurrency", "4", env=env)
    assert "Traceback" not in result.stderr
    assert not calls.exists() or calls.read_text() == "", "a render was paid for"
    assert result.returncode == 2, result.stderr
    assert "'b1/x.png.AFC.JSON'; names ending in .afc.json" in result.stderr, result.stderr
    assert not (afc.cwd / "afc.db").exists()
