"""Outside audit 34g: ``afc report --html`` of a big batch whose S3 store is down.

The README says that once one read finds no connection to a store, the report asks it for
none of its other outputs (their cards say why). That held within a page of the contact
sheet only: each page of 200 cards made its thumbnails with a fresh record of the stores out
of reach, so every page tried the store again, as many reads at once as the report has
threads. A 10,000-job batch is 50 pages: against an endpoint that refused or reset
connections, 171 connections instead of a handful; against one that hung (a VPN down, a
firewall dropping packets), each page waited out its own connect (10 s) or read (120 s)
timeout, about 8 to 100 minutes for a report that says no picture could be read. Now the
stores found out of reach are kept for the whole report."""

from __future__ import annotations

import os

import pytest
from conftest import jobs, manifest
from s3fake import Fault


def test_a_store_found_down_is_not_asked_again_on_each_page_of_the_report(afc, s3):
    pytest.importorskip("PIL", reason="the web extra: pip install 'afc-cli[web]'")
    afc.write_manifest(manifest(jobs(601, size="8x8")))  # four pages of the contact sheet
    result = afc("submit", "manifest.yaml", "--storage", s3.url, "--concurrency", "16")
    assert result.returncode == 0, result.stderr
    s3.plan.clear()
    # the store goes down: every read of an object has its connection reset
    s3.plan.add(Fault("GET", r"\.png", "reset", -1))
    result = afc("report", "--html", "r.html", timeout=300)
    assert result.returncode == 0, result.stderr
    assert "601 stored outputs have no picture in the report" in result.stderr
    reads = [path for method, path, _ in s3.plan.injected if method == "GET"]
    # the first reads, made at once in the report's threads, find it down; no page after
    # asks again (each of the four pages asked it as many times before)
    workers = min(16, (os.cpu_count() or 2) * 2)  # thumbs.make_all's threads
    assert 1 <= len(reads) <= workers, (len(reads), workers)
    page = (afc.cwd / "r.html").read_text()
    assert page.count("could not be reached") >= 601 - workers
