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
