"""Storage, the spool and the verify step, found by an outside audit: what is at an output key
decides before a render is paid, and no answer of the storage ends a run with 'unexpected
error' (a bug in afc) while its paid render waits in the spool."""

from __future__ import annotations

from conftest import manifest


def _attempts(afc) -> int:
    return afc.rows("SELECT COUNT(*) FROM attempts")[0][0]


def test_a_dangling_link_at_an_output_key_is_someone_elses_before_any_render(afc):
    """A symbolic link at an output key whose target is gone (a folder of links into a disk
    that is not mounted) read as a free key: the render was paid, the create-only store found
    the name taken, the key then read as empty, and the run ended 'unexpected error:
    AttributeError ... (a bug in afc)', exit 1, the job left queued; each 'afc resume' did the
    same. The link is an entry afc did not write: the job fails OUTPUT_KEY_CONFLICT at its
    probe, no render paid, the link untouched."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    folder = afc.outputs() / "b1"
    folder.mkdir(parents=True)
    (folder / "a.png").symlink_to(afc.cwd / "unmounted" / "a.png")
    result = afc("submit", "manifest.yaml")
    assert "unexpected error" not in result.stderr and "Traceback" not in result.stderr
    assert result.returncode == 1, result.stderr
    assert afc.rows("SELECT status, error_code FROM jobs") == [("failed", "OUTPUT_KEY_CONFLICT")]
    assert _attempts(afc) == 0  # nothing paid
    assert (folder / "a.png").is_symlink()
    assert not (folder / "a.png.afc.json").exists()
