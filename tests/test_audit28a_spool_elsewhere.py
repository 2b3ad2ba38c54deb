"""A job dead-lettered SPOOL_MISSING on a machine whose host id another machine shares (a
worker.env with AFC_HOST_ID copied to both): its render was spooled on the other machine, and
the message said the spool file 'is gone', so a person took the paid render for lost and
retried it, paying again, where the file waited on the other machine (outside audit 28a).
AFC_TEST_FINGERPRINT makes two runs of this machine look like two machines'."""

from __future__ import annotations

import psycopg
from conftest import jobs, manifest
from s3fake import Fault


def test_spool_missing_names_the_other_machine_under_this_host_id(afc, s3, pg_url):  # noqa: F811
    def on(machine: str) -> dict[str, str]:
        return {
            "AFC_LEDGER": pg_url,
            "AFC_HOST_ID": "render-07",
            "AFC_TEST_FINGERPRINT": machine,
            "AFC_SPOOL_DIR": str(afc.cwd / f"spool-{machine}"),
        }

    afc.write_manifest(manifest(jobs(1), storage=s3.url))
    s3.plan.add(Fault("PUT", r"/films/", "500", -1))  # machine-a's upload fails
    assert afc("submit", "manifest.yaml", env=on("machine-a")).returncode == 1
    s3.plan.clear()
    with psycopg.connect(pg_url) as conn:
        [(job_id,)] = conn.execute("SELECT id FROM jobs").fetchall()
        conn.execute("UPDATE jobs SET lease_expires = 0")  # machine-a gone past its lease
    spooled = afc.cwd / "spool-machine-a" / f"{job_id}.spool"
    spooled.rename(spooled.with_suffix(".away"))  # machine-b's disk has no such file
    assert afc("resume", env=on("machine-b")).returncode == 1
    with psycopg.connect(pg_url) as conn:
        [(code, message)] = conn.execute("SELECT error_code, error_message FROM jobs").fetchall()
    assert code == "SPOOL_MISSING"
    assert "is gone" not in message, message
    assert "another machine" in message and "render-07" in message, message
