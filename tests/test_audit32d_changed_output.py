"""Outside audit 32d: a stored output saved over in place (a retoucher's editor, a sync, an
object replaced) after afc verified it was shown as the job's own picture: on the review page,
whose "Approve the N shown" then approved the verified output on the strength of a picture
that was not it (the jobs using it as a reference then failed, their read-back checked
against the verified SHA-256), and in the report's contact sheet. A thumbnail is now made
only of the bytes afc verified; the card says the output changed in storage instead."""

from __future__ import annotations

import hashlib

import pytest
from browser import Served, awaiting, status

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")
import httpx  # noqa: E402

from afc_cli.providers.local import render_png  # noqa: E402


def shown_form(page: str) -> dict[str, list[str]]:
    """The fields "Approve the N shown" sends, as the page wrote them."""
    form = page.split('class="approve-shown-form"', 1)[1].split("</form>", 1)[0]
    fields: dict[str, list[str]] = {}
    for part in form.split("<input")[1:]:
        name = part.split('name="', 1)[1].split('"', 1)[0]
        fields.setdefault(name, []).append(part.split('value="', 1)[1].split('"', 1)[0])
    return fields


def saved_over(afc) -> tuple[str, str]:
    """shot-001's stored file saved over with another picture; its job id and the path."""
    [(job_id, key, sha)] = afc.rows(
        "SELECT id, output_key, output_sha256 FROM jobs WHERE key = 'shot-001'"
    )
    path = afc.outputs() / key
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha
    path.write_bytes(render_png("touched up by hand", 96, 64))
    return job_id, str(path)


def test_a_picture_saved_over_is_not_shown_nor_approved_as_the_jobs(afc):
    awaiting(afc, 1)
    job_id, _path = saved_over(afc)
    served = Served(afc)
    try:
        page = httpx.get(served.url + "review").text
        thumb = httpx.get(f"{served.url}thumb/{job_id}")
        assert thumb.status_code == 200
        assert thumb.headers["content-type"].startswith("image/svg+xml"), thumb.headers
        assert "changed in storage since afc verified it" in thumb.text
        answer = httpx.post(served.url + "review/approve-shown", data=shown_form(page))
        assert answer.status_code == 303, answer.text
        told = httpx.get(answer.headers["location"]).text
        assert "1 job left undecided" in told, told
        assert "shot-001" in told
    finally:
        code, _ = served.stop()
    assert code == 0
    assert status(afc, "shot-001") == "awaiting_review"
    assert afc.rows("SELECT COUNT(*) FROM reviews")[0][0] == 0


def test_the_report_does_not_embed_a_picture_saved_over_as_the_jobs(afc):
    awaiting(afc, 2)
    saved_over(afc)
    result = afc.json("report", "--html", "report.html")
    assert result["without_picture"] == ["shot-001"], result
    text = (afc.cwd / "report.html").read_text()
    assert "changed in storage since afc verified it" in text
