"""Outside audit 53a: 'afc retry' of a job whose 'afc cancel' could not reach its provider."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import manifest
from test_cancel_completed import _killed_while_rendering
from test_providers import FAST, MODELS, RATES


def left_rendering_without_key(afc, provider: str) -> tuple[str, dict[str, str]]:
    """One job's request left rendering at ``provider`` by a killed submit, and the
    environment of a shell without that provider's key, where 'afc cancel' cannot reach it:
    the request's id and that environment."""
    chain = [{"provider": provider, "model": MODELS[provider], "backoff": FAST}]
    afc.write_manifest(
        manifest([{"key": "shot", "prompt": "hold shot", "chain": chain}], rates=RATES)
    )
    [request] = _killed_while_rendering(afc)
    key = {"replicate": "REPLICATE_API_TOKEN", "fal": "FAL_KEY"}[provider]
    return request, {k: v for k, v in afc.env.items() if k != key}


@pytest.mark.parametrize("provider", ["replicate", "fal"])
def test_a_retry_after_a_cancel_that_never_reached_the_provider_polls_its_request(
    afc, fake, provider
):
    """'afc cancel' run where the provider's key is not set (a person's shell; the key in the
    workers' environment only) cancels the job, but its request to stop the render never
    leaves: the cancel says the request may render on, billed, and records
    ``provider_cancel_failed``. The request does render on, and is paid for. 'afc retry' then
    took that failed cancel for one that stopped the request (``Ledger._cancel_left_polling``)
    and the next run paid for a new render, the first one's result left at the provider. A
    cancel that failed stopped nothing afc knows of: the retry polls the request, as it does
    one a cut-off cancel never asked about (one the provider did stop meanwhile reads
    'cancelled', and a new request follows: ``pipeline._stopped_by_retried_cancel``)."""
    request, env = left_rendering_without_key(afc, provider)
    cancelled = subprocess.run(
        afc.command("cancel", "shot"), cwd=afc.cwd, env=env, capture_output=True, text=True
    )
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"stop request {request}" in cancelled.stderr, cancelled.stderr
    assert fake.cancels == []

    fake.released.set()  # the render goes on at the provider, and ends: paid for
    assert afc("retry", "shot").returncode == 0
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert fake.counts[f"{provider}_submit"] == 1, "the render was paid for twice"
    attempts = afc.json("show", "shot")["attempts"]
    assert [(a["number"], a["status"]) for a in attempts] == [(1, "succeeded")], attempts


def test_a_cancel_run_again_with_the_key_asks_the_provider_to_stop_the_request(afc, fake):
    """The same failed cancel, then 'afc cancel shot' again where the key is set (the person
    read the warning and fixed their shell): the cancel's docs say that run again it asks
    the provider about a request an earlier cancel had not stopped. It asked nothing, the
    failed ask counted as asked ('provider_cancel_failed'), and the prediction rendered on,
    billed, with nothing said. Now it is asked, and said stopped; a third cancel asks
    nothing more."""
    request, env = left_rendering_without_key(afc, "replicate")
    first = subprocess.run(
        afc.command("cancel", "shot"), cwd=afc.cwd, env=env, capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    again = afc("cancel", "shot", "--json")
    assert again.returncode == 0, again.stderr
    out = json.loads(again.stdout)
    assert out["already_final"] == [{"key": "shot", "batch": "b1", "status": "cancelled"}]
    assert [item["request"] for item in out["stopped_at_provider"]] == [request], out
    assert fake.cancels == [request]
    assert fake.predictions[request]["status"] == "canceled"
    third = afc.json("cancel", "shot")
    assert third["stopped_at_provider"] == [] and fake.cancels == [request], third
