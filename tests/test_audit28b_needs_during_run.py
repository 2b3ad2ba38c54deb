"""A need approved while the submit that left its dependent blocked still runs: that submit
runs the dependent (outside audit 28b)."""

from __future__ import annotations

from conftest import ledger_count, manifest, wait_for_ledger


def test_a_need_approved_while_the_submit_runs_lets_that_submit_run_its_dependent(afc, ledger_url):
    """shot-b needs shot-a, which awaits review; shot-c keeps the submit running. A person
    approves shot-a meanwhile: the submit ended with shot-b 'blocked ... waits for the jobs it
    needs', exit 0, its need succeeded, and shot-b waited for the next 'afc resume'."""
    afc.env["AFC_LEDGER"] = ledger_url
    release = afc.cwd / "release"
    for key in ("shot-a", "shot-b"):
        (afc.cwd / f"release.{key}").touch()
    afc.write_manifest(
        manifest(
            [
                {"key": "shot-a", "prompt": "style frame", "review": True},
                {"key": "shot-b", "prompt": "uses it", "needs": ["shot-a"]},
                {"key": "shot-c", "prompt": "a long render"},
            ]
        )
    )
    proc = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(release)})
    try:
        wait_for_ledger(
            afc, ledger_url, "SELECT COUNT(*) FROM jobs WHERE status = 'awaiting_review'"
        )
        approved = afc("review", "approve", "shot-a")
        assert approved.returncode == 0, approved.stderr
        (afc.cwd / "release.shot-c").touch()
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert (
        ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'") == 3
    )
    assert "waits for the jobs it needs" not in stderr
    assert "3 run here; of 3 job(s): 3 succeeded" in stderr, stderr
