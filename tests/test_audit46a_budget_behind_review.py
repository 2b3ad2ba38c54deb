"""Outside audit 46a: a submit under a budget that leaves jobs behind a review says that the
budget will not cap them.

README's review flow is ``afc submit`` (the style frame renders and awaits review), ``afc
review approve``, then ``afc resume``, which renders the shots. A budget caps the run of the
command given it (README, Budget), so the shots are rendered under the resume's own
``--max-spend``, none given: no cap. A manifest with ``budget: "0.12"`` and a plan that said
the estimate (0.25 USD) does NOT fit was submitted, the frame cost 0.05, the submit said
nothing of the budget, the approval said "each runs at the next 'afc resume'", and the resume
spent 0.20 more, 0.25 in all: as ``--no-run`` warns that its budget caps nothing, a run that
leaves jobs blocked behind a review says those jobs are outside it."""

from __future__ import annotations

from conftest import manifest


def _gated(**top) -> dict:
    return manifest(
        [
            {"key": "frame", "prompt": "the style frame", "review": True},
            *({"key": f"s{i}", "prompt": f"shot {i}", "needs": ["frame"]} for i in range(1, 5)),
        ],
        **top,
    )


def test_a_budgeted_submit_says_the_jobs_behind_a_review_are_outside_its_budget(afc):
    afc.write_manifest(_gated(budget="0.12"))
    submitted = afc("submit", "manifest.yaml")
    assert submitted.returncode == 0, submitted.stderr
    assert "the manifest's budget of 0.120000 USD caps this run's own calls" in submitted.stderr
    assert "4 jobs of batch b1 are left blocked behind a review" in submitted.stderr, (
        submitted.stderr
    )
    assert "under its own --max-spend (none given: no cap), not this budget" in submitted.stderr

    # what the warning is about: the resume after the approval is not capped by the manifest
    assert afc("review", "approve", "frame").returncode == 0
    resumed = afc.json("resume")
    assert resumed["budget"] is None and resumed["spent"] == "0.200000"

    # a replay of the finished batch leaves nothing behind a review: nothing said
    again = afc("submit", "manifest.yaml")
    assert again.returncode == 0, again.stderr
    assert "left blocked" not in again.stderr


def test_a_resume_under_max_spend_says_it_too_and_no_budget_says_nothing(afc):
    afc.write_manifest(_gated())
    submitted = afc("submit", "manifest.yaml")
    assert submitted.returncode == 0, submitted.stderr
    assert "left blocked" not in submitted.stderr  # no budget: nothing to say

    resumed = afc("resume", "--max-spend", "1.00")
    assert resumed.returncode == 0, resumed.stderr
    assert "--max-spend of 1.000000 USD caps this run's own calls" in resumed.stderr
    assert (
        "4 jobs of batch b1 are left blocked (behind a review, or a need not finished)"
        in resumed.stderr
    ), resumed.stderr
