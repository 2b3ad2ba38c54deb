"""A job key or batch name in the shape of a credential is refused at the manifest.

afc removes token shapes (``sk-…``, ``r8_…``, ``AIza…``, ``whsec_…``) from every text it
prints, whoever's they are (afc_cli/secrets.py). A legal key ``sk-shot-000123`` or batch
``sk-trailer-2026`` was admitted, rendered and stored, then shown as ``sk-<redacted>`` in
``afc status``, its ``--json``, ``afc outputs`` paths (files that do not exist) and the costs
CSV: a script could not map a job back to its key. It is refused before anything is written
(exit 2), naming the file, the job and the field.
"""

from __future__ import annotations

from conftest import manifest


def test_a_key_or_batch_shaped_like_a_credential_is_refused_before_anything_is_written(afc):
    path = afc.write_manifest(
        manifest(
            [
                {"key": "sk-shot-000123", "prompt": "a lighthouse"},
                {"key": "task-shot-1", "prompt": "a boat"},  # 'sk-' inside a word: a name
            ],
            batch="sk-trailer-2026",
        )
    )
    result = afc("submit", str(path))
    assert result.returncode == 2, result.stderr
    assert "field 'batch': has the shape of an API key or secret" in result.stderr
    assert "job 0 (key 'sk-<redacted>'): field 'key': has the shape" in result.stderr
    assert "job 1" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()


def test_a_job_list_row_shaped_like_a_credential_is_refused_and_others_pass(afc):
    (afc.cwd / "jobs.csv").write_text("key,prompt\nshot-1,a\nr8_abcdefgh,b\nAIzaShot12345678,c\n")
    data = manifest([])
    del data["jobs"]
    data["jobs_from"] = "jobs.csv"
    path = afc.write_manifest(data)
    result = afc("submit", str(path))
    assert result.returncode == 2, result.stderr
    assert "jobs.csv line 3" in result.stderr and "jobs.csv line 4" in result.stderr
    assert "line 2" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()

    # renamed, the same list runs and its keys are shown whole
    (afc.cwd / "jobs.csv").write_text("key,prompt\nshot-1,a\nrun8_abcdefgh,b\n")
    assert afc("submit", str(path)).returncode == 0
    keys = {job["key"] for job in afc.json("status", "--all")["jobs"]}
    assert keys == {"shot-1", "run8_abcdefgh"}
