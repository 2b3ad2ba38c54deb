"""Outside audit 34e: a job merging two shared blocks, ``<<: [*hero, *base]``, takes each
field from the first block that has it, as YAML's merge key says ("keys in mapping nodes
earlier in the sequence override keys specified in later mapping nodes"). PyYAML 6.0.4 (the
version afc's ``PyYAML>=6.0`` installs today) let the last block win instead for every field
named with two or more letters (its de-duplication compares the names' object ids, which only
CPython's one-letter strings share: yaml/pyyaml#953): the job was rendered and paid for with
the base block's prompt, params and chain, and the same manifest hashed to another request
under PyYAML 6.0.3, so moving between the two made every such job an IDEMPOTENCY_CONFLICT.
afc's loader now flattens merge keys itself, the same under every PyYAML."""

from __future__ import annotations

from afc_cli.manifest import load_manifest

MANIFEST = (
    "version: 1\nbatch: b1\njobs:\n"
    "  - &hero {key: h, prompt: the hero shot, params: {seed: 1},"
    " chain: [{provider: local, model: hero-model}]}\n"
    "  - &base {key: s, prompt: a base shot, params: {seed: 2},"
    ' chain: [{provider: local, model: base-model}], output: "{batch}/base/{key}.{ext}"}\n'
    "  - {<<: [*hero, *base], key: a}\n"
    "  - {<<: [*base, *hero], key: b}\n"
    "  - {<<: [*hero, *base], key: c, prompt: its own prompt}\n"
)


def test_the_first_merged_block_wins_for_every_field(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST)
    jobs = {job.key: job for job in load_manifest(path).jobs}
    a, b, c = jobs["a"], jobs["b"], jobs["c"]
    assert a.prompt == "the hero shot"
    assert a.params == {"seed": 1}
    assert [entry["model"] for entry in a.chain] == ["hero-model"]
    assert a.output_key == "b1/base/a.png"  # only the base block has an output: it is taken
    assert b.prompt == "a base shot"
    assert b.params == {"seed": 2}
    assert [entry["model"] for entry in b.chain] == ["base-model"]
    assert c.prompt == "its own prompt"  # the mapping's own field wins over every block
    assert c.params == {"seed": 1}
