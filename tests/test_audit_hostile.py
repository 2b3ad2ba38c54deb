"""Hostile and careless use found by an audit: each is refused with one clear message, a
documented exit code and nothing written or paid, never a traceback."""

from __future__ import annotations

import pytest
from conftest import manifest

REPLICATE = [{"provider": "replicate", "model": "black-forest-labs/flux-1.1-pro", "attempts": 1}]


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", "inf"])
def test_a_bad_poll_interval_is_refused_before_a_paid_submit(afc, fake, value):
    afc.write_manifest(
        manifest([{"key": "a", "prompt": "a cat"}], defaults={"chain": REPLICATE}, rates=[])
    )
    result = afc("submit", "manifest.yaml", env={"AFC_POLL_S": value})
    assert result.returncode == 2, result.stderr
    assert f"AFC_POLL_S must be a number of seconds > 0, at most 3600, got {value!r}" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr
    assert sum(fake.counts.values()) == 0  # nothing paid
    assert not (afc.cwd / "afc.db").exists()  # nothing written


@pytest.mark.parametrize(
    "url", ["s3://renders/../other", "s3://renders/films//x", "s3://renders/./x"]
)
def test_an_s3_prefix_that_could_leave_its_folder_is_refused(afc, url):
    """The output keys' rule ('..', '.' and empty segments refused) held for the key but not
    for the prefix: s3://renders/../other stored its outputs as 'renders/../other/...', which
    a proxy in front of a path-style store may resolve into the bucket 'other'."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    for command in ("submit", "plan"):
        result = afc(command, "manifest.yaml", "--storage", url)
        assert result.returncode == 2, result.stderr
        assert "empty path segment" in result.stderr and "Traceback" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()


@pytest.mark.parametrize("value", ["nan", "inf", "1e308"])
def test_a_worker_poll_that_is_not_a_finite_wait_is_a_usage_error(afc, value):
    """``afc worker --poll nan`` (or inf) passed the '> 0' check and crashed at the first idle
    wait: 'unexpected error ... a bug in afc', exit 1."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    result = afc("worker", "--poll", value, timeout=30)
    assert result.returncode == 2, result.stderr
    assert "--poll must be a number of seconds > 0, at most 3600" in result.stderr
    assert afc.rows("SELECT status FROM jobs") == [("queued",)]
