"""The command surface: help for every command, a fast start, one error boundary."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from afc_cli.cli import app

COMMANDS = ["submit", "resume", "status", "show", "outputs"]


def test_every_command_has_help_with_examples():
    runner = CliRunner()
    top = runner.invoke(app, ["--help"])
    assert top.exit_code == 0
    for name in COMMANDS:
        assert name in top.output
        result = runner.invoke(app, [name, "--help"], terminal_width=200)
        assert result.exit_code == 0, result.output
        command = next(c for c in app.registered_commands if c.callback.__name__ == name)
        assert command.callback.__doc__, f"{name} has no help text"
        assert "Examples:" in result.output, name
        assert "--ledger" in result.output and "--json" in result.output, name


def test_help_does_not_import_heavy_modules():
    code = (
        "import sys; import afc_cli.cli; "
        "heavy = {'boto3', 'botocore', 'httpx', 'pydantic', 'yaml', 'sqlite_utils', 'rfc8785'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_usage_errors_exit_2_without_traceback(afc):
    result = afc("submit")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    result = afc("submit", "x.yaml", "--concurrency", "0")
    assert result.returncode == 2
    result = afc("frobnicate")
    assert result.returncode == 2


def test_a_broken_ledger_file_is_a_clear_error(afc):
    (afc.cwd / "afc.db").write_bytes(b"this is not sqlite" * 100)
    result = afc("status")
    assert result.returncode == 2
    assert "is damaged or not a SQLite database" in result.stderr
    assert "Traceback" not in result.stderr


def test_every_example_manifest_is_valid(afc):
    from pathlib import Path

    examples = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.yaml"))
    assert len(examples) >= 6
    for example in examples:
        result = afc("plan", str(example), "--json")
        assert result.returncode == 0, (example.name, result.stderr)
    assert not (afc.cwd / "afc.db").exists()


def test_every_example_prices_every_model_for_a_plan_and_a_budget(afc):
    """An outside audit: examples/openai.yaml gave token rates only (plan: unpriced; a budget
    refused), and replicate.yaml priced flux-1.1-pro per second where fallback.yaml says it is
    billed per output image. Every example's models have a per-image estimate, so plan and
    --max-spend work on each as written, and a model is priced alike in every example."""
    from decimal import Decimal
    from pathlib import Path

    import yaml

    examples = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.yaml"))
    cards: dict[tuple[str, str], dict[str, set[Decimal]]] = {}
    for example in examples:
        planned = afc.json("plan", str(example), "--max-spend", "100")
        assert planned["unpriced_models"] == [] and planned["problems"] == [], example.name
        assert planned["fits_budget"] is True, example.name
        for card in yaml.safe_load(example.read_text()).get("rates", []):
            prices = cards.setdefault((card["provider"], card["model"]), {})
            for unit, value in card.items():
                if unit.startswith("per_"):
                    prices.setdefault(unit, set()).add(Decimal(value))
    replicate = cards[("replicate", "black-forest-labs/flux-1.1-pro")]
    assert set(replicate) == {"per_image"}  # billed per output image
    for model, prices in cards.items():
        assert all(len(values) == 1 for values in prices.values()), (model, prices)
    assert not (afc.cwd / "afc.db").exists()


def test_the_readme_manifest_example_is_valid(afc):
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = re.search(r"## The manifest\n\n```yaml\n(.*?)```", readme, re.S).group(1)
    (afc.cwd / "readme.yaml").write_text(block)
    result = afc("plan", "readme.yaml", "--json")
    assert result.returncode == 0, result.stderr


def test_the_readme_manifest_example_runs_as_its_text_says(afc):
    """An outside audit: the README's manifest example did not run as written (a budget over a
    job's model with no rate card; a webhook secret variable not set), and neither refusal
    named the file and field (the rule for errors: README, "The manifest"). The text under
    it says what it needs."""
    import base64
    import json
    import os
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block, after = re.search(
        r"## The manifest\n\n```yaml\n(.*?)```\n(.*?)\n\n", readme, re.S
    ).groups()
    assert "export AFC_WEBHOOK_SECRET=whsec_" in after
    (afc.cwd / "readme.yaml").write_text(block)
    unset = afc("submit", "readme.yaml")
    assert unset.returncode == 2 and not (afc.cwd / "afc.db").exists()
    assert "readme.yaml: field 'webhook.secret_env'" in unset.stderr
    assert "AFC_WEBHOOK_SECRET" in unset.stderr
    secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    ran = afc("submit", "readme.yaml", "--json", env={"AFC_WEBHOOK_SECRET": secret})
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["counts"] == {"succeeded": 2}
    # the budget's refusal names the file and the field too
    (afc.cwd / "nocard.yaml").write_text(
        block.replace("batch: trailer-shots", "batch: other").replace(
            '  - {provider: local, model: demo-hq, per_image: "0.04"}', ""
        )
    )
    refused = afc("submit", "nocard.yaml", env={"AFC_WEBHOOK_SECRET": secret})
    assert refused.returncode == 2
    assert "nocard.yaml: field 'budget': a budget needs a per-image rate card" in refused.stderr
    assert "local/demo-hq" in refused.stderr


def test_every_command_accepts_the_shared_options(afc):
    """The CLI's rule (README, "Commands"): every command takes --ledger, --storage,
    --concurrency, --json, -q and -v after its name (those it does not use are hidden and
    ignored). An outside audit found the newer commands (report, serve, outputs, review,
    ledger copy) refusing them with exit 2."""
    import typer.main

    shared = {"--ledger", "--storage", "--concurrency", "--json", "-q", "-v"}
    lacking = {}

    def walk(command, path):
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
            return
        opts = {opt for param in command.params for opt in getattr(param, "opts", [])}
        if shared - opts:
            lacking[" ".join(path)] = sorted(shared - opts)

    walk(typer.main.get_command(app), [])
    assert lacking == {}
    from conftest import jobs, manifest

    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "-q").returncode == 0
    for args in (
        ("outputs",),
        ("review", "list"),
        ("report", "--html", "r.html"),
    ):
        result = afc(*args, "-q", "-v", "--storage", "file://./elsewhere", "--concurrency", "2")
        assert result.returncode == 0, (args, result.stderr)
