"""Audit 20 (c), money: what every paid attempt records that it cost, through the real ``afc``
command against the fake providers at the wire (tests/fakeproviders.py)."""

from __future__ import annotations

import json

from conftest import manifest

OPENAI_TOKENS = [
    {
        "provider": "openai",
        "model": "gpt-image-1",
        "per_1k_input_tokens": "0.005",
        "per_1k_output_tokens": "0.04",
    }
]


def _openai(afc, jobs, rates):
    data = manifest(jobs, rates=rates)
    data["defaults"]["chain"] = [
        {
            "provider": "openai",
            "model": "gpt-image-1",
            "attempts": 1,
            "backoff": {"base": 0.01, "cap": 0.05},
        }
    ]
    afc.write_manifest(data)


def test_an_openai_answer_without_an_image_keeps_the_usage_it_billed(afc, fake):
    """OpenAI answered 200 with ``data: []`` and its ``usage`` (50 input tokens, 4160 output
    tokens: the call was made and billed). The attempt was recorded failed with no usage, no
    cost and no request id: ``afc costs report`` said 0.000000 priced and one unpriced
    attempt, though the answer said what it billed. The attempt keeps the answer's tokens,
    its cost by the card's token rates (0.000250 + 0.166400) and its x-request-id."""
    _openai(afc, [{"key": "a", "prompt": "no-image a"}], OPENAI_TOKENS)
    result = afc("submit", "manifest.yaml", "--json")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    rows = afc.rows(
        "SELECT status, error_class, cost_micros, cost_source, usage_json, provider_request_id"
        " FROM attempts"
    )
    assert len(rows) == 1, rows
    status, error_class, cost, source, usage, request_id = rows[0]
    assert (status, error_class) == ("failed", "server"), rows
    assert (cost, source) == (166_650, "derived"), rows
    usage = json.loads(usage or "{}")
    assert (usage.get("input_tokens"), usage.get("output_tokens")) == (50, 4160), usage
    assert "images" not in usage, usage  # no image came: a per-image price is not claimed
    assert request_id and request_id.startswith("req_"), rows
    total = afc.json("costs", "report")["total"]
    assert (total["priced"], total["unpriced_attempts"]) == ("0.166650", 0), total


FLUX = "black-forest-labs/flux-1.1-pro"


def test_a_succeeded_prediction_whose_output_was_deleted_is_priced_per_image(afc, fake):
    """A Replicate prediction that a run polled after its data was removed (``status:
    succeeded``, ``data_removed: true``, no output left, ``predict_time`` 3.2 s) was priced
    by its seconds alone: under a card that prices the model per image (flux-1.1-pro, as
    Replicate bills it) it was recorded unpriced, and under a card with per_image and
    per_second at 0.003520, a tenth of the 0.08 its two images were billed, though README
    says such a card charges per image. A succeeded prediction made the images its request
    asked for (``num_outputs``): the attempt (failed, paid) is priced by them."""
    for rates, batch in (
        ([{"provider": "replicate", "model": FLUX, "per_image": "0.04"}], "b1"),
        (
            [{"provider": "replicate", "model": FLUX, "per_image": "0.04", "per_second": "0.0011"}],
            "b2",
        ),
    ):
        data = manifest(
            [{"key": "a", "prompt": "data-removed a", "params": {"num_outputs": 2}}],
            rates=rates,
            batch=batch,
        )
        data["defaults"]["chain"] = [{"provider": "replicate", "model": FLUX, "attempts": 1}]
        afc.write_manifest(data, f"{batch}.yaml")
        result = afc("submit", f"{batch}.yaml", "--json")
        assert result.returncode == 1, result.stderr
        rows = afc.rows(
            "SELECT a.status, a.cost_micros, a.cost_source, a.usage_json FROM attempts a"
            " JOIN jobs j ON j.id = a.job_id WHERE j.batch = ?",
            (batch,),
        )
        assert len(rows) == 1, rows
        status, cost, source, usage = rows[0]
        # an answer: paid, its output lost (tests/test_audit31e_data_removed.py)
        assert (status, cost, source) == ("failed", 80_000, "derived"), (batch, rows)
        assert json.loads(usage)["images"] == 2, usage
    report = {r["batch"]: r for r in afc.json("costs", "report", "--by", "batch")["rows"]}
    for batch in ("b1", "b2"):
        row = report[batch]
        assert (row["priced"], row["unpriced_attempts"], row["unknown_attempts"]) == (
            "0.080000",
            0,
            0,
        ), row


def test_a_fal_request_completed_whose_result_was_deleted_is_priced_per_image(afc, fake):
    """fal keeps a result of 10 KB or more six minutes: a run that polls a request again
    later (its process died mid-poll, the next cron run came) finds it ``COMPLETED`` with no
    error, and its result 404. The attempt was recorded unknown (possibly paid) and unpriced,
    though the request completed and fal bills the images it made, at the card's per_image
    (the only unit a fal card has). It is priced by the images its request asked for
    (``num_images``), as the plan and the budget count them: 2 x 0.025; a paid failure, its
    output lost, counted once (tests/test_audit31g_fal_result_gone.py)."""
    data = manifest(
        [{"key": "a", "prompt": "result-gone a", "params": {"num_images": 2}}],
        rates=[{"provider": "fal", "model": "fal-ai/flux/dev", "per_image": "0.025"}],
    )
    data["defaults"]["chain"] = [{"provider": "fal", "model": "fal-ai/flux/dev", "attempts": 1}]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "--json")
    assert result.returncode == 1, result.stderr
    rows = afc.rows("SELECT status, cost_micros, cost_source, usage_json FROM attempts")
    assert len(rows) == 1, rows
    status, cost, source, usage = rows[0]
    assert (status, cost, source) == ("failed", 50_000, "derived"), rows
    assert json.loads(usage) == {"images": 2}, usage
    total = afc.json("costs", "report")["total"]
    assert (total["priced"], total["unpriced_attempts"], total["unknown_attempts"]) == (
        "0.050000",
        0,
        0,
    ), total


def test_the_csv_total_row_is_told_apart_from_a_batch_named_total(afc):
    """``afc costs report --by batch --csv`` ended with a row whose batch cell says
    ``total``: a batch named ``total`` (a studio's roll-up batch) gave two such rows, and a
    script dropping the total row dropped that batch's spend too (or summed the total in as
    a batch). The JSON keeps ``total`` apart from ``rows``; the CSV now says which row is the
    total in a last column, ``row`` (``group`` or ``total``), every column before it as it
    was."""
    import csv
    import io

    afc.write_manifest(manifest([{"key": "a", "prompt": "a"}], batch="total"), "t.yaml")
    assert afc("submit", "t.yaml").returncode == 0
    afc.write_manifest(manifest([{"key": "a", "prompt": "a"}], batch="other"), "o.yaml")
    assert afc("submit", "o.yaml").returncode == 0
    out = afc("costs", "report", "--by", "batch", "--csv")
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert [(r["batch"], r.get("row"), r["priced"]) for r in rows] == [
        ("other", "group", "0.050000"),
        ("total", "group", "0.050000"),
        ("total", "total", "0.100000"),
    ], rows
    header = out.stdout.splitlines()[0].split(",")
    assert header[:2] == ["batch", "priced"] and header[-1] == "row", header


def test_a_paid_image_whose_base64_decodes_to_nothing_is_no_output(afc, fake):
    """OpenAI answered 200 with its usage and a ``b64_json`` of ``====``: base64 that
    decodes to no bytes at all. afc stored the empty file as the job's output, the job
    succeeded (exit 0, ``afc outputs`` listing a 0-byte a.png at 0.040000), and no later run
    renders it again: the paid image was lost with success said. An empty decoded image is
    a failed ``server`` attempt that keeps the answer's usage and cost, as base64 that does
    not decode is, and the next attempt renders again; nothing is stored."""
    _openai(
        afc,
        [{"key": "a", "prompt": "empty-b64 a"}],
        [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}],
    )
    result = afc("submit", "manifest.yaml", "--json")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    rows = afc.rows("SELECT status, error_class, cost_micros FROM attempts")
    assert rows == [("failed", "server", 40_000)], rows
    assert not (afc.outputs() / "b1" / "a.png").exists()
    assert json.loads(result.stdout)["jobs"][0]["status"] == "failed"
