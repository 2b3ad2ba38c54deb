"""'afc webhooks replay --dead [--batch B]': every dead event sent again, after a receiver's
outage outlasted the tries of its events (MAX_TRIES: about ten minutes of backoff). A
replay by id sent them back one at a time, and a receiver down for an hour left every event
of its outage dead. A real receiver on 127.0.0.1; each delivery verified with the
``standardwebhooks`` reference library."""

from __future__ import annotations

import json

from conftest import jobs, manifest
from test_issue17_resubmit import on_both  # noqa: F401
from test_webhooks import SECRET, hooked, receiver, verified  # noqa: F401


def test_every_dead_event_of_a_batch_is_sent_again(on_both, receiver):  # noqa: F811
    afc = on_both
    afc.env["AFC_HOOK_SECRET"] = SECRET

    def write(data):
        data["webhook"] = {"url": receiver.url, "secret_env": "AFC_HOOK_SECRET"}
        afc.write_manifest(data)

    receiver.script = [(400, 0, {})] * 3  # refused: dead at once
    write(manifest(jobs(3)))
    assert afc("submit", "manifest.yaml", "--concurrency", "1").returncode == 0
    dead = afc.json("webhooks", "list", "--dead")["deliveries"]
    assert len(dead) == 3
    stored = dict(afc.rows("SELECT id, envelope FROM deliveries"))
    # another batch with nothing dead; a batch named that has none says so
    other = manifest(jobs(1), batch="b2")
    write(other)
    assert afc("submit", "manifest.yaml").returncode == 0
    empty = afc("webhooks", "replay", "--dead", "--batch", "b2")
    assert empty.returncode == 0 and "no dead webhook deliveries in batch b2" in empty.stderr
    none = afc.json("webhooks", "replay", "--dead", "--batch", "b2")
    result = afc("webhooks", "replay", "--dead", "--batch", "b1", "--json")
    assert result.returncode == 0, result.stderr
    assert none["replayed"] == 0 and set(none) == set(json.loads(result.stdout)), "one shape"
    assert '"replayed": 3' in result.stdout and '"delivered": 3' in result.stdout
    resent = receiver.received[-3:]
    assert sorted(r.body.decode() for r in resent) == sorted(stored[d["id"]] for d in dead)
    assert {wid for wid, _ in verified(receiver)[-3:]} == {d["id"] for d in dead}
    assert afc.json("webhooks", "list", "--dead")["deliveries"] == []
    assert afc.rows("SELECT COUNT(*) FROM events WHERE kind = 'webhook_replayed'") == [(3,)]


def test_a_replay_names_one_delivery_or_every_dead_one(afc, receiver, hooked):  # noqa: F811
    hooked(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    for args in ((), ("someid", "--dead"), ("someid", "--batch", "b1")):
        result = afc("webhooks", "replay", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr
    unknown = afc("webhooks", "replay", "--dead", "--batch", "nosuch")
    assert unknown.returncode == 2, unknown.stderr


def test_a_dead_event_whose_secret_is_unset_is_refused_first(afc, receiver, hooked):  # noqa: F811
    receiver.script = [(400, 0, {})]
    hooked(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    result = afc("webhooks", "replay", "--dead", env={"AFC_HOOK_SECRET": ""})
    assert result.returncode == 2, result.stderr
    assert "AFC_HOOK_SECRET" in result.stderr and SECRET not in result.stderr
    assert len(afc.json("webhooks", "list", "--dead")["deliveries"]) == 1, "nothing changed"
