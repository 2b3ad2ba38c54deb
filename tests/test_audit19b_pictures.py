"""Outside audit 19 (b) of the pictures: ``afc report --html``, ``afc serve`` and ``afc show``
as a user meets them, over plain HTTP and HTML."""

from __future__ import annotations

import pytest
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
