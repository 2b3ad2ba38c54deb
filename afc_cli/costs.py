"""Money: exact decimals only.

Costs are stored as integer micro-USD (1 USD = 1,000,000), rounded half-up at the sixth decimal,
so SQL can sum them exactly on SQLite and PostgreSQL alike. ``None`` means unpriced: it is shown
as unpriced everywhere and never counted as zero.

Sources: ``quoted`` (the provider said), ``derived`` (reported units x rate card), ``local``
(the offline demo provider, priced from its rate card).
"""

from __future__ import annotations

import json
from decimal import ROUND_FLOOR, ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

MAX_USD = Decimal(1_000_000)  # rates, budgets and one answer's cost stay below this


def usd_problem(value: str) -> str | None:
    """Why a USD amount (a rate, a budget, --max-spend) is refused, or None.

    Amounts are exact decimal strings, not negative, and below 1,000,000 USD: a cap on what
    a rate, a budget or one answer can say, which keeps every sum of the ledger's micro-USD
    integer columns (``cost_micros``: BIGINT on PostgreSQL) far inside their range. Here with the money, not with the manifest: a resume checks the
    ledger's recorded cards with it and imports no manifest machinery (pydantic, YAML).

    Written in ASCII digits, without ``_``: Python's ``Decimal`` reads ``"0_1"`` as 1 and
    ``"٠.١"`` (Arabic-Indic digits) as 0.1, neither what a rate card's reader sees."""
    try:
        if isinstance(value, str) and (not value.isascii() or "_" in value):
            raise ValueError(value)
        amount = Decimal(value)
    except (InvalidOperation, TypeError, ValueError):
        return f'must be a decimal string such as "0.04", got {value!r}'
    if not amount.is_finite() or amount < 0:
        return f"must be a non-negative decimal, got {value!r}"
    if amount >= MAX_USD:
        return f"must be below 1000000 USD, got {value!r}"
    return None


def cap_problem(value: str) -> str | None:
    """Why a spending cap (``--max-spend``, a manifest's ``budget``) is refused, or None: a
    USD amount (``usd_problem``) that afc can hold to as given. afc counts money in whole
    micro-USD, so a cap finer than that (``1e-20``, ``1.0000001``) could only be kept as
    another amount than the one written (rounded down: ``1e-20`` became a cap of 0, the
    run stopped by a budget that said 0.000000), and a cap written with a minus sign
    (``-0``) is not the non-negative amount a cap is. A rate may be finer (it is multiplied
    by what the provider reports before the sum is rounded)."""
    problem = usd_problem(value)
    if problem:
        return problem
    amount = Decimal(value)
    if amount.is_signed():
        return f"must be a non-negative decimal, got {value!r}"
    sign, digits, exponent = amount.as_tuple()
    # the digits below the sixth decimal, read off the written digits (not computed: a
    # Decimal product rounds at 28 digits, and 1e-999999999 underflows to 0)
    below = digits[max(0, len(digits) - (-6 - int(exponent))) :] if int(exponent) < -6 else ()
    if any(below):
        return (
            f"must be a whole number of micro-USD (at most 6 decimals: afc counts money in "
            f"millionths of a USD), got {value!r}"
        )
    return None


MICROS = Decimal(1_000_000)
# micro-USD: just under 1,000,000 USD, where a cost becomes unpriced (``_bounded``)
MAX_ESTIMATE = 999_999_999_999
# the token rates of a card and the usage counts they price
TOKEN_RATES = {"per_1k_input_tokens": "input_tokens", "per_1k_output_tokens": "output_tokens"}


def to_micros(amount: Decimal) -> int:
    return int((amount * MICROS).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def cap_micros(amount: Decimal) -> int:
    """A spending cap in micro-USD, rounded down: a budget of ``0.0000005`` is 0, not 1
    micro-USD (rounded half-up, as costs are, the cap rose above what was given, and a call
    priced between the two started past it)."""
    return int((amount * MICROS).quantize(Decimal(1), rounding=ROUND_FLOOR))


def format_usd(micros: int | None) -> str | None:
    """``"0.040000"`` for 40,000 micro-USD; ``None`` stays ``None`` (unpriced)."""
    if micros is None:
        return None
    sign = "-" if micros < 0 else ""
    whole, frac = divmod(abs(micros), 1_000_000)
    return f"{sign}{whole}.{frac:06d}"


def plural(count: int, noun: str) -> str:
    """``1 attempt``, ``2 attempts``: the counts beside the money, in words that agree."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def unknown_cost_part(attempts: int) -> str:
    """What follows a priced figure for the attempts of unknown cost it leaves out (never
    added in, never left unsaid): `` + 2 attempts of unknown cost``, or nothing for none."""
    return f" + {plural(attempts, 'attempt')} of unknown cost" if attempts else ""


def job_cost(priced_micros: int | None, attempts: int) -> str | None:
    """What a job cost so far, as shown everywhere: the sum of its priced attempts; 0 for a
    job with no attempt at all (taken from storage); unpriced (None) when it had attempts and
    none of them could be priced."""
    if priced_micros is not None:
        return format_usd(priced_micros)
    return None if attempts else format_usd(0)


def cost_cell(cost: str | None, unpriced: int) -> str:
    """A job's cost in a table: its known cost, followed by the attempts of unknown cost that
    it leaves out (``0.050000 + 2 unpriced``: the real cost is higher by theirs), or
    ``unpriced`` when no attempt's cost is known, ``unpriced (in flight)`` when its only calls
    are in flight in a live run (no cost known *yet*, and none of ``unpriced_attempts``: the
    table said a plain ``unpriced`` of every running job's first call, as of a model with no
    rate card, where ``afc show`` says the call is in flight). ``--json`` has the two apart
    (``cost``, ``unpriced_attempts``)."""
    if cost is None:
        return "unpriced" if unpriced else "unpriced (in flight)"
    return f"{cost} + {unpriced} unpriced" if unpriced else cost


class RateCards:
    """Rate cards by (provider, model), from the manifest's ``rates`` list."""

    def __init__(self, cards: dict[tuple[str, str], dict[str, Decimal]] | None = None):
        self.cards = dict(cards or {})

    @classmethod
    def from_rates(cls, rates: list[Any]) -> RateCards:
        return cls({(r.provider, r.model): r.prices() for r in rates})

    @classmethod
    def from_json(cls, data: list[dict[str, Any]]) -> RateCards:
        return cls(
            {
                (item["provider"], item["model"]): {
                    k: Decimal(v) for k, v in item["prices"].items()
                }
                for item in data
            }
        )

    @classmethod
    def from_text(cls, text: str | None) -> RateCards:
        """A batch's cards as the ledger records them (``batches.rates_json``)."""
        return cls.from_json(json.loads(text or "[]"))

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {"provider": p, "model": m, "prices": {k: str(v) for k, v in prices.items()}}
            for (p, m), prices in sorted(self.cards.items())
        ]

    def price(self, provider: str, model: str, usage: dict[str, Any]) -> int | None:
        """Cost in micro-USD of the reported usage by the one pricing rule, or None (unpriced).

        Usage keys: ``images``, ``megapixels``, ``seconds``, ``input_tokens`` (of them ``input_image_tokens``,
        priced apart by a card with ``per_1k_input_image_tokens``: ``_image_input``),
        ``output_tokens``; every adapter
        reports ``images`` for what it produced, plus whatever else the provider measured. The
        first of these that the card can price wins:

        1. tokens, when tokens were reported and the card has a rate for each token count
           reported (a card pricing input tokens only cannot price input and output), and,
           for an answer that produced images, each token count the card prices was reported
           (an image whose output tokens the answer leaves out would be priced by its prompt
           alone, a thousandth of its price: a refusal, which makes nothing, is billed its
           prompt only, so its reported tokens still price it);
        2. ``per_megapixel`` x the megapixels of the images produced (``megapixels``: fal's
           answers give each image's width and height, and fal bills its models priced by
           resolution for each image's megapixels rounded up, ``FalProvider``), so a 2048x2048
           image of a model billed 0.025 a megapixel costs 0.10, not a ``per_image`` 0.025;
        3. ``per_image`` x images produced;
        4. ``per_second`` x seconds.

        So ``{openai, gpt-image-1, per_image: "0.04"}`` prices a gpt-image answer that reports
        tokens at 0.04 an image, and a card with token rates prices the same answer by its
        tokens. Unpriced only when no reported unit has a rate: never a guessed zero.

        The usage comes from a provider's answer, after the call was paid for: a count that is
        not a finite number >= 0 (a string, NaN, a negative, a list) counts as not reported
        (``usage_amount``; one such token count and the tokens price nothing), and a cost of
        1,000,000 USD or more is unpriced. Raising here would lose the paid output and stop
        the run, at every resume again.
        """
        card = self.cards.get((provider, model))
        if card is None:
            return None
        reported = {
            rate: usage_amount(usage[unit])
            for rate, unit in TOKEN_RATES.items()
            if usage.get(unit) is not None
        }
        # one unreadable count and the tokens cannot price the answer (half of it would be
        # an underpriced guess); the images still can
        tokens = {} if None in reported.values() else _image_input(card, reported, usage)
        made = usage_amount(usage.get("images"))
        if made and any(rate in card and rate not in reported for rate in TOKEN_RATES):
            tokens = {}  # an image's answer without a token count the card prices
        if tokens and all(rate in card for rate in tokens):
            return _bounded(
                sum((amount / 1000 * card[rate] for rate, amount in tokens.items()), Decimal(0))
            )
        for rate, unit in (
            ("per_megapixel", "megapixels"),
            ("per_image", "images"),
            ("per_second", "seconds"),
        ):
            amount = usage_amount(usage.get(unit))
            if amount is not None and rate in card:
                return _bounded(amount * card[rate])
        return None

    def estimate(
        self, provider: str, model: str, images: int = 1, megapixels: int | None = None
    ) -> int | None:
        """What one attempt is expected to cost, for plans and budgets: the card's per-image
        price times the ``images`` the request asks for (``images_requested`` in
        afc_cli/providers: OpenAI's ``n``, Replicate's ``num_outputs``, fal's ``num_images``;
        every image of an answer is billed). None where the card has no per-image price (a
        per-second, per-megapixel or per-token card alone cannot say in advance). By
        ``price``'s rule, a card whose only rate that a provider's answer can use is per_image
        charges exactly this estimate when the answer holds the images asked for; a card that
        also has token rates or ``per_megapixel`` charges the reported tokens or megapixels
        (per_image is then only the estimate, raised by a run under a budget to the dearest
        answer it has seen: ``pipeline.estimate_for``). Where the request says the
        ``megapixels`` it asks for (``megapixels_requested`` in afc_cli/providers: fal's
        ``image_size``), a card with both ``per_image`` and ``per_megapixel`` estimates the
        dearer of per_image x images and per_megapixel x those megapixels, which is what the
        answer is charged when its images are the size asked for: a budget holds from the
        first calls, however many start together.

        Bounded just under 1,000,000 USD (the ledger's reservation column), which no budget
        admits: an absurd image count or size is refused by the budget, never reserved as
        nothing. Bounded before it is made micro-USD: a fal side of 2**53 - 1 pixels (the
        largest a manifest takes) made a price of some 30 digits, more than a Decimal rounds to
        a whole number, and ``afc plan`` stopped as a bug in afc (tests/test_audit64a_fal_huge_size.py)."""
        card = self.cards.get((provider, model))
        if card is None or "per_image" not in card:
            return None
        expected = card["per_image"] * max(images, 1)
        if megapixels is not None and "per_megapixel" in card:
            expected = max(expected, card["per_megapixel"] * megapixels)
        if expected >= MAX_USD:
            return MAX_ESTIMATE
        return min(to_micros(expected), MAX_ESTIMATE)


def _image_input(
    card: dict[str, Decimal], tokens: dict[str, Decimal], usage: dict[str, Any]
) -> dict[str, Decimal]:
    """The token counts to price, with the input's image tokens apart where the card prices
    them apart (``per_1k_input_image_tokens``: OpenAI's gpt-image models charge a reference
    image's input tokens twice the text's) and the answer says how many there were
    (``input_image_tokens``, part of ``input_tokens``). A card without that rate prices every
    input token at ``per_1k_input_tokens``; an image count that cannot be read, or is more
    than the input, prices no tokens (``{}``), as any unreadable count does."""
    if (
        "per_1k_input_image_tokens" not in card
        or "per_1k_input_tokens" not in tokens
        or usage.get("input_image_tokens") is None
    ):
        return tokens
    image = usage_amount(usage["input_image_tokens"])
    if image is None or image > tokens["per_1k_input_tokens"]:
        return {}
    return {
        **tokens,
        "per_1k_input_tokens": tokens["per_1k_input_tokens"] - image,
        "per_1k_input_image_tokens": image,
    }


MAX_COUNT = Decimal(10**15)  # more tokens, images or seconds than any one answer reports


def usage_amount(value: Any) -> Decimal | None:
    """A usage count from a provider's answer as an exact decimal, or None where it is not a
    finite number from 0 to ``MAX_COUNT``: a JSON number (int or float, not a bool) or a
    decimal string."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        amount = Decimal(str(value))  # a string's surrounding whitespace is allowed
    except InvalidOperation:
        return None
    if not amount.is_finite() or not 0 <= amount < MAX_COUNT:
        return None
    return amount


def _bounded(amount: Decimal) -> int | None:
    """Micro-USD of a priced usage, or None (unpriced) from 1,000,000 USD up: no real answer
    costs that, and the ledger's money columns stop there."""
    return to_micros(amount) if amount < MAX_USD else None
