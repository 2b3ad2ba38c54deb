"""A review note with a NUL byte (an ``afc serve`` reject form posted by hand; a command line
cannot carry one) was kept on SQLite and stopped the decision on PostgreSQL with psycopg's
DataError, uncaught by the page (found by outside audit 26b, not fixed there); a SQLite
ledger holding such a note could not be copied to PostgreSQL. ``Ledger.decide_reviews`` now
writes a NUL as ``\\x00`` on both engines, as ``secrets.visible`` writes other controls."""

from __future__ import annotations

import json

from test_issue17_review import style_manifest

from afc_cli.ledger import Ledger


def test_a_nul_in_a_rejection_note_is_kept_escaped_on_both_engines(afc, ledger_url):
    style_manifest(afc)
    env = {"AFC_LEDGER": ledger_url}
    result = afc("submit", "manifest.yaml", env=env)
    assert result.returncode == 0, result.stderr
    ledger = Ledger(ledger_url)
    try:
        ledger.decide_reviews(
            ledger.jobs_by_key("style"), "rejected", by="ana", note="seam\x00at left"
        )
    finally:
        ledger.close()
    shown = afc.json("show", "style", env=env)
    assert shown["job"]["status"] == "rejected"
    said = json.dumps(shown)
    assert "seam\\\\x00at left" in said and "\\u0000" not in said, said
