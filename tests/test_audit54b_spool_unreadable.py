"""Outside audit 54b (cancellation between paying and recording): a job's spool file that
cannot be read, met beside another job's paid render on its way to the spool."""

from __future__ import annotations

from conftest import manifest

RATES = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]
CHAIN = [{"provider": "openai", "model": "gpt-image-1", "attempts": 1}]


def test_an_unreadable_spool_file_stops_the_run_and_lets_the_paid_renders_finish(afc, fake):
    """'again' (retried after a failure) has attempts, so its render step first looks for a
    spool file they left: one is there that cannot be read (here a folder in its place; a
    file another user's run left unreadable, a disk's read error). The OSError ended the run
    at once, cancelling 'slow', whose paid render was on its way to the spool: dropped, and
    paid for again by the next run. It now stops the run as a spool that cannot be written
    does (SpoolError): no new call, the paid render is spooled, stored and recorded, exit 1,
    the file named."""
    first = manifest([{"key": "slow", "prompt": "slow-1s slow"}], rates=RATES, batch="b0")
    first["defaults"]["chain"] = CHAIN
    afc.write_manifest(first, "first.yaml")
    assert afc("submit", "first.yaml", "--no-run").returncode == 0
    second = manifest([{"key": "again", "prompt": "boom again"}], rates=RATES)
    second["defaults"]["chain"] = CHAIN
    afc.write_manifest(second)
    assert afc("submit", "manifest.yaml").returncode == 1  # 'again' failed: a 500, not billed
    assert afc("retry", "again", "--batch", "b1").returncode == 0
    [(again,)] = afc.rows("SELECT id FROM jobs WHERE key = 'again'")
    unreadable = afc.cwd / "afc.db-spool" / f"{again}.spool"
    unreadable.mkdir(parents=True)
    # one slot: 'slow' renders first; 'again' takes the slot as 'slow''s render goes to the
    # spool, and meets the unreadable file then
    result = afc("resume", "--concurrency", "1")
    assert result.returncode == 1, result.stderr
    assert str(unreadable) in result.stderr, result.stderr
    assert afc.rows("SELECT key, status FROM jobs ORDER BY key") == [
        ("again", "queued"),
        ("slow", "succeeded"),
    ]
    assert fake.counts["openai_billed"] == 1
