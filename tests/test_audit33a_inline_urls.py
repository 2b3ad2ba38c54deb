"""Outside audit 33a: an output sent inline as a ``data:`` URL (fal's ``sync_mode: true``
images) that holds a piece of an image, or bytes that are no image where its media type
names one.

An output URL's download refuses a body cut short (``http.cut_short``); a ``data:`` URL was
decoded and returned as it was: fal's ``data:image/png;base64,...`` of a PNG's first 40
bytes, or of a line of text, was stored as the job's ``.png``, the job succeeded (exit 0)
and the paid image was lost with nothing said. It now fails the attempt ``unavailable``
with the render's cost (a fetch of the same bytes again would find them the same), and the
next attempt renders again."""

from __future__ import annotations

import pytest
from conftest import manifest
from test_providers import FAST, MODELS, RATES

from afc_cli.providers.local import render_png


@pytest.mark.parametrize(
    ("prompt", "said"),
    [
        ("b64-text", "holds 48 bytes that are no image (image/png said)"),
        ("b64-cut", "holds a PNG cut short (40 bytes, no IEND chunk)"),
    ],
)
def test_a_fal_data_url_of_no_whole_image_is_a_failed_paid_attempt(afc, fake, prompt, said):
    data = manifest([{"key": "j", "prompt": prompt, "params": {"sync_mode": True}}], rates=RATES)
    data["defaults"]["chain"] = [
        {"provider": "fal", "model": MODELS["fal"], "attempts": 2, "backoff": FAST}
    ]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert not (afc.outputs() / "b1" / "j.png").exists()
    attempts = afc.json("show", "j", expect=None)["attempts"]
    assert len(attempts) == 2 and fake.counts["fal_submit"] == 2, attempts
    for attempt in attempts:
        assert (attempt["status"], attempt["error_class"]) == ("failed", "unavailable"), attempt
        assert said in attempt["error"] and "never stored" in attempt["error"], attempt
        assert attempt["cost"] == "0.025000", attempt


def test_other_inline_outputs_are_not_judged():
    from afc_cli.providers.http import inline_not_whole

    png = render_png("x", 4, 4)
    assert inline_not_whole("image/png", png) is None
    assert inline_not_whole("text/plain", b"a model's text output") is None
    assert inline_not_whole("application/octet-stream", b"\x00" * 9) is None
    assert inline_not_whole("image/png", png[:40]) is not None
