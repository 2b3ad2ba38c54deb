"""A re-submit of a batch longer than one round of admission (``ADMIT_CHUNK`` jobs) that
changes its webhook, beside a run of that batch, on a PostgreSQL ledger: each round took its
own jobs' rows all at once (``_lock_together``), but held the first round's while it tried
for the next's, which the run's renewal, waiting for a row of the first, held (outside audit
57a)."""

from __future__ import annotations

import json
import time

import psycopg
from conftest import frozen_at, manifest, wait_for_ledger
from pg_stalls import SECRET, on_replicate, run_out_by, stop, wake_until_ended

from afc_cli.ledger.core import ADMIT_CHUNK


def test_a_long_resubmit_changing_the_webhook_beside_a_run_is_no_deadlock(afc, fake, pg_url):
    """Host a's run holds two jobs waiting on Replicate, renewing their leases every second
    (AFC_LEASE_S=3). The batch is submitted again with another webhook and enough new jobs
    between the two that they fall in two rounds of the admission: the first round took its
    held job's row and wrote it, the run's renewal took the other held job's row and waited
    for that one, and the second round tried for the other's (LOCK_WAIT_S), then waited for
    it: a deadlock, one of the two failed by PostgreSQL (the run stopped, or the submit
    refused). Now every job's row the re-submit writes is taken at once, after the rounds:
    neither fails."""
    held = [{"key": key, "prompt": f"hold render {key}"} for key in ("shot-a", "shot-b")]
    data = manifest(held)
    on_replicate(data)
    data["webhook"] = {"url": "http://127.0.0.1:9/hooks", "secret_env": "AFC_HOOK_SECRET"}
    afc.write_manifest(data)
    env = {"AFC_LEDGER": pg_url, "AFC_GRACE_S": "0", "AFC_HOOK_SECRET": SECRET}
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
        # select reads them: the re-submit's first round holds the last of them
        with psycopg.connect(pg_url) as conn:
            first, last = [
                row[0]
                for row in conn.execute(
                    "SELECT key FROM jobs WHERE lease_owner = (SELECT MIN(lease_owner) FROM jobs)"
                    " AND status NOT IN ('succeeded', 'failed', 'cancelled')"
                )
            ]
        # new jobs, blocked behind a held one (nothing renders them), fill the first round
        filler = [
            {"key": f"extra-{n}", "prompt": f"extra {n}", "needs": [first]}
            for n in range(ADMIT_CHUNK - 1)
        ]
        lines = [held[0] if last == "shot-a" else held[1], *filler]
        lines.append(held[1] if last == "shot-a" else held[0])
        (afc.cwd / "shots.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        del data["jobs"]
        data["jobs_from"] = "shots.jsonl"
        data["webhook"] = {"url": "http://127.0.0.1:9/moved", "secret_env": "AFC_HOOK_SECRET"}
        afc.write_manifest(data, "again.yaml")
        again = afc.popen(
            "submit",
            "again.yaml",
            "--no-run",
            env={**env, "AFC_HOST_ID": "host-b", "AFC_STALL_POINT": "rewebhooked_one"},
        )
        frozen_at(again, timeout=120)  # the first round's held job written
        # the run's renewal (every second) meets the row the re-submit holds
        deadline = time.monotonic() + 60
        while run_out_by(pg_url, last) < 1:  # (the held row's lease, untouched)
            assert time.monotonic() < deadline, "the renewal never came by"
            assert holder.poll() is None, holder.stderr.read()
            time.sleep(0.05)
        # woken, and again at each later round's stall (one round writes the run's rows now)
        wake_until_ended(again, "re-submit")
        fake.released.set()
        # the run goes on (it was not the one failed)
        wait_for_ledger(
            afc, pg_url, "SELECT COUNT(*) = 2 FROM jobs WHERE status = 'succeeded'", proc=holder
        )
    finally:
        stop(holder, again)
    said = again.stderr.read()
    assert "deadlock" not in said, said
    assert again.returncode == 0, said
    with psycopg.connect(pg_url) as conn:
        hooks = conn.execute("SELECT webhook_json FROM jobs WHERE key LIKE 'shot-%'").fetchall()
    assert all("/moved" in hook for (hook,) in hooks)
