"""``fallback_on`` on a chain's last entry could never take effect: a manifest error (exit 2,
nothing written) naming the fix."""

from __future__ import annotations

from conftest import jobs, manifest


def test_last_entry_fallback_on_in_defaults_is_refused(afc):
    data = manifest(jobs(2))
    data["defaults"]["chain"][0]["fallback_on"] = ["exhausted", "refusal"]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 2
    assert "manifest.yaml" in result.stderr
    assert "field 'defaults.chain[0].fallback_on'" in result.stderr
    assert "add the model to fall back to after local/m1, or remove fallback_on" in result.stderr
    assert not (afc.cwd / "afc.db").exists() and not afc.outputs().exists()
    assert afc("plan", "manifest.yaml").returncode == 2


def test_last_entry_fallback_on_in_a_jobs_chain_is_refused(afc):
    data = manifest(jobs(1))
    data["jobs"].append(
        {
            "key": "hq",
            "prompt": "p",
            "chain": [
                {"provider": "local", "model": "m1", "fallback_on": ["refusal"]},
                {"provider": "local", "model": "m2", "fallback_on": ["unavailable"]},
            ],
        }
    )
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 2
    assert "job 1 (key 'hq'): field 'chain[1].fallback_on'" in result.stderr
    assert "chain[0]" not in result.stderr  # a model with a next one may name reasons
    assert "local/m2" in result.stderr
    assert not (afc.cwd / "afc.db").exists()


def test_an_explicit_empty_fallback_on_says_what_is_true_and_is_allowed(afc):
    data = manifest(jobs(1))
    data["defaults"]["chain"][0]["fallback_on"] = []
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
