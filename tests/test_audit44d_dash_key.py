"""Outside audit 44d: a job key that begins with '-' (the key alphabet allows it: '-take2',
'-1') is read by the command line as an option. 'afc show -take2' said only 'No such option:
-t', and the commands afc itself advises with the key in them ('afc review approve -take2
--batch B', 'afc retry -take2') failed the same way. The error now says how such a key is
written: after '--', the options before it; and written so, each command finds the job."""

from __future__ import annotations

from conftest import manifest


def test_a_key_that_begins_with_a_dash_is_said_how_to_name(afc):
    afc.write_manifest(
        manifest(
            [
                {"key": "-take2", "prompt": "a lighthouse", "review": True},
                {"key": "-1", "prompt": "a harbour"},
            ]
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    for command in (
        ["show", "-take2"],
        ["show", "-take2", "--batch", "b1"],
        ["review", "approve", "-take2"],
        ["review", "reject", "-take2", "--reason", "too dark"],
        ["retry", "-1"],
        ["cancel", "-1", "--batch", "b1"],
        ["cancel", "-yes", "--batch", "b1"],  # -y is --yes; the refused letter is '-e'
    ):
        refused = afc(*command)
        assert refused.returncode == 2, (command, refused)
        said = " ".join(refused.stderr.split())
        name = " ".join(command[:2] if command[0] == "review" else command[:1])
        assert (
            f"a job key that begins with '-' is written after '--', the options before it: "
            f"afc {name} [OPTIONS] -- {command[2 if command[0] == 'review' else 1]}"
        ) in said, (command, refused.stderr)
    # as said, each finds its job
    shown = afc("show", "--batch", "b1", "--json", "--", "-1")
    assert shown.returncode == 0, shown.stderr
    approved = afc("review", "approve", "--batch", "b1", "--", "-take2")
    assert approved.returncode == 0, approved.stderr
    assert afc.rows("SELECT key, status FROM jobs ORDER BY key") == [
        ("-1", "succeeded"),
        ("-take2", "succeeded"),
    ]


def test_a_mistyped_option_keeps_click_words(afc):
    """Only an argument that could be a key gets the hint: a mistyped option keeps click's
    suggestion, and one that names no key (a command without KEY) its plain message."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    typo = afc("show", "a", "--jsn")
    assert typo.returncode == 2
    assert "--json" in typo.stderr and "begins with '-'" not in typo.stderr, typo.stderr
    other = afc("status", "-x")
    assert other.returncode == 2
    assert "begins with '-'" not in other.stderr, other.stderr
