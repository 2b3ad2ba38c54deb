"""Property: however a valid manifest is mutated (types, values, Unicode, sizes, YAML
features), afc answers with a manifest or one ManifestError, never a traceback; and through the
real command, exit 2 means no ledger was created and no file was written to storage.

The bulk runs in process (validation only); a small sample runs the real ``afc submit``."""

from __future__ import annotations

import copy
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afc_cli.costs import RateCards
from afc_cli.errors import AfcError, ManifestError
from afc_cli.ledger import Ledger
from afc_cli.manifest import canonical_json, load_manifest, output_key_problem
from afc_cli.run import Budget

BASE: dict[str, Any] = {
    "version": 1,
    "batch": "prop",
    "budget": "10.00",
    "defaults": {
        "output": "{batch}/{key}.{ext}",
        "params": {"size": "32x32"},
        "chain": [
            {
                "provider": "local",
                "model": "m1",
                "attempts": 2,
                "fallback_on": ["exhausted"],
                "backoff": {"base": 0.01, "cap": 0.02},
            },
            {"provider": "local", "model": "m3", "attempts": 1},
        ],
    },
    "limits": {"local": {"concurrency": 2, "per_minute": 600}},
    "rates": [
        {"provider": "local", "model": "m1", "per_image": "0.01"},
        {"provider": "local", "model": "m3", "per_image": "0.01"},
    ],
    "jobs": [
        {"key": "a", "prompt": "a lighthouse", "params": {"seed": 1}},
        {"key": "b-2", "prompt": "a cottage", "output": "{batch}/b/{key}.{ext}"},
        {"key": "c.3", "prompt": "the sea", "chain": [{"provider": "local", "model": "m2"}]},
    ],
}

FIELD_NAMES = [
    "version", "batch", "storage", "budget", "defaults", "rates", "limits", "webhook", "jobs",
    "key", "prompt", "params", "chain", "output", "provider", "model", "attempts",
    "fallback_on", "backoff", "window_s", "base", "cap", "per_image", "per_second",
    "size", "fail", "latency_s", "retry_after_s", "seconds", "output_format", "seed",
    "concurrency", "per_minute", "url", "secret_env", "timeout_s", "<<", "sise",
]  # fmt: skip

TRICKY = [
    "1e22", "-1", "0.04", "1E+400", "NaN", "²x²", "64x64", "0x64", "1024x1025", "",
    " ", "{batch}/{key}.{ext}", "{nope}", "{key!r}", "{key:>10}", "../x", "x/../y", "/abs",
    "a\\b", "a/b", "C:x", "x.afc.json", "🎬", "\x00", "\u200b", "\u2028", "x" * 300,
    "local", "openai", "replicate", "whsec_", "sk-abc", "exhausted", "bogus", "2",
    "http://127.0.0.1:9/hook", "file://elsewhere", "s3://", "postgresql://x",
]  # fmt: skip

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(TRICKY),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(st.sampled_from(FIELD_NAMES), st.text(max_size=8), st.integers()),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=8,
)

SNIPPETS = [
    "extra: !!binary aGVsbG8=\n",
    "budget: !!float .inf\n",
    "version: 1\n",  # a duplicate key
    "? [a, b]\n: 1\n",
    "x: !!python/object/apply:os.system ['true']\n",
    "x: !!set {a, b}\n",
    "x: !!timestamp 2026-11-30\n",
    "jobs: *nowhere\n",
    "x: &a [*a]\n",
    "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
    "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    "e: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n",
    "x: " + "[" * 80 + "]" * 80 + "\n",
    "\t- tab indented\n",
    "--- \nsecond: document\n",
    "%YAML 1.1\n",
]


def _slots(value: Any, path: tuple = ()) -> list[tuple]:
    """Every (path) to a value inside ``value``: mapping keys and list indices."""
    out = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            out.extend(_slots(item, (*path, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out.extend(_slots(item, (*path, index)))
    return out


@st.composite
def mutated_manifests(draw) -> str:
    data = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        path = draw(st.sampled_from(_slots(data)[1:]))
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "replace", "delete", "add", "grow"]))
        last = path[-1]
        if action == "replace":
            parent[last] = draw(VALUES)
        elif action == "delete":
            del parent[last]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from(FIELD_NAMES))] = draw(VALUES)
        elif action == "grow" and isinstance(parent[last], list) and parent[last]:
            parent[last] = parent[last] * draw(st.integers(min_value=2, max_value=40))
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=draw(st.booleans()), width=1000)
    edit = draw(st.sampled_from(["none", "none", "snippet", "truncate", "insert", "replace"]))
    if edit == "snippet":
        text += draw(st.sampled_from(SNIPPETS))
    elif edit == "truncate":
        text = text[: draw(st.integers(min_value=0, max_value=len(text)))]
    elif edit in ("insert", "replace"):
        at = draw(st.integers(min_value=0, max_value=len(text) - 1))
        char = draw(st.characters(codec="utf-8") | st.sampled_from(list(":-[]{}&*!|>'\"#%@`\t\n")))
        text = text[:at] + char + text[at + (edit == "replace") :]
    return text


def _check_resolved(path: Path) -> bool:
    """Validate in process; True if the manifest is valid. Anything but a ManifestError (or,
    for its budget, a usage error) is a bug, and hypothesis reports it with the manifest."""
    try:
        manifest = load_manifest(path)
    except ManifestError as exc:
        assert exc.problems and all(isinstance(p, str) and p for p in exc.problems)
        assert exc.message.startswith(f"invalid manifest {path}:")
        return False
    rates = RateCards.from_rates(manifest.rates)
    try:
        Budget.parse(manifest.budget, allow_unpriced=False)
    except AfcError:
        return False
    for job in manifest.jobs:
        canonical_json(job.body)
        assert output_key_problem(job.output_key) is None
        for entry in job.chain:
            rates.estimate(entry["provider"], entry["model"])
    return True


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(mutated_manifests())
def test_mutated_manifests_validate_or_fail_cleanly(text):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.yaml"
        path.write_text(text, encoding="utf-8")
        _check_resolved(path)


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(mutated_manifests(), st.booleans())
def test_through_the_command_exit_2_writes_nothing(text, existing):
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        (cwd / "m.yaml").write_text(text, encoding="utf-8")
        valid = _check_resolved(cwd / "m.yaml")
        ledger_file = cwd / "ledger" / "afc.db"
        before = None
        if existing:  # a ledger with another batch in it: exit 2 must leave it unchanged
            seed = cwd / "seed.yaml"
            seed.write_text(yaml.safe_dump({**copy.deepcopy(BASE), "batch": "seed"}))
            seeded = load_manifest(seed)
            ledger_file.parent.mkdir()
            book = Ledger(ledger_file)
            book.admit(seeded, f"file://{cwd / 'out'}", RateCards.from_rates(seeded.rates))
            book.close()
            before = hashlib.sha256(ledger_file.read_bytes()).hexdigest()
        env = {k: v for k, v in os.environ.items() if not k.startswith("AFC_")}
        args = ["submit", "m.yaml", "--ledger", "ledger/afc.db", "--storage", "file://out"]
        if valid and "latency_s" in text:
            args.append("--no-run")  # a mutated latency could make the run wait for long
        result = subprocess.run(
            [sys.executable, "-m", "afc_cli", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "Traceback" not in result.stderr
        assert "unexpected error" not in result.stderr, result.stderr
        assert result.returncode in (0, 1, 2, 3, 4), result.stderr
        if result.returncode == 2:
            assert result.stderr.startswith("afc: "), result.stderr
            if before is None:
                assert not (cwd / "ledger").exists(), result.stderr
            else:
                assert hashlib.sha256(ledger_file.read_bytes()).hexdigest() == before
            assert _files(cwd / "out") == []
        else:
            assert valid, result.stderr
