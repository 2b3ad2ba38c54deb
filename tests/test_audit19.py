"""Nineteenth session: paid windows, exit codes and edges a careful user would expect."""

from __future__ import annotations

import asyncio

import pytest
from conftest import jobs, manifest

RATES = [
    {"provider": "openai", "model": "dall-e-3", "per_image": "0.04"},
    {"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"},
]


def test_dall_e_is_asked_for_the_image_in_its_paid_answer_not_a_url(afc, fake):
    """DALL-E answers a URL by default (valid about an hour): a second paid window, since a
    process killed while fetching it (later rounds go on for up to an hour while a CDN is out
    of reach) left a render no later run could find (a synchronous call has no id to look it
    up by), and the next run paid for it again. afc now asks DALL-E for ``response_format:
    b64_json``; gpt-image models, which refuse the field (400 ``unknown_parameter``, as the
    fake answers), are not sent it."""
    jobs = [
        {
            "key": "dalle",
            "prompt": "dalle-url one",
            "chain": [{"provider": "openai", "model": "dall-e-3"}],
        },
        {
            "key": "gpt",
            "prompt": "plain two",
            "chain": [{"provider": "openai", "model": "gpt-image-1"}],
        },
    ]
    afc.write_manifest(manifest(jobs, rates=RATES))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    bodies = {body["model"]: body for body in fake.openai_bodies}
    assert bodies["dall-e-3"].get("response_format") == "b64_json"
    assert "response_format" not in bodies["gpt-image-1"]
    assert fake.counts["download"] == 0  # the DALL-E image came in the answer itself
    shown = afc.json("show", "dalle")["attempts"]
    assert [(a["status"], a["cost"]) for a in shown] == [("succeeded", "0.040000")]


def test_worker_until_idle_exits_1_when_a_job_it_ran_failed(afc):
    """'afc worker --until-idle' in a script (CI, cron) is a run, as 'afc resume' is: it
    exited 0 though a job it ran failed, so the script went on as if the batch were done.
    Now exit 1, with the count in its line and its JSON; a worker with nothing failed exits 0
    (and a service's worker stopped by SIGTERM exits 0 whatever its jobs did:
    tests/test_worker_idle.py and the README's worker section)."""
    listed = jobs(2)
    listed[1]["params"] = {"fail": ["invalid", "invalid"]}
    afc.write_manifest(manifest(listed))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    worker = afc("worker", "--until-idle")
    assert worker.returncode == 1, worker.stderr
    assert "2 finished (1 failed);" in worker.stderr, worker.stderr
    assert afc.json("worker", "--until-idle")["failed"] == 0  # nothing left: nothing failed
    assert afc("retry", "shot-002").returncode == 0
    again = afc.json("worker", "--until-idle", expect=1)
    assert (again["finished"], again["failed"], again["exit_code"]) == (1, 1, 1)


def test_an_output_declared_larger_than_2_gib_is_refused_before_its_body_is_read(monkeypatch):
    """An output URL answering ``Content-Length`` past afc's 2 GiB limit was read until
    2 GiB had come (minutes of a slot, 2 GiB of memory) before it was refused, or, from a CDN
    that then stalled, fetched again in rounds. The declared length is refused at once, with
    the paid render's cost kept on the failure, after one GET."""
    from test_audit_wire import PNG, WireServer, adapter, answered, dalle, rendered

    from afc_cli.providers.base import ProviderError
    from afc_cli.providers.openai import OpenAIProvider

    async def huge(head, body, writer) -> bool:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n"
            + f"Content-Length: {3 * 1024**3}\r\n\r\n".encode()
            + PNG
        )
        await writer.drain()
        await asyncio.sleep(5)  # the rest never comes (a stalled CDN)
        return False

    cdn = WireServer(huge)
    provider_server = WireServer(answered(dalle(f"{cdn.url}/out.png")))
    try:
        provider = adapter(monkeypatch, OpenAIProvider, "OPENAI_BASE_URL", provider_server.url)
        with pytest.raises(ProviderError) as caught:
            rendered(provider, "dall-e-3")
        assert caught.value.error_class == "invalid", caught.value.message
        assert "larger than 2 GiB" in caught.value.message
        assert caught.value.cost_micros == 40_000
        assert len(cdn.received) == 1
    finally:
        provider_server.stop()
        cdn.stop()
