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


@pytest.mark.parametrize("name", ["jobs.jsonl", "jobs.csv"])
def test_an_endless_line_in_a_job_list_is_refused_without_reading_it_whole(tmp_path, name):
    """A job list of one 300 MB line (a binary or a log named by mistake) was read into memory
    whole (630 MB peak for JSON Lines; a CSV line of commas became millions of cells)."""
    from afc_cli.errors import ManifestError
    from afc_cli.joblist import MAX_LINE_CHARS
    from afc_cli.manifest import load_manifest

    header = "key,prompt\n" if name.endswith(".csv") else '{"key": "a", "prompt": "p"}\n'
    (tmp_path / name).write_text(header + "," * (MAX_LINE_CHARS + 1) + "\n")
    path = tmp_path / "m.yaml"
    path.write_text(
        f"version: 1\nbatch: b\ndefaults:\n  chain: [{{provider: local, model: m1}}]\n"
        f"jobs_from: {name}\n"
    )
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert caught.value.problems == [
        f"{name} line 2: a line longer than {MAX_LINE_CHARS:,} characters (is this a job "
        "list?); the rest of the file was not read"
    ]


def test_a_job_list_line_at_the_limit_is_read(tmp_path):
    from afc_cli.joblist import MAX_LINE_CHARS
    from afc_cli.manifest import load_manifest

    line = '{"key": "a", "prompt": "p", "output": "b/a.png"}'
    (tmp_path / "j.jsonl").write_text(line + " " * (MAX_LINE_CHARS - len(line) - 1) + "\n")
    path = tmp_path / "m.yaml"
    path.write_text(
        "version: 1\nbatch: b\ndefaults:\n  chain: [{provider: local, model: m1}]\n"
        "jobs_from: j.jsonl\n"
    )
    assert [job.key for job in load_manifest(path).jobs] == ["a"]
