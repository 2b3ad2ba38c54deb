"""Nineteenth session, review of the changes since 83891ea: the environment's proxy on the
provider transport, and 'afc resume' passing by the dependents of a person's decision."""

from __future__ import annotations

import pytest
from test_audit_wire import OPENAI_RATES, WireServer, attempts, reply, run


def refusing(status: str):
    async def behaviour(head, body, writer) -> bool:
        writer.write(reply(status, b"denied", {"Proxy-Authenticate": 'Basic realm="studio"'}))
        await writer.drain()
        return False

    return behaviour


@pytest.mark.parametrize("status", ["407 Proxy Authentication Required", "502 Bad Gateway"])
def test_a_proxy_refusing_the_tunnel_costs_nothing_and_says_so(afc, status):
    """A provider on https is reached through the proxy's tunnel (``CONNECT``). A proxy that
    refuses it (credentials missing, a host not on its list, one it cannot reach) made no
    connection to the provider, yet each paid call was recorded at a cost unknown (aiohttp's
    ``ClientHttpProxyError`` taken as a read after the request was sent), 'connection
    failed (ReadError)', naming no proxy. It is a request never sent, at 0, with what the
    proxy answered."""
    proxy = WireServer(refusing(status))
    try:
        env = {"OPENAI_BASE_URL": "https://api.openai.invalid/v1", "HTTPS_PROXY": proxy.url}
        result = run(afc, "openai", "dall-e-3", OPENAI_RATES, env)
        assert result.returncode == 1, result.stderr
        assert [head.split(b" ")[:2] for head, _ in proxy.received] == [
            [b"CONNECT", b"api.openai.invalid:443"]
        ]
        (attempt,) = attempts(afc)
        assert (attempt["cost"], attempt["cost_source"]) == ("0.000000", "unsent"), attempt
        assert f"the proxy answered {status} to CONNECT" in attempt["error"], attempt
        assert "the request was never sent" in attempt["error"], attempt
        assert "unknown cost" not in result.stderr, result.stderr
    finally:
        proxy.stop()


@pytest.mark.parametrize("first", ["rejected", "failed"])
def test_resume_looks_at_each_dependent_once_not_down_its_whole_chain(afc, monkeypatch, first):
    """'afc resume' asks of every failed job whether it failed only because of a person's
    decision (``run.follow_decisions``). Each asked by recursion down its chain of needs
    again: a sequence of N shots, each needing the one before, took N²/2 ledger reads on every
    resume (a minute at 900 shots on SQLite) and, past about a thousand, ended every resume
    in a RecursionError. Each job is now looked at once; the answers are as before."""
    from conftest import manifest

    from afc_cli import run
    from afc_cli.ledger.core import Ledger

    n = 30
    listed = [{"key": "k0", "prompt": "p0"}]
    listed += [{"key": f"k{i}", "prompt": f"p{i}", "needs": [f"k{i - 1}"]} for i in range(1, n)]
    if first == "rejected":
        listed[0]["review"] = True
    else:
        listed[0]["params"] = {"fail": ["invalid"]}
    afc.write_manifest(manifest(listed))
    afc("submit", "manifest.yaml")
    if first == "rejected":
        assert afc("review", "reject", "k0", "--reason", "no").returncode == 0
    status = {job["key"]: job["status"] for job in afc.json("status", expect=None)["jobs"]}
    assert status == {"k0": first, **{f"k{i}": "failed" for i in range(1, n)}}

    reads = []
    needs_of = Ledger.needs_of
    monkeypatch.setattr(
        Ledger, "needs_of", lambda self, job_id: reads.append(job_id) or needs_of(self, job_id)
    )
    result = run.resume(
        ledger_path=str(afc.cwd / "afc.db"), batch=None, storage=None, concurrency=2
    )
    assert len(reads) <= n, len(reads)  # was n * (n - 1) / 2
    if first == "rejected":
        assert (result.stuck, result.exit_code) == ([], 0)
    else:
        assert len(result.stuck) == n and result.exit_code == 1


def test_a_proxy_named_without_a_scheme_is_an_http_one(afc):
    """``HTTPS_PROXY=proxy.studio:3128`` (no scheme) is an http proxy for curl, httpx (afc's
    webhooks) and botocore (its S3 calls); aiohttp's reading of the variables made it a URL
    of an unknown scheme, and each paid call failed before it left, recorded at a cost
    unknown ('connection failed (UnsupportedProtocol)')."""
    import base64

    from test_audit_wire import PNG, answered, json_reply

    proxy = WireServer(
        answered(json_reply({"data": [{"b64_json": base64.b64encode(PNG).decode()}]}))
    )
    try:
        env = {
            "OPENAI_BASE_URL": "http://api.openai.invalid/v1",
            "HTTP_PROXY": f"127.0.0.1:{proxy.port}",
        }
        result = run(afc, "openai", "dall-e-3", OPENAI_RATES, env)
        assert result.returncode == 0, result.stderr
        ((head, _),) = proxy.received
        assert head.startswith(b"POST http://api.openai.invalid/v1/images/generations "), head
    finally:
        proxy.stop()


def test_a_proxy_on_https_is_kept_not_passed_by(monkeypatch):
    """A proxy the environment names on https (TLS to the proxy itself): aiohttp's reading of
    the variables dropped it with a log line ('HTTPS proxies ... are not supported,
    ignoring') and the provider calls went straight out, past the proxy the studio's network
    requires; aiohttp's requests take it (TLS in TLS, Python 3.11). Its credentials are kept
    apart from its URL, which is what any message could show."""
    import httpx

    from afc_cli.providers.transport import PoolTransport, pool_limits

    for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy", "HTTP_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "https://afc:s3cret@proxy.invalid:3129")
    transport = PoolTransport(limits=pool_limits(4))
    proxy, auth = transport._proxy_for(httpx.URL("https://api.openai.invalid/v1"))
    assert str(proxy) == "https://proxy.invalid:3129"
    assert (auth.login, auth.password) == ("afc", "s3cret")
    assert transport._proxy_for(httpx.URL("http://api.openai.invalid/v1")) == (None, None)


def test_of_two_ledgers_marking_one_spool_together_the_second_is_refused(tmp_path):
    """Two PostgreSQL ledgers' runs starting together in one working folder both find
    ./afc-spool unmarked; ``Spool.mark`` keeps the first mark and returns the one that holds,
    so the other run was refused (its renders and the first's would otherwise overwrite and
    adopt each other's files, paid again). The spool verdict's refactor (ddb34ba) dropped the
    returned mark: both ran. The second is refused again, as before it."""
    from afc_cli.errors import UsageError
    from afc_cli.run import own_spool
    from afc_cli.spool import Spool

    class Ledger:
        path = "postgresql://afc@db/second"

        def spool_identity(self):
            return "postgresql:2:2026-01-01"

        def job(self, job_id):
            return None

    class Raced(Spool):
        def mark(self, identity, named, *, replace=False):
            # the first ledger's run marks it between this run's look and its mark
            super().mark("postgresql:1:2026-01-01", "postgresql://afc@db/first")
            return super().mark(identity, named, replace=replace)

    spool = Raced(tmp_path / "afc-spool")
    with pytest.raises(UsageError, match="postgresql://afc@db/first"):
        own_spool(Ledger(), spool, running=True)
    assert spool.owner()["ledger"] == "postgresql:1:2026-01-01"


def test_a_long_chain_of_needs_is_rejected_retried_and_resumed_without_a_recursion_error(afc):
    """A sequence of shots each needing the one before (a reference image for continuity) is
    a chain of needs as long as the sequence. 'afc review reject' of its first failed the
    dependents by recursion, one frame a job, and ended in a RecursionError past about a
    thousand ('unexpected error', nothing decided); 'afc retry' of a failed first put the
    dependents back by recursion too, two frames a job (about 500); and 'afc resume' asked
    of each failed dependent whether it followed the rejection by recursion as well."""
    from conftest import manifest

    n = 1100
    for first, batch in (("rejected", "graded"), ("failed", "broken")):
        listed = [{"key": f"{batch}0", "prompt": "p0"}]
        listed += [
            {"key": f"{batch}{i}", "prompt": f"p{i}", "needs": [f"{batch}{i - 1}"]}
            for i in range(1, n)
        ]
        if first == "rejected":
            listed[0]["review"] = True
        else:
            listed[0]["params"] = {"fail": ["invalid"]}
        data = manifest(listed)
        data["batch"] = batch
        afc.write_manifest(data, f"{batch}.yaml")
        afc("submit", f"{batch}.yaml", timeout=300)
    rejected = afc("review", "reject", "graded0", "--reason", "too dark")
    assert rejected.returncode == 0, rejected.stderr
    resumed = afc("resume", "--batch", "graded")  # passes the rejection's dependents by
    assert resumed.returncode == 0, resumed.stderr
    retried = afc("retry", "broken0")
    assert retried.returncode == 0, retried.stderr
    counts = {}
    for job in afc.json("status", expect=None)["jobs"]:
        counts[job["batch"], job["status"]] = counts.get((job["batch"], job["status"]), 0) + 1
    assert counts == {
        ("graded", "rejected"): 1,
        ("graded", "failed"): n - 1,
        ("broken", "queued"): 1,
        ("broken", "blocked"): n - 1,
    }


def test_an_output_named_on_this_host_is_not_fetched_through_the_proxy(afc):
    """Through a proxy afc's resolver never sees an output's host, so the address rules are
    applied to its name as this machine resolves it (``_checked_through_proxy``). The tests
    of da26aac name outputs by IP address, which the rule for addresses given as such refused
    before any proxy: with the name check removed they still passed. A name on this host
    (``localhost``) is refused, and the proxy is never asked for it."""
    from test_audit_wire import answered, dalle

    proxy = WireServer(answered(dalle("http://localhost:9/secret.png")))
    try:
        env = {"OPENAI_BASE_URL": "http://api.openai.invalid/v1", "HTTP_PROXY": proxy.url}
        result = run(afc, "openai", "dall-e-3", OPENAI_RATES, env)
        assert result.returncode == 1, result.stderr
        assert [head.split(b" ")[0] for head, _ in proxy.received] == [b"POST"]
        (attempt,) = attempts(afc)
        assert "not public" in attempt["error"], attempt
        assert attempt["cost"] == "0.040000"
    finally:
        proxy.stop()
