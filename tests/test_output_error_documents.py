"""An output download answered 200 with an error document instead of the output: an API
gateway's JSON error, or an object store's XML ``<Error>`` (a CDN in front of S3). It was
stored as the job's image and the job succeeded, the paid render lost with nothing said, as
an HTML page was before (tests/test_audit18_outputs.py). Now it is a fetch that failed for
a moment: fetched again, and stored once the output comes. A model's own JSON or XML output
(its URL names such a file) and an SVG (``image/svg+xml``) are outputs as before."""

from __future__ import annotations

import pytest
from test_audit_wire import OPENAI_RATES, PNG, WireServer, answered, attempts, dalle, reply, run

from afc_cli.providers.http import not_an_output

S3_ERROR = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
    b"<Message>Request has expired</Message></Error>"
)
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


def pages_then_png(first: bytes, ctype: str):
    sent = []

    async def behaviour(head, body, writer) -> bool:
        if not sent:
            sent.append(1)
            writer.write(reply("200 OK", first, {"Content-Type": ctype}))
        else:
            writer.write(reply("200 OK", PNG, {"Content-Type": "image/png"}))
        await writer.drain()
        return True

    return behaviour


def test_an_s3_error_answered_200_is_fetched_again_not_stored(afc):
    cdn = WireServer(pages_then_png(S3_ERROR, "application/xml"))
    provider = WireServer(answered(dalle(f"{cdn.url}/out.png")))
    try:
        result = run(
            afc, "openai", "dall-e-3", OPENAI_RATES, {"OPENAI_BASE_URL": f"{provider.url}/v1"}
        )
        assert result.returncode == 0, result.stderr
        assert (afc.outputs() / "b1" / "shot.png").read_bytes() == PNG
        assert len(provider.received) == 1  # one paid render
        assert len(cdn.received) == 2
        (attempt,) = attempts(afc)
        assert attempt["status"] == "succeeded" and attempt["cost"] == "0.040000", attempt
    finally:
        provider.stop()
        cdn.stop()
