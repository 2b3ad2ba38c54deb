"""A synchronous provider's paid render whose output exists only at a URL when the run stops.

An OpenAI-compatible gateway (or DALL-E asked without ``response_format``) answers a ``url``
valid about an hour. Before: a run killed (SIGKILL, a power cut) or stopped (Ctrl-C) after the
paid answer and before its download ended kept that URL nowhere, and the next run paid for a
new render. Now the URL is committed on the attempt with the render's cost before the
download begins (``Ledger.record_answer_url``, migration m015), and the next run fetches it
free while the provider keeps it (``pipeline._resumable``, ``HttpProvider.fetch_left``); a
URL the provider no longer serves (404) is said, and only then is a new render paid for."""

from __future__ import annotations

import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import manifest
from test_providers import MODELS, RATES

from afc_cli.providers.http import FETCH_TRIES

PRICED = [
    {"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"},
    *[rate for rate in RATES if rate["provider"] != "openai"],
]


def start(afc, fake, *args: str, tries: int = 1):
    data = manifest([{"key": "j0", "prompt": "dalle-url cdn-held"}], rates=PRICED)
    data["defaults"]["chain"] = [{"provider": "openai", "model": MODELS["openai"]}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml", *args)
    deadline = time.time() + 30
    while fake.counts["download_refused"] < tries and time.time() < deadline:
        time.sleep(0.01)  # the paid answer came; its output is being downloaded
    assert fake.counts["download_refused"] >= tries
    return proc


def left_url(afc) -> str:
    [(url,)] = afc.rows("SELECT answer_url FROM attempts")
    assert url and url.startswith("http://127.0.0.1:"), url
    return url


def test_a_run_killed_during_the_download_leaves_the_url_and_the_next_run_pays_nothing(afc, fake):
    proc = start(afc, fake)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    [row] = afc.rows("SELECT status, cost_micros FROM attempts")
    assert row == ("started", 40_000), row  # the URL came with the cost, in one commit
    url = left_url(afc)
    fake.cdn_back.set()
    resumed = afc.json("resume")
    assert resumed["exit_code"] == 0, resumed
    assert fake.counts["openai_billed"] == 1, "the render was paid for once, across both runs"
    assert afc.rows("SELECT number, status, cost_micros FROM attempts") == [
        (1, "succeeded", 40_000)
    ]
    assert afc.json("show", "j0")["job"]["status"] == "succeeded"
    assert (afc.outputs() / "b1" / "j0.png").read_bytes().startswith(b"\x89PNG")
    # the URL is the ledger's to fetch from, never shown
    assert url not in afc("show", "j0", "--json").stdout
    assert url not in afc("show", "j0").stdout


def test_a_run_killed_during_the_download_keeps_the_answers_request_id(afc, fake):
    """The paid answer's id (OpenAI's x-request-id, what its support asks for about a bill)
    is committed with the URL and the cost: a run SIGKILLed during the download left the row
    naming no call, where a stopped run's kept it."""
    proc = start(afc, fake)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    [(request_id,)] = afc.rows("SELECT provider_request_id FROM attempts")
    assert request_id is not None and request_id.startswith("req_"), request_id
    fake.cdn_back.set()
    assert afc.json("resume")["exit_code"] == 0
    assert afc.rows("SELECT status, provider_request_id FROM attempts") == [
        ("succeeded", request_id)
    ]
    assert fake.counts["openai_billed"] == 1


def test_the_plan_says_a_left_url_is_fetched_not_polled(afc, fake):
    """'afc plan' after a run killed during the download: the job's render is fetched from its
    URL (not "poll (the provider is still rendering its paid request)": the render ended), and
    priced, the most the next run can count."""
    proc = start(afc, fake)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    planned = afc.json("plan", "manifest.yaml")
    assert (planned["to_render"], planned["resumed"], planned["estimated_spend"]) == (
        0,
        1,
        "0.040000",
    )
    [job] = planned["jobs"]
    assert job["action"] == "fetch (its paid render, at the output URL the provider's answer named)"
    fake.cdn_back.set()
    assert afc.json("resume")["exit_code"] == 0
    assert fake.counts["openai_billed"] == 1


def test_a_run_stopped_during_the_later_rounds_leaves_the_url_to_the_next_run(afc, fake):
    proc = start(afc, fake, "--grace", "20", tries=FETCH_TRIES + 1)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    assert proc.returncode == 130
    [row] = afc.rows("SELECT status, error_class, cost_micros, error_message FROM attempts")
    assert row[:3] == ("unknown", "interrupted", 40_000), row
    assert "the next run fetches it from the output URL" in row[3]
    left_url(afc)
    fake.cdn_back.set()
    resumed = afc.json("resume")
    assert resumed["exit_code"] == 0, resumed
    assert fake.counts["openai_billed"] == 1, "the render was paid for once, across both runs"
    assert afc.rows("SELECT number, status, cost_micros FROM attempts") == [
        (1, "succeeded", 40_000)
    ]


def test_a_url_the_provider_no_longer_serves_is_said_and_only_then_paid_for_again(afc, fake):
    proc = start(afc, fake)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    url = left_url(afc)
    fake.gone_files.add("/files/" + url.split("/files/", 1)[1])
    fake.cdn_back.set()
    resumed = afc.json("resume")
    assert resumed["exit_code"] == 0, resumed
    assert fake.counts["openai_billed"] == 2
    rows = afc.rows("SELECT number, status, error_class, cost_micros, error_message FROM attempts")
    assert [r[:4] for r in rows] == [
        (1, "failed", "interrupted", 40_000),
        (2, "succeeded", None, 40_000),
    ], rows
    assert "no longer serves it; a new render follows (paid again)" in rows[0][4]
    assert "404" in rows[0][4]


def _namespaces() -> bool:
    if sys.platform != "linux" or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0


def spool_filled_during_download(afc, fake, submit: list[str], then: list[str] = ()) -> str:
    """``afc submit`` (``submit``: its arguments) in a mount namespace whose spool is a
    64 KiB tmpfs, filled while the URL's output is refused (the paid answer came), then the
    CDN let back: the run stops, exit 1, on the full disk. ``then``: shell lines run after it
    in the same namespace (its spool still mounted). The first run's stderr."""
    command = " ".join(shlex.quote(p) for p in afc.command(*submit))
    script = "\n".join(
        [
            "mkdir -p afc.db-spool && mount -t tmpfs -o size=64k tmpfs afc.db-spool || exit 9",
            f"AFC_MIN_FREE_MB=0 {command} > first.out 2> first.err &",
            "while [ ! -e go ]; do sleep 0.02; done",
            "head -c 1000000 /dev/zero > afc.db-spool/filler 2>/dev/null",
            "touch filled",
            "wait $!; echo $? > first.rc",
            *then,
        ]
    )
    proc = subprocess.Popen(
        ["unshare", "-rm", "sh", "-c", script],
        cwd=afc.cwd,
        env=afc.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 30
        while fake.counts["download_refused"] < 1 and time.time() < deadline:
            time.sleep(0.01)
        (afc.cwd / "go").touch()
        while not (afc.cwd / "filled").exists() and time.time() < deadline:
            time.sleep(0.02)
        fake.cdn_back.set()
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    first_err = (afc.cwd / "first.err").read_text()
    assert (afc.cwd / "first.rc").read_text().strip() == "1", first_err
    assert "No space left on device" in first_err, first_err
    return first_err


@pytest.mark.skipif(not _namespaces(), reason="needs unprivileged mount namespaces (Linux)")
def test_an_output_the_full_spool_could_not_keep_is_fetched_again_from_its_url(afc, fake):
    """The spool's disk full as the URL's output arrives (OutputNotKept's, a spool write's
    failure): the run stops, and the next one fetches the URL, where it rendered again."""
    data = manifest([{"key": "j0", "prompt": "dalle-url cdn-held"}], rates=PRICED)
    data["defaults"]["chain"] = [{"provider": "openai", "model": MODELS["openai"]}]
    afc.write_manifest(data)
    resume = " ".join(shlex.quote(p) for p in afc.command("resume", "--json"))
    first_err = spool_filled_during_download(
        afc,
        fake,
        ["submit", "manifest.yaml"],
        then=[
            "rm afc.db-spool/filler",
            f"AFC_MIN_FREE_MB=0 {resume} > second.out 2> second.err; echo $? > second.rc",
        ],
    )
    assert "from the output URL" in first_err and "renders again" not in first_err, first_err
    second_err = (afc.cwd / "second.err").read_text()
    assert (afc.cwd / "second.rc").read_text().strip() == "0", second_err
    assert fake.counts["openai_billed"] == 1, "the render was paid for again"
    assert afc.rows("SELECT number, status, cost_micros FROM attempts") == [
        (1, "succeeded", 40_000)
    ]
    assert (afc.outputs() / "b1" / "j0.png").read_bytes().startswith(b"\x89PNG")


def test_a_run_killed_as_the_url_is_committed_leaves_it_to_the_next_run(afc, fake):
    """The named kill point right after the URL's commit, before the download's first GET."""
    data = manifest([{"key": "j0", "prompt": "dalle-url one"}], rates=PRICED)
    data["defaults"]["chain"] = [{"provider": "openai", "model": MODELS["openai"]}]
    afc.write_manifest(data)
    killed = afc("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_answer_url"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert fake.counts["download"] == 0
    left_url(afc)
    resumed = afc.json("resume")
    assert resumed["exit_code"] == 0, resumed
    assert (fake.counts["openai_billed"], fake.counts["download"]) == (1, 1)
    assert afc.rows("SELECT number, status, cost_micros FROM attempts") == [
        (1, "succeeded", 40_000)
    ]


def test_a_download_abandoned_by_a_second_ctrl_c_is_left_to_the_next_run(afc, fake):
    """Ctrl-C twice (the calls in flight abandoned) during the download's first round."""
    proc = start(afc, fake)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    assert proc.returncode == 130, proc.stderr.read()
    [row] = afc.rows("SELECT status, cost_micros FROM attempts")
    assert row[1] == 40_000, row
    left_url(afc)
    fake.cdn_back.set()
    resumed = afc.json("resume")
    assert resumed["exit_code"] == 0, resumed
    assert fake.counts["openai_billed"] == 1, "the render was paid for once, across both runs"
    assert afc.rows("SELECT number, status FROM attempts") == [(1, "succeeded")]
