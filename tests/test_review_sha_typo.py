"""A review decision's ``--sha256`` that no render of the job had: a typo, said as one."""

from __future__ import annotations

from conftest import manifest


def test_a_mistyped_sha256_is_not_said_as_a_render_since(afc):
    """A person copying a sha256 by hand and slipping one digit was refused (rightly: exit 2,
    nothing decided) with 'it now has SHA-256 ... (rendered again since)', though the job had
    rendered once: sent to look for a second picture that never existed. With one render, a
    SHA-256 that is no job's output is said as mistyped; once the job has rendered again, an
    earlier render is what it may name, and the refusal says so as before."""
    afc.write_manifest(manifest([{"key": "frame-a", "prompt": "a", "review": True}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    [listed] = afc.json("review", "list")["awaiting_review"]
    typo = ("0" if listed["sha256"][0] != "0" else "1") + listed["sha256"][1:]
    refused = afc("review", "approve", "frame-a", "--sha256", typo)
    assert refused.returncode == 2, refused.stderr
    said = " ".join(refused.stderr.split())
    assert "nothing was decided" in said, said
    assert "rendered again since" not in said, said
    assert f"it has SHA-256 {listed['sha256']}, from its only render" in said, said
    assert f"{typo} is no job's output (mistyped?); nothing was decided" in said, said

    # cancelled, its output deleted and retried: rendered twice, so the SHA-256 given may be
    # the earlier render's (with its output still stored, the retry takes it: one render)
    assert afc("cancel", "frame-a").returncode == 0
    for path in (afc.outputs() / "b1").glob("frame-a.png*"):
        path.unlink()
    assert afc("retry", "frame-a").returncode == 0
    assert afc("resume").returncode == 0
    assert [job["key"] for job in afc.json("review", "list")["awaiting_review"]] == ["frame-a"]
    again = afc("review", "approve", "frame-a", "--sha256", typo)
    assert again.returncode == 2, again.stderr
    said = " ".join(again.stderr.split())
    assert "(rendered again since)" in said and "mistyped" not in said, said
    assert afc.rows("SELECT status FROM jobs") == [("awaiting_review",)]


def test_a_mistyped_sha256_of_an_output_found_in_storage(afc):
    """A job whose output a new ledger found in its storage (stored under another ledger) has
    no render of its own: it is not said to have 'its only render'."""
    afc.write_manifest(manifest([{"key": "frame-a", "prompt": "a", "review": True}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    other = {"AFC_LEDGER": str(afc.cwd / "other.db")}
    assert afc("submit", "manifest.yaml", env=other).returncode == 0
    [listed] = afc.json("review", "list", env=other)["awaiting_review"]
    typo = ("0" if listed["sha256"][0] != "0" else "1") + listed["sha256"][1:]
    refused = afc("review", "approve", "frame-a", "--sha256", typo, env=other)
    assert refused.returncode == 2, refused.stderr
    said = " ".join(refused.stderr.split())
    assert f"it has SHA-256 {listed['sha256']}, as found in its storage" in said, said
    assert "only render" not in said and "(mistyped?)" in said, said
