"""``afc serve``'s review actions over plain HTTP, against afc_cli.review: a GET to an
action address decides nothing, nor does a POST without the server's form token, a rejection
without a reason or an unknown key. (The browser clicks Approve and Reject in
tests/test_issue18_browser.py.)"""

from __future__ import annotations

import httpx
import pytest
from browser import Served, awaiting, ledger_state, status

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def test_a_get_to_an_action_url_decides_nothing(afc):
    awaiting(afc, 1)
    before = ledger_state(afc.cwd / "afc.db")
    served = Served(afc)
    try:
        page = httpx.get(served.url + "review").text
        token = page.split('name="form_token" value="', 1)[1].split('"', 1)[0]
        for action in ("approve", "reject"):
            query = {"key": "shot-001", "batch": "b1", "reason": "no", "form_token": token}
            assert httpx.get(f"{served.url}review/{action}", params=query).status_code == 405
        forged = httpx.post(
            served.url + "review/approve",
            data={"key": "shot-001", "batch": "b1", "form_token": token[:-1]},
        )
        assert forged.status_code == 403
        no_reason = httpx.post(
            served.url + "review/reject",
            data={"key": "shot-001", "batch": "b1", "form_token": token, "reason": " "},
        )
        assert no_reason.status_code == 409 and "needs a reason" in no_reason.text
        unknown = httpx.post(
            served.url + "review/approve",
            data={"key": "no-such-key", "batch": "b1", "form_token": token},
        )
        assert unknown.status_code == 409 and "no-such-key" in unknown.text
    finally:
        code, _ = served.stop()
    assert code == 0
    assert ledger_state(afc.cwd / "afc.db") == before
    assert status(afc, "shot-001") == "awaiting_review"


def test_a_server_of_one_batch_decides_and_shows_that_batch_only(afc):
    """Found by an outside audit: ``afc serve --batch b1`` approved a job of another batch
    sent in its form, and streamed another batch's outputs by job id. A page number past the
    last (``?page=10**20``) was a 500 with a traceback."""
    from conftest import jobs, manifest

    awaiting(afc, 1)  # b1/shot-001 awaits review
    other = manifest(jobs(1, size="96x64"), batch="b2")
    other["defaults"]["review"] = True
    afc.write_manifest(other, "other.yaml")
    afc("submit", "other.yaml")
    [(b2_id,)] = afc.rows("SELECT id FROM jobs WHERE batch = 'b2'")
    [(b1_id,)] = afc.rows("SELECT id FROM jobs WHERE batch = 'b1'")
    before = ledger_state(afc.cwd / "afc.db")
    served = Served(afc, "--batch", "b1")
    try:
        page = httpx.get(served.url + "review").text
        token = page.split('name="form_token" value="', 1)[1].split('"', 1)[0]
        named = httpx.post(
            served.url + "review/approve",
            data={"key": "shot-001", "batch": "b2", "form_token": token},
        )
        assert named.status_code == 403 and "batch b1 only" in named.text
        shown = httpx.post(  # "approve the shown" of a page this server never shows
            served.url + "review/approve-shown",
            data={"key": "shot-001", "batch": "b2", "form_token": token},
        )
        assert shown.status_code == 403 and "batch b1 only" in shown.text
        assert httpx.get(f"{served.url}output/{b2_id}").status_code == 404
        assert httpx.get(f"{served.url}thumb/{b2_id}").status_code == 404
        assert httpx.get(f"{served.url}output/{b1_id}").status_code == 200
        huge = httpx.get(served.url, params={"page": "9" * 20})
        assert huge.status_code == 200 and "shot-001" in huge.text
    finally:
        code, stderr = served.stop()
    assert code == 0 and "Traceback" not in stderr
    assert ledger_state(afc.cwd / "afc.db") == before
    assert status(afc, "shot-001") == "awaiting_review"


def test_the_jobs_a_review_page_shows_are_approved_at_once_all_or_none(afc):
    """An audit at a studio's scale: 2,000 jobs awaiting review were 2,000 clicks of Approve
    in afc serve, a page load each. "Approve the N shown" sends the page's own cards (batch
    and key: no job the reviewer did not see) and approves them in one transaction, or none
    when one was decided meanwhile; it needs the form token as every decision does."""
    import html
    import re
    from urllib.parse import urlencode

    awaiting(afc, 3)
    served = Served(afc)
    try:
        page = httpx.get(served.url + "review").text
        token = page.split('name="form_token" value="', 1)[1].split('"', 1)[0]
        form = page.split('class="approve-shown-form"', 1)[1].split("</form>", 1)[0]
        shown = re.findall(r'name="key" value="([^"]+)"', form)
        assert sorted(shown) == ["shot-001", "shot-002", "shot-003"]  # the oldest first
        assert "Approve the 3 shown" in form
        for src in re.findall(r'<img src="([^"]+)"', page):  # the pictures, as a browser shows them
            assert httpx.get(httpx.URL(served.url).join(src)).status_code == 200
        pairs = [("batch", "b1"), ("key", "shot-001"), ("batch", "b1"), ("key", "shot-002")]

        def post(fields: list[tuple[str, str]]) -> httpx.Response:
            return httpx.post(
                served.url + "review/approve-shown",
                content=urlencode(fields),  # repeated fields, in the page's order
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )

        forged = post(pairs)
        assert forged.status_code == 403
        # shot-003 decided meanwhile (afc review in a terminal): none of the three is approved
        assert afc("review", "approve", "shot-003").returncode == 0
        late = [*pairs, ("batch", "b1"), ("key", "shot-003"), ("form_token", token)]
        refused = post(late)
        said = html.unescape(refused.text)
        assert refused.status_code == 409 and "'b1/shot-003': it is succeeded" in said
        assert "nothing was decided" in said
        assert status(afc, "shot-001") == status(afc, "shot-002") == "awaiting_review"
        done = post([*pairs, ("form_token", token)])
        assert done.status_code == 303
        after = httpx.get(done.url.join(done.headers["location"])).text
        assert "2 jobs: approved." in after and "No job is awaiting review." in after
    finally:
        code, stderr = served.stop()
    assert code == 0 and "Traceback" not in stderr
    assert {status(afc, f"shot-00{i}") for i in (1, 2, 3)} == {"succeeded"}
    who = afc.rows(
        "SELECT j.key, r.decided_by FROM reviews r JOIN jobs j ON j.id = r.job_id ORDER BY j.key"
    )
    assert [key for key, _ in who] == ["shot-001", "shot-002", "shot-003"]
    assert who[0][1] == who[1][1] and who[0][1].endswith("(afc serve)")
