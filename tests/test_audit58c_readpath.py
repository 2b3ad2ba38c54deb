"""Outside audit 58c: what a command pays per row on a catalogue's ledger (120,000 jobs,
358,000 attempts, 120 batches). Each test asks the engine for the plan of a statement afc
sends, as tests/test_audit52b_ledger_scale.py does, and checks that it reads an index, not
every row of a table that grows with every batch."""

from __future__ import annotations

from conftest import jobs, manifest
from test_audit52b_ledger_scale import _plans, _scans, _sent

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest


def test_a_resubmit_reads_its_batch_s_avoided_renders_from_an_index(ledger_url, afc, monkeypatch):
    """A re-submit of a finished batch reads, at each admission round, the batch's rows of
    ``avoided`` (the jobs already counted, the renders found stored): the table had no index
    on its batch, and each of the two statements read every row of every batch (27-44 ms at
    384,000 rows on SQLite, a 5,000-job round sending both)."""
    ledger = Ledger(ledger_url)
    try:
        m = load_manifest(afc.write_manifest(manifest(jobs(4))))
        ledger.admit(m, "file:///tmp/x", RateCards())
        with ledger.tx():
            ledger.db.execute("UPDATE jobs SET status = 'succeeded', step = 'done'")
        with _sent(ledger, monkeypatch) as sent:
            ledger.admit(m, "file:///tmp/x", RateCards())
        counted = ledger.db.execute("SELECT COUNT(*) FROM avoided WHERE reason = 'replay'")
        assert counted.fetchone()[0] == 4  # the replays were counted, once each
        reads = _plans(ledger, sent, lambda sql: "FROM avoided" in sql and "batch = ?" in sql)
        assert len(reads) == 2, sent
        for sql, plan in reads:
            assert "avoided_batch" in plan, (sql, plan)
            assert not _scans(plan, "avoided"), (sql, plan)
    finally:
        ledger.close()


OPENAI = "sk-proj-Abc123Def456Ghi789Jkl012Mno345Pqr678"
FAL = "fal1d2e3f4a5:0a1b2c3d4e5f6a7b8c9d0e1f2a3b"  # a colon, as fal's keys have


def _rows() -> list:
    """Rows of 'afc status --json' with the key quoted back in every field, as a provider
    quotes it (whole, cut short, in capitals, JSON-escaped, percent-encoded, in base64, glued
    to a token shape), and rows JSON writes with escapes (a quote, a backslash, non-ASCII)."""
    import base64
    from urllib.parse import quote

    said = [
        f"Incorrect API key provided: {OPENAI}",
        f"bad key {OPENAI[:20]}***",
        OPENAI.upper(),
        "".join(f"\\u{ord(c):04x}" for c in OPENAI),
        quote(OPENAI, safe=""),
        base64.b64encode(f"Bearer {OPENAI}".encode()).decode(),
        f"Key {FAL}",
        # a shape glued to the key: found only once the key is masked (a scrub's second look)
        f"{OPENAI}AIzaEXAMPLEKEY0123",
        f"{OPENAI}whsec_https://u:p@host/x",
        f'quoted "{OPENAI}" back',
        f"\u00e9chec {OPENAI[5:]}",
        "?key=\\g the text before <redacted> already masked",
        f"C:\\renders\\{OPENAI}",
    ]
    rows = []
    for n, text in enumerate(said):
        rows.append(
            {
                "key": f"shot-{n:03d}",
                "status": "failed",
                "output_key": f"b1/{text}.png",
                "attempts": n,
                "cost": None,
                "waiting": text,
                "error": {"code": "PROVIDER_ERROR", "class": text, "message": text},
                text: [text, {"nested": text}],
            }
        )
    return rows


def test_status_json_rows_are_scrubbed_string_by_string(monkeypatch, capsys):
    """'afc status --json' scrubbed each row's strings, then each row's encoded text again:
    a fifth of its CPU at 120,000 jobs (2.3 s of 9 s). A row JSON writes without escapes is
    now its strings' second scrub (``jsonout._settled``), the same bytes; the key still
    reaches no field."""
    import json

    from afc_cli import jsonout, secrets
    from afc_cli.secrets import scrub, scrub_data

    monkeypatch.setenv("OPENAI_API_KEY", OPENAI)
    monkeypatch.setenv("FAL_KEY", FAL)
    secrets.reset()
    try:
        rows = _rows()
        document = {"jobs": rows, "counts": {"failed": len(rows)}}
        whole = scrub(json.dumps(scrub_data(document), indent=2), decode=False) + "\n"
        texts: list[str] = []
        real = jsonout.scrub

        def counted(text, **kwargs):
            texts.append(text)
            return real(text, **kwargs)

        monkeypatch.setattr(jsonout, "scrub", counted)
        jsonout.emit_json({"jobs": jsonout.Streamed(iter(rows)), "counts": document["counts"]})
        out = capsys.readouterr().out
        assert out == whole  # the bytes the whole document's two scrubs give
        parsed = json.loads(out)
        assert len(parsed["jobs"]) == len(rows)
        for piece in (OPENAI[i : i + 12] for i in range(len(OPENAI) - 11)):
            assert piece.lower() not in out.lower(), piece
        assert FAL.split(":")[1] not in out and "AIzaEXAMPLEKEY" not in out
        rows_scrubbed = [text for text in texts if '"key": "shot-' in text]
        # only the rows JSON writes with an escape (a quote, a backslash, an 'é' left after
        # the scrub of their strings) are scrubbed whole, as every row was
        assert len(rows_scrubbed) == 3, rows_scrubbed
    finally:
        monkeypatch.undo()
        secrets.reset()


def test_a_secret_holding_a_blank_has_each_row_scrubbed_whole(monkeypatch, capsys):
    """A secret with a blank or a comma (a pass phrase as the serve token) could be found
    across two values of a row's text: every row's text is then scrubbed whole, as before."""
    import json

    from afc_cli import jsonout, secrets
    from afc_cli.secrets import scrub, scrub_data

    phrase = "correct horse, battery staple 42"
    monkeypatch.setenv("AFC_SERVE_TOKEN", phrase)
    secrets.reset()
    try:
        rows = [{"key": "shot-1", "a": "correct horse", "b": "battery staple 42"}, *_rows()]
        whole = scrub(json.dumps(scrub_data({"jobs": rows}), indent=2), decode=False) + "\n"
        jsonout.emit_json({"jobs": jsonout.Streamed(iter(rows))})
        assert capsys.readouterr().out == whole
        assert not secrets.json_structure_free()
    finally:
        monkeypatch.undo()
        secrets.reset()
