"""A batch heading over its table (several batches, on a terminal) keeps the batch name whole.

At 80 columns a batch name longer than the terminal was broken into pieces on separate lines
(``batch`` / ``b-very-long-...-batch`` / ``-name``): an id cut, which the README's tables
promise never to do, and a name a person copies for ``--batch`` no longer in one piece. Like a
table too wide for its essential columns, the heading is now printed whole on one line (the
terminal soft-wraps it, and copying it gives the name back).
"""

from __future__ import annotations

import io

from afc_cli.tables import Col, emit


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_long_batch_heading_is_one_line_at_80_columns(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    name = "b" + "-very-long-batch-name" * 5  # 106 characters, within the manifest's 200
    rows = [
        {"batch": name, "key": "a", "status": "succeeded"},
        {"batch": "short", "key": "a", "status": "succeeded"},
    ]
    out = _Tty()
    emit(rows, [Col("batch"), Col("key"), Col("status")], group="batch", stream=out)
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    assert f"batch {name}" in lines, lines
    assert "batch short" in lines
    # the table under it still fits the terminal
    assert all(len(line) <= 80 for line in lines if not line.startswith("batch "))


def test_long_key_said_under_the_table_is_one_line_at_80_columns(monkeypatch) -> None:
    """A failed job's reason printed under the table ("KEY: reason") broke a key longer
    than the terminal into two lines; the key is now whole on a line of its own."""
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    key = "k" + "-long-key-part" * 7  # 99 characters, within the manifest's 200
    reason = "CHAIN_FAILED: auth from local/demo-v1 (HTTP 401): injected auth on attempt 1"
    rows = [{"key": key, "status": "failed", "reason": reason}]
    cols = [Col("key"), Col("status"), Col("reason", kind="text", drop=1, below=True)]
    out = _Tty()
    emit(rows, cols, stream=out)
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    assert f"{key}:" in lines, lines
    said = " ".join(lines[lines.index(f"{key}:") + 1 :])
    assert reason in said
    # a key that fits the terminal is said as before: "KEY: reason", wrapped at words
    short = "s" + "-keeper-hands" * 5  # 66: no room left for the reason as a column
    out = _Tty()
    emit([{**rows[0], "key": short}], cols, stream=out)
    lines = out.getvalue().splitlines()
    assert any(line.startswith(f"{short}: ") for line in lines), lines
