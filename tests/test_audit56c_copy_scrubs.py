"""Outside audit 56c (secrets): ``afc ledger copy`` carried every row as an older afc had kept
it. An afc before today's scrubber kept texts it would mask now (a provider's error quoting
the key in a form then not looked for, an event's detail, a usage object), and a studio moving
to PostgreSQL put them, key and all, into a database many people read with psql. The copy now
scrubs the texts the ledger scrubs where they enter (error messages, event details, usage,
review notes, delivery errors) with the secrets of the environment it runs in; what drives work
(a job's request, its webhook, a provider's request id) is copied as it is."""

from __future__ import annotations

import json
import sqlite3

from conftest import manifest

KEY = "oai-9fK2mQ7xL4vR8tZ1wY6nB3"  # no token shape: found by its value only


def _old_afc_kept_the_key(path) -> tuple[str, ...]:
    """The source's rows as an afc that scrubbed less would have written them."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "UPDATE attempts SET error_message = ? WHERE error_message IS NOT NULL",
            (f"401: Incorrect API key provided: {KEY}",),
        )
        conn.execute("UPDATE jobs SET error_message = ?", (f"last seen with {KEY}",))
        conn.execute(
            "UPDATE attempts SET usage_json = ? WHERE error_message IS NULL",
            (json.dumps({"images": 1, "echo": f"key={KEY[:14]}..."}),),
        )
        conn.execute(
            "UPDATE events SET detail_json = ? WHERE detail_json IS NOT NULL",
            (json.dumps({"message": f"Bearer? no: {KEY}"}),),
        )
    requests = tuple(r[0] for r in conn.execute("SELECT request_json FROM jobs ORDER BY id"))
    conn.close()
    return requests


def test_a_copy_into_postgresql_carries_no_key_an_older_afc_kept(afc, pg_url):
    import psycopg

    data = manifest([{"key": "shot", "prompt": f"a sign that reads {KEY[:6]}"}])
    data["jobs"][0]["params"] = {"fail": ["server"]}  # a failed attempt, then a success
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    requests = _old_afc_kept_the_key(afc.cwd / "afc.db")

    copied = afc.json("ledger", "copy", "afc.db", pg_url, env={"OPENAI_API_KEY": KEY})
    assert copied["rows"]["attempts"] == 2, copied

    with psycopg.connect(pg_url) as conn:
        texts = [
            str(row)
            for table in ("jobs", "attempts", "events", "steps")
            for row in conn.execute(f"SELECT * FROM {table}").fetchall()
        ]
        kept = conn.execute("SELECT request_json FROM jobs ORDER BY id").fetchall()
        messages = [r[0] for r in conn.execute("SELECT error_message FROM attempts").fetchall()]
    assert texts and all(KEY not in t and KEY[:14] not in t for t in texts), texts
    assert "401: Incorrect API key provided: <redacted>" in messages, messages
    assert tuple(r[0] for r in kept) == requests  # the request as admitted: a replay is one
    replay = afc.json("submit", "manifest.yaml", env={"AFC_LEDGER": pg_url})
    assert replay["admitted"]["replayed"] == 1, replay
