"""The money figures themselves, end to end: what a budget lets a run spend, and what an
attempt records that it cost, through the real ``afc`` command against the fake providers
(tests/fakeproviders.py)."""

from __future__ import annotations

from conftest import manifest

FAST = {"base": 0.01, "cap": 0.05}
GEMINI = "gemini-2.5-flash-image"
# per_image is the estimate; the answers are priced by their tokens: 10 x 0.005/1k +
# 1290 x 0.04/1k = 0.05165 USD, five times the estimate
TOKEN_CARD = {
    "provider": "gemini",
    "model": GEMINI,
    "per_image": "0.01",
    "per_1k_input_tokens": "0.005",
    "per_1k_output_tokens": "0.04",
}


def gemini_jobs(afc, count: int, rates: list[dict]) -> None:
    data = manifest(
        [{"key": f"j{i}", "prompt": f"picture {i}"} for i in range(count)],
        rates=rates,
    )
    data["defaults"]["chain"] = [
        {"provider": "gemini", "model": GEMINI, "attempts": 1, "backoff": FAST}
    ]
    afc.write_manifest(data)


def test_a_budget_reserves_what_the_models_answers_have_cost_not_less(afc, fake):
    """A card that charges tokens keeps ``per_image`` as the estimate, and an answer can cost
    more than it (here 0.05165 against 0.01). The budget reserved the estimate for every
    attempt, so with 0.1033 spent of a 0.12 cap a third call started (0.1033 + 0.01 fits)
    and the run spent 0.15495, past its cap, by an attempt it started itself. Once an answer
    of a model has cost more than its estimate, the run reserves that cost (per image asked
    for) for the model's later attempts: the third does not start, the spend stays under the
    cap and the run stops by the budget (exit 4) with the rest resumable."""
    gemini_jobs(afc, 5, [TOKEN_CARD])
    result = afc.json(
        "submit", "manifest.yaml", "--max-spend", "0.12", "--concurrency", "1", expect=4
    )
    assert result["spent"] == "0.103300"
    assert [j["status"] for j in result["jobs"]].count("succeeded") == 2
    assert afc.json("costs", "report")["total"]["priced"] == "0.103300"
    waiting = afc.json("status", "--status", "waiting", expect=None)["jobs"]
    assert len(waiting) == 3
    assert "the next attempt is estimated at 0.051650" in waiting[0]["waiting"]


def test_a_run_whose_answers_took_it_past_its_cap_says_so(afc, fake):
    """The first answer of a token-priced model cost 0.05165 against its 0.01 estimate and a
    0.03 cap: it started within the cap and ended past it. The summary said only "no new
    attempt was started past it"; it now says the run spent more than its budget, and why."""
    gemini_jobs(afc, 3, [TOKEN_CARD])
    result = afc("submit", "manifest.yaml", "--max-spend", "0.03", "--concurrency", "1")
    assert result.returncode == 4, result.stderr
    assert "this run spent 0.051650 USD, past its budget of 0.030000" in result.stderr
    assert "answers cost more than the estimates reserved for them" in result.stderr


def test_a_paid_answer_whose_image_is_not_base64_keeps_its_known_cost(afc, fake):
    """Gemini answered 200 with its usage (10 input, 1290 output tokens) and an image whose
    base64 is broken. The attempt fails (``server``) and the job with it, but the answer
    said what it billed: the attempt keeps that usage, its cost by the card (0.05165) and
    the answer's id, where it was recorded unpriced, as if the figure were unknown."""
    data = manifest(
        [{"key": "j0", "prompt": "garbled picture"}],
        rates=[{k: v for k, v in TOKEN_CARD.items() if k != "per_image"}],
    )
    data["defaults"]["chain"] = [
        {"provider": "gemini", "model": GEMINI, "attempts": 1, "backoff": FAST}
    ]
    afc.write_manifest(data)
    run = afc.json("submit", "manifest.yaml", expect=1)
    assert run["jobs"][0]["cost"] == "0.051650"
    [attempt] = afc.json("show", "j0")["attempts"]
    assert attempt["error_class"] == "server" and "base64" in attempt["error"]
    assert attempt["cost"] == "0.051650" and attempt["cost_source"] == "derived"
    assert attempt["usage"] == {"images": 1, "input_tokens": 10, "output_tokens": 1290}
    assert attempt["provider_request_id"].startswith("resp-")
    report = afc.json("costs", "report")["total"]
    assert report["priced"] == report["failed_spend"] == "0.051650"
    assert report["unpriced_attempts"] == 0


def test_a_jobs_cost_says_when_some_of_its_attempts_are_of_unknown_cost(afc):
    """A job whose two timed-out attempts have no known cost (the provider may have billed
    them) and whose third cost 0.05: its cost is the known 0.05, and every place that shows
    it says that 2 attempts are not in it. ``afc status --json`` and ``afc show`` did; the
    status and outputs tables printed a bare 0.050000, and the webhook and ``afc outputs
    --json`` gave no count at all, so a receiver booking the job read a complete cost."""
    import base64
    import json

    from receiver import Receiver

    secret = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()
    receiver = Receiver().start()
    try:
        afc.env["AFC_HOOK_SECRET"] = secret
        data = manifest(
            [
                {"key": "ok", "prompt": "a"},
                {"key": "slow", "prompt": "c", "params": {"fail": ["timeout", "timeout"]}},
            ],
            webhook={"url": receiver.url, "secret_env": "AFC_HOOK_SECRET"},
        )
        afc.write_manifest(data)
        afc.json("submit", "manifest.yaml")
    finally:
        receiver.stop()
    hooked = {
        body["data"]["key"]: body["data"]
        for body in (json.loads(r.body) for r in receiver.received)
    }
    assert hooked["slow"]["cost"] == "0.050000" and hooked["slow"]["unpriced_attempts"] == 2
    assert hooked["ok"]["cost"] == "0.050000" and hooked["ok"]["unpriced_attempts"] == 0
    listed = {o["key"]: o for o in afc.json("outputs")["outputs"]}
    assert listed["slow"]["cost"] == "0.050000" and listed["slow"]["unpriced_attempts"] == 2
    assert listed["ok"]["unpriced_attempts"] == 0
    status = afc("status", "--all").stdout
    assert "0.050000 + 2 unpriced" in status
    outputs = afc("outputs").stdout
    assert "0.050000 + 2 unpriced" in outputs
    assert [line for line in outputs.splitlines() if line.startswith("ok\t")][0].endswith(
        "\t0.050000"
    )


def test_an_avoided_render_priced_by_the_card_counts_every_image_it_asks_for(afc, fake):
    """A job asking OpenAI for three images (``n: 3``) was rendered while its model had no
    rate card (unpriced). Submitted again once the card says 0.04 an image, the replay is an
    avoided render whose cost only the card can tell: three images, 0.12, as ``afc plan``
    estimates the same request. It was counted at one image, 0.04; so was the output a
    fresh ledger finds in storage (its metadata names no cost)."""
    data = manifest([{"key": "trio", "prompt": "three", "params": {"n": 3}}], rates=[])
    data["defaults"]["chain"] = [
        {"provider": "openai", "model": "gpt-image-1", "attempts": 1, "backoff": FAST}
    ]
    afc.write_manifest(data)
    assert afc.json("submit", "manifest.yaml")["jobs"][0]["cost"] is None
    data["rates"] = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]
    afc.write_manifest(data)
    assert afc.json("plan", "manifest.yaml")["replayed"] == 1
    afc.json("submit", "manifest.yaml")
    total = afc.json("costs", "report")["total"]
    assert total["avoided_renders"] == 1
    assert total["avoided_cost"] == "0.120000"
    for name in ("afc.db", "afc.db-wal", "afc.db-shm"):
        (afc.cwd / name).unlink(missing_ok=True)
    afc.json("submit", "manifest.yaml")  # a new ledger: the probe finds the stored output
    total = afc.json("costs", "report")["total"]
    assert total["avoided_renders"] == 1 and total["priced"] == "0.000000"
    assert total["avoided_cost"] == "0.120000"


def test_image_input_tokens_are_priced_at_their_own_rate_where_the_card_has_one():
    """OpenAI's gpt-image models charge a reference image's input tokens above the text's
    (gpt-image-1: 10 against 5 USD a million). A card can say so with
    ``per_1k_input_image_tokens``; the answer's ``input_image_tokens`` (part of its
    ``input_tokens``) are then priced at it, the rest at ``per_1k_input_tokens``. A card
    without it prices every input token at the input rate, as before; an image count that
    cannot be read, or exceeds the input, prices no tokens (the images still can)."""
    from decimal import Decimal

    from afc_cli.costs import RateCards

    card = {
        "per_1k_input_tokens": Decimal("0.005"),
        "per_1k_input_image_tokens": Decimal("0.01"),
        "per_1k_output_tokens": Decimal("0.04"),
    }
    cards = RateCards({("openai", "gpt-image-1"): card})
    usage = {"images": 1, "input_tokens": 393, "input_image_tokens": 323, "output_tokens": 4160}
    # 70 x 0.005/1k + 323 x 0.01/1k + 4160 x 0.04/1k
    assert cards.price("openai", "gpt-image-1", usage) == 350 + 3230 + 166400
    plain = RateCards(
        {("openai", "gpt-image-1"): {k: v for k, v in card.items() if "image" not in k}}
    )
    assert plain.price("openai", "gpt-image-1", usage) == 1965 + 166400
    assert cards.price("openai", "gpt-image-1", {**usage, "input_image_tokens": 400}) is None
    assert cards.price("openai", "gpt-image-1", {**usage, "input_image_tokens": "x"}) is None
    per_image = RateCards({("openai", "gpt-image-1"): {**card, "per_image": Decimal("0.04")}})
    assert per_image.price("openai", "gpt-image-1", {**usage, "input_image_tokens": -1}) == 40000


def test_an_edit_with_a_reference_image_is_priced_by_its_image_tokens(afc, fake):
    """Through ``afc``: an OpenAI edit with one reference image reports 70 text and 323 image
    input tokens and 4160 output tokens; the card prices the image tokens at their rate."""
    from afc_cli.providers.local import render_png

    (afc.cwd / "ref.png").write_bytes(render_png("ref", 8, 8))
    data = manifest(
        [{"key": "shot", "prompt": "the shot", "inputs": [{"path": "ref.png"}]}],
        rates=[
            {
                "provider": "openai",
                "model": "gpt-image-1",
                "per_1k_input_tokens": "0.005",
                "per_1k_input_image_tokens": "0.01",
                "per_1k_output_tokens": "0.04",
            }
        ],
    )
    data["defaults"]["chain"] = [
        {"provider": "openai", "model": "gpt-image-1", "attempts": 1, "backoff": FAST}
    ]
    afc.write_manifest(data)
    run = afc.json("submit", "manifest.yaml")
    assert run["jobs"][0]["cost"] == "0.169980"  # 0.00035 + 0.00323 + 0.1664
    [attempt] = afc.json("show", "shot")["attempts"]
    assert attempt["usage"] == {
        "images": 1,
        "input_tokens": 393,
        "input_image_tokens": 323,
        "output_tokens": 4160,
    }


def test_a_job_awaiting_review_shows_the_cost_afc_status_shows(afc):
    """``afc review list`` (and the review page of ``afc serve``) read a job's cost as the
    bare sum of its known attempt costs: a job whose output a fresh ledger found in storage
    (no attempt: a known 0 in ``afc status``) was listed as unpriced, and one with attempts
    of unknown cost beside a priced one showed the priced sum alone. They now give the
    cost ``afc status`` gives, with ``unpriced_attempts`` beside it."""
    data = manifest(
        [
            {"key": "ok", "prompt": "a"},
            {"key": "slow", "prompt": "c", "params": {"fail": ["timeout"]}},
        ],
        defaults={
            "review": True,
            "chain": [{"provider": "local", "model": "m1", "attempts": 3, "backoff": FAST}],
        },
    )
    afc.write_manifest(data)
    afc.json("submit", "manifest.yaml")
    status = {j["key"]: j for j in afc.json("status")["jobs"]}
    assert status["slow"]["cost"] == "0.050000" and status["slow"]["unpriced_attempts"] == 1
    listed = {j["key"]: j for j in afc.json("review", "list")["awaiting_review"]}
    assert listed["slow"]["cost"] == "0.050000" and listed["slow"]["unpriced_attempts"] == 1
    assert listed["ok"]["cost"] == "0.050000" and listed["ok"]["unpriced_attempts"] == 0
    assert "0.050000 + 1 unpriced" in afc("review", "list").stdout
    import httpx
    from browser import Served

    served = Served(afc)
    try:
        page = httpx.get(served.url + "review").text
    finally:
        served.stop()
    assert "0.050000 USD + 1 unpriced" in page
    for name in ("afc.db", "afc.db-wal", "afc.db-shm"):
        (afc.cwd / name).unlink(missing_ok=True)
    afc.json("submit", "manifest.yaml")  # a fresh ledger finds both outputs in storage
    assert {j["cost"] for j in afc.json("status")["jobs"]} == {"0.000000"}
    listed = afc.json("review", "list")["awaiting_review"]
    assert [j["cost"] for j in listed] == ["0.000000", "0.000000"]


def test_the_reports_failures_table_names_the_attempts_of_unknown_cost(afc):
    """A job that failed after a timed-out attempt (cost unknown) and a refused one (a known
    0): ``afc report --html``'s failures table showed its cost as 0.000000, where ``afc
    status`` and the report's own contact sheet add that one attempt is unpriced."""
    data = manifest([{"key": "bad", "prompt": "a", "params": {"fail": ["timeout", "auth"]}}])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 1
    assert "0.000000 + 1 unpriced" in afc("status").stdout
    assert afc("report", "--html", "r.html").returncode == 0
    page = (afc.cwd / "r.html").read_text()
    row = page[page.index('<tr data-key="bad">') :]
    row = row[: row.index("</tr>")]
    assert "0.000000 + 1 unpriced" in row


def test_the_examples_openai_cards_charge_what_the_answer_reports(afc, fake):
    """gpt-image-1's price depends on quality and size (OpenAI's own table: 0.011 to 0.25 an
    image; medium square 0.042, high square 0.167), and its answer reports the tokens that
    are billed. examples/openai.yaml and fallback.yaml priced it with ``per_image: "0.04"``
    alone, so afc recorded 0.04 for an answer of 4160 output tokens (high quality: 0.1664
    billed). Their cards now charge the tokens and keep per_image as the estimate."""
    from pathlib import Path

    import yaml

    examples = Path(__file__).resolve().parent.parent / "examples"
    for name in ("openai.yaml", "fallback.yaml"):
        card = next(
            r
            for r in yaml.safe_load((examples / name).read_text())["rates"]
            if r["provider"] == "openai"
        )
        afc.write_manifest(
            manifest(
                [{"key": name, "prompt": "a lighthouse"}],
                batch=name.split(".")[0],
                rates=[card],
                defaults={"chain": [{"provider": "openai", "model": card["model"]}]},
            )
        )
        run = afc.json("submit", "manifest.yaml")
        # 50 input tokens at 0.005/1k + 4160 output tokens at 0.04/1k
        assert run["jobs"][0]["cost"] == "0.166650", name


def _half_up_micros(amount) -> int:
    """A reference for afc's rounding: exact fractions, half up at the micro-dollar."""
    from fractions import Fraction

    scaled = Fraction(amount) * 1_000_000
    return int(scaled + Fraction(1, 2))  # floor(x + 1/2), x >= 0


def test_token_prices_are_exact_against_fractions():
    """Property: whatever the counts and rates, a token price is the exact sum of each
    count x its rate / 1000 (the input's image tokens at their own rate, Gemini's thoughts
    in the output), rounded half up once at the micro-dollar: no float on the way, no
    rounding of the parts."""
    from decimal import Decimal
    from fractions import Fraction

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from afc_cli.costs import RateCards
    from afc_cli.providers.gemini import billed_output

    rate = st.decimals(min_value=0, max_value=100, places=6).map(str)
    count = st.integers(min_value=0, max_value=10**9)

    @settings(max_examples=300, deadline=None)
    @given(rate, rate, rate, count, count, count, count)
    def check(text_rate, image_rate, out_rate, text, image, candidates, thoughts):
        card = {
            "per_1k_input_tokens": Decimal(text_rate),
            "per_1k_input_image_tokens": Decimal(image_rate),
            "per_1k_output_tokens": Decimal(out_rate),
        }
        output = billed_output(candidates, thoughts)
        assert output == candidates + thoughts
        usage = {
            "input_tokens": text + image,
            "input_image_tokens": image,
            "output_tokens": output,
        }
        exact = (
            Fraction(text) * Fraction(text_rate)
            + Fraction(image) * Fraction(image_rate)
            + Fraction(output) * Fraction(out_rate)
        ) / 1000
        got = RateCards({("p", "m"): card}).price("p", "m", usage)
        assert got == (_half_up_micros(exact) if exact < 1_000_000 else None)

    check()


def test_the_progress_counts_a_gone_requests_known_cost_as_spent(afc, fake):
    """A Replicate prediction that ran (3.2 s, billed) but whose output was deleted before
    afc read it: the ledger records its cost from its seconds (0.00352), and the run's
    summary says so, but the progress on a terminal counted it as an unpriced attempt
    ("spent 0.000000 USD + 1 unpriced"): the event it was told of carried no cost."""
    from terminal import on_pty

    data = manifest(
        [{"key": "a", "prompt": "data-removed x"}],
        rates=[
            {
                "provider": "replicate",
                "model": "black-forest-labs/flux-1.1-pro",
                "per_second": "0.0011",
            }
        ],
    )
    data["defaults"]["chain"] = [
        {"provider": "replicate", "model": "black-forest-labs/flux-1.1-pro", "attempts": 1}
    ]
    afc.write_manifest(data)
    shown = on_pty(afc.command("submit", "manifest.yaml"), cwd=afc.cwd, env=afc.env)
    assert shown.returncode == 1
    assert "spent 0.003520 USD" in shown.output
    assert "unpriced" not in shown.output
