"""The spend as SVG charts, drawn by pygal and embedded inline (no script, no font or file
fetched: the report opens offline). The charts draw the costs report's rows
(``afc_cli/costs_report.py``); the exact figures stay in the tables beside them, as decimal
strings, never rounded through a float.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Any

COLOURS = ("#2f6fb0", "#c0392b", "#2e8b57", "#8e6c8a")


def _usd(value: str | None) -> float:
    return float(Decimal(value)) if value is not None else 0.0


# a label's characters before pygal cuts it (``truncate_label``)
LABEL_CHARS = 40


def _label(name: str, row: dict[str, Any]) -> str:
    """A group's label, with the attempts of unknown cost its spend leaves out: a model whose
    every attempt was unpriced drew as a model that spent nothing, beside the tables that
    say it is unpriced. The name is cut (not the note) to fit the chart's label."""
    unpriced = row["unpriced_attempts"]
    if not unpriced:
        return name
    note = f" (+{unpriced} unpriced)"
    if len(name) + len(note) > LABEL_CHARS:
        name = name[: LABEL_CHARS - len(note) - 1] + "\u2026"
    return name + note


def _spent(row: dict[str, Any]) -> float | None:
    """A group's spent bar; none for a group whose known spend is nothing while it has
    unpriced attempts (its spend is unknown, not 0: the chart wrote it as ``$0.00``)."""
    if row["unpriced_attempts"] and Decimal(row["priced"]) == 0:
        return None
    return _usd(row["priced"])


def usd_label(value: float) -> str:
    """A chart's figure as money with the digits it has, to the micro-dollar afc counts in:
    ``$0.04``, ``$1,234.50``, ``$0.000006`` (cents alone read a real 0.000006 as ``$0.00``)."""
    amount = Decimal(repr(float(value))).quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP)
    whole, _, frac = f"{amount:,.6f}".partition(".")
    return f"${whole}.{frac.rstrip('0').ljust(2, '0')}"


def _chart(kind: str, title: str, labels: list[str], series: list[tuple[str, list[float | None]]]):
    import pygal
    from pygal.style import Style

    style = Style(
        background="transparent",
        plot_background="transparent",
        foreground="#222",
        foreground_strong="#222",
        foreground_subtle="#888",
        colors=COLOURS,
        font_family="system-ui, sans-serif",
        title_font_size=16,
        label_font_size=12,
        major_label_font_size=12,
        legend_font_size=12,
        value_font_size=11,
    )
    chart = getattr(pygal, kind)(
        style=style,
        js=[],  # no script from the web: the file opens offline and mails
        disable_xml_declaration=True,
        width=560,
        height=max(240, 90 + 14 * len(labels) * len(series)) if kind == "HorizontalBar" else 320,
        min_scale=3,
        max_scale=6,
        legend_at_bottom=True,
        legend_at_bottom_columns=len(series),
        print_values=False,
        show_y_guides=True,
        value_formatter=usd_label,
        x_label_rotation=0 if len(labels) < 8 else 30,
        truncate_label=LABEL_CHARS,
        truncate_legend=-1,
        title=title,
    )
    chart.x_labels = labels
    for name, values in series:
        chart.add(name, values)
    return chart.render(is_unicode=True)


def by_group(report: dict[str, Any], title: str) -> str:
    """Priced spend, the part of it wasted (failed and unknown-outcome attempts) and what
    stored outputs saved, per provider or model."""
    rows = report["rows"]
    by = report["by"]
    labels = [_label(str(row[by]), row) for row in rows]
    return _chart(
        "HorizontalBar",
        title,
        labels,
        [
            ("spent", [_spent(r) for r in rows]),
            ("wasted", [_usd(r["failed_spend"]) for r in rows]),
            ("saved", [_usd(r["avoided_cost"]) for r in rows]),
        ],
    )


def by_day(report: dict[str, Any]) -> str:
    rows = report["rows"]
    labels = [_label(str(row["day"]), row) for row in rows]
    return _chart(
        "Bar",
        "Spend by day (USD)",
        labels,
        [
            ("spent", [_spent(r) for r in rows]),
            ("wasted", [_usd(r["failed_spend"]) for r in rows]),
            ("saved", [_usd(r["avoided_cost"]) for r in rows]),
        ],
    )


def charts(spend: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The SVG of each chart, by name."""
    return {
        "model": by_group(spend["model"], "Spend by model (USD)"),
        "provider": by_group(spend["provider"], "Spend by provider (USD)"),
        "day": by_day(spend["day"]),
    }
