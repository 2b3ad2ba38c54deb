"""Outside audit 31h: a CSV job list separated by ';' (as a spreadsheet set to a European
locale exports it) was refused "unknown column(s) 'key;prompt'", no word of the separator."""

from __future__ import annotations

import pytest
import yaml


def _list_manifest(afc, name: str) -> None:
    data = {
        "version": 1,
        "batch": "b1",
        "defaults": {"chain": [{"provider": "local", "model": "m1"}]},
        "jobs_from": name,
    }
    (afc.cwd / "shots.yaml").write_text(yaml.safe_dump(data))


@pytest.mark.parametrize(
    "text",
    [
        "key;prompt\na;a lighthouse\nb;a harbour\n",
        "key;prompt;params.size\na;a lighthouse;64x64\n",
        '"key";"prompt"\n"a";"a lighthouse, at dusk"\n',
        "\ufeffkey;prompt;notes\r\na;a lighthouse;first\r\n",
    ],
)
def test_a_csv_list_separated_by_semicolons_is_refused_saying_so(afc, text):
    (afc.cwd / "jobs.csv").write_text(text)
    _list_manifest(afc, "jobs.csv")
    calls = afc.cwd / "calls.log"
    result = afc("submit", "shots.yaml", env={"AFC_LOCAL_CALL_LOG": str(calls)})
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "jobs.csv line 1: the columns seem separated by ';'" in result.stderr, result.stderr
    assert "comma-separated" in result.stderr, result.stderr
    assert not (afc.cwd / "afc.db").exists()
    assert not calls.exists() or calls.read_text() == ""


def test_an_unknown_column_holding_a_semicolon_is_still_named_as_unknown(afc):
    """A header that is comma-separated, one column of it with a ';' in its name, is no list
    separated by ';': its column is named unknown, as before."""
    (afc.cwd / "jobs.csv").write_text("key,prompt,note;x\na,a lighthouse,n\n")
    _list_manifest(afc, "jobs.csv")
    result = afc("submit", "shots.yaml")
    assert result.returncode == 2, result.stderr
    assert "unknown column(s) 'note;x'" in result.stderr, result.stderr
    assert "separated by ';'" not in result.stderr
