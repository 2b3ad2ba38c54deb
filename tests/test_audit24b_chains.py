"""Outside audit 24b (multi-step jobs, reference images, provider fallback), through the real
``afc`` command with the fake providers at the wire (tests/fakeproviders.py)."""

from __future__ import annotations

from conftest import manifest
from test_providers import FAST, MODELS, RATES


def _fal_then_openai(prompt: str, **top) -> dict:
    chain = [
        {
            "provider": "fal",
            "model": MODELS["fal"],
            "attempts": 1,
            "backoff": FAST,
            "window_s": 1,
            "fallback_on": ["window_expired"],
        },
        {"provider": "openai", "model": MODELS["openai"], "backoff": FAST},
    ]
    return manifest([{"key": "shot", "prompt": prompt, "chain": chain}], rates=RATES, **top)


def test_a_fal_request_that_completed_as_its_window_ended_is_fetched_not_paid_again(afc, fake):
    """A fal request afc stopped waiting for at its ``window_s`` is asked to cancel; fal
    answers ALREADY_COMPLETED when it finished meanwhile (between afc's last poll and the
    cancel): rendered and billed, its result kept at fal. afc recorded it window_expired at
    an unknown cost and fell back to the next model, paying a second provider for the one
    output (with fal alone, the job failed, and 'afc retry' paid fal again). The completed
    request is now polled by its id (free) and its result stored: one attempt, one payment."""
    afc.write_manifest(_fal_then_openai("done-at-cancel shot"))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    assert len(fake.cancels) == 1, "the window passed: the request was asked to stop"
    assert fake.counts["fal_submit"] == 1
    assert fake.counts["openai"] + fake.counts["openai_edits"] == 0, "a second provider paid"
    [attempt] = afc.json("show", "shot")["attempts"]
    assert (attempt["provider"], attempt["status"]) == ("fal", "succeeded")
    assert attempt["cost"] == "0.025000"  # its one image, priced as the card says
    assert afc.json("costs", "report")["total"]["priced"] == "0.025000"
    assert (afc.outputs() / "b1" / "shot.png").read_bytes().startswith(b"\x89PNG")


def test_a_fal_request_cancelled_at_its_window_still_falls_back(afc, fake):
    """The rule above takes only a request fal says completed: one it cancels (still
    rendering) is window_expired at an unknown cost, and the next model renders."""
    afc.write_manifest(_fal_then_openai("hold shot"))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    first, second = afc.json("show", "shot")["attempts"]
    assert (first["provider"], first["error_class"], first["cost"]) == (
        "fal",
        "window_expired",
        None,
    )
    assert (second["provider"], second["status"]) == ("openai", "succeeded")


def test_a_path_input_is_read_at_the_path_the_submit_found_it_at_not_its_links_target(afc):
    """README: a path input is kept as the absolute path the submit found it at and read
    there by whichever worker renders the job, so reference files go where every machine sees
    them at the same path (a shared mount). afc kept the path with its symbolic links resolved
    (/mnt/nfs-a/refs/palette.png for /shared/refs/palette.png, /shared a link to this host's
    mount), and a worker whose /shared links to its own mount failed the job with
    INPUT_UNAVAILABLE, the file being where the manifest named it. The path is kept as named
    (made absolute); the file there must still have the SHA-256 it was admitted with."""
    from afc_cli.providers.local import render_png

    palette = render_png("the palette", 24, 24)
    for mount in ("mount-a", "mount-b"):
        (afc.cwd / mount / "refs").mkdir(parents=True)
        (afc.cwd / mount / "refs" / "palette.png").write_bytes(palette)
    (afc.cwd / "shared").symlink_to(afc.cwd / "mount-a")
    job = {"key": "shot", "prompt": "a shot", "inputs": [{"path": "shared/refs/palette.png"}]}
    afc.write_manifest(manifest([job]))
    admitted = afc("submit", "manifest.yaml", "--no-run")
    assert admitted.returncode == 0, admitted.stderr
    # the worker's host: its /shared is its own mount, holding the same file
    (afc.cwd / "shared").unlink()
    (afc.cwd / "shared").symlink_to(afc.cwd / "mount-b")
    (afc.cwd / "mount-a" / "refs" / "palette.png").unlink()
    result = afc("resume")
    assert result.returncode == 0, result.stderr
    [attempt] = afc.json("show", "shot")["attempts"]
    assert attempt["status"] == "succeeded"
    assert [i["source"] for i in attempt["inputs"]] == ["shared/refs/palette.png"]
