"""Outside audit 21e (interruptions): the windows between a paid side effect and its
checkpoint, through real ``afc`` child processes against fake providers at the wire."""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest
import yaml
from conftest import manifest, wait_for

FAST = {"base": 0.01, "cap": 0.05}
RATES = [
    {"provider": "replicate", "model": "black-forest-labs/flux-1.1-pro", "per_second": "0.0012"},
    {"provider": "fal", "model": "fal-ai/flux/dev", "per_image": "0.025"},
]
MODELS = {"replicate": "black-forest-labs/flux-1.1-pro", "fal": "fal-ai/flux/dev"}
SUBMITS = {"replicate": "replicate_submit", "fal": "fal_submit"}


def _namespaces() -> bool:
    if sys.platform != "linux" or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _namespaces(), reason="needs unprivileged mount namespaces (Linux)")
@pytest.mark.parametrize("provider", ["replicate", "fal"])
def test_a_render_the_full_spool_could_not_keep_is_fetched_again_not_paid_again(
    afc, fake, provider
):
    """Found by outside audit 21e: a job-style render whose bytes the spool's disk could not
    take (full) was recorded succeeded, and the next run paid for a new render, although the
    provider still held the output of the request whose id the ledger had."""
    data = manifest([{"key": "j0", "prompt": "hold a lighthouse"}], rates=RATES)
    data["defaults"]["chain"] = [{"provider": provider, "model": MODELS[provider], "backoff": FAST}]
    (afc.cwd / "manifest.yaml").write_text(yaml.safe_dump(data))
    submit = " ".join(shlex.quote(p) for p in afc.command("submit", "manifest.yaml"))
    resume = " ".join(shlex.quote(p) for p in afc.command("resume", "--json"))
    show = " ".join(shlex.quote(p) for p in afc.command("show", "j0", "--json"))
    # the spool (beside the ledger) on a small disk that fills while the provider renders
    script = "\n".join(
        [
            "mkdir -p afc.db-spool && mount -t tmpfs -o size=64k tmpfs afc.db-spool || exit 9",
            f"AFC_MIN_FREE_MB=0 {submit} > first.out 2> first.err &",
            "while [ ! -e go ]; do sleep 0.02; done",
            "head -c 1000000 /dev/zero > afc.db-spool/filler 2>/dev/null",
            "touch filled",
            "wait $!; echo $? > first.rc",
            "rm afc.db-spool/filler",
            f"{show} > between.json",
            f"AFC_MIN_FREE_MB=0 {resume} > second.out 2> second.err; echo $? > second.rc",
        ]
    )
    proc = subprocess.Popen(
        ["unshare", "-rm", "sh", "-c", script],
        cwd=afc.cwd,
        env=afc.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL", 1)
        (afc.cwd / "go").touch()
        deadline = time.time() + 30
        while not (afc.cwd / "filled").exists() and time.time() < deadline:
            time.sleep(0.02)
        fake.released.set()
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    cost = {"replicate": 3840, "fal": 25_000}[provider]
    first_err = (afc.cwd / "first.err").read_text()
    assert (afc.cwd / "first.rc").read_text().strip() == "1", first_err
    assert "No space left on device" in first_err and "Traceback" not in first_err
    assert "fetches it again" in first_err and "renders again" not in first_err, first_err
    # between the runs: the paid render is on the books at its cost, left to the next run
    between = json.loads((afc.cwd / "between.json").read_text())
    [left] = between["attempts"]
    assert (left["status"], left["error_class"]) == ("unknown", "interrupted"), left
    assert left["cost"] == f"{cost / 1e6:.6f}" and "fetches it again" in left["error"], left
    second_err = (afc.cwd / "second.err").read_text()
    assert (afc.cwd / "second.rc").read_text().strip() == "0", second_err
    # the prediction (request) was paid once: the next run polled it and fetched its output
    assert fake.counts[SUBMITS[provider]] == 1, "the render was paid for again"
    assert afc.rows("SELECT number, status, cost_micros FROM attempts") == [(1, "succeeded", cost)]
    total = afc.json("costs", "report")["total"]
    assert total["priced"] == f"{cost / 1e6:.6f}" and total["unknown_attempts"] == 0, total
    assert (afc.outputs() / "b1" / "j0.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("provider", ["replicate", "fal"])
def test_a_request_a_killed_run_left_that_the_provider_let_go_never_fails_the_job(
    afc, fake, provider
):
    """Found by outside audit 21e: a run SIGKILLed while its only attempt (``attempts: 1``)
    rendered at a job-style provider; the next run came back once the provider no longer had
    the request (a 404: fal's results go after minutes, Replicate's data after an hour), and
    the job failed 'used 1 of 1 attempts' with no render made, though an attempt cut off by
    afc's own end never uses up a model's attempts nor fails a job by itself (README "Concurrency, leases and interruption")."""
    data = manifest([{"key": "j0", "prompt": "hold a lighthouse"}], rates=RATES)
    data["defaults"]["chain"] = [
        {"provider": provider, "model": MODELS[provider], "attempts": 1, "backoff": FAST}
    ]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml")
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL", 1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    (fake.predictions if provider == "replicate" else fake.fal).clear()  # let go of it
    fake.released.set()
    resumed = afc.json("resume", expect=None)
    assert resumed["exit_code"] == 0, resumed
    rows = afc.rows("SELECT number, status, error_class FROM attempts ORDER BY number")
    assert rows == [(1, "unknown", "interrupted"), (2, "succeeded", None)], rows
    assert fake.counts[SUBMITS[provider]] == 2
    assert afc.json("costs", "report")["total"]["unknown_attempts"] == 1  # possibly paid
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]


def test_the_spool_file_of_a_success_a_crash_left_goes_at_a_resume_with_nothing_to_run(afc):
    """Found by outside audit 21e: a run killed after its last job's final commit, before
    that job's spool file was removed, left the file (a whole copy of the output) for good:
    docs/pipeline.md says the next run sweeps it, but every later 'afc resume' had nothing
    to run and returned before its sweep."""
    afc.write_manifest(manifest([{"key": "j0", "prompt": "a lighthouse"}]))
    died = afc("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_terminal"})
    assert died.returncode == -signal.SIGKILL, died.stderr
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    spool = afc.cwd / "afc.db-spool"
    assert [p.suffix for p in spool.glob("*.spool")] == [".spool"]  # the window was hit
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert list(spool.glob("*.spool")) == []
    assert (afc.outputs() / "b1" / "j0.png").exists()


def test_the_same_on_a_postgresql_ledger_whose_spool_a_run_marked(afc, pg_url):
    afc.write_manifest(manifest([{"key": "j0", "prompt": "a lighthouse"}]))
    afc.env["AFC_LEDGER"] = pg_url
    died = afc("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_terminal"})
    assert died.returncode == -signal.SIGKILL, died.stderr
    spool = afc.cwd / "afc-spool"
    assert len(list(spool.glob("*.spool"))) == 1
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert list(spool.glob("*.spool")) == []
