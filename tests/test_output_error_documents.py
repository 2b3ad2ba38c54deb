"""An output download answered 200 with an error document instead of the output: an API
gateway's JSON error, or an object store's XML ``<Error>`` (a CDN in front of S3). It was
stored as the job's image and the job succeeded, the paid render lost with nothing said, as
an HTML page was before. Now it is a fetch that failed for a moment: fetched again, and
stored once the output comes (end to end in tests/test_audit18_outputs.py). A model's own
JSON or XML output (its URL names such a file) and an SVG (``image/svg+xml``) are outputs as
before."""

from __future__ import annotations

import pytest
from test_audit18_outputs import S3_ERROR
from test_audit_wire import PNG

from afc_cli.providers.http import not_an_output

GATEWAY_ERROR = b'{"error": {"code": 503, "message": "upstream unavailable"}}'


@pytest.mark.parametrize(
    "ctype, body, url, said",
    [
        ("application/json", GATEWAY_ERROR, "https://cdn/out.png", "a JSON document"),
        ("application/problem+json", b'[{"title": "x"}]', None, "a JSON document"),
        ("application/xml", S3_ERROR, "https://cdn/out.png", "an XML error document"),
        ("text/xml; charset=utf-8", S3_ERROR, None, "an XML error document"),
        ("application/json", GATEWAY_ERROR, "https://cdn/result.json", None),  # its output
        ("application/xml", S3_ERROR, "https://cdn/out.xml", None),
        ("image/svg+xml", b'<?xml version="1.0"?><svg xmlns="..."/>', None, None),
        ("application/xml", b'<?xml version="1.0"?><svg xmlns="..."/>', None, None),
        ("application/json", PNG, None, None),  # the bytes decide, as for a page
        ("application/octet-stream", GATEWAY_ERROR, None, None),
    ],
)
def test_error_documents_are_no_output(ctype, body, url, said):
    found = not_an_output(ctype, body, url)
    assert (found is None) if said is None else (said in found), found
