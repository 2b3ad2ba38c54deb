"""A failed job whose prompt was edited to fix it, then retried, end to end through ``afc``
(an outside audit). A job refused by the provider (a content-policy refusal, say) is failed;
the person edits its prompt and the nightly submit refuses the edit as a conflict; the
person then runs ``afc retry KEY``, which renders the admitted request again, the refused
prompt, paid, in silence: nothing said the retry was not of the edited request. The retry
now says so, naming the refused change, and ``--json`` carries it (``refused_edit``)."""

from __future__ import annotations

from conftest import manifest


def test_a_retry_of_a_job_whose_edit_was_refused_says_it_renders_the_admitted_request(
    afc, ledger_url
):
    afc.env["AFC_LEDGER"] = ledger_url
    data = manifest(
        [
            {"key": "a", "prompt": "a cat", "params": {"fail": ["invalid"]}},
            {"key": "b", "prompt": "a dog", "params": {"fail": ["invalid"]}},
        ]
    )
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 1

    data["jobs"][0]["prompt"] = "a tabby cat"
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 3

    result = afc("retry", "a")
    assert result.returncode == 0, result.stderr
    assert (
        "b1/a: the retry renders the request admitted for it, not the one a submit "
        "refused as a conflict at " in result.stderr
    ), result.stderr
    assert 'prompt: "a cat" -> "a tabby cat"' in result.stderr
    assert "give the changed request a new key" in result.stderr

    # a job with no refused edit is retried as before, in a word
    other = afc("retry", "b", "--json")
    assert other.returncode == 0, other.stderr
    assert "refused_edit" not in other.stdout
    assert "not the one a submit refused" not in other.stderr

    afc("cancel", "a")
    again = afc.json("retry", "a")
    [entry] = again["retried"]
    assert entry["refused_edit"]["changes"] == [
        {"field": "prompt", "old": "a cat", "new": "a tabby cat"}
    ]
