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
