"""Nineteenth session: paid windows, exit codes and edges a careful user would expect."""

from __future__ import annotations

import asyncio
import os

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


def test_resume_passes_by_the_dependents_of_a_rejection_not_of_a_failure(afc):
    """A rejection is final ('afc retry' of its dependent fails it again at once; a new key
    replaces it), and 'afc resume' passes the rejected job by; but its dependents, failed
    DEPENDENCY_FAILED, kept every cron'd resume at exit 1 for ever, with nothing a person
    could retry to clear them. They are passed by as the rejected need is (transitively: a
    dependent of a dependent too). A dependent of a need that failed for real still keeps
    resume at 1: retrying that need puts it back."""
    listed = [
        {"key": "style", "prompt": "a style frame", "review": True},
        {"key": "shot", "prompt": "a shot", "needs": ["style"]},
        {"key": "title", "prompt": "a title", "needs": ["shot"]},
    ]
    afc.write_manifest(manifest(listed))
    assert afc("submit", "manifest.yaml").returncode == 0  # style awaits review
    rejected = afc("review", "reject", "style", "--reason", "too dark")
    assert rejected.returncode == 0, rejected.stderr
    assert "2 blocked jobs that needed them failed" in rejected.stderr, rejected.stderr
    status = {job["key"]: job["status"] for job in afc.json("status")["jobs"]}
    assert status == {"style": "rejected", "shot": "failed", "title": "failed"}
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr

    # a need that failed for real (an invalid request): its dependent waits for a person
    listed += [
        {"key": "broken", "prompt": "broken", "params": {"fail": ["invalid"] * 3}},
        {"key": "after", "prompt": "after", "needs": ["broken"]},
    ]
    afc.write_manifest(manifest(listed))
    assert afc("submit", "manifest.yaml").returncode == 1
    status = {job["key"]: job["status"] for job in afc.json("status")["jobs"]}
    assert (status["broken"], status["after"]) == ("failed", "failed")
    assert afc("resume").returncode == 1


def test_a_provider_behind_the_environments_proxy_is_reached_through_it(afc):
    """A studio whose network lets nothing out but through its proxy (``HTTPS_PROXY`` /
    ``HTTP_PROXY``): afc's provider calls ignored the variables (its client has a transport
    of its own, and httpx reads them only for the transport it makes), so no provider could
    be reached at all, while webhooks and S3 went through the proxy. Calls now go through
    it; ``NO_PROXY`` is honoured."""
    import base64 as b64

    from test_audit_wire import OPENAI_RATES, PNG, WireServer, answered, json_reply, run

    proxy = WireServer(answered(json_reply({"data": [{"b64_json": b64.b64encode(PNG).decode()}]})))
    try:
        env = {"OPENAI_BASE_URL": "http://api.openai.invalid/v1", "HTTP_PROXY": proxy.url}
        result = run(afc, "openai", "dall-e-3", OPENAI_RATES, env)
        assert result.returncode == 0, result.stderr
        ((head, _),) = proxy.received
        assert head.startswith(b"POST http://api.openai.invalid/v1/images/generations "), head
        assert (afc.outputs() / "b1" / "shot.png").read_bytes() == PNG
    finally:
        proxy.stop()


def test_the_proxy_is_not_used_for_no_proxy_hosts():
    import httpx

    from afc_cli.providers.transport import PoolTransport, pool_limits

    saved = dict(os.environ)
    try:
        os.environ.update(
            HTTP_PROXY="http://proxy.invalid:3128", NO_PROXY="direct.invalid,minio.lan:9000"
        )
        transport = PoolTransport(limits=pool_limits(4))
        assert transport._proxy_for(httpx.URL("http://direct.invalid/x")) == (None, None)
        # an entry naming a port matches that port only (it matched none)
        assert transport._proxy_for(httpx.URL("http://minio.lan:9000/x")) == (None, None)
        assert transport._proxy_for(httpx.URL("http://minio.lan:9001/x"))[0] is not None
        proxied, _ = transport._proxy_for(httpx.URL("http://api.invalid/x"))
        assert str(proxied) == "http://proxy.invalid:3128"
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.mark.parametrize(
    "output, said",
    [
        ("http://127.0.0.1:9/secret.png", "not a public address"),
        ("http://169.254.169.254/latest/meta-data/", "cannot be fetched"),
    ],
)
def test_outputs_through_the_proxy_keep_the_address_rules(afc, output, said):
    """Through a proxy the connection is the proxy's, so afc's resolver never sees the
    output's host: an output URL on this host's private network, or the cloud's metadata
    service, would have been fetched by the proxy and stored as the job's output. Its host
    is checked here first, and the proxy is never asked for it."""
    from test_audit_wire import OPENAI_RATES, WireServer, answered, attempts, dalle, run

    proxy = WireServer(answered(dalle(output)))
    try:
        env = {"OPENAI_BASE_URL": "http://api.openai.invalid/v1", "HTTP_PROXY": proxy.url}
        result = run(afc, "openai", "dall-e-3", OPENAI_RATES, env)
        assert result.returncode == 1, result.stderr
        assert [head.split(b" ")[0] for head, _ in proxy.received] == [b"POST"]
        (attempt,) = attempts(afc)
        assert said in attempt["error"], attempt
        assert attempt["cost"] == "0.040000"
    finally:
        proxy.stop()


def test_a_model_answering_another_format_than_the_key_names_is_said_once(afc, fake):
    """Replicate's flux answers WebP unless asked, and an output key's ``{ext}`` is
    ``params.output_format`` (default png): a batch of ``.png`` keys held WebP with nothing
    said. The run says so once for the batch and model (stored as named)."""
    from test_providers import MODELS, RATES

    data = manifest(
        [{"key": f"j{i}", "prompt": f"webp-out {i}"} for i in range(3)]
        + [{"key": "plain", "prompt": "a png"}],
        rates=RATES,
    )
    data["defaults"]["chain"] = [{"provider": "replicate", "model": MODELS["replicate"]}]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "answered image/webp" in line]
    assert len(said) == 1, result.stderr
    assert "stored under b1/j" in said[0] and "params.output_format" in said[0], said
    assert (afc.outputs() / "b1" / "j0.png").read_bytes()[8:12] == b"WEBP"


@pytest.mark.parametrize(
    "text",
    [
        "cannot connect to postgresql://afc:Sup3r'S3cret@db.internal/afc",
        'cannot connect to postgresql://afc:Sup3r"S3cret@db.internal/afc',
        "s3 endpoint https://minio:pa'ss/w0rd@minio.lan:9000 refused",
    ],
)
def test_a_url_password_holding_a_quote_is_scrubbed_whole(text):
    """A URL's userinfo may hold a quote (libpq takes one in a password): the scrubber's
    pattern stopped at it, and the password was shown from the quote on (an outside audit
    found it in afc report --html's header and afc show's 'no job' message)."""
    from afc_cli.secrets import scrub

    shown = scrub(text)
    assert "S3cret" not in shown and "w0rd" not in shown and "<redacted>@" in shown, shown


def test_afc_status_says_what_a_blocked_or_reviewed_job_waits_for(afc):
    """'afc status' showed a job awaiting review and the job blocked behind it with no
    reason, where the run's summary said why; a person reading the table could not tell
    which key to approve."""
    listed = [
        {"key": "style", "prompt": "a style frame", "review": True},
        {"key": "shot", "prompt": "a shot", "needs": ["style"]},
    ]
    afc.write_manifest(manifest(listed))
    assert afc("submit", "manifest.yaml", "-q").returncode == 0
    reasons = {job["key"]: job["waiting"] for job in afc.json("status")["jobs"]}
    assert reasons == {
        "style": "awaiting a person's review: afc review approve style (or reject)",
        "shot": "waiting for 1 need: style",
    }
    assert afc("review", "approve", "style").returncode == 0
    reasons = {job["key"]: job["waiting"] for job in afc.json("status")["jobs"]}
    assert reasons["style"] is None  # succeeded


def test_a_socks_proxy_in_the_environment_is_refused_before_any_call(afc):
    """``HTTP_PROXY=socks5://...`` (a SOCKS proxy, which afc's provider calls cannot use):
    aiohttp took it for an http proxy and spoke HTTP to it, so a SOCKS server's refusal came
    after the request was written and each paid call was recorded at a cost unknown. The run
    is refused before anything is written (exit 2, the proxy named without its password),
    and a request that meets one anyway is never sent, at 0."""
    import httpx
    from test_audit_wire import OPENAI_RATES, run

    from afc_cli.providers.transport import PoolTransport, ProxyUnsupported, pool_limits

    proxy = "socks5://studio:hunter22@127.0.0.1:9"
    env = {"OPENAI_BASE_URL": "http://api.openai.invalid/v1", "HTTP_PROXY": proxy}
    result = run(afc, "openai", "dall-e-3", OPENAI_RATES, env)
    assert result.returncode == 2, result.stderr
    assert "HTTP_PROXY names a socks5 proxy (127.0.0.1:9)" in result.stderr, result.stderr
    assert "hunter22" not in result.stderr and not (afc.cwd / "afc.db").exists()

    saved = dict(os.environ)
    try:
        os.environ["HTTP_PROXY"] = proxy
        transport = PoolTransport(limits=pool_limits(4))
        with pytest.raises(ProxyUnsupported) as caught:
            transport._proxy_for(httpx.URL("http://api.openai.invalid/v1"))
        assert isinstance(caught.value, httpx.ConnectError)  # never sent: a known 0
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_a_downloads_retry_after_is_a_floor_over_its_draw():
    """An output URL answering 503 with ``Retry-After: 0`` had its free GETs sent again at
    once, the round spent within milliseconds where the draw would have spread it: the
    download's waits take a Retry-After as a floor, as every other retry in afc does."""
    import httpx

    from afc_cli.providers.http import FETCH_TRIES, fetched

    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    async def get():
        return httpx.Response(503, headers={"Retry-After": "0"})

    async def main():
        return await fetched(get, sleep, lambda: 1.0)

    assert asyncio.run(main()).status_code == 503
    assert len(waits) == FETCH_TRIES - 1 and all(w > 0 for w in waits), waits
    assert waits == sorted(waits)  # the draw's growth, not a string of zeros
