"""Outside audit 64e: the command afc writes for a person to decide on a job awaiting review
(under each picture of ``afc report --html``, in ``afc status``'s reason) did not run for a
key that begins with '-', which the key alphabet allows (``-take2``).

Written key first, ``afc review approve -take2 --batch b1 --sha256 HEX``, the key was read as
options: exit 2, 'No such option: -t', nothing decided, for each such card a reviewer copied
from the report; a key that is one of the command's own options (``--note``) took the words
after it as its value. Now the options come first and the key after ``--``: the command as
written decides the job. A key without a leading '-' is written as before."""

from __future__ import annotations

import html
import re
import shlex

from conftest import manifest

KEYS = ("-take2", "--note", "shot-1")


def _submitted(afc) -> None:
    afc.write_manifest(
        manifest(
            [{"key": key, "prompt": f"frame {i}", "review": True} for i, key in enumerate(KEYS)]
        )
    )
    done = afc("submit", "manifest.yaml", "-q")
    assert done.returncode == 0, done.stderr
    assert afc.rows("SELECT COUNT(*) FROM jobs WHERE status = 'awaiting_review'")[0][0] == 3


def _run(afc, command: str):
    words = shlex.split(command)
    assert words[:3] == ["afc", "review", "approve"], command
    return afc(*words[1:])


def test_the_report_cards_command_decides_a_key_beginning_with_a_dash(afc):
    _submitted(afc)
    made = afc("report", "--html", "r.html", "-q")
    assert made.returncode == 0, made.stderr
    page = (afc.cwd / "r.html").read_text()
    commands = [
        html.unescape(found)
        for found in re.findall(r'<p class="command"><code>([^<]*)</code>', page)
    ]
    assert len(commands) == 3, commands
    for command in commands:
        ran = _run(afc, command)
        assert ran.returncode == 0, f"{command}: {ran.stderr}"
    assert afc.rows("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'")[0][0] == 3
    # each decided with its own output's SHA-256, and no note taken from the words after it
    assert afc.rows("SELECT COUNT(*) FROM reviews WHERE note IS NOT NULL")[0][0] == 0
    # a plain key is written as before
    assert any(c.startswith("afc review approve shot-1 --batch b1 --sha256 ") for c in commands)


def test_status_says_a_command_that_runs_for_a_key_beginning_with_a_dash(afc):
    _submitted(afc)
    listed = afc("status")  # piped: a tab-separated row a job, its reason a column
    assert listed.returncode == 0, listed.stderr
    rows = [line.split("\t") for line in listed.stdout.splitlines()]
    column = rows[0].index("reason")
    reasons = {row[0]: row[column] for row in rows[1:]}
    for key in KEYS:
        said = re.search(r"afc review approve [^(]*?(?= \(or reject\))", reasons[key])
        assert said, reasons[key]
        ran = _run(afc, said.group(0))
        assert ran.returncode == 0, f"{said.group(0)}: {ran.stderr}"
    assert afc.rows("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'")[0][0] == 3
