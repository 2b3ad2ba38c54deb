"""Outside audit against the product contract, sentence by sentence: what the real ``afc``
command does with what README and its commands' help promise (commands, manifest,
idempotency, pipeline order, attempts, terminal states, costs)."""

from __future__ import annotations

from conftest import manifest
from terminal import on_pty


def test_show_tells_every_attempts_error_on_a_pipe_and_a_terminal(afc):
    """`afc show KEY` is one job's whole story, every attempt with its error and cost. Its
    attempts table gave each failed attempt's class and HTTP status but never the provider's
    message (which words were refused, which key was rejected): a job that fell back after a
    refusal kept why only in `afc show --json`."""
    afc.write_manifest(
        manifest(
            [
                {
                    "key": "fell-back",
                    "prompt": "p",
                    "params": {"fail": ["refusal"]},
                    "chain": [
                        {
                            "provider": "local",
                            "model": "m1",
                            "attempts": 1,
                            "fallback_on": ["refusal"],
                        },
                        {"provider": "local", "model": "m2", "attempts": 1},
                    ],
                }
            ]
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    message = "injected refusal on attempt 1"

    piped = afc("show", "fell-back")
    assert piped.returncode == 0, piped.stderr
    lines = piped.stdout.splitlines()
    header = lines[lines.index("attempts") + 1].split("\t")
    assert header[-1] == "error"  # the --json field's name, as every piped column
    first = dict(zip(header, lines[lines.index("attempts") + 2].split("\t"), strict=True))
    assert (first["status"], first["error_class"], first["error"]) == ("failed", "refusal", message)
    second = dict(zip(header, lines[lines.index("attempts") + 3].split("\t"), strict=True))
    assert (second["status"], second["error"]) == ("succeeded", "")

    # at 80 columns the message has no room as a column: it is printed under the table
    shown = on_pty(afc.command("show", "fell-back"), cwd=afc.cwd, env=afc.env, columns=80)
    assert shown.returncode == 0, shown.output
    assert f"1: {message}" in shown.lines
    rows = [line for line in shown.lines if line[:1] in "12" and " local/m" in line]
    assert len(rows) == 2 and all(len(row) <= 80 for row in rows), rows


def test_a_terminal_that_reports_no_size_gets_tables_80_columns_wide(afc):
    """A tty that answers 0x0 for its size (`script` writing to a pipe, some container and
    serial consoles) was taken as 0 columns wide: `afc status` dropped every column but the
    key and said '(not shown at 0 columns: ...)'. It is laid out at 80, as with no size."""
    afc.write_manifest(manifest([{"key": "k", "prompt": "p", "params": {"fail": ["auth"]}}]))
    assert afc("submit", "manifest.yaml").returncode == 1
    env = {k: v for k, v in afc.env.items() if k != "COLUMNS"}
    shown = on_pty(afc.command("status"), cwd=afc.cwd, env=env, columns=0)
    assert shown.returncode == 0, shown.output
    flat = " ".join(shown.output.split())  # a note may wrap
    assert "at 0 columns" not in flat, shown.output
    row = next(line for line in shown.lines if line.startswith("k "))
    assert row.split()[:4] == ["k", "failed", "render", "1"], shown.output  # step, attempts
