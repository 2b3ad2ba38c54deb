"""Outside audit 57c: ``afc serve``'s spend page and ``afc report --html`` show the spend by
provider, by model and by day, and read every attempt of the ledger once for each: three
passes over ``attempts`` (and ``avoided``) where one gives all three. On a ledger of 120,000
jobs and 345,000 attempts each spend page took 4-5 s on SQLite, and a catalogue ledger's
costs report alone is 7-8 s at 3,000,000 attempts: every page load of /spend three times it.
The page now reads as much as one ``afc costs report`` does, and shows the same figures."""

from __future__ import annotations

import sqlite3
import time

from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.costs_report import costs_report
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest
from afc_cli.web.sheet import SPEND_GROUPS, spend

DAY = 86400.0


def _filled(path: str, afc) -> None:
    """Two providers' models over three days, priced, unpriced, failed and unknown attempts,
    a call left started by a run long gone, and avoided renders (one counted twice)."""
    m = load_manifest(afc.write_manifest(manifest(jobs(6))))
    ledger = Ledger(path)
    try:
        ledger.admit(m, "file:///tmp/x", RateCards())
        ids = [job.job_id for job in m.jobs]
        t0 = time.time() - 5 * DAY
        rows = [
            (ids[0], 1, "openai", "gpt-image-1", "succeeded", t0, 40000),
            (ids[1], 1, "openai", "gpt-image-1", "failed", t0 + DAY, 40000),
            (ids[1], 2, "openai", "dall-e-3", "succeeded", t0 + DAY, None),
            (ids[2], 1, "fal", "flux/dev", "unknown", t0 + 2 * DAY, None),
            (ids[2], 2, "fal", "flux/dev", "succeeded", t0 + 2 * DAY, 25000),
            (ids[3], 1, "replicate", "flux-schnell", "started", t0 + 2 * DAY, None),
        ]
        with ledger.tx():
            ledger.db.conn.executemany(
                "INSERT INTO attempts (job_id, number, chain_index, provider, model, status,"
                " owner, started_at, cost_micros) VALUES (?, ?, 0, ?, ?, ?, 'gone:1', ?, ?)",
                rows,
            )
            ledger.db.execute(
                "UPDATE jobs SET status = 'running', lease_owner = 'gone:1', lease_expires = 1,"
                " lease_mono = 1 WHERE id = ?",
                (ids[3],),
            )
            ledger.db.conn.executemany(
                "INSERT INTO avoided (job_id, batch, at, reason, provider, model, cost_micros,"
                " cost_source) VALUES (?, 'b1', ?, 'replay', ?, ?, ?, 'rate_card')",
                [
                    (ids[4], t0, "openai", "gpt-image-1", 40000),
                    (ids[4], t0 + DAY, "openai", "gpt-image-1", 40000),
                    (ids[5], t0 + 3 * DAY, "fal", "flux/dev", None),
                ],
            )
    finally:
        ledger.close()


def _reads_of_attempts(monkeypatch, call) -> tuple[object, int]:
    """``call()``'s result and how many statements it sent that read ``attempts``."""
    sent: list[str] = []
    connect = sqlite3.connect

    def traced(*args, **kwargs):
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(sent.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    try:
        result = call()
    finally:
        monkeypatch.undo()
    return result, sum(1 for sql in sent if "attempts a" in sql)


def test_the_spend_page_reads_the_attempts_once_for_its_three_groupings(tmp_path, afc, monkeypatch):
    path = str(tmp_path / "afc.db")
    _filled(path, afc)
    one, reads_one = _reads_of_attempts(
        monkeypatch, lambda: costs_report(path, batch=None, since=None, by="provider")
    )
    page, reads_page = _reads_of_attempts(monkeypatch, lambda: spend(path, batch=None, since=None))
    assert reads_one == 2  # the grouped sums, then the calls left started
    assert reads_page == reads_one
    # the same figures as each grouping's own report, the ledger's and a batch's, since a date
    assert page["provider"] == one
    for batch, since in ((None, None), ("b1", None), (None, "2000-01-01")):
        shown = spend(path, batch=batch, since=since)
        for by in SPEND_GROUPS:
            assert shown[by] == costs_report(path, batch=batch, since=since, by=by), by
    # the roll-up is right: gpt-image-1's two days, flux/dev's unknown and avoided, the
    # started call of a gone run counted unknown and unpriced, the avoided twice counted once
    by_model = {row["model"]: row for row in page["model"]["rows"]}
    assert by_model["openai/gpt-image-1"]["priced"] == "0.080000"
    assert by_model["openai/gpt-image-1"]["failed_spend"] == "0.040000"
    assert by_model["openai/gpt-image-1"]["avoided_renders"] == 1
    assert by_model["fal/flux/dev"]["unknown_attempts"] == 1
    assert by_model["fal/flux/dev"]["avoided_unpriced"] == 1
    assert by_model["replicate/flux-schnell"]["unknown_attempts"] == 1
    assert by_model["replicate/flux-schnell"]["unpriced_attempts"] == 1
    assert page["provider"]["total"]["unpriced_attempts"] == 3
    assert len(page["day"]["rows"]) == 4
