"""A review gate added in the same edit as a prompt, end to end through ``afc`` (an outside
audit). A re-submit applies the manifest's ``review`` and ``needs`` to a job of the same
request not yet rendered, and says each change it cannot make (``gates_kept``). A job whose
prompt the same edit changed is refused as a conflict, and its admitted request, still
queued, runs as admitted: without the review the person had just asked for, its output
used by the jobs that need it unseen. That was said nowhere: the conflict names the
request's fields only. The gate kept is now said, in ``afc submit`` and ``afc plan``."""

from __future__ import annotations

from conftest import manifest


def test_a_gate_changed_with_a_refused_request_is_said_kept(afc, ledger_url):
    afc.env["AFC_LEDGER"] = ledger_url
    data = manifest([{"key": "frame", "prompt": "a style frame"}])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0

    data["jobs"][0]["prompt"] = "a warmer style frame"
    data["jobs"][0]["review"] = True
    afc.write_manifest(data)
    said = (
        "warning: key 'frame': review: true in the manifest does not take effect: its changed "
        "request was refused as a conflict, and the request admitted for the key runs as "
        "admitted; it keeps review: false as admitted. A new key renders the changed request "
        "under the new gates."
    )
    plan = afc("plan", "manifest.yaml")
    assert said in plan.stdout, plan.stdout
    result = afc("submit", "manifest.yaml", "--no-run")
    assert result.returncode == 3, result.stderr
    assert said in result.stderr, result.stderr
    [kept] = afc.json("submit", "manifest.yaml", "--no-run", expect=3)["gates_kept"]
    assert (kept["key"], kept["field"], kept["manifest"], kept["conflict"]) == (
        "frame",
        "review",
        True,
        True,
    )
