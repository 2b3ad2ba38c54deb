"""Outside audit 59c: "Approve the N shown" on afc serve's review page looks for each output
it makes ``succeeded``, as a card's own Approve and ``afc review approve`` do.

The button took a card's thumbnail, kept in the server's memory for its life, as proof that
the output had just been read from storage. A thumbnail made before the output was deleted
(or cut short, or saved over at another size) was still served, from memory, on every
reload, and the button approved the job: a ``succeeded`` job with nothing of its own
stored, which afc never renders again (the jobs needing it then failed INPUT_UNAVAILABLE).
The card's own Approve, on the same page, refused it. Now the button looks for each output
it approves (one HEAD each, ``review.gone_each``) and leaves those not in storage as verified
undecided, saying why, as it leaves a card whose picture could not be shown."""

from __future__ import annotations

import html
import re
from urllib.parse import urlencode

import httpx
import pytest
from browser import Served, awaiting, status

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def _form(page: str) -> list[tuple[str, str]]:
    form = page.split('class="approve-shown-form"', 1)[1].split("</form>", 1)[0]
    return [
        (name, html.unescape(value))
        for name, value in re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', form)
    ]


def _shown(url: str) -> str:
    """The review page, its pictures loaded as a browser loads them."""
    page = httpx.get(url + "review").text
    for src in re.findall(r'<img src="([^"]+)"', page):
        assert httpx.get(httpx.URL(url).join(src)).status_code == 200
    return page


@pytest.mark.parametrize("how", ["deleted", "cut short"])
def test_approve_the_shown_leaves_an_output_gone_since_its_picture_was_made(afc, how):
    awaiting(afc, 3)
    [(gone_key,)] = afc.rows("SELECT output_key FROM jobs WHERE key = 'shot-002'")
    served = Served(afc)
    try:
        _shown(served.url)  # the thumbnails made, kept in the server's memory
        output = afc.outputs() / gone_key
        if how == "deleted":
            output.unlink()
        else:
            output.write_bytes(output.read_bytes()[:100])
        page = _shown(served.url)  # reloaded: the kept thumbnail shown again
        done = httpx.post(
            served.url + "review/approve-shown",
            content=urlencode(_form(page)),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            follow_redirects=True,
        )
        said = html.unescape(done.text)
    finally:
        code, stderr = served.stop()
    assert code == 0 and "Traceback" not in stderr, stderr
    # the two outputs in place are approved; the one gone since its picture was made stays
    # awaiting review, the page saying why and what to do, as its own Approve says it
    assert done.status_code == 200, said
    assert "2 jobs: approved." in said, said
    assert "1 job left undecided" in said, said
    why = "is gone from storage" if how == "deleted" else "is 100 bytes, not the"
    assert "shot-002 (its output (" in said and why in said, said
    then = "then" if how == "deleted" else "and"  # and, first: delete what is at its key
    assert f"'afc cancel shot-002' {then} 'afc retry shot-002'" in said, said
    assert "no longer in storage as verified" in said, said
    assert 'data-key="shot-002"' in done.text  # still on the queue
    assert [status(afc, k) for k in ("shot-001", "shot-002", "shot-003")] == [
        "succeeded",
        "awaiting_review",
        "succeeded",
    ]
    assert afc.rows("SELECT COUNT(*) FROM reviews")[0][0] == 2
