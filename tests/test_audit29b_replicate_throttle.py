"""Outside audit 29b: Replicate's 429. Its documentation gives the throttled answer as
``{"detail": "Request was throttled. Expected available in 1 second."}`` (the API has also been
seen to say "Your rate limit resets in ~30s."); the wait it names is the one to honour.
Through the real ``afc`` command against the fake Replicate server (tests/fakeproviders.py),
its first create answered here with that 429."""

from __future__ import annotations

import pytest
from conftest import manifest
from test_providers import MODELS, RATES

from afc_cli.providers.replicate import ReplicateProvider

# the backoff's first draw is at most 0.01 s; a wait honoured is up to the cap
BACKOFF = {"base": 0.01, "cap": 0.5}


def throttled_once(fake, detail: str) -> None:
    submit = fake.replicate_submit

    def wrapped(h):
        if fake.first_time("throttled"):
            h.body()
            return h.reply(429, {"detail": detail, "status": 429})
        return submit(h)

    fake.replicate_submit = wrapped


@pytest.mark.parametrize(
    "detail, wait",
    [
        ("Request was throttled. Expected available in 1 second.", 0.5),
        ("Request was throttled. Expected available in 3 seconds.", 0.5),
        ("Request was throttled. Your rate limit resets in ~0.2s.", 0.2),
    ],
)
def test_the_wait_a_throttled_create_names_is_waited_for(afc, fake, detail, wait):
    """Replicate's documented wording ("Expected available in 1 second.") was not read: the
    next create came at the backoff's first draw (at most 10 ms here, however long the wait
    named), and in a batch spent the model's attempts on more 429s. The wait it names is
    honoured, up to the backoff's cap, as the other wording's was."""
    throttled_once(fake, detail)
    data = manifest([{"key": "shot", "prompt": "a boat"}], rates=RATES)
    data["defaults"]["chain"] = [
        {"provider": "replicate", "model": MODELS["replicate"], "attempts": 2, "backoff": BACKOFF}
    ]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "--json")
    assert result.returncode == 0, result.stderr
    first, second = afc.json("show", "shot")["attempts"]
    assert (first["error_class"], first["http_status"], first["cost"]) == (
        "rate_limited",
        429,
        "0.000000",
    )
    assert second["status"] == "succeeded"
    assert second["waited_s"] == pytest.approx(wait)


def test_a_throttled_answer_says_its_wait_in_either_wording():
    class Answer:
        status_code = 429
        headers: dict = {}

        def __init__(self, detail):
            self.content = f'{{"detail": "{detail}"}}'.encode()

        def json(self, **kwargs):
            import json

            return json.loads(self.content, **kwargs)

    said = {
        "Request was throttled. Expected available in 1 second.": 1.0,
        "Request was throttled. Expected available in 12 seconds.": 12.0,
        "Request was throttled. Your rate limit resets in ~30s.": 30.0,
        "Request was throttled.": None,
    }
    for detail, seconds in said.items():
        assert ReplicateProvider()._error(Answer(detail), "submit").retry_after == seconds, detail
