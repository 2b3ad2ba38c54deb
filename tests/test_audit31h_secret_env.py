"""Outside audit 31h: a webhook's secret_env took a name of megabytes."""

from __future__ import annotations

from conftest import manifest


def test_a_webhook_secret_env_of_megabytes_is_refused(afc):
    name = "A" * 2_000_000
    afc.write_manifest(
        manifest(
            [
                {
                    "key": "a",
                    "prompt": "p",
                    "webhook": {"url": "http://127.0.0.1:9/h", "secret_env": name},
                }
            ]
        )
    )
    calls = afc.cwd / "calls.log"
    result = afc("submit", "manifest.yaml", env={"AFC_LOCAL_CALL_LOG": str(calls)})
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "webhook.secret_env" in result.stderr, result.stderr
    assert "at most 200 characters" in result.stderr, result.stderr
    assert len(result.stderr) < 20_000
    assert not (afc.cwd / "afc.db").exists()
    assert not calls.exists() or calls.read_text() == ""
