"""A worker's loop fed batch after batch on one storage reads, for each new batch, the
unfinished jobs of the batches it holds jobs of, not of every batch it ever met (outside audit
64i).

``run._note_outputs`` looks for output keys shared between batches of one storage (jobs that
must not render side by side). It kept every batch the loop had met and, at each new one, read
the unfinished jobs of all of them with one statement naming each batch twice: a loop fed 2,000
batches of 5 instant jobs on one folder (``afc worker``, local provider) grew from 62 to 126 MiB
resident, the ever longer statements filling the ledger's statement cache, for as long as work
came. The batches it reads now are those the loop holds jobs of."""

from __future__ import annotations

import yaml
from conftest import jobs, manifest

from afc_cli import run as run_mod
from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest

BATCHES = 60


def _admit(afc, ledger: Ledger, name: str, job_list: list[dict]) -> list[str]:
    path = afc.cwd / f"{name}.yaml"
    path.write_text(yaml.safe_dump(manifest(job_list, batch=name)))
    loaded = load_manifest(path)
    ledger.admit(loaded, f"file://{afc.cwd}/out", RateCards())
    return [job.job_id for job in loaded.jobs]


def test_a_fed_loop_reads_shared_keys_of_the_batches_it_holds_only(afc):
    ledger = Ledger(afc.cwd / "afc.db")
    fed = [_admit(afc, ledger, f"b{i:03d}", jobs(2)) for i in range(BATCHES)]
    asked: list[int] = []  # batches named by each look for shared keys
    real = ledger.shared_outputs

    def spied(batches, name_of=None):
        asked.append(len(batches))
        return real(batches, name_of)

    ledger.shared_outputs = spied  # a spy on the ledger: what it reads is unchanged
    left = fed[1:]

    def more(running):
        return left.pop(0) if left else []

    try:
        stats = run_mod.run_jobs(ledger, fed[0], concurrency=2, more=more)
        statuses = {ledger.job(job_id)["status"] for ids in fed for job_id in ids}
    finally:
        ledger.close()
    assert statuses == {"succeeded"}
    assert stats.finished == 2 * BATCHES
    assert len(asked) >= BATCHES // 2, asked  # the loop met the batches one by one
    # at most the batches whose jobs were in the loop (a batch of 2 fed whenever no more than
    # --concurrency 2 run): before, the 60th batch's look named all 60
    assert max(asked) <= 4, asked
