"""Outside audit 50b (money figures that agree): the report's charts draw an unpriced model
as unpriced, not as a model that spent nothing.

A batch of a model without a rate card, run with ``--allow-unpriced``: ``afc report --html``'s
tables said its 2 attempts are unpriced (real spend is higher), while the charts beside them
drew its spent bar at ``$0.00`` under a label with nothing more, as a model that cost nothing;
so did ``afc serve``'s /spend page (the same charts). The label now says the attempts of
unknown cost its bar leaves out, and a group whose every attempt is unpriced has no spent bar.
"""

from __future__ import annotations

import re

import pytest
from conftest import manifest

pytest.importorskip("pygal", reason="the web extra: pip install 'afc-cli[web]'")


def charts_of(html: str) -> dict[str, str]:
    """Each chart's SVG by its title."""
    titles = ("Spend by model (USD)", "Spend by provider (USD)", "Spend by day (USD)")
    svgs = re.findall(r"<svg.*?</svg>", html, flags=re.S)
    return {title: next(svg for svg in svgs if f">{title}<" in svg) for title in titles}


def spent_values(svg: str) -> list[str]:
    """The figures of the chart's first series (``spent``)."""
    serie = svg.split('class="series serie-0 ', 1)[1].split('class="series serie-1 ', 1)[0]
    return re.findall(r'<desc class="value">([^<]*)</desc>', serie)


def test_an_unpriced_model_is_charted_as_unpriced_not_as_zero(afc):
    afc.write_manifest(manifest([{"key": "a", "prompt": "a"}], batch="priced"), "priced.yaml")
    assert afc("submit", "priced.yaml").returncode == 0
    bare = manifest([{"key": "b", "prompt": "b"}, {"key": "c", "prompt": "c"}], batch="bare")
    bare["defaults"]["chain"][0]["model"] = "a-model-whose-name-runs-long-v2"
    del bare["rates"]
    afc.write_manifest(bare, "bare.yaml")
    assert afc("submit", "bare.yaml", "--allow-unpriced").returncode == 0
    assert afc.json("costs", "report", "--by", "model")["rows"][0]["unpriced_attempts"] == 2

    assert afc("report", "--html", "report.html").returncode == 0
    charts = charts_of((afc.cwd / "report.html").read_text())
    model = charts["Spend by model (USD)"]
    labels = re.findall(r"<text[^>]*>([^<]*)</text>", model)
    # the unpriced model's label says so, its name cut to leave the note whole
    assert "local/a-model-whose-name-\u2026 (+2 unpriced)" in labels, labels
    assert "local/m1" in labels, labels
    # one spent bar, the priced model's: none at $0.00 for the unpriced one
    assert spent_values(model) == ["$0.05"], spent_values(model)
    # the provider and the day have priced spend beside the unpriced attempts: their bars
    # stay, their labels name what they leave out
    for title in ("Spend by provider (USD)", "Spend by day (USD)"):
        svg = charts[title]
        assert spent_values(svg) == ["$0.05"], (title, spent_values(svg))
        assert any(t.endswith(" (+2 unpriced)") for t in re.findall(r">([^<]*)</text>", svg))
