"""Outside audit 54e: the stop a job's spool file that cannot be read makes (``pipeline.render``'s
``Spool.find``: ``SpoolError``), as the run says it."""

from __future__ import annotations

from conftest import manifest

RATES = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]
CHAIN = [{"provider": "openai", "model": "gpt-image-1", "attempts": 1}]


def test_the_stop_for_an_unreadable_spool_file_says_it_could_not_be_read(afc, fake):
    """Nothing was rendered and nothing failed to be written: the file is where it was, and
    the job is not rendered again before it is read. The run's stopping line said 'stopping
    (a rendered output could not be spooled)', the reason of a paid render lost to a full
    disk, above the error that says the file could not be read."""
    data = manifest([{"key": "one", "prompt": "boom one"}], rates=RATES)
    data["defaults"]["chain"] = CHAIN
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 1  # failed: a 500, not billed
    assert afc("retry", "one", "--batch", "b1").returncode == 0
    [(job_id,)] = afc.rows("SELECT id FROM jobs")
    (afc.cwd / "afc.db-spool" / f"{job_id}.spool").mkdir(parents=True)
    result = afc("resume")
    assert result.returncode == 1, result.stderr
    stopping = [line for line in result.stderr.splitlines() if "stopping" in line]
    assert stopping and "could not be spooled" not in stopping[0], result.stderr
    assert "a spool file could not be read" in stopping[0], result.stderr
    assert fake.counts["openai_billed"] == 0
