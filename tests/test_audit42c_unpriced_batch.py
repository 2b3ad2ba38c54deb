"""Outside audit 42c (money, as the user reads it): a budget that refuses to run an unpriced
model names the batch whose rate cards lack it.

An ``afc worker --max-spend`` serves every batch of a shared ledger; one admitted without a
rate card for its model (``afc submit --no-run``, where no budget is checked) stopped the
worker, exit 2 (a service restarts it, and it stops again, every RestartSec), saying
'unpriced: local/demo-v1. Add rates, ...': the model alone, which every batch of the ledger
may use, not the manifest to fix. ``afc resume --max-spend`` said the same of a ledger's many
batches. Each unpriced model is now named with its batches."""

from __future__ import annotations

from conftest import manifest


def test_a_worker_and_a_resume_name_the_batch_whose_model_is_unpriced(afc):
    priced = manifest([{"key": "a", "prompt": "p"}], batch="stills")
    afc.write_manifest(priced, "stills.yaml")
    assert afc("submit", "stills.yaml", "--no-run").returncode == 0
    bare = manifest([{"key": "b", "prompt": "q"}], batch="teasers")
    del bare["rates"]
    afc.write_manifest(bare, "teasers.yaml")
    assert afc("submit", "teasers.yaml", "--no-run").returncode == 0

    said = "unpriced: local/m1 (batch teasers)."
    worker = afc("worker", "--until-idle", "--max-spend", "1")
    assert worker.returncode == 2, worker.stderr
    assert said in worker.stderr, worker.stderr
    resume = afc("resume", "--max-spend", "1")
    assert resume.returncode == 2, resume.stderr
    assert said in resume.stderr, resume.stderr
    # nothing was paid; the stills' card prices its model, which the teasers' lacks
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(0,)]
