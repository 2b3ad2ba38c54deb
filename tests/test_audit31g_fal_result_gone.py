"""Outside audit 31g: a fal request that completed without an error (fal billed the images
it made) whose result fal had already deleted (404: fal keeps a result of 10 KB or more six
minutes). Through the real ``afc`` command against the fake fal queue (tests/fakeproviders.py),
whose "result-gone" requests answer so."""

from __future__ import annotations

import json
import signal

from conftest import manifest

RATES = [{"provider": "fal", "model": "fal-ai/flux/dev", "per_image": "0.025"}]


def _write(afc, attempts: int) -> None:
    data = manifest(
        [{"key": "a", "prompt": "result-gone a", "params": {"num_images": 2}}], rates=RATES
    )
    data["defaults"]["chain"] = [
        {"provider": "fal", "model": "fal-ai/flux/dev", "attempts": attempts}
    ]
    afc.write_manifest(data)


def test_a_completed_request_whose_result_was_deleted_is_a_paid_failure_counted_once(afc, fake):
    """Recorded 'unknown' ('it may have been paid for') at its known cost: 'afc costs report'
    counted it in priced and again among the unknown_attempts, and the job's error class said
    'unknown'. fal said it completed; it is a failed attempt at its known cost."""
    _write(afc, attempts=1)
    result = afc("submit", "manifest.yaml", "--json")
    assert result.returncode == 1, result.stderr
    [job] = json.loads(result.stdout)["jobs"]
    assert job["error"]["class"] == "unavailable", job["error"]
    [attempt] = afc.json("show", "a")["attempts"]
    assert (attempt["status"], attempt["error_class"]) == ("failed", "unavailable"), attempt
    assert attempt["cost"] == "0.050000", attempt  # 2 images x 0.025
    assert "may have been paid" not in attempt["error"], attempt["error"]
    total = afc.json("costs", "report")["total"]
    assert (total["priced"], total["unknown_attempts"], total["failed_spend"]) == (
        "0.050000",
        0,
        "0.050000",
    ), total


def test_a_resumed_completed_request_whose_result_was_deleted_is_interrupted_at_its_cost(afc, fake):
    """A run killed after the submit; 'afc resume' polls the request, completed, its result
    gone: afc's end lost the output (as a URL no longer served), so the attempt fails
    'interrupted' at its cost, using up none of the model's attempts, and a new one is made."""
    _write(afc, attempts=1)
    killed = afc("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_submit"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = afc("resume")
    assert resumed.returncode == 1, resumed.stderr
    first, second = afc.json("show", "a")["attempts"]
    assert (first["status"], first["error_class"], first["cost"]) == (
        "failed",
        "interrupted",
        "0.050000",
    ), first
    assert "may have been paid" not in first["error"], first["error"]
    assert (second["status"], second["error_class"]) == ("failed", "unavailable"), second
    total = afc.json("costs", "report")["total"]
    assert (total["priced"], total["unknown_attempts"]) == ("0.100000", 0), total
