"""The ledger as the boundary every kept message passes (audit 54a, mutation audit): a token
in an attempt's or a job's error is scrubbed as the ledger writes it. Runs on SQLite and
PostgreSQL."""

from __future__ import annotations

from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest

TOKEN = "sk-proj-" + "Zq7" * 12  # an OpenAI key's shape, whoever's it is


def test_a_token_in_an_attempts_or_a_jobs_error_never_reaches_the_ledger(afc, ledger_url):
    """Mutants: ``report_attempt`` without ``scrub(error_message)``, ``finish`` without its
    ``scrub_data``. Messages are scrubbed where they enter (``ProviderError``, ``AfcError``)
    too, so no run test noticed; the ledger is the boundary every message passes."""
    path = afc.write_manifest(manifest(jobs(1)))
    ledger = Ledger(ledger_url)
    ledger.admit(load_manifest(path), "file:///tmp/x", RateCards())
    (a,) = [j.job_id for j in load_manifest(path).jobs]
    try:
        job = ledger.claim(a, 60)
        number = ledger.start_attempt(job, 0, "openai", "gpt-image-1", None, durable=False)
        said = f"Incorrect API key provided: {TOKEN}"
        ledger.end_attempt(
            job,
            number,
            chain_index=0,
            provider="openai",
            model="gpt-image-1",
            status="failed",
            error_class="auth",
            error_message=said,
        )
        assert ledger.finish(job, "failed", step="render", error_code="AUTH", error_message=said)
        (attempt,) = ledger.attempts(a)
        assert TOKEN not in attempt["error_message"] and "<redacted>" in attempt["error_message"]
        error = ledger.job(a)["error_message"]
        assert TOKEN not in error and "<redacted>" in error
        assert not [e for e in ledger.events(a) if TOKEN in str(e)]
    finally:
        ledger.close()
