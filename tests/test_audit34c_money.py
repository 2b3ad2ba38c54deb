"""Outside audit 34c, money: the figures ``afc costs report`` gives against what the fake
providers (tests/fakeproviders.py) billed, through the real ``afc`` command."""

from __future__ import annotations

import time

from conftest import manifest

OPENAI = {"provider": "openai", "model": "gpt-image-1", "attempts": 1}
CARD = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]


def _billed(fake) -> int:
    return sum(1 for _, _, _, billed in fake.log if billed)


def test_a_damaged_object_found_again_at_each_retry_saves_nothing(afc, fake, tmp_path):
    """A fresh ledger finds a job's own object in storage, damaged since it was stored: its
    probe counted a render avoided, its read-back failed (VERIFY_FAILED), each 'afc retry'
    found the same object and counted one more, and after the way out the message gives
    (delete the object, retry: a new render, paid) 'afc costs report' said one render more
    saved than stored outputs saved, at the price of the render just paid for again. A job
    that ended VERIFY_FAILED avoided nothing: only the job whose stored output verified is
    counted, and priced is what the provider billed."""
    out = tmp_path / "out"
    data = manifest(
        [{"key": "a", "prompt": "damaged a"}, {"key": "b", "prompt": "intact b"}], rates=CARD
    )
    data["defaults"]["chain"] = [OPENAI]
    afc.write_manifest(data)
    storage = ("--storage", f"file://{out}")
    assert afc.json("submit", "manifest.yaml", *storage)["counts"] == {"succeeded": 2}
    assert _billed(fake) == 2
    (out / "b1" / "a.png").write_bytes(b"damaged at rest")
    (afc.cwd / "afc.db").unlink()
    afc.json("submit", "manifest.yaml", *storage, expect=1)  # a fresh ledger
    for _ in range(2):  # a retry alone finds the damaged object again
        afc.json("retry", "a")
        afc.json("resume", expect=1)
    total = afc.json("costs", "report")["total"]
    assert (total["avoided_renders"], total["avoided_cost"]) == (1, "0.040000"), total
    # the way out: delete the object and its metadata, retry, a new render paid
    (out / "b1" / "a.png").unlink()
    (out / "b1" / "a.png.afc.json").unlink()
    afc.json("retry", "a")
    assert afc.json("resume")["counts"] == {"succeeded": 1}
    assert _billed(fake) == 3  # this ledger paid for one render: a's
    total = afc.json("costs", "report")["total"]
    assert total["priced"] == "0.040000", total
    assert (total["avoided_renders"], total["avoided_cost"]) == (1, "0.040000"), total
    assert afc.rows("SELECT COUNT(*) FROM avoided") == [(1,)]


def test_a_retried_job_finding_its_own_paid_render_saves_nothing(afc, fake, tmp_path):
    """A job with ``review: true`` rendered (paid once), stored and awaiting review, then
    cancelled and retried (as README's review gates say a person may before approving): its
    probe found the object of its own paid render and counted it a render avoided at that
    render's price, so 'afc costs report' said 0.04 priced and 0.04 saved for one render the
    provider billed once. The render this ledger paid for is used, and no render counts
    as avoided; a fresh ledger finding the same object still counts it."""
    out = tmp_path / "out"
    data = manifest([{"key": "a", "prompt": "reviewed a"}], rates=CARD)
    data["defaults"]["chain"] = [OPENAI]
    data["defaults"]["review"] = True
    afc.write_manifest(data)
    storage = ("--storage", f"file://{out}")
    assert afc.json("submit", "manifest.yaml", *storage)["counts"] == {"awaiting_review": 1}
    afc.json("cancel", "a")
    afc.json("retry", "a")
    assert afc.json("resume")["counts"] == {"awaiting_review": 1}
    assert _billed(fake) == 1
    total = afc.json("costs", "report")["total"]
    assert total["priced"] == "0.040000", total
    assert (total["avoided_renders"], total["avoided_cost"]) == (0, "0.000000"), total
    assert afc.rows("SELECT number, status, cost_micros FROM attempts") == [(1, "succeeded", 40000)]
    # a ledger made anew over the same storage did not pay for it: a render avoided
    (afc.cwd / "afc.db").unlink()
    afc.json("submit", "manifest.yaml", *storage)
    assert _billed(fake) == 1
    total = afc.json("costs", "report")["total"]
    assert (total["avoided_renders"], total["avoided_cost"]) == (1, "0.040000"), total


def test_a_late_result_after_a_cancel_found_by_its_retry_saves_nothing(afc, fake, tmp_path):
    """A job cancelled during its call: the answer came (paid) and was stored under its key,
    as README says, so 'afc retry' finds it on any host. The retry's probe found that object,
    the render the cancelled attempt paid for, and counted a render avoided at its price
    beside the same render in priced: 0.04 paid, 0.04 said saved."""
    out = tmp_path / "out"
    data = manifest([{"key": "a", "prompt": "slow-3s a"}], rates=CARD)
    data["defaults"]["chain"] = [OPENAI]
    afc.write_manifest(data)
    running = afc.popen("submit", "manifest.yaml", "--storage", f"file://{out}")
    deadline = time.time() + 30
    while not fake.log and time.time() < deadline:  # the call has left
        time.sleep(0.05)
    afc.json("cancel", "a")
    running.wait(timeout=60)
    afc.json("retry", "a")
    assert afc.json("resume")["counts"] == {"succeeded": 1}
    assert _billed(fake) == 1
    total = afc.json("costs", "report")["total"]
    assert total["priced"] == "0.040000", total
    assert (total["avoided_renders"], total["avoided_cost"]) == (0, "0.000000"), total
