"""Outside audit 63b: ``afc queue stats --fail-if`` given a threshold thousands of digits long
(a variable pasted wrong in a cron line) stopped with "afc: unexpected error: ValueError:
Exceeds the limit (4300 digits) for integer string conversion ... (a bug in afc)", exit 1:
the exit a crossed threshold gives, so the cron alert fired for a mistyped command. It is a
usage error now, exit 2, naming the condition, as any other unreadable --fail-if is."""

from __future__ import annotations

from conftest import manifest


def test_a_threshold_too_long_to_be_a_figure_is_a_usage_error(afc):
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    for number in ("9" * 5000, "1" + "0" * 18):
        result = afc("queue", "stats", "--fail-if", f"queued>{number}")
        said = result.stderr
        assert result.returncode == 2, said
        assert "unexpected error" not in said and "int_max_str_digits" not in said, said
        assert f"--fail-if queued>{number[:20]}…: a number {len(number):,} digits long" in said
    # one of 18 digits is a threshold as before: not crossed, exit 0; crossed, exit 1
    assert afc("queue", "stats", "--fail-if", "queued>" + "9" * 18).returncode == 0
    crossed = afc("queue", "stats", "--fail-if", "queued>=1")
    assert crossed.returncode == 1, crossed.stderr
