"""Outside audit 46 (c): an output URL answering 200 under the output's own image type
(``Content-Type: image/png``) with bytes that are no image at all: a CDN's or a proxy's error
words. They were stored as the job's ``.png`` and the job succeeded (exit 0), the paid image
lost with nothing said, where the same bytes in a data URL that says ``image/png`` fail the
attempt (tests/test_audit33a_inline_urls.py). Now they are no output: fetched again as a 503
is, then the attempt fails at the render's cost, nothing stored. Runs the real ``afc``
against a raw socket server (tests/test_audit_wire.py)."""

from __future__ import annotations

import json

import pytest
from conftest import manifest
from fakeproviders import KEYS, render_webp
from test_audit_wire import PNG, WireServer, reply

from afc_cli.providers.http import not_the_image_said

ERROR_WORDS = b"upstream error: the object could not be read\n"


def test_an_output_url_answering_words_as_image_png_is_no_output(afc):
    gets: list[bytes] = []

    async def behaviour(head, body, writer) -> bool:
        path = head.split(b" ")[1]
        if path.startswith(b"/out/"):
            gets.append(path)
            writer.write(reply("200 OK", ERROR_WORDS, {"Content-Type": "image/png"}))
        else:
            url = f"{server.url}/out/shot.png"
            data = json.dumps({"created": 1, "data": [{"url": url}]}).encode()
            writer.write(reply("200 OK", data, {"Content-Type": "application/json"}))
        await writer.drain()
        return True

    server = WireServer(behaviour)
    try:
        data = manifest([{"key": "shot", "prompt": "a lighthouse"}])
        # the window bounds the rounds of fetches (DALL-E keeps its URLs about an hour)
        data["defaults"]["chain"] = [
            {"provider": "openai", "model": "dall-e-3", "attempts": 1, "window_s": 2}
        ]
        data["rates"] = [{"provider": "openai", "model": "dall-e-3", "per_image": "0.04"}]
        afc.write_manifest(data)
        env = {**KEYS, "OPENAI_BASE_URL": server.url, "AFC_POLL_S": "0.05"}
        result = afc("submit", "manifest.yaml", env=env)
        [attempt] = afc.json("show", "shot", expect=None, env=env)["attempts"]
    finally:
        server.stop()
    assert result.returncode == 1, result.stderr
    assert len(gets) > 1  # fetched again, as a CDN's passing failure is
    assert not list(afc.outputs().rglob("*.png"))
    assert attempt["status"] == "failed" and attempt["cost"] == "0.040000", attempt
    assert "bytes that are no image (image/png said)" in attempt["error"], attempt
    assert "never stored as the output" in attempt["error"], attempt


@pytest.mark.parametrize(
    ("ctype", "body", "said"),
    [
        ("image/png", ERROR_WORDS, True),
        ("image/jpeg; charset=binary", b"<Error>AccessDenied</Error>", True),
        ("IMAGE/WEBP", b"\x00" * 64, True),
        ("image/png", PNG, False),
        ("image/png", render_webp(), False),  # another image kind: a model's own, said apart
        ("text/plain", ERROR_WORDS, False),  # no image said: not judged
        ("application/octet-stream", ERROR_WORDS, False),
        ("video/mp4", ERROR_WORDS, False),
        (None, ERROR_WORDS, False),
    ],
)
def test_only_bytes_that_are_no_image_under_an_image_type_are_refused(ctype, body, said):
    found = not_the_image_said(ctype, body[:64], len(body))
    assert (found is not None) == said, found
