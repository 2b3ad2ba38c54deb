"""Outside audit 55b (commands run against a ledger a run is using): what 'afc status' says of
a job that has waited out its backoff and now waits for its provider's call slot."""

from __future__ import annotations

import signal

from conftest import manifest, stop_between_writes, wait_for


def test_a_job_past_its_backoff_waiting_for_the_providers_limit_says_so(afc):
    """One call of the provider at once (the manifest's limits): a job failed once (a 500),
    waits out a one-second backoff, and then waits for the call another job holds (here held
    until the test lets it go). 'afc status' went on saying 'backoff 1.00s after server' for
    as long as that call lasted (a video's: many minutes), a wait long over, and a person
    read the job as stuck. The job's reason now names the wait for its provider's slot."""
    release = afc.cwd / "release"
    failing = {"fail": ["server"], "retry_after_s": 1}
    data = manifest(
        [{"key": "again", "prompt": "a", "params": failing}, {"key": "long", "prompt": "b"}],
        limits={"local": {"concurrency": 1}},
    )
    data["defaults"]["chain"][0]["backoff"] = {"base": 1, "cap": 1}
    afc.write_manifest(data)
    (afc.cwd / "release.again").touch()  # its own calls answer at once
    run = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(release)})
    try:
        wait_for(
            afc,
            "SELECT COUNT(*) FROM jobs WHERE key = 'again'"
            " AND waiting_reason LIKE 'waiting for a call of local to end%'",
            1,
            timeout=20,
        )
        said = afc.json("status")["jobs"]
        assert [job["waiting"] for job in said if job["key"] == "again"] == [
            "waiting for a call of local to end: its limits allow 1 at once"
        ]
        release.touch()
        assert run.wait(timeout=60) == 0, run.stderr.read()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert sorted(afc.rows("SELECT key, status FROM jobs")) == [
        ("again", "succeeded"),
        ("long", "succeeded"),
    ]


def test_so_does_one_waiting_for_a_call_of_another_process_under_the_shared_limit(afc):
    """The same wait, for a call another afc process holds: the limit holds across the
    ledger, and the job's run asks again and again (``ProviderBusy``), its reason still the
    backoff's. Here batch b2's run waits out its backoff frozen while batch b1's run starts
    its held call, so the shared limit is full when it wakes."""
    release = afc.cwd / "release"
    env = {"AFC_LOCAL_RELEASE": str(release)}
    limits = {"local": {"concurrency": 1}}
    again = manifest(
        [{"key": "again", "prompt": "a", "params": {"fail": ["server"], "retry_after_s": 2}}],
        batch="b2",
        limits=limits,
    )
    again["defaults"]["chain"][0]["backoff"] = {"base": 2, "cap": 2}
    afc.write_manifest(again, "again.yaml")
    afc.write_manifest(manifest([{"key": "long", "prompt": "b"}], limits=limits), "long.yaml")
    (afc.cwd / "release.again").touch()
    waiting = afc.popen("submit", "again.yaml", env=env)
    holding = None
    try:
        wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE status = 'waiting'", 1)
        stop_between_writes(afc, waiting)
        holding = afc.popen("submit", "long.yaml", env=env)
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
        waiting.send_signal(signal.SIGCONT)
        wait_for(
            afc,
            "SELECT COUNT(*) FROM jobs WHERE key = 'again'"
            " AND waiting_reason LIKE 'waiting for a call of local to end%'",
            1,
            timeout=20,
        )
        said = afc.json("status", "--batch", "b2")["jobs"]
        assert [job["waiting"] for job in said] == [
            "waiting for a call of local to end: 1 call in flight across this ledger (limit 1)"
        ]
        release.touch()
        assert holding.wait(timeout=60) == 0, holding.stderr.read()
        assert waiting.wait(timeout=60) == 0, waiting.stderr.read()
    finally:
        for proc in (waiting, holding):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()
    assert sorted(afc.rows("SELECT key, status FROM jobs")) == [
        ("again", "succeeded"),
        ("long", "succeeded"),
    ]
