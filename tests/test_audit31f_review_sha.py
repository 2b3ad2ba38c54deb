"""Outside audit 31f: ``afc review list --json`` gives each job's output ``sha256`` so a
script knows which output a decision is about, but ``afc review approve KEY`` and ``afc review
reject KEY`` decided by key alone: a job cancelled (or rejected), retried and rendered again
between the list and the decision, another picture, was approved unseen. ``--sha256 HEX``
names the output decided on, checked in the decision's own transaction; the review page's
card check moved into that transaction too (it read the SHA-256 before it)."""

from __future__ import annotations

import signal
import threading

import pytest
from conftest import frozen_at, ledger_count, manifest

OTHER = "ab" * 32  # the SHA-256 of the picture a re-render stored


def _sql(afc, ledger_url: str, sql: str, params: tuple = ()) -> None:
    """Write to the test's ledger as another afc process would (a re-render's output)."""
    if ledger_url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(ledger_url) as conn:
            conn.execute(sql.replace("?", "%s"), params)
        return
    import sqlite3

    conn = sqlite3.connect(ledger_url)
    try:
        with conn:
            conn.execute(sql, params)
    finally:
        conn.close()


def rendered_again(afc, ledger_url: str) -> None:
    """What a cancel, a retry and a new render leave: the job awaiting review again, its
    output another picture (the local provider renders one request alike every time, so
    the new picture's digest is written as that render's store step writes it: in the
    ledger, and in the stored object's metadata, which an approval's look at the output
    compares with the ledger's)."""
    import json

    _sql(afc, ledger_url, "UPDATE jobs SET output_sha256 = ? WHERE key = 'frame'", (OTHER,))
    [sidecar] = afc.outputs().rglob("*.afc.json")
    meta = json.loads(sidecar.read_text())
    sidecar.write_text(json.dumps({**meta, "sha256": OTHER}))


def awaiting(afc, ledger_url: str) -> str:
    afc.env["AFC_LEDGER"] = ledger_url
    afc.write_manifest(manifest([{"key": "frame", "prompt": "the style frame", "review": True}]))
    done = afc("submit", "manifest.yaml")
    assert done.returncode == 0, done.stderr
    [row] = afc.json("review", "list")["awaiting_review"]
    return row["sha256"]


def undecided(afc, ledger_url: str) -> None:
    assert ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM reviews") == 0
    assert ledger_count(
        afc, ledger_url, "SELECT COUNT(*) FROM jobs WHERE status = 'awaiting_review'"
    )


def test_a_decision_on_the_output_listed_is_refused_once_it_is_another(afc, ledger_url):
    listed = awaiting(afc, ledger_url)
    rendered_again(afc, ledger_url)
    for args in (("approve", "frame"), ("reject", "frame", "--reason", "too dark")):
        refused = afc("review", *args, "--sha256", listed)
        assert refused.returncode == 2, refused.stderr
        said = refused.stderr
        assert "'frame'" in said and listed in said and OTHER in said, said
        assert "nothing was decided" in said and "afc review list" in said, said
        undecided(afc, ledger_url)
    # upper-case hex, as some tools print it, is the same digest
    approved = afc("review", "approve", "frame", "--sha256", OTHER.upper())
    assert approved.returncode == 0, approved.stderr
    assert ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'")


def test_a_render_between_the_check_and_the_decision_is_refused(afc, ledger_url):
    """The SHA-256 is compared in the decision's transaction, not in a read before it: a
    decision frozen after its reads while the job is rendered again decides nothing."""
    listed = awaiting(afc, ledger_url)
    proc = afc.popen(
        "review", "approve", "frame", "--sha256", listed, env={"AFC_STALL_POINT": "review_decide"}
    )
    try:
        frozen_at(proc)
        rendered_again(afc, ledger_url)
        proc.send_signal(signal.SIGCONT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, stderr
    assert listed in stderr and OTHER in stderr, stderr
    undecided(afc, ledger_url)


def test_sha256_names_one_job_and_a_digest(afc, tmp_path):
    ledger = str(tmp_path / "afc.db")
    afc.env["AFC_LEDGER"] = ledger
    afc.write_manifest(
        manifest([{"key": k, "prompt": f"frame {k}", "review": True} for k in ("a", "b")])
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    shas = {row["key"]: row["sha256"] for row in afc.json("review", "list")["awaiting_review"]}
    several = afc("review", "approve", "a", "b", "--sha256", shas["a"])
    assert several.returncode == 2 and "one job" in several.stderr, several.stderr
    bad = afc("review", "approve", "a", "--sha256", "abc")
    assert bad.returncode == 2 and "64 hexadecimal digits" in bad.stderr, bad.stderr
    undecided(afc, ledger)
    right = afc("review", "approve", "a", "--sha256", shas["a"])
    assert right.returncode == 0, right.stderr


def test_the_review_page_checks_the_output_in_the_decisions_transaction(afc, tmp_path):
    pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")
    import httpx
    from browser import Served
    from test_audit27a_stale_card import form_fields

    ledger = str(tmp_path / "afc.db")
    awaiting(afc, ledger)
    served = Served(afc, env={"AFC_STALL_POINT": "review_decide"})
    answers = []
    try:
        approve = form_fields(httpx.get(served.url + "review").text, "approve")
        post = threading.Thread(
            target=lambda: answers.append(
                httpx.post(f"{served.url}review/approve", data=approve, timeout=60)
            )
        )
        post.start()
        frozen_at(served.proc)  # after the page's reads, before the decision's transaction
        rendered_again(afc, ledger)
        served.proc.send_signal(signal.SIGCONT)
        post.join(60)
    finally:
        code, _ = served.stop()
    assert code == 0
    [answer] = answers
    assert answer.status_code == 409, answer.text
    assert "its output changed since this page showed it" in answer.text
    undecided(afc, ledger)
