"""Outside audit 54b (cancellation between paying and recording): a job that succeeded but
whose spool file the disk would not let go, beside other jobs' paid calls in flight."""

from __future__ import annotations

from conftest import manifest

RATES = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]


def test_a_spool_file_that_cannot_be_removed_cancels_no_call_in_flight(afc, fake):
    """'quick' succeeds (stored, verified, recorded) while 'slow' is in its paid call. The
    removal of 'quick''s spool files then failed (here a folder in the way of one of them, as
    a spool disk remounted read-only after an I/O error refuses every removal, EROFS): the
    OSError ended the run at once ('afc: [Errno 21] Is a directory ...', exit 1), which
    cancelled 'slow''s call, its attempt left 'unknown', and 'afc resume' paid OpenAI for it
    again. A
    success's spool file is only housekeeping (a later run's sweep removes it): its removal
    failing is said, and the calls in flight go on."""
    data = manifest(
        [{"key": "quick", "prompt": "quick"}, {"key": "slow", "prompt": "slow-2s slow"}],
        rates=RATES,
    )
    data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1"}]
    afc.write_manifest(data)
    admitted = afc("submit", "manifest.yaml", "--no-run")
    assert admitted.returncode == 0, admitted.stderr
    [(quick,)] = afc.rows("SELECT id FROM jobs WHERE key = 'quick'")
    spool = afc.cwd / "afc.db-spool"
    (spool / f"{quick}.late-part").mkdir(parents=True)
    result = afc("resume", "--concurrency", "2")
    assert result.returncode == 0, result.stderr
    assert "spool" in result.stderr and quick in result.stderr  # the removal's failure, said
    assert afc.rows("SELECT key, status FROM jobs ORDER BY key") == [
        ("quick", "succeeded"),
        ("slow", "succeeded"),
    ]
    (spool / f"{quick}.late-part").rmdir()
    again = afc("resume")
    assert again.returncode == 0, again.stderr
    assert fake.counts["openai_billed"] == 2, "a call in flight was paid for again"
