"""Outside audit 31f: "Approve the N shown" on the review page sent each card's batch and key
only, and approved a card as seen when this server had sent the picture the job has now: a
job rendered again after the page was loaded (cancelled or rejected, retried, awaiting review
with another picture), whose new picture another page (a colleague's, another tab) had
loaded, was approved from a page that showed the old one. Its form now sends the SHA-256 each
card showed: a card of another output is left undecided, said why, and the outputs approved
are checked in the decision's transaction."""

from __future__ import annotations

import hashlib
import signal
import sqlite3
import threading

import pytest
from browser import Served, awaiting, status
from conftest import frozen_at

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")
import httpx  # noqa: E402


def shown_form(page: str) -> dict[str, list[str]]:
    """The fields "Approve the N shown" sends, as the page wrote them."""
    form = page.split('class="approve-shown-form"', 1)[1].split("</form>", 1)[0]
    fields: dict[str, list[str]] = {}
    for part in form.split("<input")[1:]:
        name = part.split('name="', 1)[1].split('"', 1)[0]
        fields.setdefault(name, []).append(part.split('value="', 1)[1].split('"', 1)[0])
    return fields


def render_again(afc, seed: str) -> str:
    """What a cancel, a retry and a new render of shot-001 leave: another picture stored
    at its output key and its SHA-256 in the ledger (the local provider renders one request
    alike every time, so the new picture is written here as a render would)."""
    from afc_cli.providers.local import render_png

    data = render_png(seed, 96, 64)
    [(key,)] = afc.rows("SELECT output_key FROM jobs WHERE key = 'shot-001'")
    (afc.outputs() / key).write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    conn = sqlite3.connect(afc.cwd / "afc.db")
    with conn:
        conn.execute("UPDATE jobs SET output_sha256 = ? WHERE key = 'shot-001'", (sha,))
    conn.close()
    return sha


def reviews(afc) -> int:
    return afc.rows("SELECT COUNT(*) FROM reviews")[0][0]


def test_a_card_rendered_again_since_the_page_showed_it_is_left_undecided(afc):
    awaiting(afc, 1)
    served = Served(afc)
    try:
        page = httpx.get(served.url + "review").text
        [job_id] = [row[0] for row in afc.rows("SELECT id FROM jobs")]
        assert httpx.get(f"{served.url}thumb/{job_id}").status_code == 200
        old = shown_form(page)
        render_again(afc, "another picture")
        # a colleague's page loads the new picture
        assert httpx.get(served.url + "review").status_code == 200
        assert httpx.get(f"{served.url}thumb/{job_id}").status_code == 200
        answer = httpx.post(served.url + "review/approve-shown", data=old)
        assert answer.status_code == 303, answer.text
        told = httpx.get(answer.headers["location"]).text
        assert "rendered again since this page showed it" in told, told
    finally:
        code, _ = served.stop()
    assert code == 0
    assert status(afc, "shot-001") == "awaiting_review" and reviews(afc) == 0


def test_a_render_between_the_pages_check_and_the_decision_is_refused(afc):
    awaiting(afc, 1)
    served = Served(afc, env={"AFC_STALL_POINT": "review_decide"})
    answers = []
    try:
        page = httpx.get(served.url + "review").text
        [job_id] = [row[0] for row in afc.rows("SELECT id FROM jobs")]
        assert httpx.get(f"{served.url}thumb/{job_id}").status_code == 200
        fields = shown_form(page)
        post = threading.Thread(
            target=lambda: answers.append(
                httpx.post(served.url + "review/approve-shown", data=fields, timeout=60)
            )
        )
        post.start()
        frozen_at(served.proc)  # after the page's reads, before the decision's transaction
        render_again(afc, "a picture rendered meanwhile")
        served.proc.send_signal(signal.SIGCONT)
        post.join(60)
    finally:
        code, _ = served.stop()
    assert code == 0
    [answer] = answers
    assert answer.status_code == 409, answer.text
    assert "output changed since this page showed it" in answer.text
    assert status(afc, "shot-001") == "awaiting_review" and reviews(afc) == 0
