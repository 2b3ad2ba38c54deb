"""The core promises, end to end through the real ``afc`` command."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from conftest import jobs, manifest

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def attempts_count(afc) -> int:
    return afc.rows("SELECT COUNT(*) FROM attempts")[0][0]


def test_submit_renders_stores_and_records(afc):
    afc.write_manifest(manifest(jobs(3)))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    for i in (1, 2, 3):
        obj = afc.outputs() / "b1" / f"shot-{i:03d}.png"
        data = obj.read_bytes()
        assert data.startswith(PNG_MAGIC)
        meta = json.loads((obj.parent / (obj.name + ".afc.json")).read_text())
        assert meta["key"] == f"shot-{i:03d}"
        assert meta["sha256"] == hashlib.sha256(data).hexdigest()
        assert meta["size"] == len(data)
        assert {"job_id", "request_hash", "provider", "model", "attempt"} <= set(meta)
    images = {(afc.outputs() / "b1" / f"shot-{i:03d}.png").read_bytes() for i in (1, 2, 3)}
    assert len(images) == 3, "different prompts must give different images"
    status = afc.json("status")
    assert status["counts"] == {"succeeded": 3}
    assert {j["cost"] for j in status["jobs"]} == {"0.050000"}
    assert all(j["attempts"] == 1 for j in status["jobs"])
    # the spool is emptied once outputs are stored and verified
    assert list((afc.cwd / "afc.db-spool").iterdir()) == []


def test_replay_makes_no_new_attempt(afc):
    afc.write_manifest(manifest(jobs(3)))
    assert afc("submit", "manifest.yaml").returncode == 0
    before = attempts_count(afc)
    stamp = {p: p.stat().st_mtime_ns for p in afc.outputs().rglob("*")}
    second = afc.json("submit", "manifest.yaml")
    assert second["admitted"] == {"new": 0, "replayed": 3, "conflicts": 0}
    assert second["exit_code"] == 0
    assert attempts_count(afc) == before
    assert {p: p.stat().st_mtime_ns for p in afc.outputs().rglob("*")} == stamp
    # the summary tells the jobs this process ran from the tally of all it reports (an
    # audit read "1 run; 4 succeeded" as a contradiction)
    afc.write_manifest(manifest(jobs(4)))
    said = afc("submit", "manifest.yaml").stderr
    assert "afc: 1 run here; of 4 job(s): 4 succeeded; this run spent 0.050000" in said


def test_changed_body_under_old_key_conflicts_and_leaves_output(afc):
    data = manifest(jobs(2))
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    stored = (afc.outputs() / "b1" / "shot-001.png").read_bytes()
    data["jobs"][0]["prompt"] = "a different prompt"
    data["jobs"].append({"key": "shot-003", "prompt": "a new shot"})
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 3, result.stderr
    assert "IDEMPOTENCY_CONFLICT" in result.stderr and "shot-001" in result.stderr
    (stored_hash,) = afc.rows("SELECT request_hash FROM jobs WHERE key = 'shot-001'")[0]
    assert stored_hash in result.stderr  # both hashes are shown
    assert (afc.outputs() / "b1" / "shot-001.png").read_bytes() == stored
    # the rest of the batch still ran
    assert (afc.outputs() / "b1" / "shot-003.png").exists()
    assert afc.rows("SELECT status FROM jobs WHERE key = 'shot-003'") == [("succeeded",)]
    # and the JSON names both hashes too
    payload = afc.json("submit", "manifest.yaml", expect=3)
    (conflict,) = payload["conflicts"]
    assert conflict["key"] == "shot-001" and conflict["stored_hash"] == stored_hash
    assert conflict["new_hash"] != stored_hash


def test_same_key_in_two_batches_are_two_jobs(afc):
    afc.write_manifest(manifest(jobs(1), batch="film-a"), "a.yaml")
    afc.write_manifest(manifest(jobs(1), batch="film-b"), "b.yaml")
    assert afc("submit", "a.yaml").returncode == 0
    assert afc("submit", "b.yaml").returncode == 0
    assert afc.rows("SELECT COUNT(DISTINCT id) FROM jobs WHERE key = 'shot-001'") == [(2,)]
    show = afc("show", "shot-001")
    assert show.returncode == 2 and "--batch" in show.stderr
    story = afc.json("show", "shot-001", "--batch", "film-b")
    assert story["job"]["batch"] == "film-b"


def test_bad_manifest_exits_2_names_field_and_writes_nothing(afc):
    bad = manifest(jobs(3))
    bad["jobs"][1]["chain"] = [{"provider": "local", "model": "m1", "attempts": "many"}]
    afc.write_manifest(bad)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 2
    assert "manifest.yaml" in result.stderr
    assert "job 1 (key 'shot-002')" in result.stderr
    assert "chain[0].attempts" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (afc.cwd / "afc.db").exists(), "the ledger must not even be created"
    assert not afc.outputs().exists()


def test_bad_manifest_leaves_existing_ledger_untouched(afc):
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    tables = ("batches", "jobs", "steps", "attempts", "events")
    before = {t: afc.rows(f"SELECT COUNT(*) FROM {t}") for t in tables}
    bad = manifest(jobs(2))
    bad["jobs"][1]["colour"] = "red"
    afc.write_manifest(bad)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 2
    assert "job 1 (key 'shot-002'): field 'colour': unknown field" in result.stderr
    assert {t: afc.rows(f"SELECT COUNT(*) FROM {t}") for t in tables} == before


def test_manifest_errors_are_named(afc):
    cases = [
        (
            "version: 1\nbatch: b\njobs:\n  - {key: a, prompt: x}\n  - {key: a, prompt: y}\n",
            "job 1 (key 'a'): field 'key': duplicate key",
        ),
        ("version: 1\nbatch: b\nbatch: c\njobs: []\n", "duplicate key 'batch'"),
        (
            "version: 1\nbatch: b\njobs:\n  - {prompt: x}\n",
            "job 0: field 'key': required field is missing",
        ),
        (
            "version: 1\nbatch: b\njobs:\n  - {key: a, prompt: x}\n",
            "job 0 (key 'a'): field 'chain': the chain is empty",
        ),
        (
            "version: 1\nbatch: b\ndefaults: {chain: []}\njobs:\n  - {key: a, prompt: x}\n",
            "the chain is empty",
        ),
        (
            "version: 1\nbatch: b\ndefaults: {chain: [{provider: nope, model: m}]}\n"
            "jobs:\n  - {key: a, prompt: x}\n",
            "unknown provider 'nope'",
        ),
        (
            "version: 1\nbatch: b\ndefaults: {chain: [{provider: local, model: m}]}\n"
            "jobs:\n  - {key: a, prompt: x, params: {fail: [bogus]}}\n",
            "field 'params.fail': 'bogus' is not an error class",
        ),
        (
            "version: 1\nbatch: b\ndefaults: {chain: [{provider: local, model: m}]}\n"
            "jobs:\n  - {key: a, prompt: x}\n  - {key: b, prompt: y, output: 'same.png'}\n"
            "  - {key: c, prompt: z, output: 'same.png'}\n",
            "also job 1's",
        ),
        (
            "version: 1\nbatch: b\nrates: [{provider: local, model: m, per_image: 0.04}]\n"
            "defaults: {chain: [{provider: local, model: m}]}\njobs:\n  - {key: a, prompt: x}\n",
            "rates[0].per_image",
        ),
        ("- just\n- a list\n", "must be a mapping"),
        ("version: [unclosed\n", "not valid YAML"),
    ]
    for text, expected in cases:
        (afc.cwd / "m.yaml").write_text(text)
        result = afc("submit", "m.yaml")
        assert result.returncode == 2, (text, result.stderr)
        assert expected in result.stderr, (text, result.stderr)
        assert "Traceback" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()
    missing = afc("submit", "nope.yaml")
    assert missing.returncode == 2 and "nope.yaml" in missing.stderr


def test_path_escaping_templates_are_refused(afc):
    for template in (
        "../{key}.{ext}",
        "/etc/{key}.{ext}",
        "{batch}/../../x/{key}.png",
        "a//{key}.png",
        "{batch}/{nope}.png",
        "{key}.{ext}.afc.json",
    ):
        data = manifest(jobs(1))
        data["defaults"]["output"] = template
        afc.write_manifest(data)
        result = afc("submit", "manifest.yaml")
        assert result.returncode == 2, (template, result.stderr)
        assert "output" in result.stderr
    data = manifest([{"key": "..", "prompt": "x"}])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 2
    assert not (afc.cwd / "afc.db").exists()
    assert not (afc.cwd.parent / "shot-001.png").exists()


def test_foreign_object_at_output_key_is_never_overwritten(afc):
    target = afc.outputs() / "b1" / "shot-002.png"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"someone else's file")
    afc.write_manifest(manifest(jobs(3)))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 1
    assert target.read_bytes() == b"someone else's file"
    status = {j["key"]: j for j in afc.json("status")["jobs"]}
    assert status["shot-002"]["status"] == "failed"
    assert status["shot-002"]["error"]["code"] == "OUTPUT_KEY_CONFLICT"
    assert status["shot-002"]["attempts"] == 0, "a conflict found by probe costs no render"
    assert status["shot-001"]["status"] == status["shot-003"]["status"] == "succeeded"


def test_a_file_that_takes_the_key_while_the_job_renders_is_a_conflict_not_ours(afc):
    """Found by an outside audit: a file written at the output key during the render got
    afc's metadata written beside it (naming this job), the job ended VERIFY_FAILED, and
    every retry, even from a fresh ledger, failed the same way."""
    from conftest import wait_for

    release = afc.cwd / "release"
    afc.write_manifest(manifest(jobs(1)))
    proc = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(release)})
    wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
    target = afc.outputs() / "b1" / "shot-001.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"SOMEONE ELSE'S BYTES")
    release.touch()
    assert proc.wait(timeout=60) == 1
    assert target.read_bytes() == b"SOMEONE ELSE'S BYTES"
    assert not (target.parent / "shot-001.png.afc.json").exists()
    [job] = afc.json("status")["jobs"]
    assert job["error"]["code"] == "OUTPUT_KEY_CONFLICT", job


def test_output_of_another_job_is_never_overwritten(afc):
    # batch one writes shot-001's output; batch two aims a job at the same key
    afc.write_manifest(manifest(jobs(1)), "one.yaml")
    assert afc("submit", "one.yaml").returncode == 0
    original = (afc.outputs() / "b1" / "shot-001.png").read_bytes()
    other = manifest(
        [{"key": "intruder", "prompt": "other", "output": "b1/shot-001.png"}], batch="b2"
    )
    afc.write_manifest(other, "two.yaml")
    result = afc("submit", "two.yaml")
    assert result.returncode == 1
    story = afc.json("show", "intruder")
    assert story["job"]["error"]["code"] == "OUTPUT_KEY_CONFLICT"
    # the other job named by its batch and key (an audit: its batch was not said)
    assert "another job ('b1/shot-001', job id " in story["job"]["error"]["message"]
    assert (afc.outputs() / "b1" / "shot-001.png").read_bytes() == original


def test_fresh_ledger_over_stored_outputs_renders_nothing(afc):
    afc.write_manifest(manifest(jobs(3)))
    assert afc("submit", "manifest.yaml").returncode == 0
    (afc.cwd / "afc.db").unlink()
    for suffix in ("-wal", "-shm"):
        Path(str(afc.cwd / "afc.db") + suffix).unlink(missing_ok=True)
    result = afc.json("submit", "manifest.yaml")
    assert result["counts"] == {"succeeded": 3}
    assert attempts_count(afc) == 0
    assert afc.rows("SELECT DISTINCT outcome FROM jobs") == [("stored",)]
    # a changed body under the same key, on a fresh ledger, is refused by the stored metadata
    (afc.cwd / "afc.db").unlink()
    data = manifest(jobs(3))
    data["jobs"][0]["prompt"] = "changed"
    afc.write_manifest(data)
    # an idempotency conflict, found in storage rather than in the ledger: exit 3, as at
    # admission (an outside audit saw exit 1 and OUTPUT_KEY_CONFLICT where plan said conflict)
    result = afc.json("submit", "manifest.yaml", expect=3)
    by_key = {j["key"]: j for j in result["jobs"]}
    assert by_key["shot-001"]["error"]["code"] == "IDEMPOTENCY_CONFLICT"
    assert "this request is" in by_key["shot-001"]["error"]["message"]
    assert by_key["shot-002"]["status"] == "succeeded"
    assert attempts_count(afc) == 0


def test_batch_keeps_its_storage(afc):
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    result = afc("submit", "manifest.yaml", "--storage", "file://./elsewhere")
    assert result.returncode == 2
    assert "elsewhere" in result.stderr and "afc-outputs" in result.stderr
    resume = afc("resume", "--storage", "file://./elsewhere")
    assert resume.returncode == 2
    assert not (afc.cwd / "elsewhere").exists()
    # naming the same storage again (or none) is fine
    assert afc("submit", "manifest.yaml", "--storage", "file://./afc-outputs").returncode == 0
    env = afc("submit", "manifest.yaml", env={"AFC_STORAGE": "file://./other"})
    assert env.returncode == 2


def test_manifest_storage_and_command_line_precedence(afc):
    data = manifest(jobs(1), storage="file://./from-manifest")
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    assert (afc.cwd / "from-manifest" / "b1" / "shot-001.png").exists()
    data2 = manifest(jobs(1), batch="b2", storage="file://./from-manifest")
    afc.write_manifest(data2, "m2.yaml")
    assert afc("submit", "m2.yaml", "--storage", "file://./from-cli").returncode == 0
    assert (afc.cwd / "from-cli" / "b2" / "shot-001.png").exists()
    unsupported = afc("submit", "m2.yaml", "--storage", "gs://bucket")
    assert unsupported.returncode == 2 and "gs://" in unsupported.stderr


def test_no_run_admits_only_and_resume_runs(afc):
    afc.write_manifest(manifest(jobs(2)))
    result = afc.json("submit", "manifest.yaml", "--no-run")
    assert result["counts"] == {"queued": 2}
    assert attempts_count(afc) == 0
    said = afc("submit", "manifest.yaml", "--no-run").stderr
    assert "2 jobs queued at probe (b1/shot-001, b1/shot-002; afc status --status queued " in said
    assert "lists them): not started; 'afc resume' (or an 'afc worker') runs them\n" in said
    resumed = afc.json("resume")
    assert resumed["counts"] == {"succeeded": 2}
    again = afc.json("resume")
    assert again["jobs"] == [] and again["exit_code"] == 0


def test_an_unfinished_job_left_out_of_the_manifest_still_runs_and_is_named(afc):
    """Found by an outside audit: a job admitted by an earlier manifest and left out of the
    next one was neither run nor reported by its submit, which exited 0 ("every requested
    job ended succeeded") while cron's resume would render it later. A batch's unfinished
    jobs run until done, as README's `afc submit` says; the submit names them. A key the manifest
    changed (refused as a conflict) is not run by it."""
    data = manifest(jobs(3))
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    data["jobs"] = [data["jobs"][0], {"key": "shot-002", "prompt": "changed"}]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 3, result.stderr
    assert "1 unfinished job(s) of batch b1 are not in this manifest and ran with it" in (
        result.stderr
    )
    assert "shot-003" in result.stderr
    assert dict(afc.rows("SELECT key, status FROM jobs")) == {
        "shot-001": "succeeded",
        "shot-002": "queued",  # its admitted request was edited away: not paid for here
        "shot-003": "succeeded",
    }
    payload = afc.json("submit", "manifest.yaml", expect=3)
    assert payload["unlisted"] == []  # nothing left to run outside the manifest
    data["jobs"].append({"key": "shot-004", "prompt": "later"})
    afc.write_manifest(data, "more.yaml")
    assert afc("submit", "more.yaml", "--no-run").returncode == 3
    payload = afc.json("submit", "manifest.yaml", expect=3)
    assert payload["unlisted"] == ["shot-004"]
    assert "shot-004" in {job["key"] for job in payload["jobs"]}


def test_an_unlisted_job_is_checked_and_planned_as_the_manifests_own_are(afc):
    """Found by a review: the unfinished job a manifest left out ran on a model the budget
    could not price (no --allow-unpriced), and the plan did not show it."""
    data = manifest(
        [
            {"key": "a", "prompt": "a"},
            {"key": "b", "prompt": "b", "chain": [{"provider": "local", "model": "m2"}]},
        ],
        rates=[
            {"provider": "local", "model": "m1", "per_image": "0.05"},
            {"provider": "local", "model": "m2", "per_image": "0.05"},
        ],
    )
    afc.write_manifest(data, "v1.yaml")
    said = afc("submit", "v1.yaml", "--no-run").stderr
    data["jobs"] = data["jobs"][:1]
    data["rates"] = data["rates"][:1]
    afc.write_manifest(data, "v2.yaml")
    said = afc("submit", "v2.yaml", "--no-run").stderr
    assert "are not in this manifest and stay in its batch: 'afc resume'" in said
    assert "ran with it" not in said
    before = afc.rows("SELECT COUNT(*) FROM events")
    refused = afc("submit", "v2.yaml", "--max-spend", "1")
    assert refused.returncode == 2 and "unpriced: local/m2" in refused.stderr
    assert afc.rows("SELECT COUNT(*) FROM events") == before, "nothing written"
    plan = afc.json("plan", "v2.yaml", "--max-spend", "1", expect=2)
    assert plan["unlisted"] == ["b"] and plan["to_render"] == 2
    assert plan["unpriced_models"] == ["local/m2"] and plan["problems"]
    ran = afc.json("submit", "v2.yaml", "--max-spend", "1", "--allow-unpriced")
    assert ran["unlisted"] == ["b"] and ran["counts"] == {"succeeded": 2}


def test_failed_job_exit_1_with_last_real_cause(afc):
    data = manifest(
        [
            {"key": "ok", "prompt": "fine"},
            {"key": "bad", "prompt": "rejected", "params": {"fail": ["auth"]}},
            {
                "key": "flaky",
                "prompt": "flaky",
                "params": {"fail": ["server", "rate_limited", "server"]},
            },
        ]
    )
    afc.write_manifest(data)
    result = afc.json("submit", "manifest.yaml", expect=1)
    by_key = {j["key"]: j for j in result["jobs"]}
    assert by_key["ok"]["status"] == "succeeded"
    assert by_key["bad"]["status"] == "failed"
    assert by_key["bad"]["attempts"] == 1, "auth stops the chain at once"
    assert by_key["bad"]["error"]["class"] == "auth"
    assert by_key["flaky"]["attempts"] == 3
    assert by_key["flaky"]["error"]["class"] == "server"
    assert "HTTP 500" in by_key["flaky"]["error"]["message"]
    # a resume does not rerun failed jobs, but says they wait for a person (exit 1)
    resumed = afc.json("resume", expect=1)
    assert resumed["jobs"] == []
    assert sorted(j["key"] for j in resumed["stuck"]) == ["bad", "flaky"]


def test_show_tells_the_whole_story(afc):
    data = manifest([{"key": "s", "prompt": "p", "params": {"fail": ["rate_limited"]}}])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    story = afc.json("show", "s")
    assert [a["status"] for a in story["attempts"]] == ["failed", "succeeded"]
    assert story["attempts"][0]["error_class"] == "rate_limited"
    assert story["attempts"][0]["http_status"] == 429
    assert story["attempts"][1]["cost"] == "0.050000"
    assert story["attempts"][1]["cost_source"] == "local"
    assert story["attempts"][1]["waited_s"] is not None
    assert [s["step"] for s in story["steps"]] == [
        "probe",
        "render",
        "spool",
        "store",
        "verify",
        "finish",
    ]
    kinds = [e["kind"] for e in story["events"]]
    assert kinds[0] == "admitted" and kinds[-1] == "succeeded"
    assert story["request"]["prompt"] == "p"
    text = afc("show", "s")
    assert text.returncode == 0 and "rate_limited" in text.stdout
    missing = afc("show", "nope")
    assert missing.returncode == 2 and "nope" in missing.stderr


def test_unpriced_is_not_zero(afc):
    data = manifest(jobs(1))
    data["rates"] = []
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    (job,) = afc.json("status")["jobs"]
    assert job["cost"] is None and job["unpriced_attempts"] == 1
    assert afc.rows("SELECT cost_micros, cost_source FROM attempts") == [(None, None)]


def test_read_commands_need_a_ledger(afc):
    for args in (("status",), ("show", "x"), ("resume",)):
        result = afc(*args)
        assert result.returncode == 2 and "no ledger" in result.stderr
    assert not (afc.cwd / "afc.db").exists()


def test_json_stdout_is_only_json(afc):
    afc.write_manifest(manifest(jobs(2)))
    result = afc("submit", "manifest.yaml", "--json")
    json.loads(result.stdout)
    quiet = afc("submit", "manifest.yaml", "-q")
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == ""


def test_example_manifest_runs_offline_and_replays(afc):
    example = Path(__file__).resolve().parent.parent / "examples" / "manifest.yaml"
    first = afc.json("submit", str(example))
    assert first["counts"] == {"succeeded": 6}, first
    assert (afc.outputs() / "demo-trailer" / "titles" / "title-card.png").exists()
    attempts = attempts_count(afc)
    second = afc.json("submit", str(example))
    assert second["admitted"]["replayed"] == 6 and second["exit_code"] == 0
    assert attempts_count(afc) == attempts


def test_a_same_job_output_stored_by_another_process_keeps_its_metadata(tmp_path, monkeypatch):
    """Two afc processes storing one job (two ledgers over one storage): A writes the
    metadata, B finds it is its own and links its object first, A's object create then
    fails. A must not remove the metadata, which now describes B's object (a review found
    the object left without it, read as a stranger's on every later probe)."""
    import pytest

    from afc_cli.storage.base import ObjectExists
    from afc_cli.storage.file import FileStorage

    data = b"the same render"
    source = tmp_path / "spooled"
    source.write_bytes(data)
    meta = {
        "job_id": "j1",
        "request_hash": "h1",
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
    }
    store = FileStorage(tmp_path / "out")
    real_create = FileStorage._create

    def racing(self, final, **kwargs):
        if final.name == "k.png" and not final.exists():  # B links the same bytes first
            real_create(self, final, **kwargs)
        return real_create(self, final, **kwargs)

    monkeypatch.setattr(FileStorage, "_create", racing)
    with pytest.raises(ObjectExists):
        store.put_if_absent("k.png", source, meta)
    monkeypatch.setattr(FileStorage, "_create", real_create)
    info = store.head("k.png")
    assert info.exists and info.meta and info.meta["job_id"] == "j1"
    # a stranger's bytes at the key: the metadata just written goes
    (tmp_path / "out" / "k.png").unlink()
    (tmp_path / "out" / "k.png.afc.json").unlink()

    def stranger(self, final, **kwargs):
        if final.name == "k.png" and not final.exists():
            final.write_bytes(b"someone else's")
        return real_create(self, final, **kwargs)

    monkeypatch.setattr(FileStorage, "_create", stranger)
    with pytest.raises(ObjectExists):
        store.put_if_absent("k.png", source, meta)
    assert store.head("k.png").meta is None
