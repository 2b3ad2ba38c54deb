"""Outside audit 31e: a Replicate prediction that succeeded while afc polled it, but whose
data Replicate had already removed (``data_removed: true``, its output list gone; the fake's
"data-removed" prompt). Through the real ``afc`` command against the fake Replicate server
(tests/fakeproviders.py)."""

from __future__ import annotations

import json

from conftest import manifest
from test_providers import FAST, MODELS, RATES


def test_a_fresh_prediction_whose_data_was_removed_is_a_paid_failure_counted_once(afc, fake):
    """Replicate answered: succeeded, billed for its 3.2 s of predict_time, its output gone.
    afc recorded the attempt ``unknown`` (possibly paid, 'it may have been paid for'), though
    the answer said it was paid and what for: the job's error class was 'unknown', and
    ``afc costs report`` counted it both in ``priced`` (its known cost) and among the
    ``unknown_attempts`` (answers afc never got, possibly paid). It is a failed attempt at its
    known cost, its output unavailable (the model's next attempt renders the job)."""
    chain = [
        {"provider": "replicate", "model": MODELS["replicate"], "attempts": 2, "backoff": FAST}
    ]
    afc.write_manifest(
        manifest([{"key": "shot", "prompt": "data-removed shot", "chain": chain}], rates=RATES)
    )
    result = afc("submit", "manifest.yaml", "--json")
    assert result.returncode == 1, result.stderr
    [job] = json.loads(result.stdout)["jobs"]
    assert job["error"]["class"] == "unavailable", job["error"]
    attempts = afc.json("show", "shot")["attempts"]
    assert len(attempts) == 2 and fake.counts["replicate_submit"] == 2
    for attempt in attempts:
        assert (attempt["status"], attempt["error_class"]) == ("failed", "unavailable"), attempt
        assert attempt["cost"] == "0.003840"  # 3.2 s x 0.0012, paid
        assert "may have been paid" not in attempt["error"], attempt["error"]
    total = afc.json("costs", "report")["total"]
    assert (total["priced"], total["unpriced_attempts"], total["unknown_attempts"]) == (
        "0.007680",
        0,
        0,
    ), total
    assert total["failed_spend"] == "0.007680", total
