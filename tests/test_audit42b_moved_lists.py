"""A ledger moved by ``afc ledger copy``: its review queue and its outbox are the destination's
to work through. ``afc review list`` on the old ledger listed a job awaiting a decision that
the old ledger refuses (or that was decided in the new one since), and ``afc webhooks list``
listed deliveries ``pending`` with a next try in the past that no run will ever send from it,
both without a word of the move, where ``status``, ``queue stats`` and ``costs report`` say
where the work went (found by outside audit 42b). Both now say it too: stderr, and
``moved_to`` in ``--json``."""

from __future__ import annotations

import base64
import socket

from conftest import manifest

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_review_list_and_webhooks_list_of_a_moved_ledger_say_where_its_work_went(afc):
    env = {"AFC_HOOK_SECRET": SECRET}
    data = manifest([{"key": "frame", "prompt": "style frame", "review": True}])
    data["webhook"] = {
        "url": f"http://127.0.0.1:{_closed_port()}/hooks",
        "secret_env": "AFC_HOOK_SECRET",
    }
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", env=env).returncode == 0
    pending = afc.json("webhooks", "list")["deliveries"]
    assert [d["status"] for d in pending] == ["pending"]
    copied = afc("ledger", "copy", "afc.db", "new.db")
    assert copied.returncode == 0, copied.stderr

    listed = afc("review", "list")
    assert listed.returncode == 0, listed.stderr
    assert "this ledger was moved to " in listed.stderr and "new.db" in listed.stderr
    assert afc.json("review", "list")["moved_to"].endswith("new.db")
    # deciding here is refused, naming the destination, as before
    refused = afc("review", "approve", "frame")
    assert refused.returncode == 2 and "new.db" in refused.stderr

    hooks = afc("webhooks", "list")
    assert hooks.returncode == 0, hooks.stderr
    assert "this ledger was moved to " in hooks.stderr and "new.db" in hooks.stderr
    assert afc.json("webhooks", "list")["moved_to"].endswith("new.db")

    # the destination's own lists say nothing of a move
    env_new = {"AFC_LEDGER": "new.db"}
    assert "moved" not in afc("review", "list", env=env_new).stderr
    assert "moved_to" not in afc.json("review", "list", env=env_new)
    assert "moved" not in afc("webhooks", "list", env=env_new).stderr
    assert "moved_to" not in afc.json("webhooks", "list", env=env_new)
