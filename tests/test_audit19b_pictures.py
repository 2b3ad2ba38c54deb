"""Outside audit 19 (b) of the pictures: ``afc report --html``, ``afc serve`` and ``afc show``
as a user meets them, over plain HTTP and HTML."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
from browser import Served, awaiting, browser, rendered_as  # noqa: F401 - the browser fixture
from conftest import jobs, manifest

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def test_a_password_with_a_quote_in_a_postgresql_ledger_url_is_in_no_report(afc, pg_url):
    """A password may hold a quote (``'`` needs no percent-encoding in a URL, and libpq takes
    it): the report's header said 'made ... from postgresql://afc:pa'ss@...' and afc show's
    'no job with key' (afc retry's and afc cancel's too) named the URL as given, the mask of a URL's credentials stopping at the
    quote. afc serve, which names the ledger as every other message does, masked it."""
    password = "Sup3r'S3cretPW-0123"
    url = pg_url.replace("postgresql://afc@", f"postgresql://afc:{password}@")
    afc.env["AFC_LEDGER"] = url
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    result = afc("report", "--html", "report.html")
    assert result.returncode == 0, result.stderr
    text = (afc.cwd / "report.html").read_text()
    assert "postgresql://&lt;redacted&gt;@127.0.0.1" in text
    shown = afc("show", "no-such-key")
    assert shown.returncode == 2 and "no job with key 'no-such-key'" in shown.stderr
    retried = afc("retry", "no-such-key")
    assert retried.returncode == 2 and "no job with key 'no-such-key'" in retried.stderr
    for said in (text, result.stderr, shown.stderr, retried.stderr):
        assert "S3cretPW" not in said and "Sup3r" not in said


def test_a_ledger_serve_cannot_read_is_a_page_saying_so_not_a_traceback(afc):
    """The ledger moved away, a PostgreSQL server restarting, a ledger upgraded by a newer
    afc: every page of afc serve was 'Internal Server Error' and every request wrote a
    Python traceback on serve's terminal (uvicorn's), the ledger's own one-line message in
    its last line. Now each page is a 503 saying it, and once the ledger is back the pages
    are too."""
    afc.write_manifest(manifest(jobs(2, size="32x32")))
    assert afc("submit", "manifest.yaml").returncode == 0
    [job_id] = afc.rows("SELECT id FROM jobs WHERE key = 'shot-001'")[0]
    served = Served(afc)
    try:
        (afc.cwd / "afc.db").rename(afc.cwd / "moved.db")
        for path in ("", "failures", "spend", "review", f"thumb/{job_id}", f"output/{job_id}"):
            answer = httpx.get(served.url + path)
            assert answer.status_code == 503, (path, answer.status_code, answer.text[:200])
            assert "no ledger at afc.db" in answer.text, path
        (afc.cwd / "moved.db").rename(afc.cwd / "afc.db")
        assert httpx.get(served.url).status_code == 200
        assert httpx.get(f"{served.url}thumb/{job_id}").status_code == 200
    finally:
        code, stderr = served.stop()
    assert code == 0
    assert "Traceback" not in stderr and "no ledger at afc.db" in stderr, stderr


def test_a_thumbnail_storage_could_not_read_is_read_again_once_the_output_is_back(afc):
    """afc serve kept a thumbnail it could not read from storage (an S3 blip, a mount not yet
    there, an output deleted and then restored) as 'no thumbnail' for that SHA-256 until the
    server restarted: the card's picture stayed broken while the full-size output beside it
    was served. A storage error is not kept; what the bytes themselves are is."""
    afc.write_manifest(manifest(jobs(1, size="32x32")))
    assert afc("submit", "manifest.yaml").returncode == 0
    [[job_id]] = afc.rows("SELECT id FROM jobs")
    [stored] = [Path(o["path"]) for o in afc.json("outputs")["outputs"]]
    served = Served(afc)
    try:
        stored.rename(stored.with_name("aside"))
        gone = httpx.get(f"{served.url}thumb/{job_id}")
        assert gone.headers.get("content-type") != "image/webp"
        stored.with_name("aside").rename(stored)
        assert httpx.get(f"{served.url}output/{job_id}").status_code == 200
        thumb = httpx.get(f"{served.url}thumb/{job_id}")
        assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/webp"
    finally:
        code, _ = served.stop()
    assert code == 0


class Sections(HTMLParser):
    """The report's paged sections: for each ``section.page``, its classes and its cards."""

    def __init__(self):
        super().__init__()
        self.sections: list[tuple[set[str], list[str]]] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section" and "page" in (attrs.get("class") or "").split():
            self.sections.append((set(attrs["class"].split()), []))
        elif tag == "figure" and "data-key" in attrs and self.sections:
            self.sections[-1][1].append(attrs["data-key"])

    def handle_endtag(self, tag):
        if tag == "section":
            self.sections.append((set(), []))  # cards after it belong to no section


def press(driver, selector: str) -> None:
    """Click a button wherever the page is scrolled (the sticky header may cover it)."""
    from selenium.webdriver.common.by import By

    button = driver.find_element(By.CSS_SELECTOR, selector)
    driver.execute_script("arguments[0].click()", button)


def test_the_reports_jobs_awaiting_review_are_paged_as_its_contact_sheet(afc, browser):  # noqa: F811
    """A batch whose every job awaits review: the report's 'Awaiting review' was every card
    again, on one page, after the paged contact sheet. 3,000 such jobs took a headless
    Chromium 2.7 to 3.8 s to load the file (0.9 to 1.2 s with that section not laid out), a
    10,000-job one three times that, and a reader scrolled past 10,000 cards to reach the
    spend. It is cut into pages of 200 as the sheet is, with a pager of its own."""
    awaiting(afc, 201)
    written = afc.json("report", "--html", "report.html")
    assert written["awaiting_review"] == 201
    parsed = Sections()
    parsed.feed((afc.cwd / "report.html").read_text())
    review = [(classes, keys) for classes, keys in parsed.sections if "review" in classes]
    assert [len(keys) for _, keys in review] == [200, 1]
    assert "current" in review[0][0] and "current" not in review[1][0]
    loose = [keys for classes, keys in parsed.sections if not classes and keys]
    assert loose == [], loose  # no card outside a page
    from selenium.webdriver.common.by import By

    browser.get((afc.cwd / "report.html").as_uri())
    last = "#review ~ .paged figure[data-key=shot-201]"
    card = browser.find_element(By.CSS_SELECTOR, last)
    assert not card.is_displayed()
    press(browser, "#review ~ .paged .pager button[data-page='2']")
    assert card.is_displayed()
    # the contact sheet's pager still pages the sheet alone
    sheet_card = browser.find_element(By.CSS_SELECTOR, "#sheet ~ .paged figure[data-key=shot-201]")
    assert not sheet_card.is_displayed()
    press(browser, "#sheet ~ .paged .pager button[data-page='2']")
    assert sheet_card.is_displayed() and card.is_displayed()


def test_a_report_that_cannot_be_written_says_so_and_sends_no_one_to_resume(afc):
    """A folder the report cannot be written in (no permission, a read-only or full disk)
    said '[Errno 13] Permission denied: '/dir/.r.html.x1y2z3.part'; every job stays
    resumable: fix it, then run 'afc resume'' with exit 1: a temporary name the user never
    gave, and an 'afc resume' that would start the batch's unfinished jobs, paid, to mend a
    report. Now it is the file asked for, why, and exit 2 with nothing written."""
    afc.write_manifest(manifest(jobs(1, size="16x16")))
    assert afc("submit", "manifest.yaml").returncode == 0
    result = afc("report", "--html", "/sys/report.html")  # sysfs: refused even to root
    assert result.returncode == 2, result.stderr
    assert "/sys/report.html" in result.stderr and "ermission denied" in result.stderr
    assert "resume" not in result.stderr and ".part" not in result.stderr
    assert "Traceback" not in result.stderr


def test_a_live_card_whose_output_cannot_be_shown_says_why(afc):
    """The report's card of an output it cannot show says why (missing from storage, not a
    picture, a video); afc serve's showed a broken-image icon: its thumbnail was a bare 404.
    Now the thumbnail is a picture of that sentence, sandboxed as every output is."""
    afc.write_manifest(manifest(jobs(2, size="16x16")))
    assert afc("submit", "manifest.yaml").returncode == 0
    ids = dict(afc.rows("SELECT key, id FROM jobs"))
    paths = {o["key"]: Path(o["path"]) for o in afc.json("outputs")["outputs"]}
    paths["shot-001"].unlink()
    rendered_as(afc, "shot-002", b"not a picture at all")
    served = Served(afc)
    try:
        gone = httpx.get(f"{served.url}thumb/{ids['shot-001']}")
        odd = httpx.get(f"{served.url}thumb/{ids['shot-002']}")
        nothing = httpx.get(f"{served.url}thumb/no-such-job")
    finally:
        code, _ = served.stop()
    assert code == 0
    for answer, said in ((gone, "missing"), (odd, "not a picture this afc can preview")):
        assert answer.status_code == 200, answer.status_code
        assert answer.headers["content-type"].startswith("image/svg+xml")
        assert answer.headers["content-security-policy"].startswith("sandbox;")
        assert said in answer.text and "<script" not in answer.text
    assert nothing.status_code == 404


def test_a_review_of_an_output_found_in_storage_names_the_model_that_made_it(afc):
    """A job awaiting review whose output a fresh ledger found in storage (the ledger lost,
    the manifest submitted again: no render, no attempt) had model null in 'afc review list
    --json' and 'None' on afc serve's review page, where the contact sheet named the model
    that made it (from the stored object)."""
    data = manifest(jobs(1, size="16x16"))
    data["defaults"]["review"] = True
    afc.write_manifest(data)
    afc("submit", "manifest.yaml")
    for path in afc.cwd.glob("afc.db*"):
        if path.is_file():
            path.unlink()
    afc("submit", "manifest.yaml")
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(0,)]
    [listed] = afc.json("review", "list")["awaiting_review"]
    assert listed["model"] == "local/m1", listed
    served = Served(afc)
    try:
        page = httpx.get(f"{served.url}review").text
    finally:
        served.stop()
    assert "local/m1 · " in page and "None" not in page


def test_serve_opens_a_storage_once_not_once_a_picture(afc, monkeypatch):
    """Every thumbnail and full-size output of afc serve opened its batch's storage anew:
    for S3 a new boto3 client each time, a third of a second of CPU on the 2-core machine. A
    contact-sheet page of 120 thumbnails from S3 (moto) took 62 s to fill and each full-size
    output about a second; with the backend kept, 21 s (most of it moto's) and 0.1 s.
    Counted here as the backends opened, never as a time."""
    import asyncio

    from afc_cli import storage
    from afc_cli.web.server import build_app

    afc.write_manifest(manifest(jobs(6, size="16x16")))
    assert afc("submit", "manifest.yaml").returncode == 0
    opened: list[str] = []
    real = storage.open

    def counted(url: str):
        opened.append(url)
        return real(url)

    monkeypatch.setattr(storage, "open", counted)
    app = build_app(str(afc.cwd / "afc.db"), batch=None, host="127.0.0.1", token=None)
    ids = [row[0] for row in afc.rows("SELECT id FROM jobs")]

    async def browse() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            for job_id in ids:
                thumb = await client.get(f"/thumb/{job_id}")
                assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/webp"
                full = await client.get(f"/output/{job_id}")
                assert full.content[:8] == b"\x89PNG\r\n\x1a\n"

    asyncio.run(browse())
    assert len(opened) == 1, opened


def test_a_card_never_shows_another_jobs_picture_of_the_same_bytes(afc):
    """afc serve kept thumbnails by the output's SHA-256 alone: two jobs whose outputs are
    the same bytes (the same prompt, a deterministic model) shared one, so once one job's
    picture was shown, the other's card showed it too after its own output was deleted from
    storage, its full-size link answering 404 'missing'."""
    listed = [{"key": key, "prompt": "the same", "params": {"size": "16x16"}} for key in "ab"]
    afc.write_manifest(manifest(listed))
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc.rows("SELECT COUNT(DISTINCT output_sha256) FROM jobs") == [(1,)]
    ids = dict(afc.rows("SELECT key, id FROM jobs"))
    paths = {o["key"]: Path(o["path"]) for o in afc.json("outputs")["outputs"]}
    served = Served(afc)
    try:
        shown = httpx.get(f"{served.url}thumb/{ids['b']}")
        assert shown.headers["content-type"] == "image/webp"
        paths["a"].unlink()
        assert httpx.get(f"{served.url}output/{ids['a']}").status_code == 404
        gone = httpx.get(f"{served.url}thumb/{ids['a']}")
    finally:
        served.stop()
    assert gone.headers["content-type"].startswith("image/svg+xml"), gone.headers
    assert "missing" in gone.text
