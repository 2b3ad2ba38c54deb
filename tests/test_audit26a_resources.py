"""Outside audit 26a: the machine's resources and slow or stuck peers during a long batch, run
through the real ``afc`` command against the suite's fakes (tests/fakeproviders.py,
tests/s3fake.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest
from conftest import manifest, wait_for
from s3fake import Fault

OPENAI = {"provider": "openai", "model": "gpt-image-1", "attempts": 2}
OPENAI_RATE = {"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}


def test_an_s3_endpoint_that_stalls_uploads_does_not_hold_a_stop_or_paid_bytes(afc, fake, s3):  # noqa: F811
    """An S3 endpoint that takes each upload and never answers (a hung store, a link gone
    quiet: botocore waits 120 s a try). Its uploads ran on the run loop's few threads
    (min(32, CPUs + 4)), the ones the ledger's commit sync before each paid call, the spool
    writes of paid bytes and name lookups use too: once stalled uploads held them all, the
    answers already in were not spooled nor recorded, and a SIGTERM (acted on after the
    ledger's sync) went unheard for minutes, past its grace, until cron's SIGKILL lost the
    renders held in memory, paid for again by the next run. The uploads hang on threads of
    their own: a SIGTERM stops the run within its grace, every paid call recorded at its cost
    with its bytes in the spool, and the uploads it cut off are said as such (it said their
    calls were recorded unknown, possibly paid, and then that no call was abandoned); the next
    run stores them, paying for none again."""
    count = 80
    threads = min(32, (os.cpu_count() or 1) + 4)  # the run loop's (run.RunThreads)
    afc.write_manifest(
        manifest(
            [{"key": f"shot-{i:03d}", "prompt": f"frame {i}"} for i in range(count)],
            defaults={"chain": [OPENAI]},
            rates=[OPENAI_RATE],
        )
    )
    s3.plan.add(Fault("PUT", r"/films/", "stall", -1))
    run = afc.popen(
        "submit", "manifest.yaml", "--storage", s3.url, "--concurrency", "10", "--grace", "1"
    )
    try:
        deadline = time.time() + 60
        while len(s3.plan.injected) < threads:  # every thread holds a stalled upload
            assert time.time() < deadline and run.poll() is None, "uploads never stalled"
            time.sleep(0.05)
        time.sleep(0.5)  # the calls in flight come back meanwhile
        run.send_signal(signal.SIGTERM)
        _, stderr = run.communicate(timeout=60)
        assert run.returncode == 130, stderr
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    paid = fake.counts["openai"]
    assert paid >= threads
    assert afc.rows("SELECT COUNT(*) FROM attempts WHERE status IN ('started', 'unknown')") == [
        (0,)
    ]
    assert afc.rows(
        "SELECT COUNT(*) FROM attempts WHERE status = 'succeeded' AND cost_micros = 40000"
    ) == [(paid,)]
    spooled = list((afc.cwd / "afc.db-spool").glob("*.spool"))
    assert len(spooled) == paid
    # the uploads the grace cut off are said as such, not as calls recorded unknown
    assert "in their storage work (their renders are recorded with their cost" in stderr
    assert "recorded as unknown" not in stderr, stderr

    s3.plan.clear()
    s3.plan.release()
    again = afc("resume", "--storage", s3.url)
    assert again.returncode == 0, again.stderr
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY 1") == [("succeeded", count)]
    assert fake.counts["openai"] == count  # nothing rendered twice


REPLICATE = {"provider": "replicate", "model": "black-forest-labs/flux-1.1-pro", "attempts": 1}
REPLICATE_RATE = {
    "provider": "replicate",
    "model": "black-forest-labs/flux-1.1-pro",
    "per_image": "0.04",
}


@pytest.mark.parametrize("command", ["submit", "resume"])
def test_a_chain_over_two_providers_is_given_room_for_each_of_their_pools(afc, fake, command):
    """``--concurrency 100`` under a hard limit of 148 open files, one chain falling back from
    OpenAI (a refusal) to Replicate: afc counted one socket per call in flight (148 needed),
    but each provider's connection pool keeps its sockets alive past their calls, and
    Replicate's downloads have a pool of their own. The run started and met EMFILE: the
    fallback calls failed as never sent, using up their jobs' one attempt (failed, for a
    person to retry), until the ledger's WAL could not be opened and the run stopped. It is
    refused before anything runs, naming the concurrency that fits, which then runs whole."""
    afc.write_manifest(
        manifest(
            [{"key": f"s{i:03d}", "prompt": f"moderation frame {i}"} for i in range(100)],
            defaults={"chain": [{**OPENAI, "attempts": 1, "fallback_on": ["refusal"]}, REPLICATE]},
            rates=[OPENAI_RATE, REPLICATE_RATE],
        )
    )
    if command == "resume":
        assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    args = ("submit", "manifest.yaml") if command == "submit" else ("resume",)
    refused = files_limited(afc, 148, *args, "--concurrency", "100")
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "--concurrency 100 needs at least 348 open files" in refused.stderr
    assert "openai's, replicate's, replicate's downloads'" in refused.stderr
    assert "give --concurrency 33 or less" in refused.stderr
    assert fake.counts["openai"] == fake.counts["replicate_submit"] == 0
    if command == "submit":
        assert not (afc.cwd / "afc.db").exists(), "nothing written"
    else:
        assert afc.rows("SELECT COUNT(*) FROM attempts") == [(0,)]

    ran = files_limited(afc, 148, *args, "--concurrency", "33")
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY 1") == [("succeeded", 100)]
    assert fake.counts["replicate_submit"] == 100


def files_limited(afc, limit: int, *args: str) -> subprocess.CompletedProcess:
    """``afc`` with the open-file limit (soft and hard) at ``limit``."""
    import resource

    def files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return subprocess.run(
        afc.command(*args),
        cwd=afc.cwd,
        env=afc.env,
        preexec_fn=files,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_provider_that_never_answers_a_cancel_does_not_hold_the_batchs_other_cancels(
    afc, fake, monkeypatch
):
    """``afc cancel --batch`` cancelled a job, asked its provider to stop the job's request,
    then went on to the next job. A provider that takes the cancel and never answers (an API
    that hangs in an outage) held it there up to its read and pool timeouts (150 s on
    Replicate) a job: the batch's other jobs stayed runnable meanwhile, for hours on a big
    batch, and a running afc (a cron'd resume, a worker falling back to another provider)
    went on paying for them. Every job is cancelled before any provider is asked."""
    chain = [{"provider": "replicate", "model": REPLICATE["model"], "attempts": 1}]
    afc.write_manifest(
        manifest(
            [{"key": f"shot-{i}", "prompt": f"hold {i}", "chain": chain} for i in range(3)],
            rates=[REPLICATE_RATE],
        )
    )
    run = afc.popen("submit", "manifest.yaml")
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE provider_request_id > ''", 3)
    finally:
        run.kill()  # the run dies; its predictions render on
        run.wait(timeout=30)
    answer = threading.Event()
    cancel = fake.replicate_cancel

    def hung(h, pid: str) -> None:
        fake.cancels.append(pid)
        answer.wait(60)
        cancel(h, pid)

    monkeypatch.setattr(fake, "replicate_cancel", hung)
    cancelling = afc.popen("cancel", "--batch", "b1", "--yes")
    try:
        deadline = time.time() + 30
        while not fake.cancels:
            assert time.time() < deadline and cancelling.poll() is None, "no cancel came"
            time.sleep(0.05)
        # the first provider cancel hangs: every job of the batch is cancelled all the same
        assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY 1") == [("cancelled", 3)]
    finally:
        answer.set()
        _, stderr = cancelling.communicate(timeout=60)
    assert cancelling.returncode == 0, stderr
    assert len(set(fake.cancels)) == 3  # each prediction asked to stop


def test_a_render_starts_only_with_room_for_the_renders_already_in_flight(afc, monkeypatch):
    """The disk check before a paid call (AFC_MIN_FREE_MB, 64 MiB by default) compared the
    free space with the margin alone, however many renders were in flight: at --concurrency
    100 with 3 MB images, a disk with 65 MiB free let every call start, and the 300 MB they
    brought back did not fit. The bytes past the room were paid for and lost (the run stopped
    at its first failed spool write; a synchronous provider's render was paid again by the
    next run). Each render in flight, and the one about to start, is counted at the largest
    output the run has spooled."""
    from test_pipeline import OneJob

    from afc_cli import pipeline

    mib = 1024 * 1024
    one = OneJob(afc)
    try:
        ctx = one.context(min_free_bytes=64 * mib)
        monkeypatch.setattr(ctx.spool, "free_bytes", lambda: 100 * mib)
        ctx.largest_output = 3 * mib  # the run has spooled a 3 MiB image
        job = one.ledger.claim(one.job_id, 300)
        assert not pipeline._disk_low(ctx, job)  # 64 MiB kept, 3 MiB for this one: room
        ctx.calls.update({f"in-flight-{i}": None for i in range(20)})
        assert pipeline._disk_low(ctx, job)  # 64 + 21 x 3 MiB: no room
        assert one.ledger.job(one.job_id)["status"] == "waiting"
    finally:
        one.ledger.close()
