"""Outside audit 59d, the command line: afc's options come after the command's name (README
"Commands"). One written before it, as ``git -C``, ``docker --host`` or ``kubectl -n`` take
theirs (``afc --json status``, ``afc --ledger /srv/afc.db resume`` in a crontab), was refused
'No such option: --json (Possible options: --version)', which reads as if afc had no --json
at all. The refusal is still exit 2, nothing run; it now says where the option goes. Through
the real afc command."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--json", "status"], "afc status --json"),
        (["-q", "resume"], "afc resume -q"),
        (["--ledger", "other.db", "queue", "stats"], "afc queue stats --ledger ..."),
        (["--batch", "b1", "costs", "report", "--by", "day"], "afc costs report --batch ..."),
    ],
)
def test_an_option_before_the_command_says_where_it_goes(afc, args, said):
    result = afc(*args)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert f"afc's options go after the command's name: {said}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not (afc.cwd / "afc.db").exists() and not (afc.cwd / "other.db").exists()


def test_a_mistyped_or_unknown_option_keeps_clicks_words(afc):
    for args in (["--jsn", "status"], ["--json"], ["--all", "resume"]):
        result = afc(*args)
        assert result.returncode == 2, result.stderr
        assert "go after the command's name" not in result.stderr, (args, result.stderr)
        assert f"No such option: {args[0]}" in result.stderr
