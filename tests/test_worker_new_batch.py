"""A batch admitted while a worker's round runs joins that round (``worker.Refill``,
``run._open_batches``): its storage checked and its rate cards read as the round's claims
bring its jobs, not once every job the round holds has ended.

A worker's round refused a batch admitted after it began, and its claims stopped until the
round ended: a worker of --concurrency 4 rendering one long video (ten minutes) left three
slots idle and the new batch waiting for as long."""

from __future__ import annotations

from conftest import ledger_count, manifest, wait_for_ledger


def test_a_batch_admitted_during_a_long_render_runs_beside_it(afc, ledger_url):
    afc.env["AFC_LEDGER"] = ledger_url
    release = afc.cwd / "release"
    (afc.cwd / "release.later").touch()  # every render returns at once, but the long one
    env = {"AFC_LOCAL_RELEASE": str(release)}
    afc.write_manifest(manifest([{"key": "long", "prompt": "a video"}], batch="films"), "f.yaml")
    assert afc("submit", "f.yaml", "--no-run").returncode == 0
    worker = afc.popen("worker", "--concurrency", "4", "--poll", "0.05", env=env)
    try:
        running = "SELECT COUNT(*) FROM attempts WHERE status = 'started'"
        wait_for_ledger(afc, ledger_url, running, proc=worker)  # the long render is under way
        # a new batch, to another storage folder of its own
        later = manifest([{"key": "later", "prompt": "x"}], batch="stills")
        afc.write_manifest(later, "s.yaml")
        stills = f"file://{afc.cwd}/stills-out"
        assert afc("submit", "s.yaml", "--no-run", "--storage", stills).returncode == 0
        done = "SELECT COUNT(*) FROM jobs WHERE key = 'later' AND status = 'succeeded'"
        wait_for_ledger(afc, ledger_url, done, timeout=30, proc=worker)
        long = "SELECT COUNT(*) FROM jobs WHERE key = 'long' AND status = 'running'"
        assert ledger_count(afc, ledger_url, long) == 1  # it ran beside the long render
        release.touch()
        worker.terminate()  # SIGTERM: drained
        _, stderr = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, stderr
    assert (afc.cwd / "stills-out" / "stills" / "later.png").exists()
    assert (
        ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM jobs WHERE status <> 'succeeded'") == 0
    )
    # its storage was checked before its call (as a round's start checks it): its endpoint
    # held, the folder made by the check
    assert ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM batches") == 2


def test_a_batch_admitted_during_a_round_whose_storage_fails_its_check_stops_no_call(
    afc, ledger_url
):
    """Its claim is given back and the round's feeding ends; the long render in flight
    finishes and is stored, and the next round says why the new batch cannot run (exit 2,
    as a round's start always has)."""
    from afc_cli.costs import RateCards
    from afc_cli.ledger import Ledger
    from afc_cli.manifest import load_manifest

    afc.env["AFC_LEDGER"] = ledger_url
    release = afc.cwd / "release"
    afc.write_manifest(manifest([{"key": "long", "prompt": "a video"}], batch="films"), "f.yaml")
    assert afc("submit", "f.yaml", "--no-run").returncode == 0
    worker = afc.popen(
        "worker", "--concurrency", "4", "--poll", "0.05", env={"AFC_LOCAL_RELEASE": str(release)}
    )
    try:
        running = "SELECT COUNT(*) FROM attempts WHERE status = 'started'"
        wait_for_ledger(afc, ledger_url, running, proc=worker)
        # admitted by a library call (a submit checks its storage first): a file where the
        # storage folder goes
        (afc.cwd / "in-the-way").write_text("not a folder")
        path = afc.write_manifest(manifest([{"key": "later", "prompt": "x"}], batch="stills"))
        ledger = Ledger(ledger_url)
        try:
            ledger.admit(load_manifest(path), f"file://{afc.cwd}/in-the-way", RateCards())
        finally:
            ledger.close()
        given_back = (
            "SELECT COUNT(*) FROM jobs WHERE key = 'later' AND lease_owner IS NULL"
            " AND updated_at > created_at"
        )
        wait_for_ledger(afc, ledger_url, given_back, timeout=30, proc=worker)
        release.touch()  # the long render answers
        assert worker.wait(timeout=60) == 2
        stderr = worker.stderr.read()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert "in-the-way" in stderr, stderr
    rows = (
        "SELECT j.key || ':' || j.status || ':' || COALESCE(a.status, '-') FROM jobs j"
        " LEFT JOIN attempts a ON a.job_id = j.id ORDER BY j.key"
    )
    if ledger_url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(ledger_url) as conn:
            said = [row[0] for row in conn.execute(rows).fetchall()]
    else:
        said = [row[0] for row in afc.rows(rows)]
    assert said == ["later:queued:-", "long:succeeded:succeeded"]


def test_a_batch_admitted_during_a_round_has_its_webhooks_posted_in_that_round(afc, ledger_url):
    """The round's outbox (``webhooks.run_beside``) was started only when the round began with
    webhooks to post: a batch with a webhook, admitted meanwhile into a round that had none,
    ran its jobs there and their events waited unposted for the round's end (a held render's
    ten minutes; a busy worker's round, fed claim after claim, for as long as work came)."""
    import base64

    from receiver import Receiver

    receiver = Receiver().start()
    try:
        afc.env["AFC_LEDGER"] = ledger_url
        afc.env["AFC_HOOK_SECRET"] = "whsec_" + base64.b64encode(b"x" * 32).decode()
        release = afc.cwd / "release"
        (afc.cwd / "release.later").touch()  # every render returns at once, but the long one
        films = manifest([{"key": "long", "prompt": "a video"}], batch="films")
        afc.write_manifest(films, "f.yaml")
        assert afc("submit", "f.yaml", "--no-run").returncode == 0
        worker = afc.popen(
            "worker",
            "--concurrency",
            "4",
            "--poll",
            "0.05",
            env={"AFC_LOCAL_RELEASE": str(release)},
        )
        try:
            running = "SELECT COUNT(*) FROM attempts WHERE status = 'started'"
            wait_for_ledger(afc, ledger_url, running, proc=worker)  # the long render is under way
            hook = {"url": receiver.url, "secret_env": "AFC_HOOK_SECRET"}
            later = manifest([{"key": "later", "prompt": "x"}], batch="stills", webhook=hook)
            afc.write_manifest(later, "s.yaml")
            assert afc("submit", "s.yaml", "--no-run").returncode == 0
            posted = "SELECT COUNT(*) FROM deliveries WHERE status = 'delivered'"
            wait_for_ledger(afc, ledger_url, posted, timeout=30, proc=worker)
            long = "SELECT COUNT(*) FROM jobs WHERE key = 'long' AND status = 'running'"
            assert ledger_count(afc, ledger_url, long) == 1  # posted while the long one renders
            release.touch()
            worker.terminate()
            _, stderr = worker.communicate(timeout=60)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        assert worker.returncode == 0, stderr
        assert receiver.received
    finally:
        receiver.stop()
