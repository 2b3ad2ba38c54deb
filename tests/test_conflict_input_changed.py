"""A reference file edited in place while its job waits: the re-submit is an
IDEMPOTENCY_CONFLICT (the request hash covers the file's content), whose message said the
next run of the batch renders the admitted request. That run fails it instead
(INPUT_UNAVAILABLE, nothing paid: the file is not the one admitted) and exits 1. The
conflict now says so, naming the file, in ``afc submit`` and ``afc plan`` alike, on both
ledgers; a manifest pointing at another file leaves the admitted one, which still renders."""

from __future__ import annotations

import pytest
from conftest import manifest
from test_issue17_resubmit import on_both  # noqa: F401

from afc_cli.providers.local import render_png


def write(afc, path: str) -> None:
    data = manifest([{"key": "shot", "prompt": "harbour", "inputs": [{"path": path}]}])
    afc.write_manifest(data)


@pytest.mark.parametrize("edited", [True, False])
def test_a_reference_file_changed_on_disk_is_said_to_fail_the_next_run(on_both, edited):  # noqa: F811
    afc = on_both
    (afc.cwd / "palette.png").write_bytes(render_png("palette", 16, 16))
    write(afc, "palette.png")
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    if edited:  # the same file, edited in place
        (afc.cwd / "palette.png").write_bytes(render_png("palette, warmer", 16, 16))
    else:  # the manifest now names another file; the admitted one is as it was
        (afc.cwd / "other.png").write_bytes(render_png("other", 16, 16))
        write(afc, "other.png")
    submitted = afc("submit", "manifest.yaml", "--no-run")
    assert submitted.returncode == 3, submitted.stderr
    planned = afc("plan", "manifest.yaml")
    fails = "so the next run of the batch fails it (INPUT_UNAVAILABLE, nothing paid)"
    for said in (submitted.stderr, planned.stdout):
        assert ("changed on disk since (palette.png)" in said) is edited, said
        assert (fails in said) is edited, said
    if not edited:
        assert "the next run of the batch renders it" in submitted.stderr
        assert "and the next run renders it" in planned.stdout
    resumed = afc("resume")
    assert resumed.returncode == (1 if edited else 0), resumed.stderr
    assert ("changed since it was admitted" in resumed.stderr) is edited, resumed.stderr
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(0 if edited else 1,)]
