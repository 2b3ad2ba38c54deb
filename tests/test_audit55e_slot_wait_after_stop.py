"""Outside audit 55e: 5b52190 has a job that waits for its provider's call slot say so
('waiting for a call of local to end: its limits allow 1 at once'). A run stopped during
that wait (Ctrl-C here; a budget, a signal) frees the job and leaves the reason in the
ledger: 'afc status', 'afc show' and --json went on saying it waited for a call to end,
with no afc process left to make one or to wait for it, and a person read the job as held
back by a call still going on, where only the next 'afc resume' (or a worker) calls it."""

from __future__ import annotations

import signal

from conftest import manifest, wait_for

REASON = "waiting for a call of local to end: its limits allow 1 at once"


def test_a_slot_wait_left_by_a_stopped_run_says_no_process_waits_now(afc):
    release = afc.cwd / "release"
    failing = {"fail": ["server"], "retry_after_s": 1}
    data = manifest(
        # 'long' holds local's one slot only once 'again' made its first call (answered at
        # once, as 'tiny's is): started beside 'again', it took the slot first about one run
        # in five on a loaded machine, and 'again' stayed 'queued', never waiting for it
        [
            {"key": "again", "prompt": "a", "params": failing},
            {"key": "tiny", "prompt": "c"},
            {"key": "long", "prompt": "b", "needs": ["tiny"]},
        ],
        limits={"local": {"concurrency": 1}},
    )
    data["defaults"]["chain"][0]["backoff"] = {"base": 1, "cap": 1}
    afc.write_manifest(data)
    (afc.cwd / "release.again").touch()  # its own calls answer at once
    (afc.cwd / "release.tiny").touch()
    run = afc.popen(
        "submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(release), "AFC_GRACE_S": "0"}
    )
    try:
        wait_for(
            afc,
            f"SELECT COUNT(*) FROM jobs WHERE key = 'again' AND waiting_reason = '{REASON}'",
            1,
            timeout=20,
        )
        # while the run waits, the reason is said as it is
        [live] = [job for job in afc.json("status")["jobs"] if job["key"] == "again"]
        assert live["waiting"] == REASON
        run.send_signal(signal.SIGINT)
        assert run.wait(timeout=60) == 130
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert afc.rows("SELECT status, lease_owner FROM jobs WHERE key = 'again'") == [
        ("waiting", None)
    ]
    [said] = [job for job in afc.json("status")["jobs"] if job["key"] == "again"]
    assert said["waiting"].startswith(REASON + "; no afc process waits for it now"), said
    assert "afc resume" in said["waiting"]
    shown = afc("show", "again")
    assert "no afc process waits for it now" in shown.stdout, shown.stdout
    table = afc("status")
    assert "no afc process waits for it now" in table.stdout, table.stdout

    release.touch()
    resumed = afc("resume", env={"AFC_LOCAL_RELEASE": str(release)})
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(afc.rows("SELECT key, status FROM jobs")) == [
        ("again", "succeeded"),
        ("long", "succeeded"),
        ("tiny", "succeeded"),
    ]
