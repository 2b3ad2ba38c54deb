"""Outside audit 63b: a folder storage's metadata file (``NAME.afc.json``) whose ``size`` or
``attempt`` is a string of thousands of digits (edited by hand, or by a script) stopped the
whole run at that job's probe, "afc: unexpected error: ValueError: Exceeds the limit (4300
digits) for integer string conversion ... (a bug in afc)", exit 1, the other jobs of the
batch not rendered; and every later run the same way. The same value written as a JSON
number, or a list where a name goes, is that job's unreadable metadata: it fails alone
(OUTPUT_KEY_CONFLICT), the others run. A string of digits too long to be a size is now
read as no size, as any other value of the wrong type is."""

from __future__ import annotations

import json

from conftest import manifest


def test_a_sidecar_size_thousands_of_digits_long_fails_its_job_alone(afc):
    afc.write_manifest(manifest([{"key": k, "prompt": f"p {k}"} for k in ("a", "b", "c")]))
    first = afc("submit", "manifest.yaml", "--no-run")
    assert first.returncode == 0, first.stderr
    # a's output stored by a run of another ledger, its sidecar then edited by a script
    only_a = manifest([{"key": "a", "prompt": "p a"}])
    other = afc.cwd / "other"
    other.mkdir()
    (other / "a.yaml").write_text(json.dumps(only_a))
    stored = afc(
        "submit", "other/a.yaml", "--ledger", "other/afc.db", "--storage", "file://./afc-outputs"
    )
    assert stored.returncode == 0, stored.stderr
    sidecar = afc.outputs() / "b1" / "a.png.afc.json"
    meta = json.loads(sidecar.read_text())
    for field in ("size", "attempt"):
        meta[field] = "9" * 5000
    sidecar.write_text(json.dumps(meta))

    result = afc("resume")
    said = result.stderr
    assert "unexpected error" not in said and "int_max_str_digits" not in said, said
    assert result.returncode == 1, said  # a failed job, not a stopped run
    status = {row["key"]: row["status"] for row in afc.json("status", "--all")["jobs"]}
    assert status == {"a": "failed", "b": "succeeded", "c": "succeeded"}, status
    assert (afc.outputs() / "b1" / "b.png").exists() and (afc.outputs() / "b1" / "c.png").exists()
