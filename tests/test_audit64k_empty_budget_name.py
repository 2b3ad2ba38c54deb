"""Outside audit 64k, the command line: ``afc worker --budget "$NIGHT" --max-spend 50`` in a
crontab with the variable left unset gave an empty budget name, which the worker took as the
default budget ``workers``: its spend joined that never-reset budget (shared with every
worker started without --budget) rather than starting the budget a name starts (README
"Running on several machines"), and nothing said so. An empty ``--budget`` is now refused,
exit 2, before anything is claimed, as an empty ``--ledger=`` or ``--storage=`` is. Through
the real afc command."""

from __future__ import annotations

from tests.conftest import jobs, manifest


def test_an_empty_budget_name_is_refused_before_anything_is_claimed(afc):
    afc.write_manifest(manifest(jobs(2)))
    admitted = afc("submit", "manifest.yaml", "--no-run")
    assert admitted.returncode == 0, admitted.stderr
    for extra in (["--max-spend", "1"], []):
        result = afc("worker", "--until-idle", "--budget", "", *extra, "--json")
        assert result.returncode == 2, (extra, result.returncode, result.stderr)
        assert result.stdout == ""
        assert "--budget is empty" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("queued", 2)]
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(0,)]
