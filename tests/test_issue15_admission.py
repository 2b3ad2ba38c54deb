"""A big job list's admission without per-job work that is not needed: lines checked without
pydantic when they need nothing of it, canonical strings and the ledger's JSON text made from
shared parts, no query per job after admitting, no status rows read back for a quiet
``submit --no-run``. Each fast path must give exactly what the general one gives."""

from __future__ import annotations

import json
import sqlite3

import pytest
import yaml
from conftest import jobs, manifest
from pydantic import ValidationError

from afc_cli.joblist import plain_spec
from afc_cli.ledger.core import _dumps
from afc_cli.manifest import (
    MAX_PROMPT_CHARS,
    JobSpec,
    _canonical_text,
    canonical_json,
    load_manifest,
    request_hash,
)

LINES = [
    {"key": "a", "prompt": "one"},
    {"key": "a", "prompt": "one", "output": "x/{key}.{ext}"},
    {"key": "a", "prompt": "one", "output": None},
    {"key": "", "prompt": "empty key"},
    {"key": "k" * 200, "prompt": "longest key"},
    {"key": "k" * 201, "prompt": "key too long"},
    {"key": "a", "prompt": "p" * MAX_PROMPT_CHARS},
    {"key": "a", "prompt": "p" * (MAX_PROMPT_CHARS + 1)},
    {"key": "a", "prompt": "lone \ud800 surrogate"},
    {"key": "a\udfff", "prompt": "x"},
    {"key": "a", "prompt": "x", "output": "o\ud800"},
    {"key": "a", "prompt": "é, 日本, \u2028 and \x00"},
    {"key": "a", "prompt": 7},
    {"key": 7, "prompt": "x"},
    {"key": "a", "prompt": "x", "output": 3},
    {"key": "a"},
    {"prompt": "x"},
    {"key": "a", "prompt": "x", "colour": "red"},
    {"key": "a", "prompt": "x", "params": {"size": "16x16"}},
    {"key": "a", "prompt": True},
]


@pytest.mark.parametrize("row", LINES, ids=range(len(LINES)))
def test_a_line_checked_without_pydantic_is_one_pydantic_accepts_unchanged(row):
    try:
        validated = JobSpec.model_validate(row)
    except ValidationError:
        validated = None
    plain = plain_spec(row)
    if plain is None:  # the general path checks it (and names its problems)
        assert row not in LINES[:3]  # the common lines do take the fast path
        return
    assert validated is not None, f"plain_spec accepted a line pydantic refuses: {row!r}"
    for name in ("key", "prompt", "output", "params", "chain", "webhook"):
        assert getattr(plain, name) == getattr(validated, name), name


STRINGS = [
    "plain prompt, 35mm film",
    'a "quoted" word',
    "back\\slash",
    "tab\tand newline\n",
    "\x00\x1f\x7f",
    "é, 日本, emoji \U0001f3ac, \u2028\u2029",
    "",
    "{batch}/{key}.{ext}",
]


@pytest.mark.parametrize("text", STRINGS, ids=range(len(STRINGS)))
def test_a_canonical_string_is_rfc8785s(text):
    assert _canonical_text(text) == canonical_json(text)


def test_the_stored_text_of_each_body_is_the_ledgers_json_of_it(tmp_path):
    rows = [
        {"key": "a", "prompt": "one"},
        {"key": "b", "prompt": 'é "quoted" \\ 日本 \u2028', "output": "x/{key}-é.{ext}"},
        {"key": "c", "prompt": "p", "params": {"size": "16x16", "latency_s": 0.5}},
        {"key": "d", "prompt": "p", "chain": [{"provider": "local", "model": "m2"}]},
    ]
    data = manifest(rows[:1], defaults={"params": {"size": "32x32"}, **manifest([])["defaults"]})
    data["jobs_from"] = "jobs.jsonl"
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    (tmp_path / "jobs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[1:]))
    loaded = load_manifest(tmp_path / "m.yaml")
    assert len(loaded.jobs) == 4
    for job in loaded.jobs:
        assert job.request_json == _dumps(job.body)
        assert request_hash(job.body) == job.request_hash


def test_a_quiet_admission_reads_no_rows_back_and_still_says_conflicts(afc):
    data = manifest([], jobs_from="jobs.jsonl")
    del data["jobs"]
    afc.write_manifest(data)
    rows = jobs(40)
    (afc.cwd / "jobs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    first = afc("submit", "manifest.yaml", "--no-run", "-q")
    assert first.returncode == 0, first.stderr
    assert first.stdout == first.stderr == ""
    stored = afc.rows("SELECT request_json, request_hash FROM jobs ORDER BY seq")
    assert len(stored) == 40
    assert all(request_hash(json.loads(text)) == digest for text, digest in stored)
    assert afc.rows("SELECT COUNT(*) FROM events WHERE kind = 'admitted'") == [(40,)]
    rows[7]["prompt"] = "changed"
    (afc.cwd / "jobs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    again = afc("submit", "manifest.yaml", "--no-run", "-q")
    assert again.returncode == 3
    assert "IDEMPOTENCY_CONFLICT: key 'shot-008' changed prompt" in again.stderr
    shown = afc.json("submit", "manifest.yaml", "--no-run", expect=3)
    assert len(shown["jobs"]) == 39 and shown["counts"] == {"queued": 39}


def test_queue_stats_sum_each_status_over_every_batch(afc):
    """The counts are grouped by batch and status (the index's order) and summed per status."""
    for batch, n in (("b1", 3), ("b2", 2)):
        afc.write_manifest(manifest(jobs(n), batch=batch), name=f"{batch}.yaml")
        assert afc("submit", f"{batch}.yaml", "--no-run", "-q").returncode == 0
    conn_rows = afc.rows("SELECT id FROM jobs WHERE batch = 'b2' ORDER BY seq")
    conn = sqlite3.connect(afc.cwd / "afc.db")
    conn.execute("UPDATE jobs SET status = 'dead' WHERE id = ?", conn_rows[0])
    conn.execute("UPDATE jobs SET status = 'failed' WHERE batch = 'b1' AND seq = 0")
    conn.commit()
    conn.close()
    stats = afc.json("queue", "stats")
    assert (stats["queued"], stats["dlq"], stats["failed"]) == (3, 1, 1)


def test_an_admission_leaves_the_page_cache_as_it_found_it(tmp_path):
    """The bigger page cache is the admission's alone: the run after it keeps SQLite's."""
    from afc_cli.ledger import Ledger
    from afc_cli.run import manifest_rates

    (tmp_path / "m.yaml").write_text(yaml.safe_dump(manifest(jobs(3)), sort_keys=False))
    loaded = load_manifest(tmp_path / "m.yaml")
    ledger = Ledger(tmp_path / "afc.db")
    try:
        before = ledger.db.execute("PRAGMA cache_size").fetchone()[0]
        result = ledger.admit(loaded, "file:///tmp/out", manifest_rates(loaded))
        assert len(result.new) == 3
        assert ledger.db.execute("PRAGMA cache_size").fetchone()[0] == before
    finally:
        ledger.close()
