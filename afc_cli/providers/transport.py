"""The HTTP transport under the provider adapters' httpx clients: aiohttp's connection pool,
through the ``httpx-aiohttp`` transport, with the adapters still speaking httpx's API.

Why not httpx's own transport: measured against a fake OpenAI server in its own process
(``bench/http_calls.py --transports``), an httpx client with its pool sized to the width took
10.2 s for 200 calls of 1 s at 100 wide and 67 s for 1,000 at 500 wide (httpx's pool is slow
under many concurrent requests, httpx issue #3215); the same client on this transport took
2.9 s and 4.9 s, where a bare asyncio client took 2.2 s and 2.9 s.

What this module adds to the library's transport:

- **One error vocabulary.** httpx-aiohttp maps every ``aiohttp.ClientConnectionError`` to
  ``httpx.ConnectTimeout`` (so a server that drops the connection mid-answer would read as a
  timeout) and lets ``OSError`` and other aiohttp errors through unmapped (an adapter catching
  ``httpx.TransportError`` would miss them). ``httpx_error`` maps them by cause instead: a
  refused or failed connect is ``ConnectError`` (the request never left), a connect that took
  too long ``ConnectTimeout``, no answer in time ``ReadTimeout``, a dropped connection
  ``RemoteProtocolError``, a broken body ``ReadError``. The adapters classify those as before.
- **Less work per request** (``PoolTransport``): timeouts and fixed endpoints' URLs made
  once, headers handed to aiohttp as its own multidict, the body read through one stream.
  Measured against ``bench/fakeserver.py`` (an OpenAI call of the adapter, client and
  transport, CPU per call, alternating runs): 1.01-1.05 ms before, 0.84-0.96 ms after.
- **No resent POST.** aiohttp retries a request on a reused keep-alive connection that turned
  out closed only for idempotent methods (GET, PUT, DELETE...); a paid POST is sent once.
- **No connection to a link-local address** (``PoolTransport``, ``_Resolver``): an output URL
  is the provider's to name, and a redirect the CDN's; one naming the cloud's metadata service
  (``169.254.169.254``, AWS's ``fd00:ec2::254``; a name resolving to it too) had afc fetch
  what it answers (on AWS with IMDSv1, the instance's credentials) and store it as the job's
  output. No provider is there: such a request is refused before it connects
  (``AddressRefused``: never sent, and a download's definite failure).
- **An output from a public provider comes from a public address** (``PUBLIC_ONLY``,
  ``_PublicResolver``): an output URL is the provider's answer, and a model's output on
  Replicate is the model's to write. One naming this host or its private network
  (``http://127.0.0.1:2375/containers/json``, ``http://10.0.0.5/``, a name resolving there, or
  a redirect to one) had afc fetch what a service there answers and store it as the job's
  output, which a studio may deliver to whoever wrote the model. Refused unless the provider's
  own base URL is on such an address (a proxy on the private network: ``http.HttpProvider``),
  and then this host's own addresses still are (``NOT_THIS_HOST``) unless the base URL is on
  this host too.
- **An answer comes whole in time** (``PoolTransport``, ``_Stream``): a read timeout bounds
  only the silence between two reads, so a server (or a proxy, a CDN) that drips a byte every
  few seconds into its headers or body held a paid call, a poll or a download, and with it
  the job and the run, for ever when no ``window_s`` bounds the attempt. The status line and
  headers must come within the pool and read timeouts of the request (and the time its body
  takes to send at ``MIN_RATE``), the body within the read timeout of the headers plus the
  time it takes at ``MIN_RATE``; past that, ``ReadTimeout`` as for silence.
- **The environment's proxy** (``HTTPS_PROXY``, ``HTTP_PROXY``, ``NO_PROXY``, as curl,
  boto3 and httpx read them: ``env_proxy``): a studio whose network lets no
  connection out but through its proxy could not reach a provider at all (afc's client was
  given its own transport, and httpx reads the proxy variables only for the transport it
  makes itself), while its webhooks and S3 calls went through the proxy. A proxied request
  takes the same path as any other, with the rules above applied to the host it names, as
  this host resolves it (``_checked_through_proxy``): a name that does not resolve here (the
  proxy resolves it) cannot be checked, and is sent.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any, NoReturn

import aiohttp
import httpx
import yarl
from httpx._decoders import GZipDecoder
from httpx_aiohttp import AiohttpTransport
from multidict import CIMultiDict

# AWS's instance metadata service over IPv6 (a unique local address, not link-local)
_METADATA_V6 = ipaddress.ip_address("fd00:ec2::254")


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``address`` as an IP address (an IPv4 address mapped into IPv6 as itself), or None for
    a name."""
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def refused_address(address: str) -> bool:
    """Whether ``address`` (an IP address, else False) is one no provider is at and afc never
    connects to: link-local (the cloud's metadata service at 169.254.169.254), or AWS's IPv6
    metadata address; an IPv4 address mapped into IPv6 counts as itself."""
    ip = _ip(address)
    return ip is not None and (ip.is_link_local or ip == _METADATA_V6)


# A request extension: the request (an output download, and each of its redirects) connects
# to public addresses only (True: ``public_address``), never to this host or its private
# network; or (``NOT_THIS_HOST``) to any address but this host's (``not_this_host``)
PUBLIC_ONLY = "afc_public_only"
NOT_THIS_HOST = "not_this_host"


def public_address(address: str) -> bool:
    """Whether ``address`` is a public (globally routable) IP address; a name is taken as
    public here (its addresses are checked as it is resolved: ``_PublicResolver``)."""
    ip = _ip(address)
    return ip is None or ip.is_global


def not_this_host(address: str) -> bool:
    """Whether ``address`` is not this host's (loopback, or the unspecified address that
    connects to it); a name is taken as not this host's here (checked as it is resolved)."""
    ip = _ip(address)
    return ip is None or not (ip.is_loopback or ip.is_unspecified)


def allowed_by(rule: Any) -> Any:
    """The address check of a ``PUBLIC_ONLY`` extension's value."""
    return not_this_host if rule == NOT_THIS_HOST else public_address


def _where(rule: Any) -> str:
    return "not this host's" if rule == NOT_THIS_HOST else "public"


class AddressRefused(httpx.UnsupportedProtocol, httpx.ConnectError):
    """A request to an address afc never connects to (``refused_address``): never sent (a
    ``ConnectError``, so ``http.never_sent`` says so) and not worth sending again (an
    ``UnsupportedProtocol``, which ``http.fetched`` does not try again)."""


class NotPublic(AddressRefused):
    """A ``PUBLIC_ONLY`` request to an address that is not public (``public_address``)."""


class ProxyRefused(httpx.ConnectError):
    """The environment's proxy answered a tunnel's ``CONNECT`` with other than 200 (407 for
    credentials it wants, 403 for a host it does not allow, 502 for one it cannot reach): no
    connection to the host was made, so the request never left (``http.never_sent``). Mapped
    as any other aiohttp error, it was a read error after the request was sent, and each paid
    call was recorded at a cost unknown, its message naming no proxy."""


class ProxyUnsupported(httpx.UnsupportedProtocol, httpx.ConnectError):
    """The environment names a proxy of a scheme afc's provider calls cannot use (a SOCKS
    proxy, ``socks5://``): aiohttp took it for an http proxy and spoke HTTP to it, so a SOCKS
    server's refusal came after the request was written, each paid call recorded at a cost
    unknown though none reached the provider. Never sent, and not worth sending again."""


class _RefusedName(OSError):
    """A name that resolves only to refused addresses (``_Resolver``)."""


class _PrivateName(_RefusedName):
    """A name that resolves to no public address (``_PublicResolver``)."""


class _Resolver(aiohttp.ThreadedResolver):
    """The system's resolver, without the addresses afc never connects to: a name that
    resolves only to them is refused (``_RefusedName``, then ``AddressRefused``)."""

    async def resolve(self, host: str, port: int = 0, family: Any = socket.AF_INET) -> Any:
        found = await super().resolve(host, port, family)
        kept = [item for item in found if not refused_address(item["host"])]
        if not kept:
            raise _RefusedName(f"{host} resolves to a link-local address only")
        return kept


class _PublicResolver(_Resolver):
    """``_Resolver`` keeping the addresses a ``PUBLIC_ONLY`` request's ``rule`` allows
    (``allowed_by``: public ones only, by default)."""

    def __init__(self, rule: Any = True) -> None:
        super().__init__()
        self.rule = rule

    async def resolve(self, host: str, port: int = 0, family: Any = socket.AF_INET) -> Any:
        found = await super().resolve(host, port, family)
        allowed = allowed_by(self.rule)
        kept = [item for item in found if allowed(item["host"])]
        if not kept:
            raise _PrivateName(f"{host}, which resolves to no {_where(self.rule)} address")
        return kept


def httpx_error(exc: BaseException) -> BaseException:
    """The httpx exception an aiohttp or socket failure stands for (``exc`` itself when it is
    neither)."""
    cause = exc.__cause__ if isinstance(exc, httpx.TransportError) and exc.__cause__ else exc
    message = str(cause) or cause.__class__.__name__
    if isinstance(cause, httpx.HTTPError):
        return cause
    if isinstance(cause, aiohttp.ClientConnectorError) and isinstance(cause.os_error, _RefusedName):
        refused = NotPublic if isinstance(cause.os_error, _PrivateName) else AddressRefused
        return refused(str(cause.os_error))
    if isinstance(cause, aiohttp.ClientHttpProxyError):
        return ProxyRefused(f"the proxy answered {cause.status} {cause.message} to CONNECT")
    if isinstance(cause, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(message)
    if isinstance(cause, TimeoutError):  # aiohttp's socket/server timeouts and asyncio's
        return httpx.ReadTimeout(message)
    if isinstance(cause, aiohttp.ClientConnectorError):
        return httpx.ConnectError(message)
    if isinstance(cause, aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError):
        # refused before a connection (an output URL, or its redirect, of another scheme:
        # ftp://): it was a read error after the request was sent, so a paid render's output
        # at such a URL was fetched again for as long as its provider keeps its outputs
        return httpx.UnsupportedProtocol(message)
    if isinstance(cause, aiohttp.ClientPayloadError):
        return httpx.ReadError(message)
    if isinstance(cause, aiohttp.ServerDisconnectedError):
        return httpx.RemoteProtocolError(message)
    if isinstance(cause, (aiohttp.ClientError, OSError)):
        return httpx.ReadError(message)
    return exc


# The slowest average an answer's body (and a request's) may keep beyond the read timeout:
# 64 KiB/s (half a megabit), a 2 GiB output in about 9 h, a 10 MB JSON answer in 2.5 min. A drip
# (a byte every few seconds) still ends in time. At 256 KiB/s an output coming steadily over a
# slow link (a studio's line shared by many downloads: below about 2 Mbit/s each) was cut off
# round after round until the provider let it go, and the job paid for another render, cut off
# the same way (tests/test_audit_wire.py)
MIN_RATE = 64 * 1024


def _deadline(timeout: dict[str, Any], after: float, sized: int = 0) -> float | None:
    """When an answer's part must have come (on the loop's clock): ``after`` plus the read
    timeout and ``sized`` bytes' time at ``MIN_RATE``. None when no read timeout is set."""
    read = timeout.get("read")
    return None if read is None else after + read + sized / MIN_RATE


# The most an answer read whole may decode to: a JSON answer (OpenAI's and Gemini's carry their
# images inline as base64, a few MB each; the others a few KB). An output download is streamed
# and counts its own bytes (``http.download``, up to ``http.MAX_OUTPUT_BYTES``).
MAX_ANSWER_BYTES = 256 * 1024**2


# The most of an error answer's body (a status outside 2xx) that is read: the providers' own
# error bodies are a few KB (``{"error": {"message", ...}}``), and nothing past this is ever
# needed (an error's message is cut to some 4,000 characters: ``base.bounded``). Read to
# MAX_ANSWER_BYTES, a gateway's 50 MB error page was held whole, decoded, parsed and copied into
# the message: some 150 MB for each call, 1.25 GB for 8 at once, and a run at --concurrency
# 100 answered so was killed by the kernel, its calls in flight left possibly paid.
MAX_ERROR_ANSWER_BYTES = 1024**2


class AnswerTooLarge(httpx.ReadError):
    """An answer that decoded to more than its limit (``_Answer``): a body not read whole, as a
    cut one is not (a paid call's cost unknown)."""


# The content codings afc asks for (``http.new_client``) and decodes: deflate's ratio is about
# 1,000 to 1, and a body in one of them goes to its decoder ``DECODE_SLICE`` bytes at a time
# (``_Answer.aiter_raw``), so a piece decoded is some 4 MiB at most; httpx would also ask for
# brotli and zstd where their packages are installed, whose ratios reach far higher
ACCEPT_ENCODING = "gzip, deflate"
IDENTITY = ("", "identity")
DECODE_SLICE = 4 * 1024
# the other codings of IANA's registry: refused (a token outside it, as a misconfigured
# server's ``Content-Encoding: none`` or ``binary``, is no coding, and httpx ignores it)
OTHER_CODINGS = frozenset("aes128gcm br compress dcb dcz exi pack200-gzip x-compress zstd".split())


class AnswerUndecodable(httpx.ReadError):
    """An answer whose body does not decode as its ``Content-Encoding`` says (``_Answer``): a
    body not read whole, as a cut one is not."""


class _Answer(httpx.Response):
    """An answer whose decoded bytes are counted as they are read, up to ``MAX_ANSWER_BYTES``
    (unless ``limited`` is False: ``http.download`` counts its own). Unbounded, a multi-GB
    JSON answer, or a gzip bomb (10 MB on the wire, 10 GB decoded: httpx decodes what
    ``Content-Encoding`` names), was held whole in memory by ``aread``, until the kernel
    killed the run and every call in flight became possibly paid.

    A piece of the body (``DECODE_SLICE``, ``aiter_raw``) decodes whole before it is counted:
    one coding makes it at most about 4 MiB (deflate's ratio is about 1,000 to 1), but codings stacked
    (``Content-Encoding: gzip, gzip``) multiply the ratios, and one chunk decoded to
    gigabytes in one piece before any count. afc asks for one coding of ``ACCEPT_ENCODING``:
    an answer with more, or with another, is refused unread (``AnswerUndecodable``), and so is
    a body that does not decode as its coding says (httpx's ``DecodingError``, no transport
    error: it stopped the run as an answer afc could not read, a download's paid render
    recorded at a cost unknown)."""

    limited = True
    # an error answer cut at MAX_ERROR_ANSWER_BYTES (``_error_head``): its body is a head only
    head_only = False

    async def aiter_raw(self, chunk_size: int | None = None):
        """The body as it came, a read of an encoded one (``Content-Encoding``) cut into
        ``DECODE_SLICE`` pieces: httpx's decoder turns each piece it is given into one piece,
        whatever it swells to, so a read of 64 KiB of gzipped zeros (``_Stream.CHUNK``)
        decoded to some 64 MiB in one piece, held before an answer's or a download's count saw
        it or an output's spill could write it (``http._read_output``): a hundred such
        downloads in flight held 6 GiB, and a run the kernel kills leaves its calls in flight
        possibly paid."""
        coded = self.headers.get("content-encoding", "").strip().lower() not in IDENTITY
        async for raw in super().aiter_raw(chunk_size):
            if not coded or len(raw) <= DECODE_SLICE:
                yield raw
                continue
            for start in range(0, len(raw), DECODE_SLICE):
                yield raw[start : start + DECODE_SLICE]

    def _get_content_decoder(self) -> Any:
        if not hasattr(self, "_decoder"):
            codings = self.headers.get_list("content-encoding", split_commas=True)
            named = [c.strip().lower() for c in codings if c.strip().lower() not in IDENTITY]
            if len(named) > 1:
                raise AnswerUndecodable(
                    f"an answer with more than one content coding ({', '.join(codings)})"
                )
            if named and named[0] in OTHER_CODINGS:
                # httpx passes a coding it has no decoder for as it is (an output stored
                # still encoded, its job succeeded), and decodes brotli and zstd unbounded
                raise AnswerUndecodable(
                    f"an answer in a content coding afc did not ask for ({named[0]})"
                )
            if named in (["gzip"], ["x-gzip"]):  # x-gzip: gzip's old name (RFC 9110), which
                self._decoder = GzipMembers()  # httpx passes as it is
        return super()._get_content_decoder()

    async def aiter_bytes(self, chunk_size: int | None = None):
        limit, size = MAX_ANSWER_BYTES if self.limited else None, 0
        if not 200 <= self.status_code < 300:
            # an error answer: its first MAX_ERROR_ANSWER_BYTES are all afc reads (the rest is
            # left unread, the connection closed, not reused); cut so, it is read as any body
            # afc cannot parse (the status alone classes it: README "Error classes")
            async for chunk in self._error_head(chunk_size):
                yield chunk
            return
        try:
            async for chunk in super().aiter_bytes(chunk_size):
                if limit is not None:
                    size += len(chunk)
                    if size > limit:
                        raise AnswerTooLarge(f"an answer larger than {limit // 1024**2} MiB")
                yield chunk
        except httpx.DecodingError as exc:
            raise AnswerUndecodable(f"an answer that does not decode ({exc})") from exc
        # httpx's decoder hands back what a gzip or deflate stream decoded to when the body
        # ends, and says nothing of one that never reached its end: a body cut within it (a
        # CDN's cached copy as far as its origin sent it, or a connection closed early) was a
        # piece of an output, stored as the job's
        decoder = getattr(self, "_decoder", None)
        for each in getattr(decoder, "children", [decoder]):  # gzip beside identity's
            stream = getattr(each, "decompressor", None)
            if stream is None or not self.num_bytes_downloaded or stream.eof:
                continue
            raise AnswerUndecodable(
                f"an answer whose {self.headers['content-encoding']} stream is cut short"
            )

    async def _error_head(self, chunk_size: int | None):
        """An error answer's body, its first ``MAX_ERROR_ANSWER_BYTES`` decoded bytes: a body
        that does not decode is the bytes that did (an error's words are never an output)."""
        size = 0
        body = super().aiter_bytes(chunk_size)
        try:
            async for chunk in body:
                chunk = chunk[: MAX_ERROR_ANSWER_BYTES - size]
                size += len(chunk)
                if chunk:
                    yield chunk
                if size >= MAX_ERROR_ANSWER_BYTES:
                    self.head_only = True  # its JSON read as far as it goes (http._answer_json)
                    break
        except httpx.DecodingError:
            pass
        finally:
            await body.aclose()
        await self.aclose()  # the rest unread: the connection is closed, never reused


_GZIP_MAGIC = b"\x1f\x8b"


class GzipMembers(GZipDecoder):
    """httpx's gzip decoder, reading every member of the stream: a gzip stream is a series of
    members (RFC 1952: files concatenated, pigz's, a store's object written in parts), and
    httpx's read the first only and passed the rest over as it would bytes after the
    stream, so an output was stored as its first member's piece and the job succeeded. Bytes
    after a member that start no other (a server's padding) are still passed over."""

    def __init__(self) -> None:
        super().__init__()
        self._after = b""  # bytes after a member, too few yet to say whether one follows
        self._done = False  # bytes after the last member that start none: passed over

    def decode(self, data: bytes) -> bytes:
        import zlib

        pieces = []
        data, self._after = self._after + data, b""
        while data and not self._done:
            if self.decompressor.eof:
                if len(data) < len(_GZIP_MAGIC):
                    self._after = data
                    break
                if not data.startswith(_GZIP_MAGIC):
                    self._done = True
                    break
                self.decompressor = zlib.decompressobj(zlib.MAX_WBITS | 16)
            pieces.append(super().decode(data))
            data = self.decompressor.unused_data if self.decompressor.eof else b""
        return b"".join(pieces)


def _raise_mapped(exc: Exception) -> NoReturn:
    """Raise ``exc`` as the httpx error it stands for (chained to it), or as it is."""
    mapped = httpx_error(exc)
    if mapped is exc:
        raise exc
    raise mapped from exc


class _Stream(httpx.AsyncByteStream):
    """An answer's body, read from aiohttp's response in chunks, its errors mapped by cause
    (``httpx_error``); closing it releases the connection to the pool. One layer: the
    library's stream wrapped in a second one for the mapping cost a generator per chunk.
    The body must come within the read timeout of the headers, and each chunk received gives
    it its time at ``MIN_RATE`` more (module docstring): a body that drips in ends as a
    ``ReadTimeout``."""

    CHUNK = 64 * 1024

    def __init__(self, response: Any, timeout: dict[str, Any]) -> None:
        self.response = response
        self.timeout = timeout

    async def __aiter__(self):
        # No timer per read: silence is aiohttp's read timeout, and a body that drips in
        # sends chunks, each checked against the deadline as it comes (one clock read).
        clock = asyncio.get_running_loop().time
        deadline = _deadline(self.timeout, clock())
        try:
            async for chunk in self.response.content.iter_chunked(self.CHUNK):
                if deadline is not None:
                    if clock() > deadline:
                        raise httpx.ReadTimeout("the answer's body came too slowly")
                    deadline += len(chunk) / MIN_RATE
                yield chunk
        except Exception as exc:
            _raise_mapped(exc)

    async def aclose(self) -> None:
        try:
            await self.response.__aexit__(None, None, None)  # released, its body sent
        except Exception as exc:
            _raise_mapped(exc)


class PoolTransport(AiohttpTransport):
    """httpx-aiohttp's transport with afc's error mapping (module docstring), and with the
    per-request work it need not repeat done once: a request's timeouts (``ClientTimeout``)
    and a fixed endpoint's parsed URL are kept, its headers are handed over as aiohttp's own
    multidict (not read through httpx's ``Headers``, which decodes every header again on each
    look), and the answer's body is one stream (``_Stream``). Proxies are the environment's,
    read per request (``_proxy_for``, ``env_proxy``); the library's own ``proxy`` argument is
    never given (afc_cli.providers.http.new_client builds every transport)."""

    URL_CACHE = 256  # fixed endpoints: a run's poll URLs are each used a few times only

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._timeouts: dict[tuple, aiohttp.ClientTimeout] = {}
        self._urls: dict[str, Any] = {}
        self._refused: dict[str, bool] = {}
        # PUBLIC_ONLY requests' own pools, one a rule
        self._public: dict[Any, aiohttp.ClientSession] = {}
        # (scheme, host, port) -> proxy
        self._proxies: dict[tuple[str, str, int | None], tuple[Any, Any]] = {}
        self._looked_up: dict[str, tuple[float, list[str]]] = {}  # proxied hosts' addresses

    def _timeout(self, timeout: dict[str, Any]) -> aiohttp.ClientTimeout:
        key = (timeout.get("connect"), timeout.get("read"), timeout.get("pool"))
        found = self._timeouts.get(key)
        if found is None:
            found = self._timeouts[key] = aiohttp.ClientTimeout(
                sock_connect=key[0], sock_read=key[1], connect=key[2]
            )
        return found

    def get_client(self, resolver: Any = None) -> aiohttp.ClientSession:
        """The library's session (its connector's pool size and keep-alive, afc's TLS
        defaults), its names resolved by ``resolver`` (default ``_Resolver``)."""
        limit = self.limits.max_connections
        connector = aiohttp.TCPConnector(
            keepalive_timeout=self.limits.keepalive_expiry,
            ssl=self.ssl_context,
            resolver=resolver or _Resolver(),
            **({"limit": limit} if limit is not None else {}),
        )
        return aiohttp.ClientSession(connector=connector)

    def _url(self, url: httpx.URL) -> Any:
        text = str(url)
        found = self._urls.get(text)
        if found is None:
            if len(self._urls) >= self.URL_CACHE:
                self._urls.clear()
            try:
                found = yarl.URL(text)
            except ValueError as exc:
                # a URL httpx reads and yarl does not (a port past 65535): an output URL is
                # the provider's to name, and this ValueError stopped the run as a bug in afc
                raise httpx.InvalidURL(str(exc)) from None
            self._urls[text] = found
        return found

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.userinfo:
            # httpx sends a URL's user:password as the Authorization header (Basic), as curl
            # does; aiohttp refuses a URL holding them beside that header (a ValueError, which
            # stopped the run as a bug in afc: an output URL is the provider's to name)
            request.url = request.url.copy_with(userinfo=b"")
        if not isinstance(self.client, aiohttp.ClientSession):
            self.client = self.get_client()
        host = request.url.host
        refused = self._refused.get(host)
        if refused is None:
            if len(self._refused) >= self.URL_CACHE:
                self._refused.clear()
            refused = self._refused[host] = refused_address(host)
        if refused:  # an address given as such: the resolver never sees it
            raise AddressRefused(f"{host} is a link-local address")
        session = self.client
        public_only = request.extensions.get(PUBLIC_ONLY)
        if public_only and not allowed_by(public_only)(host):
            raise NotPublic(f"{host}, which is not a {_where(public_only)} address")
        proxy, proxy_auth = self._proxy_for(request.url)
        if proxy is not None:  # connected to the proxy: the host's rules are checked here
            await self._checked_through_proxy(host, public_only)
        elif public_only:
            session = self._public.get(public_only)
            if session is None:
                session = self._public[public_only] = self.get_client(_PublicResolver(public_only))
        try:
            data: Any = request.content or None
        except httpx.RequestNotRead:
            if isinstance(request.stream, httpx.ByteStream):
                # a redirect's request (a download's): httpx hands it the first request's
                # stream unread; given to aiohttp it went out as an empty chunked body, a GET
                # that a CDN may refuse (CloudFront answers a GET with a body 403)
                data = request.read() or None
            else:
                data = request.stream  # a streamed body (multipart): aiohttp frames it
                request.headers.pop("transfer-encoding", None)
        headers = CIMultiDict(
            (name.decode("latin-1"), value.decode("latin-1")) for name, value in request.headers.raw
        )
        extensions = request.extensions
        timeout = extensions.get("timeout", {})
        # the status line and headers within the pool and read timeouts (and the request
        # body's time at MIN_RATE): aiohttp's own bound the silence between reads only
        sized = int(request.headers.get("content-length") or 0)
        deadline = _deadline(
            timeout, asyncio.get_running_loop().time() + (timeout.get("pool") or 0), sized
        )
        try:
            async with asyncio.timeout_at(deadline):
                response = await session.request(
                    request.method,
                    self._url(request.url),
                    headers=headers,
                    data=data,
                    allow_redirects=False,
                    auto_decompress=False,
                    compress=False,
                    timeout=self._timeout(timeout),
                    server_hostname=extensions.get("sni_hostname"),
                    proxy=proxy,
                    proxy_auth=proxy_auth,
                )
        except Exception as exc:
            _raise_mapped(exc)
        return _Answer(
            status_code=response.status,
            headers=response.raw_headers,
            stream=_Stream(response, timeout),
            request=request,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": response.reason.encode()}
            if response.reason
            else {"http_version": b"HTTP/1.1"},
        )

    def _proxy_for(self, url: httpx.URL) -> tuple[Any, Any]:
        """The environment's proxy for ``url`` and its credentials (None, None: none), looked
        up once a scheme, host and port (``env_proxy``)."""
        key = (url.scheme, url.host, url.port)
        found = self._proxies.get(key)
        if found is None:
            if len(self._proxies) >= self.URL_CACHE:
                self._proxies.clear()
            found = self._proxies[key] = env_proxy(self._url(url))
        return found

    async def _checked_through_proxy(self, host: str, public_only: Any) -> None:
        """The address rules for a host reached through a proxy, which connects to it: the
        host's addresses as this host resolves them (kept ``DNS_TTL_S``, as aiohttp's own
        resolver keeps them) must not be link-local (``AddressRefused``), nor, for a
        ``PUBLIC_ONLY`` request, other than public (``NotPublic``). A name that does not
        resolve here is the proxy's to resolve, and is not refused."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        found = self._looked_up.get(host)
        if found is None or found[0] < now:
            try:
                infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
            except (OSError, UnicodeError):
                infos = []
            if len(self._looked_up) >= self.URL_CACHE:
                self._looked_up.clear()
            found = self._looked_up[host] = (now + DNS_TTL_S, [info[4][0] for info in infos])
        addresses = found[1]
        if any(refused_address(address) for address in addresses):
            raise AddressRefused(f"{host} resolves to a link-local address")
        if public_only and not all(allowed_by(public_only)(address) for address in addresses):
            raise NotPublic(
                f"{host}, which resolves to an address that is not {_where(public_only)}"
            )

    async def aclose(self) -> None:
        for session in self._public.values():
            await session.close()
        self._public = {}
        await super().aclose()


class LeanCookies(httpx.Cookies):
    """A client's cookie jar that looks at a response only when it sets a cookie. httpx
    hands every response to ``http.cookiejar``, which builds a urllib request (parsing the URL
    again) before it finds no ``Set-Cookie`` header: measured, an eighth of the client's CPU
    per call. The jar ignores ``Set-Cookie2`` anyway (its default policy is not RFC 2965),
    so skipping responses without ``Set-Cookie`` changes nothing it keeps."""

    def extract_cookies(self, response: httpx.Response) -> None:
        if "set-cookie" in response.headers:
            super().extract_cookies(response)


DNS_TTL_S = 10.0  # how long a proxied host's addresses are kept (aiohttp's resolver's own)


def env_proxy(url: yarl.URL) -> tuple[Any, Any]:
    """The proxy the environment names for ``url`` (``HTTPS_PROXY`` or ``HTTP_PROXY`` by its
    scheme, upper or lower case, unless ``NO_PROXY`` lists its host: the rules curl, boto3
    and httpx follow, read by the standard library), with the proxy's credentials from its
    URL or ``~/.netrc`` (aiohttp's reading), or (None, None).

    A proxy named without a scheme (``HTTPS_PROXY=proxy.studio:3128``) is an http one, as
    curl, httpx and botocore take it, and one on https is kept: aiohttp's own reading
    (``get_env_proxy_for_url``) made the first a URL of an unknown scheme (each paid call
    failed, at a cost unknown) and dropped the second with a log line, the calls going
    straight out past the proxy."""
    from aiohttp.helpers import basicauth_from_netrc, netrc_from_env, strip_auth_from_url

    from afc_cli.providers.base import named_proxy

    named = named_proxy(url.scheme, url.host, url.explicit_port)
    if named is None:
        return None, None
    try:
        proxy, auth = strip_auth_from_url(yarl.URL(named))
        why = None if proxy.host else "no host"
    except ValueError as exc:  # 'http://[::1', a port past 65535, ':3128'
        proxy, auth, why = None, None, str(exc)
    if why is not None:
        # yarl's ValueError stopped the run before it began as 'unexpected error ... a bug in
        # afc', exit 1, naming no variable; a proxy with no host failed each call, never sent.
        # The value is not shown: a proxy's URL may hold its password
        raise ProxyUnsupported(
            f"{url.scheme.upper()}_PROXY is set to no proxy URL afc can reach ({why}): fix it "
            "(http://HOST:PORT), or list the provider's host in NO_PROXY"
        )
    assert proxy is not None
    if proxy.scheme not in ("http", "https"):
        raise ProxyUnsupported(
            f"{url.scheme.upper()}_PROXY names a {proxy.scheme} proxy ({proxy.host}:{proxy.port}):"
            " afc's provider calls go through http and https proxies only; name one, or list "
            "the provider's host in NO_PROXY"
        )
    if auth is None and proxy.host is not None:
        try:
            auth = basicauth_from_netrc(netrc_from_env(), proxy.host)
        except LookupError:
            pass
        if auth is not None:
            from afc_cli import secrets

            # sent in Proxy-Authorization as a URL's is, and as open to a proxy quoting it
            # back: a secret as a proxy variable's password is (secrets._proxy_passwords)
            # (the login where the password is empty: then it is the key, as in a URL's)
            secrets.register_value(auth.password or auth.login)
            for token in secrets.basic_tokens(auth.login, auth.password):  # as it is sent
                secrets.register_value(token)
    return proxy, auth


class LeanClient(httpx.AsyncClient):
    """httpx's client with ``LeanCookies`` for its jar; otherwise httpx's own."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._cookies = LeanCookies(self._cookies)

    @property
    def cookies(self) -> httpx.Cookies:
        return self._cookies

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        self._cookies = LeanCookies(cookies)


def pool_limits(connections: int) -> Any:
    """A pool of ``connections``, all kept alive between calls (for 30 s idle): at a width of
    hundreds, a connection closed after each call is a reconnect for the next one."""
    return httpx.Limits(
        max_connections=connections, max_keepalive_connections=connections, keepalive_expiry=30.0
    )


def new_transport(connections: int) -> PoolTransport:
    return PoolTransport(limits=pool_limits(connections))
