"""Outside audit 54b (cancellation between paying and recording): a job that gave its
``--concurrency`` slot back for a pause (a paid output out of reach, fetched again in
rounds) and whose attempt window ended while it waited to take a slot again."""

from __future__ import annotations

import time

from conftest import manifest

RATES = [
    {"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"},
    {"provider": "openai", "model": "dall-e-3", "per_image": "0.04"},
    {"provider": "fal", "model": "fal-ai/flux/schnell", "per_image": "0.003"},
]


def test_a_window_that_ends_while_a_job_waits_for_its_slot_keeps_the_concurrency(afc, fake):
    """--concurrency 1: 'first' is paid, its output out of reach, and fetched again after a
    pause, its slot given meanwhile to 'second' (a fal request that renders until the test
    lets it end). 'first''s 2 s window ended while it waited to take the slot back: cancelled
    in that wait, it went on without a slot, its next model paid for at once, beside
    'second''s request (two paid calls at once under --concurrency 1), and the slot it never
    took back was given back at its end: one more for the rest of the run (an ``afc worker``'s
    loop for as long as it is fed). It now takes the slot back before it goes on."""
    data = manifest(
        [
            {
                "key": "first",
                "prompt": "dalle-url cdn-held first",
                "chain": [
                    {
                        "provider": "openai",
                        "model": "gpt-image-1",
                        "window_s": 2,
                        "fallback_on": ["window_expired"],
                    },
                    {"provider": "openai", "model": "dall-e-3"},
                ],
            },
            {
                "key": "second",
                "prompt": "hold second",
                "chain": [{"provider": "fal", "model": "fal-ai/flux/schnell"}],
            },
        ],
        rates=RATES,
    )
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml", "--concurrency", "1")
    try:
        # 'first''s window ends 2 s in; its next call, if it goes on without a slot, a moment
        # after that
        deadline = time.time() + 6
        while fake.counts["openai"] < 2 and time.time() < deadline:
            time.sleep(0.05)
        beside = fake.counts["openai"]  # the calls made while 'second' held the only slot
    finally:
        fake.released.set()
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    assert beside == 1, "'first' called dall-e-3 while 'second' held the only slot"
    assert afc.rows("SELECT key, status FROM jobs ORDER BY key") == [
        ("first", "succeeded"),
        ("second", "succeeded"),
    ]
    # 'first' ended its window on gpt-image-1 and went on to dall-e-3 (the image in its paid
    # answer) once 'second' had given the slot back
    assert afc.rows(
        "SELECT a.model, a.status, a.error_class FROM attempts a JOIN jobs j ON j.id = a.job_id"
        " WHERE j.key = 'first' ORDER BY a.number"
    ) == [("gpt-image-1", "failed", "window_expired"), ("dall-e-3", "succeeded", None)]
