"""Outside audit 44d: ``afc costs report --csv`` ended every line with '\\r\\n' (Python's csv
writer's default), so the last column, ``row``, which README gives scripts to tell the total
row apart, read 'total\\r' to the line tools a cron script uses: ``awk -F, '$NF == "total"'``
found no total row and printed nothing (a spend alert on it never fired), ``grep ',total$'``
matched nothing, and a shell ``read`` got 'total\\r'. Lines now end with '\\n' alone, as
every other output of afc does; CSV readers (Python's csv, spreadsheets) read either."""

from __future__ import annotations

import csv
import io
import subprocess

from conftest import manifest


def test_the_csv_total_row_is_found_by_line_tools(afc):
    afc.write_manifest(
        manifest([{"key": "a", "prompt": "a, with a comma"}, {"key": "b", "prompt": "b"}])
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    # the bytes as a pipe carries them (the fixture's text mode would turn '\r\n' into '\n')
    out = subprocess.run(
        afc.command("costs", "report", "--by", "batch", "--csv"),
        cwd=afc.cwd,
        env=afc.env,
        capture_output=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert b"\r" not in out.stdout, out.stdout
    total = subprocess.run(
        ["awk", "-F,", '$NF == "total" {print $2}'],
        input=out.stdout,
        capture_output=True,
        check=True,
    )
    assert total.stdout == b"0.100000\n", total.stdout
    rows = list(csv.DictReader(io.StringIO(out.stdout.decode(), newline="")))
    assert [(r["batch"], r["priced"], r["row"]) for r in rows] == [
        ("b1", "0.100000", "group"),
        ("total", "0.100000", "total"),
    ], rows
