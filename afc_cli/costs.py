"""Money: exact decimals only.

Costs are stored as integer micro-USD (1 USD = 1,000,000), rounded half-up at the sixth decimal,
so SQL can sum them exactly on SQLite and PostgreSQL alike. ``None`` means unpriced: it is shown
as unpriced everywhere and never counted as zero.

Sources: ``quoted`` (the provider said), ``derived`` (reported units x rate card), ``local``
(the offline demo provider, priced from its rate card).
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Any

MICROS = Decimal(1_000_000)


def to_micros(amount: Decimal) -> int:
    return int((amount * MICROS).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def format_usd(micros: int | None) -> str | None:
    """``"0.040000"`` for 40,000 micro-USD; ``None`` stays ``None`` (unpriced)."""
    if micros is None:
        return None
    sign = "-" if micros < 0 else ""
    whole, frac = divmod(abs(micros), 1_000_000)
    return f"{sign}{whole}.{frac:06d}"


def job_cost(priced_micros: int | None, attempts: int) -> str | None:
    """What a job cost so far, as shown everywhere: the sum of its priced attempts; 0 for a
    job with no attempt at all (taken from storage); unpriced (None) when it had attempts and
    none of them could be priced."""
    if priced_micros is not None:
        return format_usd(priced_micros)
    return None if attempts else format_usd(0)


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

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {"provider": p, "model": m, "prices": {k: str(v) for k, v in prices.items()}}
            for (p, m), prices in sorted(self.cards.items())
        ]

    def price(self, provider: str, model: str, usage: dict[str, Any]) -> int | None:
        """Cost in micro-USD of the reported usage, or None if any used unit has no rate.

        Usage keys: ``images``, ``seconds``, ``input_tokens``, ``output_tokens``.
        """
        card = self.cards.get((provider, model))
        if card is None:
            return None
        units = {
            "per_image": usage.get("images"),
            "per_second": usage.get("seconds"),
            "per_1k_input_tokens": _per_k(usage.get("input_tokens")),
            "per_1k_output_tokens": _per_k(usage.get("output_tokens")),
        }
        total = Decimal(0)
        priced_any = False
        for name, amount in units.items():
            if amount is None:
                continue
            rate = card.get(name)
            if rate is None:
                return None  # a unit was used that this card cannot price: unpriced, not zero
            total += Decimal(str(amount)) * rate
            priced_any = True
        return to_micros(total) if priced_any else None

    def estimate(self, provider: str, model: str) -> int | None:
        """What one attempt is expected to cost, for plans and budgets: the card's per-image
        price. None where the card has none (a per-second or per-token card alone cannot say
        in advance); a card may carry both, per_image as the estimate."""
        card = self.cards.get((provider, model))
        if card is None or "per_image" not in card:
            return None
        return to_micros(card["per_image"])


def _per_k(tokens: Any) -> Decimal | None:
    if tokens is None:
        return None
    return Decimal(str(tokens)) / Decimal(1000)
