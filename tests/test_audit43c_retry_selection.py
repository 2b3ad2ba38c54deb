"""Outside audit 43c: ``afc retry --batch B --failed`` and a job given up while it runs.

The retry reads the batch's failed jobs, then puts them back one transaction each: on 50,000
failed jobs 37 s on SQLite, 132 s on PostgreSQL. A person who gave one of them up meanwhile
(``afc cancel KEY``: failed, now cancelled) saw it queued again by the retry, said ``queued
again (was failed)``, and the next run paid for the render they had given up. A job is now
put back only while it still has the status the retry selected it by; one changed meanwhile
is left as it is, and said so (``unchanged``: ``now cancelled``)."""

from __future__ import annotations

from conftest import jobs, manifest

from afc_cli import ops


def test_a_job_cancelled_while_a_batch_retry_runs_stays_cancelled(afc, ledger_url):
    afc.write_manifest(manifest(jobs(3, fail=["invalid"])))
    env = {"AFC_LEDGER": ledger_url}
    assert afc("submit", "manifest.yaml", env=env).returncode == 1  # all three failed
    given_up = "shot-002"

    def confirm(what: str, selected: list[dict]) -> bool:
        # between the retry's selection and its writes, another person gives one job up
        assert sorted(job["status"] for job in selected) == ["failed"] * 3
        done = ops.cancel(ledger_url, [given_up], "b1")
        assert [item["key"] for item in done["cancelled"]] == [given_up]
        return True

    result = ops.retry(ledger_url, [], "b1", ["failed"], by="tester", confirm=confirm)

    assert sorted(item["key"] for item in result["retried"]) == ["shot-001", "shot-003"]
    assert [(i["key"], i["status"]) for i in result["unchanged"]] == [(given_up, "cancelled")]
    listed = {job["key"]: job["status"] for job in afc.json("status", "--all", env=env)["jobs"]}
    assert listed == {"shot-001": "queued", "shot-003": "queued", given_up: "cancelled"}
    said = afc("retry", given_up, "--batch", "b1", env=env)  # by its key: a person's choice
    assert said.returncode == 0 and "queued again (was cancelled)" in said.stderr
