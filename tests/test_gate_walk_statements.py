"""A decision on a style frame with a batch behind it walks the jobs that need it a level
at a time: their rows read (and, on PostgreSQL, locked) and their needs read a chunk per
query, not each job with queries of its own (``Ledger._fail_dependents``,
``_reblock_dependents``). A rejection or cancel of a frame before 10,000 shots sent seven
statements a shot: 13 s on PostgreSQL, in one transaction holding those jobs' rows."""

from __future__ import annotations

import pytest

N = 600  # more than one IN chunk (core.IN_CHUNK)


def _count_reads(monkeypatch) -> list[str]:
    """The statements sent through the ledger's ``_all`` and ``_one`` from now on."""
    from afc_cli.ledger.core import Ledger

    sent: list[str] = []
    for name in ("_all", "_one"):
        method = getattr(Ledger, name)

        def counted(self, sql, *args, _method=method, **kw):
            sent.append(sql)
            return _method(self, sql, *args, **kw)

        monkeypatch.setattr(Ledger, name, counted)
    return sent


@pytest.mark.parametrize("verb", ["reject", "cancel"])
def test_a_gate_s_decision_reads_the_jobs_behind_it_a_chunk_per_query(
    afc, ledger_url, monkeypatch, verb
):
    from conftest import manifest

    from afc_cli import ops, review
    from afc_cli.ledger import open_ledger

    shots = [{"key": f"shot-{i:04d}", "prompt": f"s{i}", "needs": ["frame"]} for i in range(N)]
    # a level below: a title card needing two shots fails naming the first of them
    title = {"key": "title", "prompt": "t", "needs": ["shot-0000", "shot-0001"]}
    frame = {"key": "frame", "prompt": "harbour", "review": True}
    afc.write_manifest(manifest([frame, *shots, title]))
    env = {"AFC_LEDGER": ledger_url}
    assert afc("submit", "manifest.yaml", "-q", env=env).returncode == 0

    sent = _count_reads(monkeypatch)
    if verb == "reject":
        ledger = open_ledger(ledger_url)
        try:
            review.reject(ledger, ["frame"], by="tester", reason="too cold")
        finally:
            ledger.close()
    else:
        out = ops.cancel(ledger_url, ["frame"], None)
        assert out["cancelled"][0]["dependents_failed"] == N + 1, out
    # one update a job (its ending, first-terminal-wins); was five reads and that update
    assert len(sent) < N + 60, len(sent)

    stats = afc.json("queue", "stats", env=env)
    assert (stats["failed"], stats["blocked"]) == (N + 1, 0), stats
    shown = afc.json("show", "title", env=env)["job"]["error"]
    assert shown["code"] == "DEPENDENCY_FAILED", shown
    assert shown["message"].startswith("need 'shot-0000' ended failed, itself"), shown

    if verb == "cancel":  # a retry of the frame puts them back, a level at a time too
        sent.clear()
        out = ops.retry(ledger_url, ["frame"], None, [])
        assert out["retried"][0]["dependents_blocked"] == N + 1, out
        assert len(sent) < N + 60, len(sent)  # was a read of each one's dependents more
        stats = afc.json("queue", "stats", env=env)
        assert (stats["failed"], stats["blocked"], stats["queued"]) == (0, N + 1, 1), stats
