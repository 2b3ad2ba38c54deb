"""A paid render left at its output URL, on a PostgreSQL ledger shared by ``afc worker`` hosts.

Each worker runs as a host of its own (``AFC_HOST_ID``, ``AFC_SPOOL_DIR``), with a short lease:
only the lease's expiry lets another host take a job over."""

from __future__ import annotations

import json
import time

import pytest
from conftest import manifest
from test_audit28c_answer_url import PRICED
from test_postgres_e2e import PgAfc
from test_providers import MODELS


@pytest.fixture
def pg(tmp_path, pg_url):
    from fakeproviders import FakeProviders

    afc = PgAfc(tmp_path, pg_url)
    server = FakeProviders().start()
    afc.env.update(server.env())
    afc.fake = server
    yield afc
    server.stop()


def _env(pg, host: str) -> dict[str, str]:
    spool = pg.cwd / f"spool-{host}"
    spool.mkdir(exist_ok=True)
    return {"AFC_HOST_ID": host, "AFC_SPOOL_DIR": str(spool), "AFC_LEASE_S": "3"}


def _worker(pg, host: str, *extra: str):
    return pg.popen("worker", "--until-idle", "--poll", "0.2", *extra, env=_env(pg, host))


def _submit(pg) -> None:
    data = manifest([{"key": "j0", "prompt": "dalle-url cdn-held"}], rates=PRICED)
    data["defaults"]["chain"] = [{"provider": "openai", "model": MODELS["openai"]}]
    pg.write_manifest(data)
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0


def _downloading(pg) -> None:
    deadline = time.time() + 30
    while pg.fake.counts["download_refused"] < 1 and time.time() < deadline:
        time.sleep(0.01)
    assert pg.fake.counts["download_refused"] >= 1, (pg.fake.counts, pg.rows("SELECT * FROM jobs"))


BUDGET = ("--budget", "night", "--max-spend", "1")


def test_a_job_cancelled_from_another_host_during_the_download_is_fetched_by_its_retry(pg):
    """'afc cancel' from a fourth host while a worker fetched the paid render's output (the CDN
    out of reach) said 'afc retry j0 stores its result without paying for it again', but the
    worker, seeing the cancel between its rounds of fetches, ended the attempt 'failed', which
    the retry passed over: the retry's worker paid for a new render."""
    _submit(pg)
    a = _worker(pg, "host-a", *BUDGET)
    _downloading(pg)
    d = _env(pg, "host-d")
    cancel = pg("cancel", "j0", env=d)
    assert cancel.returncode == 0, cancel.stderr
    assert "'afc retry j0' stores its result without paying for it again" in cancel.stderr
    pg.fake.cdn_back.set()
    err = a.stderr.read()
    assert a.wait(timeout=60) == 1, err  # a job it ran was cancelled (README, exit codes)
    assert "b1/j0: ended cancelled" in err, err
    assert pg.rows("SELECT status FROM jobs") == [("cancelled",)]
    assert pg("retry", "j0", env=d).returncode == 0
    b = _worker(pg, "host-b", *BUDGET)
    err = b.stderr.read()
    assert b.wait(timeout=60) == 0, err
    assert pg.fake.counts["openai_billed"] == 1, "the retry fetched the render paid for"
    assert pg.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert pg.rows("SELECT status, cost_micros FROM attempts") == [("succeeded", 40_000)]
    # counted once: by the worker that paid for it, in the ledger and in the shared budget
    assert "spent 0.000000 USD (priced); budget 'night': 0.040000 of" in err, err
    report = json.loads(pg("costs", "report", "--json").stdout)
    assert report["total"]["priced"] == "0.040000", report
