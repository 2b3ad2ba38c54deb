"""Outside audit 61c: a param written with leading zeros, read by YAML 1.1 as an octal number.

PyYAML reads a plain ``0042`` as the octal 34 and ``010`` as 8 (while ``0089``, with no octal
digit, is the text "0089"). A zero-padded seed copied from a shot's file name was admitted and
rendered as another number than the one written, and the same job moved to a JSON Lines or CSV
list (``"seed": 42``), or the manifest corrected to ``seed: 42``, was another request: an
IDEMPOTENCY_CONFLICT under its key, whose way out, a new key, pays again. Refused now as the
base-60 ``16:9`` is: exit 2, nothing written, naming the file, job, field and both fixes. A
number YAML reads the same either way (``007``) is left alone.
"""

from __future__ import annotations

import json

from conftest import manifest

YAML = """version: 1
batch: b1
defaults:
  chain: [{provider: local, model: m1, attempts: 1}]
  params: {seed: SEED}
jobs:
  - {key: shot-001, prompt: "a lighthouse"}
"""


def test_a_zero_padded_param_read_as_octal_is_refused(afc):
    (afc.cwd / "manifest.yaml").write_text(YAML.replace("SEED", "0042"))
    refused = afc("submit", "manifest.yaml")
    assert refused.returncode == 2, refused.stderr
    assert "manifest.yaml" in refused.stderr
    assert "field 'defaults.params.seed'" in refused.stderr
    assert "octal number 34" in refused.stderr
    assert 'write 42 for the number, or quotes to keep it as text ("0042")' in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not (afc.cwd / "afc.db").exists()
    assert afc("plan", "manifest.yaml").returncode == 2
    # in a job's own params too
    data = YAML.replace("  params: {seed: SEED}\n", "").replace(
        'prompt: "a lighthouse"}', 'prompt: "a lighthouse", params: {seed: -010}}'
    )
    (afc.cwd / "job.yaml").write_text(data)
    refused = afc("submit", "job.yaml")
    assert refused.returncode == 2
    assert "(key 'shot-001'): field 'params.seed'" in refused.stderr
    assert "octal number -8; write -10" in refused.stderr


def test_the_fixed_manifest_and_its_job_list_are_one_request(afc):
    (afc.cwd / "manifest.yaml").write_text(YAML.replace("SEED", "42"))
    assert afc("submit", "manifest.yaml").returncode == 0
    listed = manifest([], jobs_from="jobs.jsonl")
    listed["defaults"]["chain"][0]["attempts"] = 1
    listed["defaults"]["chain"][0].pop("backoff")
    listed.pop("jobs")
    listed.pop("rates")
    (afc.cwd / "jobs.jsonl").write_text(
        json.dumps({"key": "shot-001", "prompt": "a lighthouse", "params": {"seed": 42}}) + "\n"
    )
    afc.write_manifest(listed, name="listed.yaml")
    again = afc("submit", "listed.yaml")
    assert again.returncode == 0, again.stderr
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(1,)]
    # a number YAML reads alike either way is not refused
    (afc.cwd / "seven.yaml").write_text(YAML.replace("SEED", "007").replace("b1", "b2"))
    assert afc("submit", "seven.yaml").returncode == 0
