"""Conformance to the product contract's later sections (concurrency and cron, storage,
providers, webhooks, the round-2 additions), checked from outside through the ``afc``
command, sentence by sentence."""

from __future__ import annotations

import hashlib

from conftest import manifest

from afc_cli.providers.local import render_png


def test_needs_and_inputs_are_taken_from_defaults(afc):
    """``needs`` and ``inputs`` are job fields "also in defaults", as ``review`` is: a job
    without its own takes the defaults' (the job a default names does not wait for itself),
    and a job's own list, even an empty one, overrides them. afc refused both in defaults
    as unknown fields (exit 2)."""
    (afc.cwd / "ref.png").write_bytes(render_png("a palette", 16, 16))
    data = manifest(
        [
            {"key": "style", "prompt": "the style frame", "review": True},
            {"key": "shot-1", "prompt": "a lighthouse"},
            {"key": "loose", "prompt": "on its own", "needs": [], "inputs": []},
        ],
        jobs_from="more.jsonl",
    )
    data["defaults"]["needs"] = ["style"]
    data["defaults"]["inputs"] = [{"path": "ref.png"}, {"job": "style"}]
    (afc.cwd / "more.jsonl").write_text('{"key": "shot-2", "prompt": "a harbour"}\n')
    afc.write_manifest(data)

    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    status = {j["key"]: j["status"] for j in afc.json("status")["jobs"]}
    assert status == {
        "style": "awaiting_review",
        "shot-1": "blocked",
        "shot-2": "blocked",
        "loose": "succeeded",
    }
    palette = hashlib.sha256((afc.cwd / "ref.png").read_bytes()).hexdigest()
    style = afc.json("show", "style")
    assert style["needs"] == []
    assert [i.get("sha256") for i in style["inputs"]] == [palette]
    for key in ("shot-1", "shot-2"):
        shot = afc.json("show", key)
        assert [n["key"] for n in shot["needs"]] == ["style"]
        assert [i.get("sha256") or i.get("job") for i in shot["inputs"]] == [palette, "style"]
    assert afc.json("show", "loose")["inputs"] is None

    assert afc("review", "approve", "style").returncode == 0
    assert afc("resume").returncode == 0
    assert {j["status"] for j in afc.json("status")["jobs"]} == {"succeeded"}
    sent = afc.json("show", "shot-1")["attempts"][-1]["inputs"]
    assert len(sent) == 2 and sent[0]["sha256"] == palette


def test_queue_stats_rows_are_tab_separated(afc):
    """Piped output is plain text, tab-separated rows: ``afc queue stats`` printed
    ``dlq 0`` with a space, so ``afc queue stats | grep dlq | cut -f2`` gave the whole line."""
    afc.write_manifest(manifest([{"key": "k", "prompt": "p"}]))
    assert afc("submit", "manifest.yaml", "--no-run", "-q").returncode == 0
    result = afc("queue", "stats")
    assert result.returncode == 0, result.stderr
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    figures = afc.json("queue", "stats")
    piped = {name: int(value) for name, value in rows}
    # an age grows between the two commands (by a second or more on a loaded machine)
    ages = {name for name in figures if name.endswith("age_seconds")}
    assert ages and piped.keys() == figures.keys()
    assert {n: v for n, v in piped.items() if n not in ages} == {
        n: v for n, v in figures.items() if n not in ages
    }
    assert all(0 <= figures[n] - piped[n] <= 60 for n in ages)
    assert figures["queued"] == 1


def test_a_params_problem_is_named_once_for_a_chain_of_one_provider(afc):
    """An error names the file, the job and the field: once. With two models of one provider
    in the chain, each bad param was listed twice, word for word."""
    data = manifest([{"key": "k", "prompt": "p", "params": {"fail": ["bogus"]}}])
    data["defaults"]["chain"].append({"provider": "local", "model": "m2"})
    afc.write_manifest(data)
    result = afc("plan", "manifest.yaml")
    assert result.returncode == 2
    assert result.stderr.count("'bogus' is not an error class") == 1, result.stderr


def test_a_worker_named_another_storage_is_refused_with_both_named(afc):
    """A later run that names a different storage for a batch is refused (exit 2) with both
    named. ``afc worker --storage`` was accepted and ignored: the worker rendered into the
    batch's own storage, exit 0, where the operator had named another."""
    afc.write_manifest(manifest([{"key": "k", "prompt": "p"}]))
    assert afc("submit", "manifest.yaml", "--no-run", "-q").returncode == 0
    bound = (afc.cwd / "afc-outputs").resolve().as_uri()
    elsewhere = (afc.cwd / "elsewhere").resolve().as_uri()

    result = afc("worker", "--until-idle", "--storage", "file://./elsewhere")
    assert result.returncode == 2
    assert bound in result.stderr and elsewhere in result.stderr
    assert afc.json("status")["jobs"][0]["status"] == "queued", "nothing was claimed"
    assert afc.rows("SELECT COUNT(*) FROM attempts")[0][0] == 0

    assert afc("worker", "--until-idle", "--storage", "file://./afc-outputs").returncode == 0
    assert afc.json("status")["jobs"][0]["status"] == "succeeded"


def test_a_worker_naming_a_storage_is_not_refused_by_a_finished_batch_bound_elsewhere(afc):
    """A long-lived ledger's old batch, every job ended, was stored on another storage: a
    worker naming the new batch's storage was refused at its start (exit 2) for that batch,
    though it had nothing of it to run."""
    old = [{"key": "k", "prompt": "p", "params": {"fail": ["invalid"]}}]
    afc.write_manifest(manifest(old))
    assert afc("submit", "manifest.yaml", "-q").returncode == 1  # b1, on afc-outputs: ended
    later = manifest([{"key": "k2", "prompt": "p2"}], batch="b2")
    afc.write_manifest(later, name="later.yaml")
    assert (
        afc("submit", "later.yaml", "--no-run", "-q", "--storage", "file://./other").returncode == 0
    )

    result = afc("worker", "--until-idle", "--storage", "file://./other")
    assert result.returncode == 0, result.stderr
    assert dict(afc.rows("SELECT key, status FROM jobs")) == {"k": "failed", "k2": "succeeded"}
    assert (afc.cwd / "other").is_dir()

    # that batch's job retried later is the worker's again: refused at its claim, given back
    assert afc("retry", "k", "--batch", "b1").returncode == 0
    refused = afc("worker", "--until-idle", "--storage", "file://./other")
    assert refused.returncode == 2 and "batch 'b1'" in refused.stderr, refused.stderr
    assert afc.rows("SELECT status, lease_owner FROM jobs WHERE key = 'k'") == [("queued", None)]


def test_a_batch_admitted_while_a_worker_runs_is_held_to_its_storage(afc):
    """The same check at each claim: a batch admitted since the worker started, bound to
    another storage, is refused (exit 2), its job given back unrendered."""
    afc.write_manifest(manifest([{"key": "k", "prompt": "p"}]))
    assert afc("submit", "manifest.yaml", "-q").returncode == 0
    worker = afc.popen(
        "worker", "--storage", "file://./afc-outputs", "--poll", "0.05", "--grace", "0"
    )
    try:
        later = manifest([{"key": "k2", "prompt": "p2"}], batch="b2")
        afc.write_manifest(later, name="later.yaml")
        admitted = afc("submit", "later.yaml", "--no-run", "--storage", "file://./other")
        assert admitted.returncode == 0, admitted.stderr
        assert worker.wait(timeout=60) == 2
        stderr = worker.stderr.read()
        assert "batch 'b2'" in stderr and (afc.cwd / "other").resolve().as_uri() in stderr
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert afc.rows("SELECT status, lease_owner FROM jobs WHERE key = 'k2'") == [("queued", None)]
