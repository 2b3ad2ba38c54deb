"""Outside audit 31g: a Replicate prediction afc polls by its id (``resume_id``), a killed
run's (``AFC_CRASH_POINT=after_submit``, then ``afc resume``) or one its attempt window's cancel
found succeeded, that Replicate answers succeeded with its data removed (billed for its
predict_time, its output list gone). Through the real ``afc`` command against the fake
Replicate server (tests/fakeproviders.py): a "data-removed-once" prompt's first prediction is
answered so, a "removed-at-cancel" prompt's first one renders until the window's cancel finds
it so; the next prediction of either renders."""

from __future__ import annotations

import json
import signal

from conftest import manifest
from test_providers import FAST, MODELS, RATES


def _chain(**extra) -> list[dict]:
    return [
        {"provider": "replicate", "model": MODELS["replicate"], "backoff": FAST, **extra},
    ]


def test_a_resumed_prediction_whose_data_was_removed_is_paid_once_and_rendered_again(afc, fake):
    """Replicate said it ran and what it cost; only its output is lost (afc's end lost it: the
    killed run would have fetched it). afc recorded the attempt 'unknown' at its known cost:
    'afc costs report' counted it in priced and again among the unknown_attempts (answers
    never had, possibly paid), and its message said 'it may have been paid for'. It fails
    'interrupted' at its known cost, as a resumed request whose output URL is no longer
    served does, using up none of the model's attempts: the next attempt renders the job."""
    afc.write_manifest(
        manifest(
            [{"key": "shot", "prompt": "data-removed-once shot", "chain": _chain(attempts=1)}],
            rates=RATES,
        )
    )
    killed = afc("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_submit"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = afc("resume", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["exit_code"] == 0
    assert fake.counts["replicate_submit"] == 2
    first, second = afc.json("show", "shot")["attempts"]
    assert (first["status"], first["error_class"]) == ("failed", "interrupted"), first
    assert first["cost"] == "0.003840", first  # 3.2 s x 0.0012, paid
    assert "may have been paid" not in first["error"], first["error"]
    assert "removed its data" in first["error"], first["error"]
    assert second["status"] == "succeeded", second
    assert (afc.outputs() / "b1" / "shot.png").read_bytes().startswith(b"\x89PNG")
    total = afc.json("costs", "report")["total"]
    assert (total["priced"], total["unknown_attempts"], total["failed_spend"]) == (
        "0.007680",
        0,
        "0.003840",
    ), total


def test_a_window_reread_that_finds_the_data_removed_is_a_paid_failure(afc, fake):
    """The prediction's attempt window ended; the cancel found it succeeded (it cannot be
    stopped), and its reading by id found its data removed. Recorded 'unknown' at its known
    cost, counted twice by the report, the job's failure said 'unknown'. A paid failure."""
    afc.write_manifest(
        manifest(
            [
                {
                    "key": "shot",
                    "prompt": "removed-at-cancel shot",
                    "chain": _chain(attempts=2, window_s=1),
                }
            ],
            rates=RATES,
        )
    )
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    assert len(fake.cancels) == 1
    first, second = afc.json("show", "shot")["attempts"]
    assert first["status"] == "failed", first
    # as polled since its submit: the window's, not afc's end, so it uses up an attempt (an
    # 'interrupted' one would be followed by another paid request each window, without end)
    assert first["error_class"] == "unavailable", first
    assert first["cost"] == "0.003840", first
    assert "may have been paid" not in first["error"], first["error"]
    assert second["status"] == "succeeded", second
    total = afc.json("costs", "report")["total"]
    assert (total["priced"], total["unknown_attempts"], total["failed_spend"]) == (
        "0.007680",
        0,
        "0.003840",
    ), total
