"""A job list's common line (a key and a prompt) is resolved to a ``PlainJob`` that keeps only
its own parts and shares the rest: it must read exactly like the ``ResolvedJob`` the general
path makes of the same job, and admit the same ledger rows."""

from __future__ import annotations

import json

import yaml
from conftest import manifest

from afc_cli.manifest import PlainJob, ResolvedJob, load_manifest, request_hash

FIELDS = (
    "index",
    "key",
    "job_id",
    "prompt",
    "params",
    "chain",
    "output_template",
    "output_key",
    "body",
    "request_hash",
    "webhook",
    "review",
    "needs",
    "inputs",
    "request_json",
)

ROWS = [
    {"key": "a", "prompt": "one"},
    {"key": "b", "prompt": 'quote " and back\\slash, caf\u00e9 \u2603 \U0001f600'},
    {"key": "c", "prompt": "tab\there, new\nline, \u0000 control"},
    {"key": "d", "prompt": ""},
    {"key": "e", "prompt": "five", "output": "x/{key}.{ext}"},  # its own template
    {"key": "f", "prompt": "six", "params": {"size": "16x16"}},  # its own params
]

TOP = {
    "webhook": {"url": "https://hooks.example/afc", "secret_env": "AFC_HOOK_SECRET"},
}


def _manifests(tmp_path, rows):
    listed_dir, inline_dir = tmp_path / "listed", tmp_path / "inline"
    listed_dir.mkdir()
    inline_dir.mkdir()
    listed = manifest([], jobs_from="jobs.jsonl", **TOP)
    del listed["jobs"]
    listed["defaults"]["params"] = {"size": "64x64"}
    listed["defaults"]["review"] = True
    (listed_dir / "m.yaml").write_text(yaml.safe_dump(listed, sort_keys=False))
    (listed_dir / "jobs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    inline = manifest(rows, **TOP)
    inline["defaults"] = listed["defaults"]
    (inline_dir / "m.yaml").write_text(yaml.safe_dump(inline, sort_keys=False))
    return listed_dir / "m.yaml", inline_dir / "m.yaml"


def test_a_plain_line_reads_like_the_resolved_job_of_the_general_path(tmp_path):
    listed_path, inline_path = _manifests(tmp_path, ROWS)
    listed = list(load_manifest(listed_path).jobs)
    inline = list(load_manifest(inline_path).jobs)
    assert [type(j) for j in listed] == [ResolvedJob] + [PlainJob] * 3 + [ResolvedJob] * 2
    assert all(type(j) is ResolvedJob for j in inline)
    for got, want in zip(listed, inline, strict=True):
        for name in FIELDS:
            assert getattr(got, name) == getattr(want, name), (want.key, name)
        assert request_hash(got.body) == got.request_hash
        assert json.loads(got.request_json) == got.body
    # read back from the temporary file again: the same
    again = list(load_manifest(listed_path).jobs)
    assert [[getattr(j, n) for n in FIELDS] for j in again] == [
        [getattr(j, n) for n in FIELDS] for j in inline
    ]


def test_a_list_of_plain_lines_admits_the_rows_of_the_same_jobs_inline(afc):
    columns = (
        "id, key, seq, request_hash, request_json, output_key, webhook_json, status, step,"
        " review, inputs_json"
    )
    listed_path, inline_path = _manifests(afc.cwd, ROWS)
    env = {"AFC_HOOK_SECRET": "whsec_dGVzdA=="}
    for path, ledger in ((listed_path, "listed.db"), (inline_path, "inline.db")):
        done = afc("submit", str(path), "--no-run", "-q", "--ledger", ledger, env=env)
        assert done.returncode == 0, done.stderr
    import sqlite3

    def rows(name):
        conn = sqlite3.connect(afc.cwd / name)
        try:
            return (
                conn.execute(f"SELECT {columns} FROM jobs ORDER BY seq").fetchall(),
                conn.execute(
                    "SELECT job_id, kind, detail_json FROM events ORDER BY job_id"
                ).fetchall(),
            )
        finally:
            conn.close()

    listed_rows, listed_events = rows("listed.db")
    assert len(listed_rows) == len(ROWS) and len(listed_events) == len(ROWS)
    assert (listed_rows, listed_events) == rows("inline.db")
    # and a replay of the list admits nothing new
    again = afc.json("submit", str(listed_path), "--no-run", "--ledger", "listed.db", env=env)
    assert again["admitted"] == {"new": 0, "replayed": len(ROWS), "conflicts": 0}
