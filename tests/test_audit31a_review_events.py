"""Outside audit 31a: review gates and their events, end to end through the real ``afc``
command."""

from __future__ import annotations

from conftest import ledger_count, manifest, wait_for_ledger

HOOK = {"url": "http://127.0.0.1:9/hooks/afc", "secret_env": "HOOK_SECRET"}
SECRET = {"HOOK_SECRET": "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"}


def test_a_webhook_a_resubmit_names_while_a_run_holds_the_job_gets_its_events(afc, ledger_url):
    """A batch is running when its producer adds the webhook that tells reviewers a style
    frame awaits them (and the pipeline that its shots are done), and submits the manifest
    again: the ledger takes the webhook for every unfinished job ('the latest manifest sets
    it'), this submit leaves the jobs to the run holding them. That run ended them with the
    job rows it had claimed, before the webhook: no ``job.awaiting_review`` and no
    ``job.succeeded`` was ever queued, the receiver waited for events that never came, and
    nothing said so. The run's terminal and review writes now queue the events the job's
    row names."""
    afc.env["AFC_LEDGER"] = ledger_url
    jobs = [
        {"key": "style", "prompt": "the style frame", "review": True},
        {"key": "plain", "prompt": "a plain shot"},
    ]
    afc.write_manifest(manifest(jobs))
    release = afc.cwd / "release"
    run = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(release)})
    try:
        # both in their provider calls
        wait_for_ledger(afc, ledger_url, "SELECT COUNT(*) / 2 FROM attempts")
        afc.write_manifest(manifest(jobs, webhook=HOOK))
        again = afc("submit", "manifest.yaml", "--no-run", env=SECRET)
        assert again.returncode == 0, again.stderr
        assert not ledger_count(
            afc, ledger_url, "SELECT COUNT(*) FROM jobs WHERE webhook_json IS NULL"
        )
        release.touch()
        _, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, stderr
    said = {job["key"]: job["status"] for job in afc.json("status")["jobs"]}
    assert said == {"style": "awaiting_review", "plain": "succeeded"}
    queued = afc.json("webhooks", "list")["deliveries"]
    assert sorted((d["event"], d["url"]) for d in queued) == [
        ("job.awaiting_review", HOOK["url"]),
        ("job.succeeded", HOOK["url"]),
    ]


def test_a_job_input_whose_output_is_no_image_is_never_posted_as_a_reference(afc, fake):
    """A ``job`` input is sent to the provider as a reference image, but afc sent whatever
    the job it names had stored: a video model's clip named by mistake (``inputs`` written
    where ``needs`` was meant, to order a title card after the clip) went to Replicate as a
    ``data:video/mp4`` 'image', a paid prediction of a model that cannot read it. A ``path``
    input that is no image is refused before anything is written (README); a job input's
    bytes are known only once that job has rendered, so it is refused then, as an input the
    job cannot send (``INPUT_UNAVAILABLE``), nothing posted."""
    from test_providers import FAST, MODELS, RATES

    chain = [{"provider": "replicate", "model": MODELS["replicate"], "backoff": FAST}]
    jobs = [
        {"key": "clip", "prompt": "the harbour clip mp4-out", "params": {"output_format": "mp4"}},
        {"key": "title", "prompt": "the title card", "inputs": [{"job": "clip"}]},
    ]
    afc.write_manifest(manifest(jobs, rates=RATES, defaults={"chain": chain}))
    run = afc.json("submit", "manifest.yaml", expect=1)
    said = {job["key"]: job for job in run["jobs"]}
    assert said["clip"]["status"] == "succeeded"
    assert (afc.outputs() / "b1" / "clip.mp4").read_bytes()[4:8] == b"ftyp"
    assert said["title"]["status"] == "failed", said["title"]
    assert said["title"]["error"]["code"] == "INPUT_UNAVAILABLE", said["title"]["error"]
    assert "is not a PNG, JPEG" in said["title"]["error"]["message"]
    assert fake.counts["replicate_submit"] == 1, "the clip's alone: nothing posted for the title"
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(1,)]


def test_a_worker_gone_idle_says_what_waits_for_a_review(tmp_path, pg_url):
    """``afc worker --until-idle`` (a CI job's or cron's worker) ran the style frame, which
    then awaited review, and went idle: exit 0 and 'worker claimed 1 job in 1 round; 0
    finished', not a word of the frame awaiting a person nor of the shots blocked behind it,
    which 'afc resume' names; a script's log read as a batch done. Its line and its --json
    now count them (``awaiting_review``, ``blocked``)."""
    from test_issue17_review import style_manifest
    from test_postgres_e2e import PgAfc

    pg = PgAfc(tmp_path, pg_url)
    style_manifest(pg)
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    worker = ("worker", "--until-idle", "--poll", "0.1")
    first = pg(*worker)
    assert first.returncode == 0, first.stderr
    assert "0 finished; " in first.stderr
    assert "; 1 awaiting review ('afc review list'" in first.stderr
    assert "; 3 blocked on their needs" in first.stderr
    again = pg.json(*worker)
    assert (again["claimed"], again["awaiting_review"], again["blocked"]) == (0, 1, 3)
    assert pg("review", "approve", "style").returncode == 0
    done = pg(*worker)
    assert done.returncode == 0, done.stderr
    assert "4 finished" not in done.stderr and "3 finished" in done.stderr
    assert "awaiting review" not in done.stderr and "blocked" not in done.stderr


def test_a_reference_file_moved_and_resubmitted_while_a_run_holds_its_job_is_read_there(afc):
    """README: a file moved, the manifest naming its new place, is a replay, and a re-submit
    makes a job not yet rendered read it at the place the manifest names now. The ledger
    took the new place for the job, but the run holding it (its first attempt failed, the
    next one waiting for its backoff or the provider's limit) read its inputs from the row
    it had claimed: the old place, gone, and the job failed INPUT_UNAVAILABLE ('restore it,
    then afc retry') under the re-submit that had just said where the file is. Each attempt
    reads its inputs where the job's row names them."""
    from afc_cli.providers.local import render_png

    (afc.cwd / "refs").mkdir()
    (afc.cwd / "refs" / "palette.png").write_bytes(render_png("palette", 16, 16))
    shot = {
        "key": "shot",
        "prompt": "a shot with the palette",
        "inputs": [{"path": "refs/palette.png"}],
        "params": {"fail": ["server"]},
    }
    afc.write_manifest(manifest([shot]))
    release = afc.cwd / "release"
    run = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(release)})
    try:
        wait_for_ledger(afc, str(afc.cwd / "afc.db"), "SELECT COUNT(*) FROM attempts")
        (afc.cwd / "palettes").mkdir()
        (afc.cwd / "refs" / "palette.png").rename(afc.cwd / "palettes" / "palette.png")
        afc.write_manifest(manifest([{**shot, "inputs": [{"path": "palettes/palette.png"}]}]))
        again = afc("submit", "manifest.yaml", "--no-run")
        assert again.returncode == 0, again.stderr
        release.touch()  # the first attempt fails (server), the second reads the palette
        _, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, stderr
    shown = afc.json("show", "shot")
    assert shown["job"]["status"] == "succeeded", shown["job"]
    assert [a["status"] for a in shown["attempts"]] == ["failed", "succeeded"]
    assert shown["attempts"][1]["inputs"][0]["source"] == "palettes/palette.png"
