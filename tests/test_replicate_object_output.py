"""A Replicate model whose output schema is an object (``{"image": URL, "seed": 42}``) was
"succeeded without an output URL": a failed ``server`` attempt at its cost, and each attempt
after it paid again for the same answer. Its URL values are its outputs now
(``replicate.output_urls``)."""

from __future__ import annotations

from conftest import manifest


def test_an_object_output_is_fetched_and_stored_once_paid_once(afc, fake):
    from test_providers import MODELS, RATES

    data = manifest([{"key": "obj", "prompt": "object-out a lighthouse"}], rates=RATES)
    data["defaults"]["chain"] = [{"provider": "replicate", "model": MODELS["replicate"]}]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    stored = (afc.outputs() / "b1" / "obj.png").read_bytes()
    assert stored.startswith(b"\x89PNG"), stored[:16]
    rows = afc.rows("SELECT status, cost_micros FROM attempts")
    assert [status for status, _ in rows] == ["succeeded"], rows
    assert rows[0][1] is not None


def test_output_urls_of_each_shape():
    from afc_cli.providers.replicate import output_urls

    assert output_urls("https://r.example/a.png") == ["https://r.example/a.png"]
    assert output_urls(["https://r.example/a.png", "https://r.example/b.png"]) == [
        "https://r.example/a.png"
    ]
    assert output_urls({"seed": 1, "image": "https://r.example/a.png", "note": "done"}) == [
        "https://r.example/a.png"
    ]
    assert output_urls({"images": ["https://r.example/a.png", "data:image/png;base64,AA=="]}) == [
        "https://r.example/a.png",
        "data:image/png;base64,AA==",
    ]
    assert output_urls({"text": "no picture"}) == [] and output_urls(None) == []
    assert output_urls([]) == [] and output_urls([{"image": "x"}]) == []
