"""Issue 15, admission's fast paths give exactly what the general ones give: the canonical
JSON of a string against rfc8785 itself, job ids against ``uuid.uuid5``, a JSON Lines line
decoded without the duplicate-key hook against the hooked decoder, and a job list's common
lines (``_PlainJobs`` in afc_cli/manifest.py) against the same jobs resolved inline from YAML
through the general path: the same request hash (a changed hash would make a replay pay
again), stored text, job id and output key, and the same problems."""

from __future__ import annotations

import hashlib
import json
import string
import uuid

import pytest
import rfc8785
import yaml
from conftest import manifest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afc_cli.errors import ManifestError
from afc_cli.joblist import _DECODER, _Duplicate, _flat
from afc_cli.ledger.core import _dumps
from afc_cli.manifest import JOB_ID_NAMESPACE, _canonical_text, job_id_for, load_manifest

KEYS = st.text(string.ascii_letters + string.digits + "._-:", min_size=1, max_size=40).filter(
    lambda k: k not in (".", "..")
)
# any code point, lone surrogates included (rfc8785 refuses those: so must the fast path)
ANY_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()))


@settings(max_examples=2000)
@given(ANY_TEXT)
def test_canonical_text_is_rfc8785s_byte_for_byte(text):
    try:
        want = rfc8785.dumps(text)
    except rfc8785.CanonicalizationError:
        with pytest.raises(rfc8785.CanonicalizationError):
            _canonical_text(text)
        return
    assert _canonical_text(text) == want


@settings(max_examples=500)
@given(st.text(min_size=1, max_size=30), st.text(max_size=60))
def test_job_id_is_uuid5(batch, key):
    try:
        want = str(uuid.uuid5(JOB_ID_NAMESPACE, f"{batch}\x00{key}"))
    except UnicodeEncodeError:
        with pytest.raises(UnicodeEncodeError):
            job_id_for(batch, key)
        return
    assert job_id_for(batch, key) == want


MEMBERS = st.lists(
    st.tuples(
        st.sampled_from(["key", "prompt", "output", "k", 'q"uote', "é"]),
        st.one_of(st.text(max_size=20), st.integers(), st.none(), st.just({"a": "b"})),
    ),
    max_size=5,
)


@settings(max_examples=1000)
@given(MEMBERS, st.sampled_from([(", ", ": "), (",", ":")]), st.booleans())
def test_a_line_decoded_without_the_hook_is_what_the_hooked_decoder_reads(
    members, separators, ascii_only
):
    # members written out by hand, so a key may appear twice
    item, key = separators
    line = (
        "{"
        + item.join(
            json.dumps(k, ensure_ascii=ascii_only) + key + json.dumps(v, ensure_ascii=ascii_only)
            for k, v in members
        )
        + "}"
    )
    try:
        want = _DECODER.decode(line)
    except _Duplicate:
        want = None
    got = _flat(line)
    if got is not None:
        assert want is not None, f"a key written twice was accepted: {line!r}"
        assert got == want and list(got) == list(want)


@pytest.mark.parametrize(
    "line",
    [
        '{"key": "a", "key": "b"}',
        '{"key":"a","prompt":"b","key":"c"}',
        '{"key": "a", "prompt": "x\\"", "key": "b"}',
    ],
)
def test_a_key_written_twice_is_never_decoded_without_the_hook(line):
    assert _flat(line) is None
    with pytest.raises(_Duplicate):
        _DECODER.decode(line)


def resolved(tmp_path, rows, *, listed: bool, defaults=None):
    folder = tmp_path / ("listed" if listed else "inline")
    folder.mkdir()
    data = manifest([] if listed else rows)
    if defaults:
        data["defaults"] = {**data["defaults"], **defaults}
    if listed:
        del data["jobs"]
        data["jobs_from"] = "jobs.jsonl"
        (folder / "jobs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "m.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return load_manifest(folder / "m.yaml")


def facts(jobs):
    return [
        (j.key, j.job_id, j.output_key, j.request_hash, j.request_json or _dumps(j.body))
        for j in jobs
    ]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.lists(KEYS, min_size=1, max_size=8, unique=True),
    st.lists(st.text(max_size=80), min_size=8, max_size=8),
    st.sampled_from([None, {"params": {"size": "32x32"}}, {"output": "o/{key}-{job_id}.{ext}"}]),
)
def test_the_common_lines_hash_as_the_general_path_does(tmp_path_factory, keys, prompts, defaults):
    rows = [{"key": k, "prompt": p} for k, p in zip(keys, prompts, strict=False)]
    tmp_path = tmp_path_factory.mktemp("same")
    try:
        inline = resolved(tmp_path, rows, listed=False, defaults=defaults)
    except ManifestError as exc:  # e.g. a prompt pydantic refuses: the list must say the same
        with pytest.raises(ManifestError) as caught:
            resolved(tmp_path, rows, listed=True, defaults=defaults)
        assert [p.split(": ", 1)[1] for p in caught.value.problems] == [
            p.split(": ", 1)[1] for p in exc.problems
        ]
        return
    listed = resolved(tmp_path, rows, listed=True, defaults=defaults)
    assert facts(listed.jobs) == facts(inline.jobs)
    for job in listed.jobs:
        assert job.request_hash == hashlib.sha256(rfc8785.dumps(job.body)).hexdigest()


def test_the_common_lines_problems_read_as_before(tmp_path):
    """Lines after the fast path is built still fail with the general path's messages."""
    rows = [{"key": f"k{i}", "prompt": "p"} for i in range(5)]
    rows += [
        {"key": "k1", "prompt": "again"},  # duplicate key
        {"key": "bad key", "prompt": "x"},  # outside the alphabet
        {"key": "..", "prompt": "x"},
    ]
    with pytest.raises(ManifestError) as caught:
        resolved(tmp_path, rows, listed=True)
    problems = caught.value.problems
    assert problems[0] == (
        "jobs.jsonl line 6 (key 'k1'): field 'key': duplicate key, already used by "
        "jobs.jsonl line 2"
    )
    assert problems[1].startswith("jobs.jsonl line 7 (key 'bad key'): field 'key': must use")
    assert problems[2].startswith("jobs.jsonl line 8 (key '..'): field 'key': '..' names a folder")


def test_the_common_lines_take_the_fast_path(tmp_path, monkeypatch):
    from afc_cli import manifest as manifest_module

    taken = []
    resolve = manifest_module._PlainJobs.resolve

    def counting(self, *args):
        job = resolve(self, *args)
        taken.append(job is not None)
        return job

    monkeypatch.setattr(manifest_module._PlainJobs, "resolve", counting)
    rows = [{"key": f"k{i}", "prompt": f"p {i}"} for i in range(50)]
    listed = resolved(tmp_path, rows, listed=True)
    assert len(listed.jobs) == 50
    assert taken == [True] * 49  # the first resolves through the general path, which builds it
