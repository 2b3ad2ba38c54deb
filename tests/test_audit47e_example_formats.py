"""Outside audit 47e: the provider examples as a new user runs them, against fakes whose
models answer the image format the real ones answer when not asked for another."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from afc_cli.inputs import image_type

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# what each example's model answers unless its input names an output_format (Replicate's
# black-forest-labs/flux-1.1-pro schema: output_format default "webp"; fal's fal-ai/flux/dev:
# default "jpeg")
DEFAULTS = {"black-forest-labs/flux-1.1-pro": "webp", "fal-ai/flux/dev": "jpeg"}


@pytest.mark.parametrize("example", ["replicate.yaml", "fal.yaml", "fallback.yaml"])
def test_each_example_stores_the_format_its_output_keys_name(afc, fake, example):
    """examples/replicate.yaml, fal.yaml and fallback.yaml named no output_format, so their
    output keys ended `.png` (README: `{ext}` is `params.output_format`, default png) while
    flux-1.1-pro answers WebP and fal's flux/dev JPEG unless asked: every job stored a WebP
    or JPEG under a `.png` name, and the run said so ('answered image/webp for
    replicate-stills/plate-001, stored under replicate-stills/plate-001.png (image/png): set
    params.output_format ...'), the advice the README gives and the examples did not follow.
    fallback.yaml reaches Replicate's flux here through OpenAI refusing twice, its chain's
    `fallback_on: [refusal]`."""
    fake.model_formats.update(DEFAULTS)
    shutil.copy(EXAMPLES / example, afc.cwd / example)
    if example == "fallback.yaml":
        text = (afc.cwd / example).read_text()
        (afc.cwd / example).write_text(text.replace('prompt: "', 'prompt: "moderation: '))
    run = afc("submit", example)
    assert run.returncode == 0, run.stderr
    assert "set params.output_format" not in run.stderr, run.stderr
    outputs = afc.json("outputs")["outputs"]
    assert outputs
    for output in outputs:
        if example == "fallback.yaml":
            assert output["model"].startswith("replicate/"), output
        head = Path(output["path"]).read_bytes()[:32]
        assert output["path"].endswith(".png") and image_type(head) == "image/png", output
