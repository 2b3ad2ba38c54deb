"""Outside audit 53c: the workers of a shared budget count the requests a sibling holds to
take over.

A worker under a budget counts the requests an earlier run left at their provider, which it
claimed and will take over, as spent from its claim (``pipeline.count_adoptions``,
tests/test_adopt_before_new.py), each moving into the budget's spend when its job reopens it
(``Ledger.reopen_attempt``). Its siblings on the ledger did not count them: a submit killed
with three fal requests rendering (0.30), one worker of ``--budget night --max-spend 0.35``
holding them while it looked at their storage, and two others started the batch's new jobs in
the room those requests were to fill: three new calls, the budget's workers at 0.60 of 0.35
USD. A worker counts the requests its live siblings hold to take over
(``Ledger.adopting_elsewhere``), and waits for them as for their calls in flight."""

from __future__ import annotations

import signal
import subprocess
import time

from conftest import ledger_count
from s3fake import Fault
from test_adopt_before_new import fal_manifest

BUDGET = ("--budget", "night", "--max-spend", "0.35", "--concurrency", "6")


def _seen(s3, batch: str) -> int:
    return sum(1 for method, path in s3.plan.seen if method == "HEAD" and f"/{batch}/" in path)


def test_a_siblings_takeovers_count_before_a_new_call(afc, fake, s3, pg_url):
    afc.env["AFC_LEDGER"] = pg_url
    afc.write_manifest(fal_manifest([(f"j{i}", f"hold {i}") for i in range(3)]))
    killed = afc.popen("submit", "manifest.yaml", "--storage", s3.url)
    sql = "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL"
    deadline = time.time() + 60
    while ledger_count(afc, pg_url, sql) < 3 and time.time() < deadline:
        time.sleep(0.05)
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)
    fake.released.set()
    # the first worker's takeovers wait on their storage's look (a slow store)
    s3.plan.add(Fault("HEAD", r"/b1/", "stall", -1))
    first = subprocess.Popen(
        afc.command("worker", "--poll", "60", "--batch", "b1", *BUDGET),
        cwd=afc.cwd,
        env=afc.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    others = []
    try:
        deadline = time.time() + 60
        while _seen(s3, "b1") < 3:
            assert time.time() < deadline and first.poll() is None, first.stderr.read()
            time.sleep(0.05)
        afc.write_manifest(
            {**fal_manifest([(f"a{i}", f"plain {i}") for i in range(3)]), "batch": "a1"},
            "fresh.yaml",
        )
        admitted = afc("submit", "fresh.yaml", "--no-run", "--storage", s3.url)
        assert admitted.returncode == 0, admitted.stderr
        args = ("worker", "--until-idle", "--poll", "0.2", "--batch", "a1", *BUDGET)
        others = [afc.popen(*args) for _ in range(2)]
        # both have looked at their new jobs' keys (the probe): a call is theirs to start
        deadline = time.time() + 60
        while _seen(s3, "a1") < 3:
            assert time.time() < deadline, [p.stderr.read() for p in others if p.poll()]
            time.sleep(0.05)
        s3.plan.release()
        s3.plan.clear()
        for other in others:
            other.wait(timeout=120)
        deadline = time.time() + 90
        done = "SELECT COUNT(*) FROM jobs WHERE batch = 'b1' AND status = 'succeeded'"
        while ledger_count(afc, pg_url, done) < 3:
            assert time.time() < deadline and first.poll() is None, first.stderr.read()
            time.sleep(0.1)
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=60)
    finally:
        for proc in (first, *others):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert fake.counts["fal_submit"] == 3, "a new call took the room of the requests taken over"
    report = afc.json("costs", "report", "--by", "batch")
    assert report["total"]["priced"] == "0.300000"
