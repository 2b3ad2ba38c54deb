"""A job's probe that finds its own output in storage counts a render avoided (``afc costs
report``: avoided_renders, avoided_cost) before its verify reads the object back. When that
read-back fails (VERIFY_FAILED: the object was edited or cut short in storage), no render was
avoided: the job needs a new, paid render (or its spool file) to succeed. The count stayed, so
after the job was rendered again the report showed the job's two paid renders and a render
"avoided" at the price of one, which never was. The failed verify now takes the find back."""

from __future__ import annotations

from conftest import manifest


def report(afc) -> dict:
    return afc.json("costs", "report")["total"]


def damage(afc, key: str) -> None:
    [(output_key,)] = afc.rows("SELECT output_key FROM jobs WHERE key = ?", (key,))
    output = afc.outputs() / output_key
    output.write_bytes(output.read_bytes() + b"edited in place")


def test_a_reviewed_output_found_damaged_after_cancel_and_retry_avoided_nothing(afc):
    afc.write_manifest(manifest([{"key": "frame", "prompt": "the style frame", "review": True}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    damage(afc, "frame")
    for args in (("cancel", "frame", "--yes"), ("retry", "frame")):
        assert afc(*args).returncode == 0
    assert afc("resume").returncode == 1
    assert afc.rows("SELECT error_code FROM jobs WHERE key = 'frame'")[0][0] == "VERIFY_FAILED"
    total = report(afc)
    assert (total["avoided_renders"], total["avoided_cost"]) == (0, "0.000000"), total

    # rendered again as its message says (the object deleted): two renders paid, none avoided
    [(output_key,)] = afc.rows("SELECT output_key FROM jobs WHERE key = 'frame'")
    for path in afc.outputs().glob(output_key + "*"):
        path.unlink()
    assert afc("retry", "frame").returncode == 0
    assert afc("resume").returncode == 0
    total = report(afc)
    assert total["priced"] == "0.100000", total
    assert (total["avoided_renders"], total["avoided_cost"]) == (0, "0.000000"), total


def test_a_ledger_made_anew_over_a_damaged_output_avoided_nothing(afc):
    afc.write_manifest(manifest([{"key": "shot", "prompt": "a shot"}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    damage(afc, "shot")
    (afc.cwd / "afc.db").unlink()
    assert afc("submit", "manifest.yaml").returncode == 1
    assert afc.rows("SELECT error_code FROM jobs WHERE key = 'shot'")[0][0] == "VERIFY_FAILED"
    total = report(afc)
    assert (total["avoided_renders"], total["avoided_cost"]) == (0, "0.000000"), total


def test_an_intact_output_found_is_still_a_render_avoided(afc):
    afc.write_manifest(manifest([{"key": "shot", "prompt": "a shot"}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    (afc.cwd / "afc.db").unlink()
    assert afc("submit", "manifest.yaml").returncode == 0
    total = report(afc)
    assert (total["avoided_renders"], total["avoided_cost"]) == (1, "0.050000"), total
