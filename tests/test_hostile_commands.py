"""Commands given surprising arguments or run side by side (issue 12): a clear message, the
documented exit code, and exit 2 only when nothing was written."""

from __future__ import annotations

import time

from conftest import jobs, manifest


def test_cancel_with_an_unknown_key_cancels_nothing(afc):
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    result = afc("cancel", "shot-001", "nonexistent")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "no job with key 'nonexistent'" in result.stderr
    assert "nothing was changed" in result.stderr
    assert afc.rows("SELECT key, status FROM jobs ORDER BY key") == [
        ("shot-001", "queued"),
        ("shot-002", "queued"),
    ]
    assert afc("cancel", "shot-001").returncode == 0
    assert afc.rows("SELECT status FROM jobs WHERE key = 'shot-001'") == [("cancelled",)]


def test_resume_beside_a_submit_says_the_other_process_has_the_jobs(afc):
    afc.write_manifest(manifest(jobs(2)))
    release = afc.cwd / "release"  # the submit's renders return once the resume has looked
    submit = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(release)})
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (afc.cwd / "afc.db").exists():
                try:
                    held = afc.rows("SELECT COUNT(*) FROM jobs WHERE lease_owner IS NOT NULL")
                except Exception:  # noqa: BLE001 - the ledger is being created
                    held = [(0,)]
                if held[0][0] == 2:
                    break
            time.sleep(0.05)
        else:
            raise AssertionError("the submit never claimed its jobs")
        result = afc("resume")
        assert "Traceback" not in result.stderr
        # both jobs, said once (jobs left for the same reason share a line)
        assert "2 jobs running at render (b1/shot-001, b1/shot-002" in result.stderr
        assert result.stderr.count("being run by another afc process (pid ") == 1, result.stderr
        assert f"pid {submit.pid} " in result.stderr
        assert "running at render: \n" not in result.stderr
    finally:
        release.touch()
        assert submit.wait(timeout=60) == 0
