"""Outside audit 25d: the examples as a fresh install runs them."""

from __future__ import annotations

from pathlib import Path

from conftest import manifest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_the_example_worker_unit_logs_what_its_worker_did(afc):
    """examples/workers/afc-worker.service ran 'afc worker --concurrency 32 --quiet': under
    systemd the journal is the worker's only log, and --quiet wrote nothing to it, not the
    failed jobs, the spend, a drain on SIGTERM, nor the warnings that a provider's polls keep
    failing or a billed output is out of reach (README: '-q shows neither'). The unit's own
    command, run as written (until idle, here), now logs them."""
    unit = (EXAMPLES / "workers" / "afc-worker.service").read_text()
    (command,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    program, *args = command.removeprefix("ExecStart=").split()
    assert program.endswith("/afc") and args[0] == "worker", command
    afc.write_manifest(
        manifest(
            [
                {"key": "ok", "prompt": "p"},
                {"key": "bad", "prompt": "q", "params": {"fail": ["auth"]}},
            ]
        )
    )
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    done = afc(*args, "--until-idle")
    assert done.returncode == 1, done.stderr
    assert "b1/bad: ended failed" in done.stderr, done.stderr
    assert "spent 0.050000 USD (priced)" in done.stderr, done.stderr
