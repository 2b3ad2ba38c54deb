"""A job's refused edit in its story, end to end through ``afc`` (an outside audit). A cron'd
submit of a manifest whose prompt for an admitted key was edited refuses the change
(IDEMPOTENCY_CONFLICT) and keeps the admitted request, which the next run may still render
(or ``afc retry`` renders again). The refusal was recorded as a batch event only, so ``afc
show KEY``, a job's whole story, showed the old prompt and no word of the edit refused for
it: a person asking why the new prompt was never rendered found nothing there. The event now
names the job; a new job refused with a need it names none (it has no row)."""

from __future__ import annotations

from conftest import manifest


def test_afc_show_names_the_edits_refused_for_the_job(afc, ledger_url):
    afc.env["AFC_LEDGER"] = ledger_url
    data = manifest([{"key": "a", "prompt": "a cat"}, {"key": "b", "prompt": "a dog"}])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0

    data["jobs"][0]["prompt"] = "a tabby cat"
    data["jobs"].append({"key": "c", "prompt": "a cat's friend", "needs": ["a"]})
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 3

    story = afc.json("show", "a")
    refused = [e for e in story["events"] if e["kind"] == "conflict_refused"]
    assert len(refused) == 1, story["events"]
    assert refused[0]["detail"]["changes"] == [
        {"field": "prompt", "old": "a cat", "new": "a tabby cat"}
    ]
    text = afc("show", "a").stdout
    assert "conflict_refused" in text and "a tabby cat" in text
    # the other job's story is its own
    assert not [e for e in afc.json("show", "b")["events"] if e["kind"] == "conflict_refused"]
