"""A re-submit naming moved input files, beside a run of that batch, on a PostgreSQL ledger:
the re-submit writes each job's new file places on its row, the run's jobs too, in one
transaction, while the run renews its leases (every job it holds, one statement) in its own:
the two locked the same rows in opposite orders (outside audit 57a)."""

from __future__ import annotations

import signal
import time

import psycopg
from conftest import frozen_at, manifest, wait_for_ledger
from pg_stalls import on_replicate, run_out_by, stop

from afc_cli.providers.local import render_png


def test_a_resubmit_naming_moved_inputs_beside_a_run_is_no_deadlock(afc, fake, pg_url):
    """Host a's run holds two jobs waiting on Replicate, renewing their leases every second
    (AFC_LEASE_S=3). Their reference files are moved and the batch submitted again naming the
    new places: its transaction wrote one job's row and stalls before the other's; the run's
    renewal locks the other row and waits for the first; woken, the re-submit waited for the
    other: a deadlock, one of the two failed by PostgreSQL (the run stopped, or the submit
    refused). Now neither fails, and both jobs end under the run, their rows naming the new
    places."""
    (afc.cwd / "refs").mkdir()
    for key in ("shot-a", "shot-b"):
        (afc.cwd / "refs" / f"{key}.png").write_bytes(render_png(key, 16, 16))

    def job_list(where: str) -> list[dict]:
        return [
            {
                "key": key,
                "prompt": f"hold render {key}",
                "params": {"inputs_field": "input_image"},
                "inputs": [{"path": f"{where}/{key}.png"}],
            }
            for key in ("shot-a", "shot-b")
        ]

    data = manifest(job_list("refs"))
    on_replicate(data)
    afc.write_manifest(data)
    env = {"AFC_LEDGER": pg_url, "AFC_GRACE_S": "0"}
    holder = afc.popen(
        "submit", "manifest.yaml", env={**env, "AFC_HOST_ID": "host-a", "AFC_LEASE_S": "3"}
    )
    again = None
    try:
        wait_for_ledger(
            afc,
            pg_url,
            "SELECT COUNT(*) = 2 FROM jobs WHERE status = 'waiting'"
            " AND waiting_reason LIKE 'provider still rendering%'",
            proc=holder,
        )
        # the renewal locks the rows in the order of its index (jobs_lease_owner), as this
        # select reads them: the re-submit writes the last of them first
        with psycopg.connect(pg_url) as conn:
            order = [
                row[0]
                for row in conn.execute(
                    "SELECT key FROM jobs WHERE lease_owner = (SELECT MIN(lease_owner) FROM jobs)"
                    " AND status NOT IN ('succeeded', 'failed', 'cancelled')"
                )
            ]
        (afc.cwd / "refs").rename(afc.cwd / "assets")
        data["jobs"] = [
            job for key in reversed(order) for job in job_list("assets") if job["key"] == key
        ]
        afc.write_manifest(data, "again.yaml")
        again = afc.popen(
            "submit",
            "again.yaml",
            env={**env, "AFC_HOST_ID": "host-b", "AFC_STALL_POINT": "refiled_one"},
        )
        frozen_at(again)  # one row written, the other not yet
        # the run's renewal (every second) meets the row the re-submit holds
        deadline = time.monotonic() + 60
        while run_out_by(pg_url, order[-1]) < 1:  # (the held row's lease, untouched)
            assert time.monotonic() < deadline, "the renewal never came by"
            assert holder.poll() is None, holder.stderr.read()
            time.sleep(0.05)
        again.send_signal(signal.SIGCONT)
        fake.released.set()
        assert holder.wait(timeout=60) == 0, holder.stderr.read()
        again.wait(timeout=60)
    finally:
        stop(holder, again)
    said = holder.stderr.read() + again.stderr.read()
    assert "deadlock" not in said, said
    # admitted (its run may find both jobs still host a's: exit 1, 'left it alone')
    assert "0 new, 2 replayed, 0 conflicting" in said, said
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT status, inputs_json FROM jobs").fetchall()
    assert [status for status, _ in rows] == ["succeeded", "succeeded"]
    assert all("assets/" in inputs and "refs/" not in inputs for _, inputs in rows)
    assert fake.counts["replicate_submit"] == 2
