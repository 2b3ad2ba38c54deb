"""``afc report --html``: one self-contained file, its thumbnails made from the stored outputs
(file:// and s3://), its spend the costs report's figures. Read here as HTML, without a
browser (tests/test_issue18_browser.py opens it in one)."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import stat
from html.parser import HTMLParser

import pytest
from conftest import jobs, manifest

pytest.importorskip("PIL", reason="the web extra: pip install 'afc-cli[web]'")


def shots() -> dict:
    """Three stored outputs (one by the chain's fallback model), one failure."""
    return manifest(
        [
            {"key": "s01", "prompt": "a lighthouse at dawn", "params": {"size": "96x64"}},
            {"key": "s02", "prompt": "storm over the harbour", "params": {"fail": ["server"]}},
            {"key": "s03", "prompt": "the keeper's hands", "params": {"fail": ["refusal"] * 3}},
            {"key": "s04", "prompt": "fog bank", "params": {"size": "64x96"}},
        ],
        defaults={
            "chain": [
                {"provider": "local", "model": "m1", "attempts": 1},
                {"provider": "local", "model": "m2", "attempts": 3},
            ]
        },
        rates=[
            {"provider": "local", "model": "m1", "per_image": "0.04"},
            {"provider": "local", "model": "m2", "per_image": "0.08"},
        ],
    )


class Page(HTMLParser):
    """The report's cards (data-key, and the img inside), its totals, and every URL in it."""

    def __init__(self):
        super().__init__()
        self.cards: dict[str, dict] = {}
        self.totals: dict[str, dict[str, str]] = {}
        self.urls: list[str] = []
        self._card: str | None = None
        self._total: tuple[str, str] | None = None
        self._by: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for name in ("src", "href"):
            if attrs.get(name):
                self.urls.append(attrs[name])
        if tag in ("link", "script") and (attrs.get("src") or attrs.get("href")):
            self.urls.append(f"<{tag}> {attrs}")
        if tag == "figure" and "data-key" in attrs:
            self._card = attrs["data-key"]
            self.cards.setdefault(self._card, {"status": attrs["data-status"], "img": None})
        if tag == "img" and self._card:
            self.cards[self._card]["img"] = attrs.get("src")
        if tag == "table" and "data-by" in attrs:
            self._by = attrs["data-by"]
        if tag == "td" and "data-total" in attrs:
            self._total = (self._by, attrs["data-total"])

    def handle_endtag(self, tag):
        if tag == "figure":
            self._card = None
        if tag == "td":
            self._total = None

    def handle_data(self, data):
        if self._total and data.strip():
            by, field = self._total
            self.totals.setdefault(by, {})[field] = data.strip()


def read(path) -> Page:
    page = Page()
    page.feed(path.read_text())
    return page


def decoded(uri: str):
    from PIL import Image

    assert uri.startswith("data:image/webp;base64,"), uri[:40]
    return Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])))


def test_the_report_is_self_contained_with_every_output_and_the_costs_reports_totals(afc):
    afc.write_manifest(shots())
    assert afc("submit", "manifest.yaml").returncode == 1  # s03 fails
    result = afc("report", "--html", "report.html")
    assert result.returncode == 0, result.stderr
    assert "4 jobs, 3 pictures, 1 failed" in result.stderr
    page = read(afc.cwd / "report.html")

    # nothing fetched when it opens: every URL in it is a data: URI or a fragment
    assert page.urls and all(u.startswith(("data:", "#")) for u in page.urls), page.urls
    outputs = afc.json("outputs")["outputs"]
    assert sorted(o["key"] for o in outputs) == ["s01", "s02", "s04"]
    from PIL import Image

    for output in outputs:
        thumb = decoded(page.cards[output["key"]]["img"])
        with Image.open(output["path"]) as original:
            # the thumbnail is this output, downscaled: same aspect, same colours
            assert thumb.size[0] / thumb.size[1] == pytest.approx(
                original.size[0] / original.size[1], rel=0.05
            )
            expected = original.convert("RGB").resize((1, 1), Image.Resampling.BOX).getpixel((0, 0))
            got = thumb.convert("RGB").resize((1, 1), Image.Resampling.BOX).getpixel((0, 0))
            assert all(abs(a - b) <= 12 for a, b in zip(expected, got, strict=True))
    assert page.cards["s03"] == {"status": "failed", "img": None}

    for by in ("provider", "model", "day"):
        report = afc.json("costs", "report", "--by", by)
        assert page.totals[by] == {k: str(v) for k, v in report["total"].items()}
    text = (afc.cwd / "report.html").read_text()
    assert "fallback" in text  # s02 was made by the chain's second model
    assert "CHAIN_FAILED: refusal from local/m1" in text  # the failure's cause


def test_json_summary_and_the_since_and_batch_scopes(afc):
    afc.write_manifest(shots())
    afc("submit", "manifest.yaml")
    summary = afc.json("report", "--html", "r.html", "--batch", "b1")
    assert summary["jobs"] == 4 and summary["pictures"] == 3 and summary["failures"] == 1
    assert summary["total"] == afc.json("costs", "report")["total"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((afc.cwd / "r.html").stat().st_mode) == 0o666 & ~umask  # not 0600
    later = afc.json("report", "--html", "later.html", "--since", "2999-01-01")
    assert later["jobs"] == 0 and later["total"]["priced"] == "0.000000"


def test_refusals_write_nothing(afc):
    afc.write_manifest(shots())
    afc("submit", "manifest.yaml")
    unknown = afc("report", "--html", "r.html", "--batch", "nope")
    assert unknown.returncode == 2 and "known batches: b1" in unknown.stderr
    no_folder = afc("report", "--html", "missing/r.html")
    assert no_folder.returncode == 2 and "does not exist" in no_folder.stderr
    bad_since = afc("report", "--html", "r.html", "--since", "yesterday")
    assert bad_since.returncode == 2
    assert sorted(p.name for p in afc.cwd.iterdir() if p.suffix in (".html", ".part")) == []
    no_ledger = afc("report", "--html", "r.html", "--ledger", "other.db")
    assert no_ledger.returncode == 2 and not (afc.cwd / "other.db").exists()


def test_only_an_html_file_is_ever_replaced(afc):
    """Found by an outside audit: ``afc report --html afc.db`` replaced the ledger (its paid
    history gone) and ``--html manifest.yaml`` the manifest."""
    afc.write_manifest(shots())
    afc("submit", "manifest.yaml")
    (afc.cwd / "notes.txt").write_text("keep me")
    (afc.cwd / "afc.db-empty").touch()
    for name in ("afc.db", "manifest.yaml", "notes.txt", "afc.db-empty"):
        before = (afc.cwd / name).read_bytes()
        result = afc("report", "--html", name)
        assert result.returncode == 2, result.stderr
        assert "exists and is not an HTML file" in result.stderr
        assert (afc.cwd / name).read_bytes() == before
    assert afc("status").returncode == 0
    # an empty file (mktemp) and an HTML file opening with a comment are replaced
    (afc.cwd / "empty.html").touch()
    (afc.cwd / "commented.html").write_text("<!-- kept by hand -->\n<!DOCTYPE html><p>old")
    for name in ("empty.html", "commented.html"):
        assert afc("report", "--html", name).returncode == 0, name
        assert "<!doctype html>" in (afc.cwd / name).read_text().lower()
    # a report written before is replaced, as a rerun from cron does
    assert afc("report", "--html", "r.html").returncode == 0
    (afc.cwd / "r.html").write_text((afc.cwd / "r.html").read_text() + "<!-- old -->")
    assert afc("report", "--html", "r.html").returncode == 0
    assert "<!-- old -->" not in (afc.cwd / "r.html").read_text()


def test_an_output_gone_from_storage_is_said_on_its_card(afc):
    afc.write_manifest(manifest(jobs(2)))
    afc("submit", "manifest.yaml")
    (afc.outputs() / "b1" / "shot-001.png").unlink()
    result = afc("report", "--html", "r.html")
    assert result.returncode == 0, result.stderr
    assert "1 stored outputs have no picture in the report (shot-001)" in result.stderr
    page = read(afc.cwd / "r.html")
    assert page.cards["shot-001"]["img"] is None and page.cards["shot-002"]["img"]
    assert "shot-001.png: missing" in (afc.cwd / "r.html").read_text()


def test_thumbnails_from_s3(afc, s3):  # noqa: F811 - the S3 fixture
    afc.write_manifest(manifest(jobs(3, size="480x120")))
    assert afc("submit", "manifest.yaml", "--storage", s3.url).returncode == 0
    summary = afc.json("report", "--html", "r.html")
    assert summary["pictures"] == 3 and summary["without_picture"] == []
    page = read(afc.cwd / "r.html")
    for i in (1, 2, 3):
        assert decoded(page.cards[f"shot-00{i}"]["img"]).size == (240, 60)
    assert any(method == "GET" for method, _ in s3.plan.seen)  # read through S3 itself


def test_a_secret_in_a_prompt_stays_out_of_the_report(afc):
    secret = "sk-" + "A1b2" * 10
    afc.write_manifest(manifest([{"key": "k", "prompt": f"a poster reading {secret}"}]))
    afc("submit", "manifest.yaml")
    afc("report", "--html", "r.html")
    text = (afc.cwd / "r.html").read_text()
    assert secret not in text and "&lt;redacted&gt;" in text


def test_the_help_is_fast_without_the_web_libraries(afc):
    probe = (
        "import sys, afc_cli.cli; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('jinja2', 'starlette', 'uvicorn', 'PIL', 'pygal', 'selenium'))))"
    )
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", "import json; " + probe], capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == []


def test_thumbnail_of_what_is_not_a_picture(tmp_path):
    from afc_cli.storage.file import FileStorage
    from afc_cli.web.thumbs import make

    (tmp_path / "clip.mp4").write_bytes(b"\0" * 100)
    (tmp_path / "notes.png").write_text("not a png")
    store = FileStorage(tmp_path)
    assert make(store, "clip.mp4").note == "video: no preview"
    assert make(store, "notes.png").note == "not a picture this afc can preview"
    missing = make(store, "gone.png")
    assert missing.data is None and re.search(r"gone\.png: missing", missing.note)


def test_the_charts_show_a_micro_dollar_spend_not_zero(afc):
    """The charts' figures were cents (``$0.00`` for a real 0.000006): they keep the digits
    afc counts in."""
    afc.write_manifest(
        manifest(jobs(1), rates=[{"provider": "local", "model": "m1", "per_image": "0.000006"}])
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc("report", "--html", "report.html").returncode == 0
    text = (afc.cwd / "report.html").read_text()
    assert "$0.000006" in text
