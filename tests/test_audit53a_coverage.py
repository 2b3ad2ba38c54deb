"""Outside audit 53a: money branches of afc_cli/pipeline.py and afc_cli/ops.py that the tests
nearest them left unexercised (found by a coverage run), each driven through the real ``afc``
command against the fake providers at the wire (tests/fakeproviders.py)."""

from __future__ import annotations

import json
import subprocess

from conftest import manifest
from s3fake import Fault
from test_audit28c_answer_url import PRICED
from test_audit53a_failed_cancel_retry import left_rendering_without_key
from test_output_spill import MIB, run_measured
from test_providers import MODELS


def test_a_url_answer_the_disk_cannot_keep_is_fetched_again_by_the_next_run_not_paid_again(
    afc, fake
):
    """A synchronous provider's paid answer that names its output by URL (an OpenAI-compatible
    gateway, DALL-E without ``response_format``), on a disk that refuses the output's bytes
    (RLIMIT_FSIZE: EFBIG past 64 MiB, as a full disk's ENOSPC). The URL was committed with
    the render's cost before the download (``Ledger.record_answer_url``), so ``_not_kept``
    leaves the attempt ``unknown``/``interrupted`` at that cost, its URL kept, and the next
    run fetches it from there (``_resumable``, ``fetch_left``) rather than pay for a second
    render. Ended ``succeeded`` (the branch of a render nobody can fetch again), the next
    run rendered the job again, paid twice for one output."""
    data = manifest([{"key": "j0", "prompt": "dalle-url big-out-100 shot"}], rates=PRICED)
    data["defaults"]["chain"] = [{"provider": "openai", "model": MODELS["openai"]}]
    afc.write_manifest(data)
    code, stderr, _ = run_measured(afc, "submit", "manifest.yaml", limit_file_bytes=64 * MIB)
    assert code == 1, stderr
    assert "Traceback" not in stderr
    assert "from the output URL its answer named" in stderr, stderr
    [attempt] = afc.json("show", "j0")["attempts"]
    assert (attempt["status"], attempt["cost"]) == ("unknown", "0.040000"), attempt
    assert fake.counts["openai_billed"] == 1

    code, stderr, _ = run_measured(afc, "resume")
    assert code == 0, stderr
    assert fake.counts["openai_billed"] == 1, "the render was paid for twice"
    assert (afc.outputs() / "b1" / "j0.png").stat().st_size == 100 * MIB
    [attempt] = afc.json("show", "j0")["attempts"]
    assert (attempt["status"], attempt["cost"]) == ("succeeded", "0.040000"), attempt
    total = afc.json("costs", "report")["total"]
    assert total["priced"] == "0.040000" and total["unpriced_attempts"] == 0, total


def test_a_cut_off_render_whose_key_cannot_be_read_is_not_paid_again_until_it_can(afc, s3):
    """A job whose run died in its provider call (``after_attempt_row``: attempt 1 left
    ``started``, possibly paid) is resumed at its render step, which reads its output key
    before paying again: that run may have stored the output. With the key unreadable (an
    outage: every HEAD under the prefix answers 500) ``render`` leaves the job waiting at that
    step, paying nothing (``_storage_gave_up`` before any render), and the run once storage
    answers renders it once. Taken as a free key, the outage's run paid for a render it
    could not even tell was needed."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    died = afc(
        "submit", "manifest.yaml", "--storage", s3.url, env={"AFC_CRASH_POINT": "after_attempt_row"}
    )
    assert died.returncode < 0, died.stderr
    assert afc.rows("SELECT number, status FROM attempts") == [(1, "started")]

    outage = Fault("HEAD", r"/films/", "500", -1)
    s3.plan.add(outage)
    waited = afc.json("resume", expect=1)
    [job] = waited["jobs"]
    assert (job["status"], job["step"]) == ("waiting", "render"), job
    assert "before any render is paid" in job["waiting"], job
    assert afc.rows("SELECT number, status FROM attempts") == [(1, "unknown")]

    s3.plan.faults.remove(outage)
    assert afc("resume").returncode == 0
    rows = afc.rows("SELECT number, status FROM attempts ORDER BY number")
    assert rows == [(1, "unknown"), (2, "succeeded")], rows


def test_a_cancel_that_cannot_ask_the_provider_cancels_the_job_and_says_the_render_goes_on(
    afc, fake
):
    """``afc cancel`` run where the provider's key is not set (a person's shell, the key in the
    workers' environment only): asking Replicate to stop the prediction a killed run left
    raises before anything is sent (``api_key``). The job is cancelled all the same, the
    failure recorded (``provider_cancel_failed``) and the request named, with why, as one that
    may render on and be billed (``_stop_at_providers``: the cancel's own error caught per
    request). Let through, that error ended the cancel with afc's 'unexpected error' line and
    told nothing of the render billed on."""
    request, env = left_rendering_without_key(afc, "replicate")
    result = subprocess.run(
        afc.command("cancel", "shot", "--json"),
        cwd=afc.cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["cancelled"] == [{"key": "shot", "batch": "b1"}]
    [left] = out["not_stopped_at_provider"]
    assert (left["provider"], left["request"]) == ("replicate", request), left
    assert "REPLICATE_API_TOKEN is not set" in left["why"], left
    assert f"stop request {request}" in result.stderr and "billed" in result.stderr
    assert fake.cancels == [], "no cancel could have been sent"
    kinds = [e["kind"] for e in afc.json("show", "shot")["events"]]
    assert "provider_cancel_failed" in kinds, kinds
    assert afc.json("show", "shot")["job"]["status"] == "cancelled"


def test_a_cut_off_render_whose_key_another_writer_took_is_failed_without_paying_again(afc):
    """A job whose run died in its provider call is resumed at its render step, which reads
    its output key before paying again; a file afc did not write is there now (another tool,
    another ledger sharing the folder). ``render`` fails the job as its probe would
    (OUTPUT_KEY_CONFLICT, ``_fail_conflict``), before any new attempt: rendered, that render
    was paid for and then refused at its create-only store. The file is left as it was."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    died = afc("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_attempt_row"})
    assert died.returncode < 0, died.stderr
    folder = afc.outputs() / "b1"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "a.png").write_bytes(b"someone else's picture")

    result = afc("resume")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    rows = afc.rows("SELECT status, step, error_code FROM jobs")
    assert rows == [("failed", "render", "OUTPUT_KEY_CONFLICT")], rows
    assert afc.rows("SELECT number, status FROM attempts") == [(1, "unknown")]
    assert (folder / "a.png").read_bytes() == b"someone else's picture"
    assert not (folder / "a.png.afc.json").exists()


def test_a_look_before_the_request_that_storage_cannot_answer_sends_nothing(afc, s3):
    """Batches v1 and v2 share an output key (a template without {batch}); v1's job stored
    it, and its object was removed since (to render it anew). v2's attempt row, committed,
    says another job stored the key, so ``_stored_meanwhile`` looks in storage before the
    request leaves; that look failing (storage answers 500 from then on), the request is
    never sent: the attempt ends ``unsent`` at a known 0 (not a possibly paid call) and the
    job waits at render, saying storage is read again before any render is paid. Once
    storage answers, the next run renders it once."""
    calls = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(calls)}
    for batch in ("v1", "v2"):
        data = manifest([{"key": "shot", "prompt": "p"}], batch=batch)
        data["defaults"]["output"] = "{key}.{ext}"
        afc.write_manifest(data, name=f"{batch}.yaml")
    assert afc("submit", "v1.yaml", "--storage", s3.url, env=env).returncode == 0
    s3.client.delete_object(Bucket=s3.bucket, Key="films/shot.png")

    outage = Fault("HEAD", r"/films/shot\.png", "500", -1)

    def after_the_probe(method: str, path: str) -> None:  # v2's probe found the key free
        if method == "HEAD" and path.endswith("/films/shot.png") and outage not in s3.plan.faults:
            s3.plan.add(outage)

    s3.plan.answered = after_the_probe
    result = afc("submit", "v2.yaml", "--storage", s3.url, env=env)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert len(calls.read_text().splitlines()) == 1, "v2's request was sent"
    [(status, step, waiting)] = afc.rows(
        "SELECT status, step, waiting_reason FROM jobs WHERE batch = 'v2'"
    )
    assert (status, step) == ("waiting", "render"), (status, step, waiting)
    assert "before any render is paid" in waiting, waiting
    rows = afc.rows(
        "SELECT a.status, a.cost_micros, a.cost_source FROM attempts a JOIN jobs j"
        " ON j.id = a.job_id WHERE j.batch = 'v2'"
    )
    assert rows == [("failed", 0, "unsent")], rows

    s3.plan.answered = lambda method, path: None
    s3.plan.faults.remove(outage)
    assert afc("resume", "--batch", "v2", env=env).returncode == 0
    assert len(calls.read_text().splitlines()) == 2
    assert afc.rows("SELECT status FROM jobs WHERE batch = 'v2'") == [("succeeded",)]
