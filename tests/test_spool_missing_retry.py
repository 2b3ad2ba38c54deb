"""The remedy ``SPOOL_MISSING`` names, on several hosts: the spool file copied into a host's
spool, then ``afc retry`` there. The retried job was free for any host, and a worker on a
host without the file met it first: its probe found nothing stored and its render paid again
for the output the file held. Now a retry run on the host whose spool has the file leaves the
job with that host for a lease (``Ledger.retry``'s ``spooled_here``), as a job waiting to
store is, so a run there stores the file and nothing is paid again."""

from __future__ import annotations

import shutil

from conftest import jobs, manifest
from s3fake import Fault


def _rows(pg_url: str, sql: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(pg_url) as conn:
        return [tuple(r) for r in conn.execute(sql).fetchall()]


def test_a_retry_on_the_host_given_the_spool_file_keeps_the_job_there(afc, s3, pg_url):  # noqa: F811
    calls = afc.cwd / "calls.log"
    spools = {host: afc.cwd / f"spool-{host}" for host in ("a", "b", "c")}

    def on(host: str) -> dict[str, str]:
        return {
            "AFC_LEDGER": pg_url,
            "AFC_HOST_ID": f"host-{host}",
            "AFC_SPOOL_DIR": str(spools[host]),
            "AFC_LOCAL_CALL_LOG": str(calls),
        }

    afc.write_manifest(manifest(jobs(1), storage=s3.url))
    # host-a renders; its upload fails: the render waits in host-a's spool
    s3.plan.add(Fault("PUT", r"/films/", "500", -1))
    assert afc("submit", "manifest.yaml", env=on("a")).returncode == 1
    s3.plan.clear()
    [(job_id,)] = _rows(pg_url, "SELECT id FROM jobs")
    spooled = spools["a"] / f"{job_id}.spool"
    assert spooled.is_file()
    # host-a is gone; once its lease ran out host-b met the job without the file
    _rows(pg_url, "UPDATE jobs SET lease_expires = 0 RETURNING id")
    assert afc("resume", env=on("b")).returncode == 1
    [(status, code)] = _rows(pg_url, "SELECT status, error_code FROM jobs")
    assert (status, code) == ("dead", "SPOOL_MISSING")

    # the remedy: the file copied into host-b's spool, the retry run there
    kept = spooled.read_bytes()
    shutil.copy(spooled, spools["b"] / spooled.name)
    spooled.unlink()
    retried = afc("retry", "shot-001", env=on("b"))
    assert retried.returncode == 0, retried.stderr
    # host-c, without the file, runs first: it leaves the job to host-b and pays nothing
    afc("resume", env=on("c"))
    assert len(calls.read_text().splitlines()) == 1, "host-c paid again for the render"
    assert _rows(pg_url, "SELECT status FROM jobs") == [("queued",)]
    # host-b stores the file it was given
    stored = afc("resume", env=on("b"))
    assert stored.returncode == 0, stored.stderr
    assert len(calls.read_text().splitlines()) == 1
    assert _rows(pg_url, "SELECT status FROM jobs") == [("succeeded",)]
    body = s3.client.get_object(Bucket=s3.bucket, Key="films/b1/shot-001.png")["Body"].read()
    assert body == kept
