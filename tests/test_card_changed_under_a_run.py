"""A re-submit that corrects a batch's rate card while an afc process runs its jobs says that
process goes on pricing and budgeting by the card it began with (``run.batch_rates`` is read
as a run begins), and how to apply the new one now. Found by outside audit 49c: a resume kept
pricing at 0.05 after the card was corrected to 0.50, four more calls started, every report
showed the old figures, and nothing said so (README "Rate cards")."""

from __future__ import annotations

import os
import signal
import time

from conftest import ledger_count, manifest, wait_for


def priced(per_image: str) -> dict:
    return manifest(
        [{"key": f"s{i}", "prompt": f"shot {i}"} for i in range(3)],
        rates=[{"provider": "local", "model": "m1", "per_image": per_image}],
    )


def test_a_card_corrected_under_a_live_run_says_that_run_keeps_the_old_one(afc, ledger_url):
    afc.env["AFC_LEDGER"] = ledger_url
    release = afc.cwd / "release"
    afc.env["AFC_LOCAL_RELEASE"] = str(release)
    afc.write_manifest(priced("0.05"))
    running = afc.popen("submit", "manifest.yaml", "--concurrency", "1")
    try:
        deadline = time.time() + 60
        sql = "SELECT COUNT(*) FROM attempts"
        while ledger_count(afc, ledger_url, sql) < 1 and time.time() < deadline:
            time.sleep(0.05)
        afc.write_manifest(priced("0.50"))
        corrected = afc("submit", "manifest.yaml", "--no-run", "--json")
        assert corrected.returncode == 0, corrected.stderr
        said = corrected.stderr
        assert "batch b1's rate cards changed while an afc process holds its jobs" in said
        assert f"pid {running.pid} on " in said
        assert "stop it (Ctrl-C or SIGTERM) and run 'afc resume'" in said
        # the same card again, or a card changed with nothing running: nothing to say
        again = afc("submit", "manifest.yaml", "--no-run")
        assert "rate cards changed" not in again.stderr, again.stderr
    finally:
        release.touch()
        running.send_signal(signal.SIGINT)
        running.wait(timeout=60)
    os.unlink(release)
    afc.write_manifest(priced("0.05"))
    idle = afc("submit", "manifest.yaml", "--no-run")
    assert idle.returncode == 0 and "rate cards changed" not in idle.stderr, idle.stderr


def test_a_resubmit_that_drops_a_card_says_its_attempts_go_unpriced(afc):
    """Found by outside audit 49c: a cron host without the AFC_CONFIG file the batch was first
    submitted with re-submitted it: the batch lost its card, and every attempt after was
    unpriced, said only as 'N attempts of unknown cost' once paid."""
    (afc.cwd / "rates.yaml").write_text(
        'rates:\n  - {provider: local, model: m1, per_image: "0.05"}\n'
    )
    data = manifest([{"key": "s0", "prompt": "shot 0"}])
    data.pop("rates", None)
    afc.write_manifest(data)
    first = afc("submit", "manifest.yaml", "--no-run", env={"AFC_CONFIG": "rates.yaml"})
    assert first.returncode == 0 and "no longer priced" not in first.stderr, first.stderr
    again = afc("submit", "manifest.yaml", "--no-run")
    assert again.returncode == 0, again.stderr
    assert "batch b1 is no longer priced for local/m1: its last submit had a rate card" in (
        again.stderr
    )
    assert "is AFC_CONFIG unset here, or another file?" in again.stderr
    assert "no longer priced" not in afc("submit", "manifest.yaml", "--no-run").stderr


def test_a_card_written_anew_at_the_same_price_says_nothing_under_a_live_run(afc):
    """A card re-written with its price the same ("0.05" as "0.050", or its fields in
    another order) changes nothing a run prices or reserves: a re-submit beside a live run
    told the user to stop it and resume, for a correction there was not."""
    release = afc.cwd / "release"
    afc.env["AFC_LOCAL_RELEASE"] = str(release)
    afc.write_manifest(priced("0.05"))
    running = afc.popen("submit", "manifest.yaml", "--concurrency", "1")
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts", 1)
        afc.write_manifest(priced("0.050"))
        again = afc("submit", "manifest.yaml", "--no-run")
        assert again.returncode == 0, again.stderr
        assert "rate cards changed" not in again.stderr, again.stderr
        afc.write_manifest(priced("0.5"))
        corrected = afc("submit", "manifest.yaml", "--no-run")
        assert "batch b1's rate cards changed while an afc process holds" in corrected.stderr
    finally:
        release.touch()
        running.send_signal(signal.SIGINT)
        running.wait(timeout=60)


def test_a_card_dropped_with_its_model_says_nothing_once_no_job_left_renders_it(afc, ledger_url):
    """A batch moved to another model (its jobs on m1 all rendered, the next ones on m2, the
    card for m1 taken out with m1) prices every attempt still to come: the re-submit said
    its attempts went unpriced and asked whether AFC_CONFIG was unset, for a model no job of
    the batch will call again. One job left to render on m1 keeps the notice."""
    afc.env["AFC_LEDGER"] = ledger_url
    afc.write_manifest(priced("0.05"))
    assert afc("submit", "manifest.yaml").returncode == 0
    moved = manifest(
        [
            {
                "key": "t0",
                "prompt": "shot t0",
                "chain": [{"provider": "local", "model": "m2", "attempts": 1}],
            }
        ],
        rates=[{"provider": "local", "model": "m2", "per_image": "0.07"}],
    )
    afc.write_manifest(moved)
    again = afc("submit", "manifest.yaml", "--no-run")
    assert again.returncode == 0, again.stderr
    assert "no longer priced" not in again.stderr, again.stderr
    # a job still to render on m1, admitted under its card: the notice is for it
    afc.write_manifest(priced("0.05") | {"jobs": [{"key": "s9", "prompt": "shot 9"}]})
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    afc.write_manifest(moved)
    dropped = afc("submit", "manifest.yaml", "--no-run")
    assert "batch b1 is no longer priced for local/m1" in dropped.stderr, dropped.stderr


def test_a_card_written_anew_at_the_same_price_does_not_end_a_workers_refill(afc):
    """A worker's refill ends once a batch's cards change (the jobs it runs finish under the
    cards it read, its next round reads them anew). The cards were compared as text: a
    re-submit writing the same price anew ("0.05" as "0.050") ended it, and a job added by
    that re-submit waited for a long render in flight to end (suspected by outside audit
    50a). Compared by price, the worker takes it at once."""
    release = afc.cwd / "release"
    afc.env["AFC_LOCAL_RELEASE"] = str(release)
    data = priced("0.05")
    data["jobs"] = data["jobs"][:1]  # s0: held until the test ends
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    worker = afc.popen("worker", "--concurrency", "2", "--poll", "0.1")
    try:
        deadline = time.time() + 60
        while not afc.rows("SELECT 1 FROM attempts") and time.time() < deadline:
            time.sleep(0.05)
        again = priced("0.050")
        again["jobs"] = [again["jobs"][0], {"key": "late", "prompt": "added meanwhile"}]
        afc.write_manifest(again)
        assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
        (afc.cwd / "release.late").touch()
        deadline = time.time() + 60
        done = []
        while not done and time.time() < deadline:
            done = afc.rows("SELECT 1 FROM jobs WHERE key = 'late' AND status = 'succeeded'")
            time.sleep(0.05)
        assert done, "the job added beside the render in flight waited for it"
        assert afc.rows("SELECT status FROM jobs WHERE key = 's0'") == [("running",)]
    finally:
        release.touch()
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
