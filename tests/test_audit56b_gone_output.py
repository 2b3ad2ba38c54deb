"""A succeeded job's output deleted from its folder since, found by outside audit 56b.

afc has no command that reads every stored output back; replays and the probe trust the
ledger's ``succeeded``. A person who found a picture gone and asked ``afc retry`` for it was
told its output "is stored"."""

from __future__ import annotations

from conftest import manifest


def test_retry_of_a_succeeded_job_whose_file_is_gone_says_so(afc):
    """The refusal stands (afc never pays for a succeeded job again, exit 2, nothing changed)
    but names the missing file and what can be done, instead of saying it is stored; with the
    file there the refusal is as before."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    calls = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(calls)}
    assert afc("submit", "manifest.yaml", env=env).returncode == 0
    result = afc("retry", "a", env=env)
    assert result.returncode == 2
    assert "its output is stored" in result.stderr
    stored = afc.outputs() / "b1/a.png"
    stored.unlink()
    result = afc("retry", "a", env=env)
    assert result.returncode == 2, result.stderr
    assert "its output is stored" not in result.stderr
    assert f"{stored} is no longer there" in result.stderr
    assert "put the file back, or submit the request under a new key" in result.stderr
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert len(calls.read_text().splitlines()) == 1  # nothing rendered again
