"""'afc cancel' then 'afc retry' from another host while a worker still fetches a paid render's
output, its CDN out of reach for longer than a call is taken to be in flight (ops.STALE_CALL_S:
a retry is let through): the render is fetched, not paid for again."""

from __future__ import annotations

import json
import time

from test_audit29f_cancel_during_fetch import BUDGET, _env, _submit, pg  # noqa: F401

from afc_cli.providers.http import FETCH_TRIES


def test_a_job_cancelled_and_retried_while_a_worker_fetches_its_url_is_paid_once(pg):  # noqa: F811
    _submit(pg)
    # the production pause between rounds of fetches (AFC_POLL_S 2: 8 to 16 s after the first)
    a = pg.popen(
        "worker",
        "--until-idle",
        "--poll",
        "0.2",
        *BUDGET,
        env={**_env(pg, "host-a"), "AFC_POLL_S": "2"},
    )
    deadline = time.time() + 30
    while pg.fake.counts["download_refused"] < FETCH_TRIES and time.time() < deadline:
        time.sleep(0.01)
    assert pg.fake.counts["download_refused"] >= FETCH_TRIES  # its first round failed
    # the render was paid for 20 minutes ago: 'afc retry' no longer takes it to be in flight
    pg.rows("UPDATE attempts SET started_at = started_at - 1200 RETURNING number")
    d = _env(pg, "host-d")
    assert pg("cancel", "j0", env=d).returncode == 0
    retry = pg("retry", "j0", env=d)
    assert retry.returncode == 0, retry.stderr
    pg.fake.cdn_back.set()
    err = a.stderr.read()
    code = a.wait(timeout=90)
    b = pg.popen("worker", "--until-idle", "--poll", "0.2", *BUDGET, env=_env(pg, "host-b"))
    err_b = b.stderr.read()
    assert b.wait(timeout=60) == 0, err_b
    assert pg.fake.counts["openai_billed"] == 1, (code, err, err_b)
    assert pg.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert pg.rows("SELECT status, cost_micros FROM attempts") == [("succeeded", 40_000)]
    report = json.loads(pg("costs", "report", "--json").stdout)
    assert report["total"]["priced"] == "0.040000", report
