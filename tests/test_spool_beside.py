"""A PostgreSQL ledger's spool is ``AFC_SPOOL_DIR``, else ``./afc-spool`` of the working
folder. A job whose upload failed waits at its store step with its paid render in the spool
of the run that rendered it; an 'afc resume' on the same host run from another folder (or
without the worker's AFC_SPOOL_DIR) found no file in its own spool and dead-lettered the job
SPOOL_MISSING, and the 'afc retry' that message asks for, run there, rendered and paid
again (found by outside audit 22c). The spool step's checkpoint now records its folder, and
a store that finds no file here copies it from there (``pipeline._copy_beside``)."""

from __future__ import annotations

import json

import pytest
from conftest import jobs, manifest
from s3fake import Fault
from test_postgres_e2e import PgAfc


@pytest.fixture
def afc(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


@pytest.fixture
def pg(afc) -> PgAfc:  # conftest's s3 fixture points ``afc`` at its bucket
    return afc


def _failed_upload(pg, s3, log):
    pg.write_manifest(manifest(jobs(1), storage=s3.url))
    s3.plan.add(Fault("PUT", r"/", "500", -1, retry_after="0"))
    env = {"AFC_LOCAL_CALL_LOG": str(log)}
    assert pg("submit", "manifest.yaml", env=env).returncode == 1
    s3.plan.clear()
    assert pg.rows("SELECT status, step FROM jobs") == [("waiting", "store")]
    [(detail,)] = pg.rows("SELECT detail_json FROM steps WHERE step = 'spool'")
    assert json.loads(detail)["dir"] == str(pg.cwd / "afc-spool")
    return env


def test_a_resume_from_another_folder_of_the_host_stores_the_spooled_render(pg, s3):
    log = pg.cwd / "calls.log"
    env = _failed_upload(pg, s3, log)
    elsewhere = {**env, "AFC_SPOOL_DIR": str(pg.cwd / "other-folder")}
    resumed = pg("resume", "--json", env=elsewhere)
    assert resumed.returncode == 0, resumed.stderr
    assert pg.rows("SELECT status, COALESCE(error_code, '') FROM jobs") == [("succeeded", "")]
    assert len(log.read_text().splitlines()) == 1, "the render was paid for again"
    assert pg.rows("SELECT status FROM attempts") == [("succeeded",)]
    assert pg.rows("SELECT kind FROM events WHERE kind = 'spool_copied'") == [("spool_copied",)]
    assert list((pg.cwd / "other-folder").glob("*.spool")) == []  # stored: removed
    # the first folder's copy goes at its next run, the job having succeeded
    assert len(list((pg.cwd / "afc-spool").glob("*.spool"))) == 1
    assert pg("resume", env=env).returncode == 0
    assert list((pg.cwd / "afc-spool").glob("*.spool")) == []


def test_a_file_there_that_is_not_the_render_is_left_alone(pg, s3):
    """Bytes other than the checkpointed ones are no render of this job: not copied, not set
    aside (they are that folder's), and the job is dead-lettered SPOOL_MISSING as before."""
    log = pg.cwd / "calls.log"
    env = _failed_upload(pg, s3, log)
    [found] = (pg.cwd / "afc-spool").glob("*.spool")
    found.write_bytes(b"not the render")
    elsewhere = {**env, "AFC_SPOOL_DIR": str(pg.cwd / "other-folder")}
    assert pg("resume", env=elsewhere).returncode == 1
    assert pg.rows("SELECT status, error_code FROM jobs") == [("dead", "SPOOL_MISSING")]
    assert found.read_bytes() == b"not the render"
    assert len(log.read_text().splitlines()) == 1
