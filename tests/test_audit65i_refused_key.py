"""Outside audit 65i: a run whose provider refuses its key (or its account, or the model).

Every job met the same answer: OpenAI's 401 for a wrong key (or 429 ``insufficient_quota``,
an account out of money), one free request each, each job failed (``auth`` ends its chain)
for a person to retry: 20 jobs, 20 requests, 20 failed (a 10,000-job batch: 10,000). Now the
first refusal holds the model's other jobs in the run: they wait for the next run, nothing
sent, and that run (the key fixed) renders them, with no 'afc retry'. Through the real afc
command against the fake OpenAI of tests/fakeproviders.py."""

from __future__ import annotations

import pytest
from conftest import manifest
from test_providers import FAST, MODELS, RATES


def _jobs(n: int, prompt: str) -> list[dict]:
    chain = [{"provider": "openai", "model": MODELS["openai"], "backoff": FAST}]
    return [{"key": f"shot-{i:02d}", "prompt": f"{prompt} {i}", "chain": chain} for i in range(n)]


@pytest.mark.parametrize("wrong", ["key", "quota"])
def test_a_refused_key_is_met_once_and_the_other_jobs_wait_for_the_next_run(afc, fake, wrong):
    afc.write_manifest(
        manifest(_jobs(20, "quota shot" if wrong == "quota" else "shot"), rates=RATES)
    )
    env = {"OPENAI_API_KEY": "sk-wrong-key-0123456789"} if wrong == "key" else {}
    result = afc("submit", "manifest.yaml", "--concurrency", "1", env=env)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert fake.counts["openai"] == 1, "one refusal, not one a job"  # was: 20
    rows = afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status ORDER BY status")
    assert rows == [("failed", 1), ("waiting", 19)], rows
    [reason] = afc.rows("SELECT DISTINCT waiting_reason FROM jobs WHERE status = 'waiting'")
    assert reason[0].startswith(f"not sent: openai/{MODELS['openai']} refused a request"), reason
    assert "sk-wrong-key" not in reason[0] and "nothing sent or paid" in reason[0]
    assert afc.rows("SELECT COUNT(*) FROM attempts")[0][0] == 1  # no attempt row for them

    if wrong == "key":  # the key fixed: the next run renders them, no retry needed
        assert afc("resume").returncode == 1  # the one failed job waits for a person
        rows = afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status ORDER BY status")
        assert rows == [("failed", 1), ("succeeded", 19)], rows
        assert fake.counts["openai"] == 20


def test_a_workers_rounds_do_not_send_a_refused_model_a_request_each(afc, fake):
    """A worker's every round is a run of its own: each would send the model one refused
    request again, every --poll. The jobs held rest in this worker for a while."""
    afc.write_manifest(manifest(_jobs(12, "shot"), rates=RATES))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    env = {"OPENAI_API_KEY": "sk-wrong-key-0123456789"}
    result = afc("worker", "--until-idle", "--concurrency", "1", "--poll", "0.1", env=env)
    assert result.returncode == 1, result.stderr
    assert fake.counts["openai"] == 1, result.stderr
    rows = afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status ORDER BY status")
    assert rows == [("failed", 1), ("waiting", 11)], rows
