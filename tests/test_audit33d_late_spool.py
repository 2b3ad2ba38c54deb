"""Outside audit 33d: two processes of one host writing one job's spool file name."""

from __future__ import annotations

import hashlib
import itertools
import json
import signal
import time

import fakeproviders
import pytest
from conftest import stop_between_writes
from s3fake import Fault
from test_audit26f_killpoints import _chain, _write, fakes, s3  # noqa: F401 - fixtures

KEY = r"^/kills-\d+/films/b1/j\.png$"


@pytest.fixture
def new_bytes_each_render(monkeypatch):
    """The fake OpenAI renders another image for each paid request, as the real one does."""
    real = fakeproviders.render_png
    count = itertools.count()
    monkeypatch.setattr(
        fakeproviders, "render_png", lambda seed, w, h: real(f"{seed}#{next(count)}", w, h)
    )


def test_a_stalled_runs_late_render_never_replaces_the_taker_s_spool_file(
    afc,
    fakes,  # noqa: F811
    s3,  # noqa: F811
    new_bytes_each_render,
):
    """A run frozen (SIGSTOP) past its lease while OpenAI rendered its job (billed, the
    answer on its way); host-b took the job over, rendered it (paid again), spooled it and
    waited at its store step (the storage refused uploads). host-a woke, read its late
    answer and wrote it to the spool under the job's name, over host-b's file, before its
    checkpoint told it the job was lost: the next run to store the job (host-a's own, once
    host-b's hold of it ran out) found host-b's spool file "damaged" and dead-lettered the
    job SPOOL_DAMAGED, both paid renders lost. A render that comes back more than a moment
    after its attempt row now looks at the job first (renewing its lease if still its own);
    taken over, it is kept under a name of its own (``<job id>.late``)."""
    _late_render_while_the_taker_waits_at_its_store(afc, fakes, s3, afc.cwd / "afc.db-spool")


def test_the_same_on_postgresql(
    afc,
    fakes,  # noqa: F811
    s3,  # noqa: F811
    new_bytes_each_render,
    pg_url,
):
    """As above, with both processes on one PostgreSQL ledger (one spool: ./afc-spool)."""
    from test_postgres_e2e import PgAfc

    pg = PgAfc(afc.cwd, pg_url)
    pg.env = {**afc.env, "AFC_LEDGER": pg_url}  # the fakes' and the S3 fixture's settings
    _late_render_while_the_taker_waits_at_its_store(pg, fakes, s3, pg.spool())


def _late_render_while_the_taker_waits_at_its_store(afc, fakes, s3, spool) -> None:  # noqa: F811
    url = s3.url
    _write(afc, _chain("openai"))
    env = {"AFC_LEASE_S": "3"}
    held = fakes.holds.add("POST", r"^/v1/images/generations$", "after")
    s3.plan.add(Fault("PUT", KEY, "500", -1))
    a = afc.popen("submit", "manifest.yaml", "--storage", url, env={**env, "AFC_HOST_ID": "host-a"})
    try:
        assert held.arrived.wait(60), "host-a's request never came"
        stop_between_writes(afc, a)
        time.sleep(3.5)  # past its 3 s lease
        b = afc("submit", "manifest.yaml", "--storage", url, env={**env, "AFC_HOST_ID": "host-b"})
        assert b.returncode == 1, b.stdout + b.stderr
        assert afc.rows("SELECT status, step FROM jobs") == [("waiting", "store")], b.stderr
        held.release.set()  # host-a's paid answer, read once it wakes
    finally:
        a.send_signal(signal.SIGCONT)
    _, err = a.communicate(timeout=60)
    assert fakes.charged() == 2, fakes.log
    s3.plan.clear()  # the storage is back
    time.sleep(3)  # past host-b's pause of the job's claims
    out = afc(
        "submit", "manifest.yaml", "--storage", url, "--json", env={**env, "AFC_HOST_ID": "host-b"}
    )
    status = afc.json("status")
    [job] = status["jobs"]
    assert job["status"] == "succeeded", "\n".join([json.dumps(job), out.stderr, err])
    listed = s3.client.list_objects_v2(Bucket=s3.bucket).get("Contents", [])
    assert [o["Key"] for o in listed] == ["films/b1/j.png"], listed
    stored = s3.client.get_object(Bucket=s3.bucket, Key="films/b1/j.png")["Body"].read()
    [(sha,)] = afc.rows("SELECT output_sha256 FROM jobs")
    assert hashlib.sha256(stored).hexdigest() == sha  # host-b's render, as checkpointed
    assert fakes.charged() == 2, fakes.log
    # host-a's late render was kept under a name of its own, never over host-b's file
    [kept] = [
        json.loads(d)["spool"]
        for (d,) in afc.rows("SELECT detail_json FROM events WHERE kind = 'late_result_kept'")
    ]
    assert kept.endswith(".late"), kept
    assert [p.name for p in spool.iterdir() if not p.name.startswith(".")] == []
