"""'afc cancel' then 'afc retry' from another host while a worker's synchronous call, whose
chain entry's ``window_s`` lets it run longer than ops.STALE_CALL_S, is still in flight.

The call's read timeout is the attempt's ``window_s`` when longer than the provider's own
(README, "Connections"), so such a call may still be rendering, to be paid for, well past the
15 minutes a retry took any other host's call to last at most: the retry was let through, and
a worker paid for a second render of the job while the first still ran."""

from __future__ import annotations

import time

from conftest import manifest
from test_audit28c_answer_url import PRICED
from test_audit29f_cancel_during_fetch import _env, pg  # noqa: F401
from test_providers import MODELS

from afc_cli.ops import STALE_CALL_S

WINDOW_S = 1800  # a long render on an OpenAI-compatible gateway: its answer may take 30 min


def _submit(pg) -> None:  # noqa: F811
    data = manifest([{"key": "j0", "prompt": "slow-6s long render"}], rates=PRICED)
    data["defaults"]["chain"] = [
        {"provider": "openai", "model": MODELS["openai"], "window_s": WINDOW_S}
    ]
    pg.write_manifest(data)
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0


def test_a_retry_waits_for_another_hosts_call_that_its_window_lets_run_longer(pg):  # noqa: F811
    _submit(pg)
    a = pg.popen("worker", "--until-idle", "--poll", "0.2", env=_env(pg, "host-a"))
    deadline = time.time() + 30
    while time.time() < deadline and not pg.rows("SELECT 1 FROM attempts WHERE status = 'started'"):
        time.sleep(0.02)
    d = _env(pg, "host-d")
    assert pg("cancel", "j0", env=d).returncode == 0
    # the call has been rendering for 16 minutes (of the 30 its window allows)
    pg.rows(
        "UPDATE attempts SET started_at = started_at - ? RETURNING number", (STALE_CALL_S + 60,)
    )
    refused = pg("retry", "j0", env=d)
    assert refused.returncode == 2, refused.stderr
    assert "is still in flight; retry once it has ended" in refused.stderr, refused.stderr
    # and when it is taken to be over, should host-a have died mid-call: 15 min + 2 windows
    ((started,),) = pg.rows("SELECT started_at FROM attempts")
    over = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started + STALE_CALL_S + 2 * WINDOW_S))
    assert f"another host's call: taken to be over at {over}" in refused.stderr, refused.stderr
    assert pg.rows("SELECT status FROM jobs") == [("cancelled",)]
    err = a.stderr.read()
    a.wait(timeout=60)
    # the call's answer came: recorded at its cost, its render stored as the job's own
    assert pg.rows("SELECT status, cost_micros FROM attempts") == [("succeeded", 40_000)], err
    assert pg("retry", "j0", env=d).returncode == 0
    b = pg.popen("worker", "--until-idle", "--poll", "0.2", env=_env(pg, "host-b"))
    err = b.stderr.read()
    assert b.wait(timeout=60) == 0, err
    assert pg.fake.counts["openai_billed"] == 1, "the retry used the render paid for"
    assert pg.rows("SELECT status FROM jobs") == [("succeeded",)]
