"""The pure parts behind the screens: table layout, the live progress figures, the run
summary's collapsing of repeated messages."""

from __future__ import annotations

from afc_cli.progress import RunProgress, same_message
from afc_cli.tables import Col, layout, shorten_left

ROWS = [
    {"key": "b-shot-0001-establishing-wide", "status": "failed", "cost": "11.200000",
     "reason": "CHAIN_FAILED: server from local/m1 (HTTP 500): injected server on attempt 3",
     "output_key": "trailer/very/deep/folder/b-shot-0001-establishing-wide.png"},
    {"key": "title", "status": "succeeded", "cost": "1234.567800", "reason": "",
     "output_key": "trailer/title.png"},
]  # fmt: skip
COLUMNS = [
    Col("key"),
    Col("status"),
    Col("cost", right=True),
    Col("reason", kind="text", drop=2),
    Col("output_key", kind="tail", drop=1),
]


def total(plan) -> int:
    return sum(plan.widths) + 2 * (len(plan.widths) - 1)


def test_whole_columns_keep_their_longest_value_and_the_table_fits():
    for width in (60, 80, 100, 140):
        plan = layout(ROWS, COLUMNS, width)
        widths = dict(zip([c.name for c in plan.columns], plan.widths, strict=True))
        assert widths["key"] >= len("b-shot-0001-establishing-wide")
        assert widths["cost"] >= len("1234.567800")
        assert total(plan) == plan.width <= width


def test_less_useful_columns_go_first_and_come_back_when_there_is_room():
    narrow = layout(ROWS, COLUMNS, 70)
    assert [c.name for c in narrow.dropped] == ["output_key"]
    assert [c.name for c in layout(ROWS, COLUMNS, 60).dropped] == ["output_key", "reason"]
    wide = layout(ROWS, COLUMNS, 200)
    assert wide.dropped == [] and wide.widths[-1] == len(ROWS[0]["output_key"])


def test_columns_that_are_never_dropped_overflow_rather_than_cut():
    plan = layout(ROWS, [Col("key"), Col("cost"), Col("reason", kind="text")], 20)
    assert plan.width > 20 and plan.widths[0] == len(ROWS[0]["key"])


def test_headers_wrap_at_words_when_the_values_are_narrower():
    rows = [{"unpriced_attempts": 0}]
    assert layout(rows, [Col("unpriced_attempts")], 5).widths == [len("attempts")]
    assert layout(rows, [Col("unpriced_attempts")], 80).widths == [len("unpriced attempts")]


def test_long_output_keys_are_shortened_from_the_left():
    assert shorten_left("trailer/titles/shot-001.png", 16) == "…es/shot-001.png"
    assert shorten_left("short.png", 16) == "short.png"
    assert len(shorten_left("x" * 40, 10)) == 10


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def job(key, **extra):
    return {"id": key, "batch": "b", "key": key, **extra}


def test_progress_counts_spend_waits_and_eta():
    clock = Clock()
    progress = RunProgress(4, cap_micros=5_000_000, clock=clock, wall=clock)
    for key in ("a", "b", "c"):
        progress.event(job(key), "started", "probe")
    progress.event(job("a"), "rendered", "attempt 1", cost_micros=1_250_000)
    progress.event(job("b"), "attempt_failed", "timeout", cost_micros=None)
    progress.event(job("b"), "waiting", "20s", reason="rate_limited", until=clock.now + 20)
    clock.now += 2
    progress.event(job("a"), "ended", "succeeded")
    counts, money, waiting = progress.lines()
    assert counts == "ok 1  failed 0  waiting 1  in flight 1  queued 1"
    assert money.startswith("spent 1.250000 of 5.000000 USD + 1 unpriced  0.5 jobs/s")
    assert money.endswith("ETA 0:00:06")
    assert waiting.startswith("waiting 1: rate_limited; next try ") and waiting.endswith("(in 18s)")
    assert progress.head() == "1/4 0:00:02"
    progress.event(job("b"), "attempt", "local/m1 attempt 2")
    assert progress.lines()[0] == "ok 1  failed 0  waiting 0  in flight 2  queued 1"


def test_failures_are_told_once_each_and_repeats_collapse():
    progress = RunProgress(300)
    progress.event(
        job("x", error_code="CHAIN_FAILED", error_message="auth (HTTP 401)"), "ended", "failed"
    )
    for i in range(248):
        stopped = job(f"k{i}", waiting_reason=f"budget: this run spent {i}.00 of 5.00 USD")
        progress.event(stopped, "ended", "waiting")
    messages = progress.take()
    assert messages == [
        "b/x: failed: CHAIN_FAILED: auth (HTTP 401)",
        "b/k0: left waiting: budget: this run spent 0.00 of 5.00 USD",
    ]
    assert progress.take() == []
    assert progress.lines()[-1] == "(247 repeated messages not shown again)"
    assert progress.lines()[0].startswith("ok 0  failed 1  waiting 248")


def test_the_run_state_is_shown_under_the_figures():
    progress = RunProgress(1)
    progress.state("draining: 12s left for 3 calls in flight")
    assert progress.lines()[-1] == "draining: 12s left for 3 calls in flight"
    progress.state(None)
    assert len(progress.lines()) == 2


def test_messages_that_differ_only_in_figures_are_the_same():
    assert same_message("spent 1.20 of 5 USD") == same_message("spent 3.40 of 5 USD")
    assert same_message("HTTP 500") != same_message("HTTP server error")


def test_the_run_summary_collapses_jobs_stopped_for_one_reason():
    from afc_cli.cli import _not_ok_lines

    def row(key, status, why):
        return {"batch": "b", "key": key, "status": status, "step": "render",
                "error": None, "waiting": why}  # fmt: skip

    lines = _not_ok_lines(
        [row(f"k{i}", "waiting", f"budget: spent {i}.5 of 9 USD") for i in range(248)]
        + [row("odd", "waiting", "storage: bucket gone")]
    )
    assert len(lines) == 2
    assert lines[0].startswith("248 jobs waiting at render (b/k0, b/k1, b/k2 and 245 more;")
    assert lines[0].endswith("): budget: spent 0.5 of 9 USD")
    assert lines[1] == "b/odd: waiting at render: storage: bucket gone"


def test_a_text_column_with_room_to_spare_narrows_before_it_is_dropped():
    cols = [Col("key"), Col("reason", kind="text", drop=2, least=30), Col("out", drop=1)]
    rows = [{"key": "k" * 40, "reason": "r " * 40, "out": "o" * 10}]
    assert layout(rows, cols, 80).widths == [40, 38]  # out dropped, reason keeps its room
    plan = layout(rows, cols, 55)
    assert [c.name for c in plan.columns] == ["key", "reason"] and plan.widths == [40, 13]
    assert [c.name for c in layout(rows, cols, 50).columns] == ["key"]


def test_the_stopping_line_says_how_long_it_waits_even_with_no_limit():
    """``--grace inf`` waits for calls in flight however long they take: the line said
    'waiting up to infs'."""
    from afc_cli.output import stopping_message

    assert "waiting up to 2.5s for 3 job(s)" in stopping_message(2.5, 3)
    line = stopping_message(float("inf"), 3, "SIGTERM")
    assert "waiting with no limit for 3 job(s)" in line and "inf" not in line


def test_a_message_names_the_first_few_and_counts_the_rest():
    from afc_cli.errors import first_named, named_batches

    assert first_named(["a", "b", "c"], 3) == "a, b, c"
    assert first_named(["a", "b", "c", "d", "e"], 3) == "a, b, c and 2 more"
    assert first_named(["a", "b"], 1, " (--json lists them)") == "a and 1 more (--json lists them)"
    assert first_named([], 3) == ""
    assert named_batches(["n2", "n1"]) == "batches n1, n2"
    assert named_batches(["n3", "n1", "n2"], shown=2) == "batches n1, n2 and 1 more"
