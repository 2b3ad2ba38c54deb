"""'afc ledger copy' of a PostgreSQL ledger while a worker on another host is in a call for a
job 'afc cancel' ended under it.

A cancel ends the job's lease and leaves its call to the live run, which records the answer and
its cost when it comes. The copy refused such a call of this host alone (its process can be
looked at); another host's went on: the copy kept the paid attempt 'started', unpriced, and
the worker wrote its answer and cost into the source after it was marked moved, where no
report of the new ledger sees them."""

from __future__ import annotations

import time

from conftest import manifest
from test_audit28c_answer_url import PRICED
from test_audit29f_cancel_during_fetch import _env, pg  # noqa: F401
from test_providers import MODELS


def test_a_copy_waits_for_another_hosts_call_of_a_cancelled_job(pg):  # noqa: F811
    data = manifest([{"key": "j0", "prompt": "slow-6s long render"}], rates=PRICED)
    data["defaults"]["chain"] = [{"provider": "openai", "model": MODELS["openai"]}]
    pg.write_manifest(data)
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    a = pg.popen("worker", "--until-idle", "--poll", "0.2", env=_env(pg, "host-a"))
    deadline = time.time() + 30
    while time.time() < deadline and not pg.rows("SELECT 1 FROM attempts WHERE status = 'started'"):
        time.sleep(0.02)
    d = _env(pg, "host-d")
    assert pg("cancel", "j0", env=d).returncode == 0
    back = f"sqlite:///{pg.cwd}/back.db"
    refused = pg("ledger", "copy", pg.url, back, env=d)
    assert refused.returncode == 2, refused.stderr
    assert "in a call of a live run" in refused.stderr and "b1/j0" in refused.stderr
    ((started,),) = pg.rows("SELECT started_at FROM attempts")
    over = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started + 900))
    assert f"another host's call: taken to be over at {over}" in refused.stderr, refused.stderr
    assert not (pg.cwd / "back.db").exists(), "the destination was not even created"
    err = a.stderr.read()
    assert a.wait(timeout=60) == 1, err  # its job was cancelled
    copied = pg("ledger", "copy", pg.url, back, env=d)
    assert copied.returncode == 0, copied.stderr
    report = pg.json("costs", "report", env={**d, "AFC_LEDGER": back})["total"]
    assert (report["priced"], report["unknown_attempts"]) == ("0.040000", 0), report
