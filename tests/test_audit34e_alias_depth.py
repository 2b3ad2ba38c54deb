"""Outside audit 34e: a manifest's YAML nested more than 64 levels deep is refused
(MAX_YAML_DEPTH), but the check counted an anchored value's depth where it was written only:
an alias to it written deeper down went unchecked, so a few anchors, each nesting the one
before (a few kilobytes, far under the alias expansion limit), made a job's params ~900
levels deep. Such a job was admitted and rendered, and 'afc show KEY' then failed with
'unexpected error: RecursionError' (exit 1); deeper still, the manifest was refused as
'cannot be canonicalised (maximum recursion depth exceeded in __instancecheck__)'. The depth
an alias reaches, written out, is now checked as the anchored value's own."""

from __future__ import annotations

import pytest

from afc_cli.errors import ManifestError
from afc_cli.manifest import MAX_YAML_DEPTH, load_manifest

DEPTH = 50  # each anchored list alone is well within the limit


def _nested_aliases(count: int) -> str:
    """``seed``: ``count`` anchored lists, each DEPTH deep holding the one before."""
    items = ["&a0 " + "[" * DEPTH + "]" * DEPTH]
    items += [f"&a{k} " + "[" * DEPTH + f"*a{k - 1}" + "]" * DEPTH for k in range(1, count)]
    return (
        "version: 1\nbatch: b1\ndefaults:\n  chain: [{provider: local, model: m1}]\n"
        "jobs:\n  - key: a\n    prompt: x\n    params:\n      seed: [" + ", ".join(items) + "]\n"
    )


def test_an_alias_written_deeper_than_the_limit_is_refused(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(_nested_aliases(2))  # *a0 inside a1: 2 * DEPTH levels, written out
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert caught.value.problems == [
        f"line 9: nested more than {MAX_YAML_DEPTH} levels deep (once an alias of the value "
        "there is written out)"
    ]


def test_a_manifest_of_deeply_nested_aliases_writes_nothing(afc):
    (afc.cwd / "m.yaml").write_text(_nested_aliases(17))  # ~850 levels, written out
    calls = afc.cwd / "calls.log"
    result = afc("submit", "m.yaml", env={"AFC_LOCAL_CALL_LOG": str(calls)})
    assert result.returncode == 2, result.stderr
    assert f"nested more than {MAX_YAML_DEPTH} levels deep" in result.stderr, result.stderr
    assert "Recursion" not in result.stderr and "Traceback" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()
    assert not calls.exists() or calls.read_text() == ""


def test_an_alias_within_the_limit_is_still_read(tmp_path):
    path = tmp_path / "m.yaml"
    shallow = "[" * 10 + "]" * 10
    path.write_text(
        "version: 1\nbatch: b1\ndefaults:\n  chain: [{provider: local, model: m1}]\n"
        f"jobs:\n  - key: a\n    prompt: x\n    params:\n      seed: [&s {shallow}, [[*s]]]\n"
    )
    assert [job.key for job in load_manifest(path).jobs] == ["a"]
