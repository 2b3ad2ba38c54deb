"""Hostile input and secrets, found by an outside audit: provider answers, manifests and job
lists that afc must meet with one clear message, a documented exit code, nothing written that
should not be and no secret shown."""

from __future__ import annotations

import io
import re
import struct

import pytest
from browser import rendered_as
from conftest import jobs, manifest


def _lying_png(data: bytes) -> bytes:
    """``data`` (a PNG) with its IDAT chunk's length field made shorter than the chunk: the
    decoder then reads image bytes as the next chunk's header."""
    at = data.index(b"IDAT") - 4
    return data[:at] + struct.pack(">I", 16) + data[at + 4 :]


def test_an_output_pillow_fails_on_oddly_is_said_on_its_card_not_the_end_of_the_report(afc):
    """A stored output whose PNG chunk length lies (a provider's broken bytes) made Pillow
    raise SyntaxError, which the thumbnail did not catch: ``afc report --html`` ended with
    'unexpected error' and wrote no report for the whole batch."""
    pytest.importorskip("PIL", reason="the web extra: pip install 'afc-cli[web]'")
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml").returncode == 0
    stored = afc.outputs() / "b1" / "shot-001.png"
    rendered_as(afc, "shot-001", _lying_png(stored.read_bytes()))
    result = afc("report", "--html", "r.html")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "unexpected error" not in result.stderr
    assert "1 stored outputs have no picture in the report (shot-001)" in result.stderr
    text = (afc.cwd / "r.html").read_text()
    assert "cannot decode the picture: broken PNG file" in text


@pytest.mark.parametrize(
    ("endpoint", "said"),
    [
        ("minio.internal:9000", "Invalid endpoint: minio.internal:9000"),
        ("http://minio.internal:99999", "was not a valid URI"),
        ("ftp://minio:s3cretPassw0rd@minio.internal/", "was not a valid URI"),
    ],
)
def test_an_s3_endpoint_botocore_refuses_is_a_usage_error(afc, endpoint, said):
    """An endpoint without its scheme (``AWS_ENDPOINT_URL_S3=minio:9000``) made botocore raise
    ValueError, which afc called 'unexpected error ... (a bug in afc)' with exit 1; one it
    cannot resolve (a port past 65535, another scheme) was retried as a connection problem
    under the storage policy, then exit 1. Both are the user's setting: exit 2, said once,
    nothing written, no password shown."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    env = {
        "AWS_ENDPOINT_URL_S3": endpoint,
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY",
    }
    result = afc("submit", "manifest.yaml", "--storage", "s3://renders/films", env=env)
    assert result.returncode == 2, result.stderr
    assert "AWS_ENDPOINT_URL_S3 is not an S3 endpoint URL (" in result.stderr
    assert said in result.stderr and result.stderr.count("\n") == 1
    assert "unexpected error" not in result.stderr and "Traceback" not in result.stderr
    assert "s3cretPassw0rd" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()


@pytest.mark.parametrize("provider", ["replicate", "fal", "gemini", "openai"])
@pytest.mark.parametrize(
    "model", ["black-forest-labs/flux-1.1-pro\n", "fal-ai/flux\t/dev", "m\x00"]
)
def test_a_model_name_that_cannot_go_into_a_url_is_a_manifest_error(afc, fake, provider, model):
    """A model name with a control character (a pasted line break or tab) was admitted; the
    adapter's URL then could not be built, which the run took for a provider answer it could
    not read: the run stopped, the attempt was recorded failed with its cost unknown (possibly
    paid, though nothing left) and the job stayed queued to do it again at every resume."""
    afc.write_manifest(
        manifest(
            [{"key": "a", "prompt": "p"}],
            defaults={"chain": [{"provider": provider, "model": model, "attempts": 1}]},
            rates=[],
        )
    )
    result = afc("submit", "manifest.yaml", "--allow-unpriced")
    assert result.returncode == 2, result.stderr
    assert "field 'defaults.chain[0].model'" in result.stderr
    assert "has a control or invisible character" in result.stderr
    assert sum(fake.counts.values()) == 0
    assert not (afc.cwd / "afc.db").exists()


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("{base}\r", "naming a host, without spaces or controls"),  # a .env file from Windows
        ("{hostport}/v1", "must be an http:// or https:// URL"),  # the scheme left out
        ("ftp://{hostport}/v1", "must be an http:// or https:// URL"),
        ("http://127.0.0.1:99999/v1", "Port out of range"),
    ],
)
@pytest.mark.parametrize("command", ["submit", "resume"])
def test_a_provider_base_url_no_request_can_go_to_is_refused_before_anything_is_paid(
    afc, fake, value, said, command
):
    """REPLICATE_BASE_URL set to what no request can be sent to was met only inside the HTTP
    client, after each job's attempt row was written: a missing scheme or another one failed
    every job with an attempt 'of unknown cost' (possibly paid, though nothing was sent); a
    carriage return or a bad port stopped the run as if Replicate's answer could not be read,
    'a bug in afc's replicate adapter', the job left to do it again at every resume."""
    afc.write_manifest(
        manifest(
            [{"key": "a", "prompt": "p"}],
            defaults={"chain": [{"provider": "replicate", "model": "o/m", "attempts": 1}]},
            rates=[{"provider": "replicate", "model": "o/m", "per_image": "0.01"}],
        )
    )
    base = afc.env["REPLICATE_BASE_URL"]
    env = {"REPLICATE_BASE_URL": value.format(base=base, hostport=base.split("://", 1)[1][:-3])}
    if command == "resume":
        assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
        result = afc("resume", env=env)
    else:
        result = afc("submit", "manifest.yaml", env=env)
    assert result.returncode == 2, result.stderr
    assert "provider base URL cannot be used: REPLICATE_BASE_URL must be" in result.stderr
    assert said in result.stderr and "Traceback" not in result.stderr
    assert sum(fake.counts.values()) == 0
    if command == "submit":
        assert not (afc.cwd / "afc.db").exists()
    else:
        assert afc.rows("SELECT COUNT(*) FROM attempts") == [(0,)]
    plan = afc("plan", "manifest.yaml", env=env)
    assert "would be refused (exit 2): provider base URL cannot be used" in plan.stdout


def test_a_provider_base_url_set_but_empty_is_the_default(monkeypatch):
    """``OPENAI_BASE_URL=`` (left empty in a .env file) made every request's URL a bare path,
    failed in the HTTP client after the attempt row was written; empty is unset, as afc
    reads AWS_ENDPOINT_URL."""
    from afc_cli.providers.openai import OpenAIProvider

    monkeypatch.setenv("OPENAI_BASE_URL", "")
    assert OpenAIProvider().base == "https://api.openai.com/v1"


def test_an_output_file_name_its_metadata_file_could_not_have_is_refused(afc):
    """A key's last segment within 255 bytes but over 246 (``{key}-{job_id}.{ext}`` with a
    long key) was admitted, rendered and paid for, then never stored: its ``.afc.json``
    metadata file (and the temporary name it is written under) passed the file system's
    255-byte limit at every store, and the job waited at store run after run."""
    key = "k" * 200  # the longest key: with its job id, a file name of 241 bytes
    data = manifest([{"key": key, "prompt": "p"}])
    data["defaults"]["output"] = "{batch}/{key}-{job_id}.{ext}"
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0  # 241 + 9 < 255: stored
    assert afc.json("status")["jobs"][0]["status"] == "succeeded"
    data["batch"] = "b2"
    data["defaults"]["output"] = "{batch}/{key}-{job_id}-extra.{ext}"  # 247 bytes
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 2, result.stderr
    assert "whose file name is longer than 246 bytes" in result.stderr
    assert afc.rows("SELECT COUNT(*) FROM jobs") == [(1,)]


def test_a_file_name_near_the_limit_is_stored_under_a_short_temporary_name(tmp_path):
    """The temporary file a create is written under was named after the final one (plus 38
    bytes): a name of 209 to 246 bytes, admitted, was never stored."""
    from afc_cli.storage.file import FileStorage

    source = tmp_path / "spooled"
    source.write_bytes(b"\x89PNG\r\n\x1a\n")
    store = FileStorage(tmp_path / "out")
    name = "n" * 240 + ".png"
    meta = {"job_id": "j", "request_hash": "h", "sha256": "s", "size": 8}
    store.put_if_absent(name, source, meta)
    assert store.head(name).exists and store.head(name).meta["job_id"] == "j"


def openai_400(afc, message: str):
    """A one-job submit to dall-e-3 against a server answering 400 with ``message``."""
    import json

    from test_audit_wire import OPENAI_RATES, WireServer, reply, run

    body = json.dumps({"error": {"message": message, "type": "x"}}).encode()
    payload = reply("400 Bad Request", body, {"Content-Type": "application/json"})

    async def answer(head, sent, writer) -> bool:
        writer.write(payload)
        await writer.drain()
        return True

    server = WireServer(answer)
    try:
        return run(afc, "openai", "dall-e-3", OPENAI_RATES, {"OPENAI_BASE_URL": server.url})
    finally:
        server.stop()


def test_a_provider_error_of_megabytes_is_kept_and_shown_cut(afc):
    """A 400 whose message was 20 MB (a gateway quoting the request back: a reference image's
    base64 is megabytes) was kept whole: written to the ledger three times (the attempt, the
    job, its event: a 63 MB ledger), printed whole on stderr, and by every 'afc status'. An
    error answer is read to its first MiB only (outside audit 63c): its message as far as that
    head holds it (``http._head_json``), the cut said with the characters read."""
    result = openai_400(afc, "Invalid prompt: " + "x " * (10 * 1024 * 1024))
    assert result.returncode == 1, result.stderr[-500:]
    assert "openai: Invalid prompt: x x" in result.stderr
    assert re.search(r"\.\.\. \(cut: the message had 10485\d\d characters\)", result.stderr)
    assert len(result.stderr) < 20_000
    status = afc("status")
    assert len(status.stdout + status.stderr) < 20_000
    assert (afc.cwd / "afc.db").stat().st_size < 2_000_000
    [(error,)] = afc.rows("SELECT error_message FROM attempts")
    assert error.startswith("openai: Invalid prompt: x x") and len(error) < 4200


ESCAPES = "\x1b]0;PWNED\x07 \x1b[1A\x1b[2K\rall 12 jobs succeeded \x1b]52;c;ZWNobyBoaQ==\x07\x9b2J"


def test_a_provider_message_s_terminal_escapes_are_shown_not_run(afc):
    """A provider's error message holding escape sequences (a hostile or broken gateway) was
    written raw to the run's log lines, 'afc status' and 'afc show': read on a terminal (or a
    cron log read with cat or tail -f), it retitled the window, wrote the clipboard (OSC 52),
    or moved the cursor up and wrote over the failure with a line of its own."""
    result = openai_400(afc, f"bad {ESCAPES} end")
    assert result.returncode == 1, result.stderr
    shown = [result.stderr]
    for args in (("status",), ("show", "shot"), ("show", "shot", "-v")):
        done = afc(*args)
        shown.append(done.stdout + done.stderr)
    for text in shown:
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", text), repr(text)
    assert r"openai: bad \x1b]0;PWNED\x07 \x1b[1A\x1b[2K\x0dall 12 jobs" in shown[1]
    # --json carries the same text (JSON escapes control characters anyway)
    message = afc.json("status", expect=None)["jobs"][0]["error"]["message"]
    assert r"\x1b]52;c;ZWNobyBoaQ==\x07\x9b2J end" in message


def _names(monkeypatch, names: dict[str, str]) -> None:
    """aiohttp's resolver answers ``names`` (name -> address); the system's resolver does not
    know them, so a provider whose base URL names one is a provider on a public address."""
    import socket

    import aiohttp

    real = aiohttp.ThreadedResolver.resolve

    async def resolve(self, host, port=0, family=socket.AF_INET):
        if host in names:
            entry = {"hostname": host, "host": names[host], "port": port, "family": family}
            return [{**entry, "proto": 0, "flags": 0}]
        return await real(self, host, port, family)

    monkeypatch.setattr(aiohttp.ThreadedResolver, "resolve", resolve)


@pytest.mark.parametrize(
    "where",
    [
        "http://127.0.0.1:{port}/out.png",  # this host, named as such
        "http://localhost:{port}/out.png",  # by a name resolving there
        "http://cdn.wire.test:{port}/out.png",  # by a name the provider's DNS points there
        "http://[::ffff:10.1.2.3]:{port}/out.png",  # the private network
    ],
)
def test_an_output_of_a_public_provider_on_this_host_or_its_network_is_never_fetched(
    monkeypatch, where
):
    """An output URL is the provider's answer (and on Replicate a model's output is the
    model's to write): one naming this host or its private network (a Docker API on
    127.0.0.1:2375, an admin page on 10.0.0.5) was fetched and what it answered stored as the
    job's output, which a studio may deliver to whoever wrote the model. Only the metadata
    service's link-local address was refused. A provider on a public address has its outputs
    fetched from public addresses only; the paid attempt fails at its known cost."""
    from test_audit_wire import WireServer, adapter, answered, dalle, rendered

    from afc_cli.providers.base import ProviderError
    from afc_cli.providers.openai import OpenAIProvider

    cdn = WireServer(answered(reply_png()))
    api = WireServer(answered(b""))
    api.behaviour = answered(dalle(where.format(port=cdn.port)))
    _names(monkeypatch, {"api.wire.test": "127.0.0.1", "cdn.wire.test": "127.0.0.1"})
    try:
        provider = adapter(
            monkeypatch, OpenAIProvider, "OPENAI_BASE_URL", f"http://api.wire.test:{api.port}"
        )
        with pytest.raises(ProviderError) as caught:
            rendered(provider, "dall-e-3")
    finally:
        api.stop()
        cdn.stop()
    assert cdn.received == [] and len(api.received) == 1
    assert "which is not a public address" in caught.value.message or (
        "which resolves to no public address" in caught.value.message
    )
    assert "afc fetches the outputs of a provider on a public address from public" in (
        caught.value.message
    )
    assert caught.value.error_class == "server" and caught.value.cost_micros == 40_000


def reply_png() -> bytes:
    from test_audit_wire import PNG, reply

    return reply("200 OK", PNG, {"Content-Type": "image/png"})


def test_a_public_cdn_s_redirect_to_this_host_is_not_followed(monkeypatch):
    """The same for a redirect: a public CDN answering 302 to 127.0.0.2 (127.0.0.1 stands for
    a public address here: the test's servers all listen on it)."""
    from test_audit_wire import WireServer, adapter, answered, dalle, rendered, reply

    from afc_cli.providers import transport
    from afc_cli.providers.base import ProviderError
    from afc_cli.providers.openai import OpenAIProvider

    real_public = transport.public_address
    monkeypatch.setattr(transport, "public_address", lambda a: a == "127.0.0.1" or real_public(a))
    private = WireServer(answered(reply_png()))
    cdn = WireServer(
        answered(reply("302 Found", headers={"Location": f"http://127.0.0.2:{private.port}/"}))
    )
    api = WireServer(answered(dalle(f"{cdn.url}/out.png")))
    _names(monkeypatch, {"api.wire.test": "127.0.0.1"})
    try:
        provider = adapter(
            monkeypatch, OpenAIProvider, "OPENAI_BASE_URL", f"http://api.wire.test:{api.port}"
        )
        with pytest.raises(ProviderError) as caught:
            rendered(provider, "dall-e-3")
        assert "127.0.0.2, which is not a public address" in caught.value.message
        assert len(cdn.received) == 1 and private.received == []
        # and an output on the public CDN itself is fetched as ever
        cdn.behaviour = answered(reply_png())
        provider = adapter(
            monkeypatch, OpenAIProvider, "OPENAI_BASE_URL", f"http://api.wire.test:{api.port}"
        )
        assert rendered(provider, "dall-e-3").data.startswith(b"\x89PNG")
    finally:
        api.stop()
        cdn.stop()
        private.stop()


def test_a_provider_on_this_host_or_its_network_may_have_its_outputs_there(monkeypatch):
    """A base URL on a loopback or private address (a proxy on the studio's network, the
    tests' fake servers) keeps its outputs fetchable there."""
    from test_audit_wire import WireServer, adapter, answered, dalle, rendered

    from afc_cli.providers.openai import OpenAIProvider

    cdn = WireServer(answered(reply_png()))
    api = WireServer(answered(dalle(f"http://localhost:{cdn.port}/out.png")))
    try:
        provider = adapter(monkeypatch, OpenAIProvider, "OPENAI_BASE_URL", api.url)
        assert rendered(provider, "dall-e-3").data.startswith(b"\x89PNG")
    finally:
        api.stop()
        cdn.stop()


def test_an_input_file_replaced_by_a_named_pipe_fails_its_job_and_the_run_ends(afc):
    """An input file replaced after admission by a named pipe (or a link to /dev/zero) was
    opened and read whole at render: the pipe held the run for ever, through SIGTERM and a
    second signal alike (the reading thread kept the process alive), and /dev/zero read until
    the memory ran out. Only a regular file is read, and no more than an input may hold."""
    import os

    from afc_cli.providers.local import render_png

    ref = afc.cwd / "ref.png"
    ref.write_bytes(render_png("a reference", 24, 24))
    afc.write_manifest(manifest([{"key": "a", "prompt": "p", "inputs": [{"path": "ref.png"}]}]))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    ref.unlink()
    os.mkfifo(ref)
    result = afc("resume", timeout=30)
    assert result.returncode == 1, result.stderr
    assert "input file" in result.stderr and "no longer a regular file" in result.stderr
    assert afc.json("status", expect=None)["jobs"][0]["status"] == "failed"


def test_a_picture_over_pillow_s_pixel_limit_gets_no_preview_and_no_warning(afc):
    """A stored output of 9,500 x 9,500 pixels (a PNG of 90 KB) printed Pillow's warning on
    stderr ('.../PIL/Image.py:3593: DecompressionBombWarning: ... could be decompression bomb
    DOS attack.') and was decoded whole (90 MB, in each of make_all's threads at once, up to
    712 MB a picture below Pillow's hard limit). It gets no preview, said on its card."""
    pytest.importorskip("PIL", reason="the web extra: pip install 'afc-cli[web]'")
    from PIL import Image

    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml").returncode == 0
    huge = io.BytesIO()
    Image.new("L", (9500, 9500)).save(huge, "PNG")
    rendered_as(afc, "shot-001", huge.getvalue())
    result = afc("report", "--html", "r.html")
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr and "PIL" not in result.stderr, result.stderr
    assert "1 stored outputs have no picture in the report (shot-001)" in result.stderr
    assert "90 million pixels: no preview" in (afc.cwd / "r.html").read_text()


@pytest.mark.parametrize("where", ["responseId", "error"])
def test_a_nul_in_a_provider_s_answer_is_kept_on_either_ledger(afc, ledger_url, where):
    """On a PostgreSQL ledger (whose text columns cannot hold NUL) a paid Gemini answer whose
    ``responseId`` held a NUL ended the run in 'unexpected error: DataError' (exit 1): the
    image it had paid for was lost, the attempt left of unknown cost, and the next run paid
    again. So did an error message holding one. Both are kept with the NUL as ``\\x00``."""
    import json

    from test_audit_wire import GEMINI_IMAGE, WireServer, json_reply, reply, run

    if where == "responseId":
        payload = json_reply({**GEMINI_IMAGE, "responseId": "resp\x00\x1b[2Jid"})
    else:
        body = {"error": {"code": 400, "message": "bad\x00 request", "status": "INVALID_ARGUMENT"}}
        payload = reply("400 Bad Request", json.dumps(body).encode())

    async def answer(head, sent, writer) -> bool:
        writer.write(payload)
        await writer.drain()
        return True

    server = WireServer(answer)
    rates = [{"provider": "gemini", "model": "gemini-2.5-flash-image", "per_image": "0.039"}]
    env = {"GEMINI_BASE_URL": server.url, "AFC_LEDGER": ledger_url}
    try:
        result = run(afc, "gemini", "gemini-2.5-flash-image", rates, env)
    finally:
        server.stop()
    assert "unexpected error" not in result.stderr, result.stderr
    shown = afc.json("show", "shot", env={"AFC_LEDGER": ledger_url})
    [attempt] = shown["attempts"]
    if where == "responseId":
        assert result.returncode == 0, result.stderr
        assert attempt["status"] == "succeeded" and attempt["cost"] == "0.039000"
        assert attempt["provider_request_id"] == r"resp\x00\x1b[2Jid"
    else:
        assert result.returncode == 1
        assert attempt["error"] == r"gemini: INVALID_ARGUMENT bad\x00 request"
