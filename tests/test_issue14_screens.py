"""What a person at an 80-column terminal and a pipe get from the real ``afc`` command:
tables that keep keys, ids and money whole, tab-separated rows on a pipe, ``status`` filters,
``outputs``, ids by unique prefix, and one answer for an unknown ``--batch``."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3

import pytest
from conftest import Afc, manifest
from receiver import Receiver
from terminal import on_pipe, on_pty

LONG_KEYS = [
    "b-shot-0001-establishing-wide-lighthouse",
    "b-shot-0002-keeper-close-up-hands",
    "b-shot-0003-storm-over-the-harbour-night",
]
PRICE = "1234.5678"  # shown as 1234.567800: wider than any header it sits under
BOX = set("─│┃━┏┓┗┛╭╮╰╯═║")


@pytest.fixture(scope="module")
def ledger(tmp_path_factory):
    """Shared by the tests that only read it (the unknown-batch test checks that it changed
    nothing). Two batches, long keys, four-figure prices, a failure with a long message, a waiting
    job and a job on another model."""
    afc = Afc(tmp_path_factory.mktemp("screens"))
    data = manifest(
        [
            {"key": LONG_KEYS[0], "prompt": "a lighthouse at dawn, 35mm film"},
            {"key": LONG_KEYS[1], "prompt": "hands", "params": {"fail": ["invalid"]}},
            {
                "key": LONG_KEYS[2],
                "prompt": "storm",
                "chain": [{"provider": "local", "model": "m2", "attempts": 1}],
            },
            {
                "key": "title",
                "prompt": "title card",
                "output": "{batch}/titles/a/rather/deep/folder/for/the/{key}.{ext}",
            },
        ],
        batch="trailer-shots-2026",
        rates=[
            {"provider": "local", "model": "m1", "per_image": PRICE},
            {"provider": "local", "model": "m2", "per_image": "98765.4321"},
        ],
    )
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 1
    other = manifest([{"key": "teaser-0001", "prompt": "x"}], batch="teaser")
    afc.write_manifest(other, "teaser.yaml")
    assert afc("submit", "teaser.yaml").returncode == 0
    return afc


def screen(afc, *args, columns=80):
    return on_pty(afc.command(*args), cwd=afc.cwd, env=afc.env, columns=columns)


def piped(afc, *args):
    return on_pipe(afc.command(*args), cwd=afc.cwd, env=afc.env)


def assert_fits(text: str, columns: int = 80) -> None:
    for line in text.splitlines():
        assert len(line) <= columns, line


def assert_plain_rows(text: str, header: list[str]) -> list[dict[str, str]]:
    assert "\x1b" not in text and not (BOX & set(text)), text
    lines = text.splitlines()
    assert lines[0].split("\t") == header
    rows = [dict(zip(header, line.split("\t"), strict=True)) for line in lines[1:]]
    return rows


def test_status_at_80_columns_keeps_keys_and_money_whole(ledger):
    shown = screen(ledger, "status", "--all")
    assert shown.returncode == 0, shown.output
    assert_fits(shown.output)
    for key in [*LONG_KEYS, "title", "teaser-0001"]:
        assert key in shown.output, key
    assert "1234.567800" in shown.output and "98765.432100" in shown.output
    assert "trailer-shots-2026" in shown.output and "teaser" in shown.output  # two batches
    # counts come first
    assert shown.lines[0].startswith("5 jobs: ")


def test_status_shows_counts_then_the_jobs_that_need_attention(ledger):
    shown = screen(ledger, "status", "--batch", "trailer-shots-2026")
    assert shown.returncode == 0
    assert_fits(shown.output)
    assert shown.lines[0] == "batch trailer-shots-2026: 4 jobs: 3 succeeded, 1 failed"
    assert LONG_KEYS[1] in shown.output and "CHAIN_FAILED" in shown.output
    assert LONG_KEYS[0] not in shown.output, "a succeeded job is not listed without --all"
    assert "not listed: 3 succeeded" in shown.output
    # one batch: no batch column, the batch is named with the counts
    assert "batch " not in shown.lines[1]


def test_a_failed_jobs_reason_shows_under_the_table_when_its_column_has_no_room(afc):
    """Found by an outside audit: with a long key at 80 columns the reason column was dropped
    for a failed job, though the reason is what a person runs 'afc status' for."""
    key = "s01-a-very-long-shot-key-name-for-the-harbour-at-dawn-and-more"
    data = manifest([{"key": key, "prompt": "a", "params": {"fail": ["auth"]}}])
    data["defaults"]["chain"][0]["attempts"] = 1
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 1
    shown = screen(afc, "status")
    assert_fits(shown.output)
    flat = " ".join(shown.output.split())  # the line wraps at 80 columns
    assert f"{key}: CHAIN_FAILED: auth from local/m1" in flat
    assert "(not shown at 80 columns: output_key, step, attempts;" in flat


def test_status_on_a_pipe_is_tab_separated_and_whole(ledger):
    result = piped(ledger, "status", "--all")
    assert result.returncode == 0
    rows = assert_plain_rows(
        result.stdout,
        ["batch", "key", "status", "step", "attempts", "cost", "reason", "output_key"],
    )
    assert [r["key"] for r in rows] == ["teaser-0001", *LONG_KEYS, "title"]
    by_key = {r["key"]: r for r in rows}
    assert by_key[LONG_KEYS[0]]["cost"] == "1234.567800"
    assert (
        by_key["title"]["output_key"]
        == "trailer-shots-2026/titles/a/rather/deep/folder/for/the/title.png"
    )
    assert by_key[LONG_KEYS[1]]["reason"].startswith("CHAIN_FAILED: invalid from local/m1")
    assert result.stderr.startswith("5 jobs: "), "counts go to stderr on a pipe"
    failed = [line for line in result.stdout.splitlines() if "\tfailed\t" in line]
    assert len(failed) == 1 and LONG_KEYS[1] in failed[0]  # afc status | grep failed


def test_status_filter_by_status(ledger):
    failed = ledger.json("status", "--status", "failed")
    assert [j["key"] for j in failed["jobs"]] == [LONG_KEYS[1]]
    assert failed["counts"] == {"succeeded": 4, "failed": 1}, "counts cover the whole scope"
    both = ledger.json("status", "--status", "failed,succeeded", "--batch", "teaser")
    assert [j["key"] for j in both["jobs"]] == ["teaser-0001"]
    rows = assert_plain_rows(
        piped(ledger, "status", "--status", "succeeded", "--batch", "teaser").stdout,
        ["key", "status", "step", "attempts", "cost", "reason", "output_key"],
    )
    assert [r["key"] for r in rows] == ["teaser-0001"]
    bad = ledger("status", "--status", "finished")
    assert bad.returncode == 2 and "not a job status" in bad.stderr and "succeeded" in bad.stderr
    for empty in ("", ","):  # an unset variable in a script: refused, not a silent filter
        refused = ledger("status", "--status", empty)
        assert refused.returncode == 2 and "names no status" in refused.stderr
    # --json without a filter keeps its contract: every job of the scope
    assert len(ledger.json("status")["jobs"]) == 5


def test_costs_report_at_80_columns_keeps_every_figure_whole(ledger):
    report = ledger.json("costs", "report", "--by", "model")
    figures = {r["priced"] for r in report["rows"]} | {report["total"]["priced"]}
    assert figures == {"2469.185600", "98765.432100", "101234.617700"}
    shown = screen(ledger, "costs", "report", "--by", "model")
    assert shown.returncode == 0
    assert_fits(shown.output)
    for figure in figures:
        assert figure in shown.output, figure
    for model in ("local/m1", "local/m2", "total"):
        assert model in shown.output
    for word in ("priced", "unpriced", "attempts", "failed", "spend"):
        assert word in shown.output
    piped_report = piped(ledger, "costs", "report", "--by", "model")
    rows = assert_plain_rows(
        piped_report.stdout,
        [
            "model",
            "priced",
            "unpriced_attempts",
            "failed_spend",
            "unknown_attempts",
            "avoided_renders",
            "avoided_cost",
            "avoided_unpriced",
        ],
    )
    assert rows[-1]["model"] == "total" and rows[-1]["priced"] == report["total"]["priced"]


def test_outputs_lists_what_was_stored(ledger):
    listed = ledger.json("outputs")["outputs"]
    assert [o["key"] for o in listed] == ["teaser-0001", LONG_KEYS[0], LONG_KEYS[2], "title"]
    first = listed[1]
    assert first["batch"] == "trailer-shots-2026"
    assert first["cost"] == "1234.567800" and first["model"] == "local/m1"
    assert first["prompt"] == "a lighthouse at dawn, 35mm film"
    path = ledger.outputs() / "trailer-shots-2026" / f"{LONG_KEYS[0]}.png"
    assert first["path"] == str(path) and first["url"] == f"file://{path}"
    assert first["size"] == path.stat().st_size
    assert first["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert listed[2]["model"] == "local/m2"
    only = ledger.json("outputs", "--batch", "teaser")["outputs"]
    assert [o["key"] for o in only] == ["teaser-0001"]

    shown = screen(ledger, "outputs")
    assert shown.returncode == 0
    assert_fits(shown.output)
    for key in (LONG_KEYS[0], LONG_KEYS[2], "title", "teaser-0001"):
        assert key in shown.output
    assert "1234.567800" in shown.output and "98765.432100" in shown.output
    rows = assert_plain_rows(
        piped(ledger, "outputs").stdout, ["batch", "key", "path", "size", "sha256", "cost"]
    )
    assert rows[1]["path"] == str(path) and rows[1]["sha256"] == first["sha256"]


def test_the_sidecar_records_the_prompt_and_model_and_old_ones_still_count(afc):
    afc.write_manifest(manifest([{"key": "s1", "prompt": "a quiet harbour"}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    sidecar = afc.outputs() / "b1" / "s1.png.afc.json"
    meta = json.loads(sidecar.read_text())
    assert meta["prompt"] == "a quiet harbour" and meta["model"] == "m1"
    # a sidecar written before the prompt was recorded is still this job's output
    for name in ("prompt",):
        del meta[name]
    sidecar.chmod(0o644)
    sidecar.write_text(json.dumps(meta))
    (afc.cwd / "afc.db").unlink()
    result = afc.json("submit", "manifest.yaml")
    assert result["counts"] == {"succeeded": 1}
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(0,)], "recognised: nothing rendered"


def test_an_unknown_batch_is_exit_2_in_every_command(ledger):
    for args in (
        ("status",),
        ("show", LONG_KEYS[0]),
        ("resume",),
        ("cancel",),
        ("cancel", "title"),
        ("costs", "report"),
        ("outputs",),
    ):
        result = ledger(*args, "--batch", "trailer-shot")
        assert result.returncode == 2, (args, result.stderr)
        assert "no batch 'trailer-shot'" in result.stderr, args
        assert "known batches: trailer-shots-2026, teaser" in result.stderr, args
        assert "Traceback" not in result.stderr
    assert len(ledger.json("status")["jobs"]) == 5, "nothing was cancelled or run"


@pytest.fixture
def deliveries(afc):
    receiver = Receiver().start()
    receiver.script = [(400, 0, {}), (400, 0, {})]
    afc.env["AFC_HOOK_SECRET"] = "whsec_" + "c2VjcmV0IGZvciB0aGUgc2NyZWVuIHRlc3RzISEh"
    data = manifest([{"key": "k1", "prompt": "a"}, {"key": "k2", "prompt": "b"}])
    data["webhook"] = {"url": receiver.url, "secret_env": "AFC_HOOK_SECRET", "timeout_s": 2}
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--concurrency", "1").returncode == 0
    yield afc, receiver
    receiver.stop()


def test_webhook_ids_whole_at_80_columns_and_replayed_by_prefix(deliveries):
    afc, receiver = deliveries
    dead = afc.json("webhooks", "list", "--dead")["deliveries"]
    assert len(dead) == 2
    shown = screen(afc, "webhooks", "list")
    assert_fits(shown.output)
    for delivery in dead:
        assert delivery["id"] in shown.output
    rows = assert_plain_rows(
        piped(afc, "webhooks", "list").stdout,
        ["id", "status", "attempts", "last_status", "last_error", "url", "event"],
    )
    assert {r["id"] for r in rows} == {d["id"] for d in dead}
    # a unique prefix is enough
    result = afc("webhooks", "replay", dead[0]["id"][:6])
    assert result.returncode == 0, result.stderr
    statuses = {d["id"]: d["status"] for d in afc.json("webhooks", "list")["deliveries"]}
    assert statuses[dead[0]["id"]] == "delivered" and statuses[dead[1]["id"]] == "dead"


def test_an_ambiguous_prefix_names_the_candidates(deliveries):
    afc, _ = deliveries
    (first,) = afc.rows("SELECT id FROM deliveries ORDER BY id LIMIT 1")[0]
    twin = first[:8] + "ffff" + first[12:]
    conn = sqlite3.connect(afc.cwd / "afc.db")
    with conn:
        conn.execute("CREATE TEMP TABLE twin AS SELECT * FROM deliveries WHERE id = ?", (first,))
        conn.execute("UPDATE twin SET id = ?", (twin,))
        conn.execute("INSERT INTO deliveries SELECT * FROM twin")
    conn.close()
    result = afc("webhooks", "replay", first[:8])
    assert result.returncode == 2
    assert first in result.stderr and twin in result.stderr and "several" in result.stderr
    assert afc("webhooks", "replay", "0000000000zz").returncode == 2


def test_version_and_short_help(afc):
    from afc_cli import __version__

    version = afc("--version")
    assert version.returncode == 0 and version.stdout == f"afc {__version__}\n"
    short, long = afc("status", "-h"), afc("status", "--help")
    assert short.returncode == 0 and short.stdout == long.stdout
    assert afc("-h").stdout == afc("--help").stdout
    assert "--install-completion" in afc("--help").stdout


def test_the_shared_options_are_still_accepted_where_unused(afc):
    afc.write_manifest(manifest([{"key": "k", "prompt": "p"}]))
    assert afc("submit", "manifest.yaml", "-q").returncode == 0
    for args in (
        ("status",),
        ("show", "k"),
        ("costs", "report"),
        ("queue", "stats"),
    ):
        result = afc(*args, "--storage", "file://elsewhere", "--concurrency", "3", "-q", "-v")
        assert result.returncode == 0, (args, result.stderr)


def test_json_on_a_terminal_still_shows_progress_on_stderr(afc):
    afc.write_manifest(manifest([{"key": f"k{i}", "prompt": "p"} for i in range(3)]))
    shown = on_pty(
        afc.command("submit", "manifest.yaml", "--json"),
        cwd=afc.cwd,
        env=afc.env,
        stderr_pipe=False,
    )
    assert shown.returncode == 0
    assert "rendering" in shown.output and "ok 3" in shown.output
    assert "afc: b1/k0: ended" not in shown.output, "the live display, not log lines"


def test_help_never_lists_options_a_command_ignores():
    from typer.testing import CliRunner

    from afc_cli.cli import app

    runner = CliRunner()
    for args, unused in (
        (["status"], ["--storage", "--concurrency", "--quiet", "--verbose"]),
        (["show"], ["--storage", "--concurrency", "--quiet"]),
        (["costs", "report"], ["--storage", "--concurrency", "--verbose"]),
        (["outputs"], ["--storage", "--concurrency"]),
        (["plan"], ["--concurrency", "--quiet"]),
    ):
        text = runner.invoke(app, [*args, "--help"], terminal_width=200).output
        for option in unused:
            assert option not in text, (args, option)
    assert "--storage" in runner.invoke(app, ["submit", "--help"]).output


def test_progress_reaches_the_terminal_without_json(afc):
    afc.write_manifest(manifest([{"key": "k1", "prompt": "p", "params": {"fail": ["auth"]}}]))
    shown = on_pty(afc.command("submit", "manifest.yaml"), cwd=afc.cwd, env=afc.env)
    assert shown.returncode == 1
    assert "b1/k1: failed: CHAIN_FAILED: auth" in shown.output, shown.output
    assert "failed 1" in shown.output and "spent 0.000000 USD" in shown.output


def test_a_retry_after_wait_shows_its_reason_and_next_try(afc):
    afc.write_manifest(
        manifest(
            [
                {
                    "key": "slow",
                    "prompt": "p",
                    "params": {"fail": ["rate_limited"], "retry_after_s": 1.5},
                }
            ],
            defaults={
                "chain": [
                    {
                        "provider": "local",
                        "model": "m1",
                        "attempts": 2,
                        "backoff": {"base": 0.01, "cap": 2},
                    }
                ]
            },
        )
    )
    shown = on_pty(afc.command("submit", "manifest.yaml"), cwd=afc.cwd, env=afc.env)
    assert shown.returncode == 0, shown.output
    assert "waiting 1: rate_limited; next try " in shown.output, shown.output
    assert "ok 1  failed 0  waiting 0  in flight 0  queued 0" in shown.output


def test_a_budget_stop_is_one_line_not_one_per_job(afc):
    afc.write_manifest(manifest([{"key": f"k{i:02d}", "prompt": f"p{i}"} for i in range(30)]))
    result = afc("submit", "manifest.yaml", "--max-spend", "0.10", "--concurrency", "1")
    assert result.returncode == 4, result.stderr
    budget_lines = [line for line in result.stderr.splitlines() if "budget: " in line]
    assert len(budget_lines) == 1, result.stderr
    assert budget_lines[0].startswith("afc: 28 jobs waiting at render (b1/k02, b1/k03, b1/k04")


def test_show_keeps_its_figures_whole_and_pipes_plain(ledger):
    shown = screen(ledger, "show", LONG_KEYS[2])
    assert shown.returncode == 0
    assert f"trailer-shots-2026/{LONG_KEYS[2]}" in shown.output
    assert "98765.432100" in shown.output and "local/m2" in shown.output
    table = [line for line in shown.lines if "local/m2" in line and "succeeded" in line]
    assert len(table) == 1 and len(table[0]) <= 80
    result = piped(ledger, "show", LONG_KEYS[2])
    assert "\x1b" not in result.stdout and not (BOX & set(result.stdout))
    lines = result.stdout.splitlines()
    header = lines.index("attempts") + 1
    assert lines[header].split("\t")[:3] == ["number", "model", "status"]
    assert lines[header + 1].split("\t")[8] == "98765.432100"


def test_shell_completion_is_on(afc):
    # typer finds the shell among afc's parent processes, and a suite started outside a shell
    # (cron, CI, a background job) has none: its own test switch makes --show-completion take
    # the shell's name instead
    script = afc(
        "--show-completion", "bash", env={"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    )
    assert script.returncode == 0
    assert "complete -o default -F _afc_completion afc" in script.stdout
    env = {"_AFC_COMPLETE": "complete_bash", "COMP_WORDS": "afc sta", "COMP_CWORD": "1"}
    assert afc(env=env).stdout.split() == ["status"]
    env.update(COMP_WORDS="afc status --st", COMP_CWORD="2")
    assert afc(env=env).stdout.split() == ["--status"]


STYLE = re.compile(r"\x1b\[[0-9;]*m")  # SGR: colour, bold, dim


def test_no_color_means_no_style_at_all_on_a_terminal(ledger, afc):
    """no-color.org: NO_COLOR set (and not empty) and afc's terminal output has no SGR
    escape at all: rich's own NO_COLOR dropped colour but kept the bold titles and headers and
    the dim notes."""

    def styles(who, *args, no_color):
        shown = on_pty(who.command(*args), cwd=who.cwd, env=who.env, no_color=no_color)
        return set(STYLE.findall(shown.raw))

    for args in (("status",), ("costs", "report"), ("show", LONG_KEYS[2])):
        assert styles(ledger, *args, no_color=False), args  # styled without NO_COLOR
        assert not styles(ledger, *args, no_color=True), args
    afc.write_manifest(manifest([{"key": "k1", "prompt": "p"}]))
    assert not styles(afc, "submit", "manifest.yaml", no_color=True)  # the live progress
