"""Found by the webhooks review (audit 17c): a real receiver on 127.0.0.1, the real ``afc``."""

from __future__ import annotations

import sqlite3

import pytest
from conftest import jobs, manifest
from receiver import Receiver
from test_webhooks import SECRET


@pytest.fixture
def receiver():
    r = Receiver().start()
    yield r
    r.stop()


def _pending_to(afc, receiver, n: int, **hook) -> None:
    """``n`` events left pending by a receiver that was down, then due now at ``receiver``."""
    afc.env["AFC_HOOK_SECRET"] = SECRET
    data = manifest(jobs(n))
    data["webhook"] = {
        "url": "http://127.0.0.1:9/down",
        "secret_env": "AFC_HOOK_SECRET",
        "timeout_s": 2,
        **hook,
    }
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    with sqlite3.connect(afc.cwd / "afc.db") as conn:
        conn.execute("UPDATE deliveries SET url = ?, next_attempt_at = 0", (receiver.url,))


@pytest.mark.parametrize(
    "answer", [(429, 0, {"Retry-After": "120"}), (302, 0, {"Location": "http://127.0.0.1:9/x"})]
)
def test_a_receiver_asking_to_be_spared_is_skipped_for_the_rest_of_the_pass(afc, receiver, answer):
    """README: 'one that fails is skipped for the rest of that pass'. Only a 5xx or a POST
    with no answer was: a receiver answering 429 Too Many Requests (Retry-After: 120), or a
    temporary redirect (retried as a 5xx is), was posted every other due event of the pass
    one after another, each into the same answer and each spending one of its 8 tries."""
    _pending_to(afc, receiver, 4)
    before = dict(afc.rows("SELECT id, attempts FROM deliveries"))
    receiver.default = answer
    result = afc("webhooks", "deliver", "--json")
    assert result.returncode == 0, result.stderr
    assert len(receiver.received) == 1, [r.headers["webhook-id"] for r in receiver.received]
    after = dict(afc.rows("SELECT id, attempts FROM deliveries"))
    tried = [i for i in after if after[i] != before[i]]
    assert tried == [receiver.received[0].headers["webhook-id"]], "the others keep their tries"
    assert afc.rows("SELECT DISTINCT status FROM deliveries") == [("pending",)]
