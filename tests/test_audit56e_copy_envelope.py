"""Outside audit 56e (secrets): ``afc ledger copy`` scrubs again what an older afc kept
unscrubbed (tests/test_audit56c_copy_scrubs.py), but copied each webhook delivery's envelope
byte for byte. An envelope carries the job's error message (``data.error.message``) and a
person's review note, scrubbed where they entered by the afc of that day: an older afc's
envelope held the same key its job's error message did, and the copy masked it in the one
and put it into the new database in the other."""

from __future__ import annotations

import json
import sqlite3

from conftest import manifest

KEY = "oai-9fK2mQ7xL4vR8tZ1wY6nB3"  # no token shape: found by its value only
HOOK = {"HOOK_SECRET": "whsec_" + "A" * 32}


def test_a_copy_masks_a_key_an_older_afc_kept_in_an_envelope(afc):
    data = manifest(
        [{"key": "shot", "prompt": "p", "params": {"fail": ["invalid"]}}],
        webhook={"url": "http://127.0.0.1:9/h", "secret_env": "HOOK_SECRET", "timeout_s": 2},
    )
    afc.write_manifest(data)
    afc("submit", "manifest.yaml", env=HOOK)
    conn = sqlite3.connect(afc.cwd / "afc.db")
    with conn:  # the envelope as an afc that scrubbed less would have written it
        [(envelope,)] = conn.execute("SELECT envelope FROM deliveries").fetchall()
        old = json.loads(envelope)
        old["data"]["error"] = {"code": "X", "class": "invalid", "message": f"bad key {KEY}"}
        conn.execute("UPDATE deliveries SET envelope = ?", (json.dumps(old),))
    conn.close()
    copied = afc("ledger", "copy", "afc.db", "copy.db", env={"OPENAI_API_KEY": KEY, **HOOK})
    assert copied.returncode == 0, copied.stderr
    conn = sqlite3.connect(afc.cwd / "copy.db")
    [(envelope,)] = conn.execute("SELECT envelope FROM deliveries").fetchall()
    conn.close()
    assert KEY not in envelope, envelope
    assert json.loads(envelope)["data"]["error"]["message"] == "bad key <redacted>", envelope


def test_a_copy_masks_a_key_an_older_afc_kept_in_a_note_a_delivery_error_or_an_endpoint(afc):
    """The other texts the copy scrubs again (``copy.SCRUBBED``): a review's note, a delivery's
    last error, a disabled endpoint's reason. No test held a key in any of them: a mutant
    leaving each out of ``SCRUBBED`` passed, and that text went into the new database, key and
    all, as an older afc had kept it."""
    data = manifest(
        [{"key": "shot", "prompt": "p", "params": {"fail": ["invalid"]}}],
        webhook={"url": "http://127.0.0.1:9/h", "secret_env": "HOOK_SECRET", "timeout_s": 2},
    )
    afc.write_manifest(data)
    afc("submit", "manifest.yaml", env=HOOK)
    conn = sqlite3.connect(afc.cwd / "afc.db")
    with conn:  # as an afc that scrubbed less would have written them
        [(job_id, batch)] = conn.execute("SELECT id, batch FROM jobs").fetchall()
        conn.execute(
            "INSERT INTO reviews (job_id, batch, decision, decided_by, note, decided_at)"
            " VALUES (?, ?, 'rejected', 'ana', ?, 1)",
            (job_id, batch, f"the log showed {KEY}"),
        )
        conn.execute("UPDATE deliveries SET last_error = ?", (f"401 for key {KEY}",))
        conn.execute(
            "INSERT INTO endpoints (url, disabled_at, reason) VALUES (?, 1, ?)",
            ("http://127.0.0.1:9/h", f"refused: {KEY}"),
        )
    conn.close()
    copied = afc("ledger", "copy", "afc.db", "copy.db", env={"OPENAI_API_KEY": KEY, **HOOK})
    assert copied.returncode == 0, copied.stderr
    conn = sqlite3.connect(afc.cwd / "copy.db")
    said = {
        "note": conn.execute("SELECT note FROM reviews").fetchall(),
        "last_error": conn.execute("SELECT last_error FROM deliveries").fetchall(),
        "reason": conn.execute("SELECT reason FROM endpoints").fetchall(),
    }
    conn.close()
    assert said == {
        "note": [("the log showed <redacted>",)],
        "last_error": [("401 for key <redacted>",)],
        "reason": [("refused: <redacted>",)],
    }, said
