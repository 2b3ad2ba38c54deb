"""A batch's receiver moved between nights, in the same edit as a prompt, end to end through
``afc`` (an outside audit). The webhook is not part of the request, and a re-submit sets it
on the jobs it lists, their queued events too (README, Webhooks). A job whose prompt the
same manifest changed was refused as a conflict, and kept the old receiver with it: its
admitted request, which the next run still renders, sent its events to the URL the manifest
no longer names, where they died; a replay sent them there again, and no re-submit could
move them (each was refused again), unless the person undid the prompt edit."""

from __future__ import annotations

import base64

from conftest import manifest

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()
OLD = "http://127.0.0.1:9/old"
NEW = "http://127.0.0.1:9/new"


def urls(afc) -> dict[str, str]:
    """Each job's delivery URL, by its key (a delivery's id is the job id and the event)."""
    ids = {afc.json("show", key)["job"]["id"]: key for key in ("a", "b")}
    return {
        ids[row["id"].split(":")[0]]: row["url"]
        for row in afc.json("webhooks", "list")["deliveries"]
    }


def test_a_job_refused_as_a_conflict_takes_the_manifests_webhook(afc, ledger_url):
    afc.env.update(AFC_WH=SECRET, AFC_LEDGER=ledger_url)
    data = manifest(
        [{"key": "a", "prompt": "a cat"}, {"key": "b", "prompt": "a dog"}],
        webhook={"url": OLD, "secret_env": "AFC_WH"},
    )
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0

    data["webhook"]["url"] = NEW
    data["jobs"][1]["prompt"] = "a wolf"
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "--no-run")
    assert result.returncode == 3, result.stderr
    assert "IDEMPOTENCY_CONFLICT: key 'b'" in result.stderr

    afc("resume")  # renders both admitted requests; the receiver is down: events queued
    assert urls(afc) == {"a": NEW, "b": NEW}
    # the admitted request is untouched
    assert afc.json("show", "b")["request"]["prompt"] == "a dog"


def test_a_conflicting_jobs_queued_events_move_to_the_new_receiver(afc, ledger_url):
    afc.env.update(AFC_WH=SECRET, AFC_LEDGER=ledger_url)
    data = manifest(
        [{"key": "a", "prompt": "a cat"}, {"key": "b", "prompt": "a dog"}],
        webhook={"url": OLD, "secret_env": "AFC_WH"},
    )
    afc.write_manifest(data)
    afc("submit", "manifest.yaml")  # the receiver is down: both events wait
    assert urls(afc) == {"a": OLD, "b": OLD}

    data["webhook"]["url"] = NEW
    data["jobs"][1]["prompt"] = "a wolf"
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 3
    assert urls(afc) == {"a": NEW, "b": NEW}
