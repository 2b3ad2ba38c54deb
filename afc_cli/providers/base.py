"""What every provider adapter speaks: one request in, one attempt result or one error out."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from afc_cli.costs import RateCards
from afc_cli.secrets import longest_secret, scrub, visible
from afc_cli.spool import Output


async def _nothing(request_id: str) -> None:
    pass


def no_look() -> None:
    """``AttemptRequest.last_look`'s default: a request sent with no look (tests, tools)."""
    pass


def no_ready() -> None:
    """``AttemptRequest.on_ready``'s default: nobody to tell (tests, tools)."""
    pass


class NeverSent(Exception):
    """Raised by ``AttemptRequest.last_look`` right before a paid request would leave: the
    job is no longer this run's to pay for (taken over by another process while this one
    stalled, cancelled). Nothing was sent, so the attempt cost nothing."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


@dataclass(frozen=True)
class InputImage:
    """A reference image sent with a request (a manifest's ``inputs``): its bytes, media type,
    SHA-256 and where it came from (``job:KEY`` or the file's name), read by the run just
    before the attempt (afc_cli/inputs.py)."""

    data: bytes
    mime: str
    sha256: str
    source: str

    def data_uri(self) -> str:
        import base64

        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode()}"


@dataclass(frozen=True)
class AttemptRequest:
    job_id: str
    key: str
    prompt: str
    params: dict[str, Any]
    provider: str
    model: str
    attempt: int  # the job's attempt number, counted across runs (1-based)
    rates: RateCards
    # job-style providers: awaited with the provider's request id the moment a submit
    # returns, so it is committed to the attempt row before anything else can go wrong
    on_submitted: Callable[[str], Awaitable[None]] = _nothing
    # job-style providers: called once polling is over and the request's result is ready
    # (rendered, billed), before its output is fetched: a stopping run waits a moment for
    # that fetch rather than leave it to a later run (afc_cli/pipeline.py, ``result_ready``),
    # by when the provider may have deleted the result (fal keeps it minutes)
    on_ready: Callable[[], None] = no_ready
    # job-style providers: poll this request (left by a run that died) instead of submitting
    resume_id: str | None = None
    # the attempt window, for providers that enforce it on their side (Replicate Cancel-After)
    window_s: float | None = None
    # reference images, in the manifest's order; each adapter sends them in its own format
    inputs: tuple[InputImage, ...] = ()
    # the run's stop (afc_cli/pipeline.py, RunContext.stopping): a synchronous provider's
    # later rounds of fetching a paid output end at it (``HttpProvider.outlast``), its cost
    # recorded, rather than run until the grace period abandons them as unknown
    stopping: asyncio.Event | None = None
    # Between later rounds of fetching a paid output (``HttpProvider.outlast``): ``idle()``
    # gives the job's run slot back for the pause (RunContext.idle, as a backoff wait does),
    # and ``ended()`` says why the job is no longer this run's to finish (cancelled, taken
    # over), or None: then the rounds end, the render's cost recorded, and nothing holds on.
    idle: Callable[[], AbstractAsyncContextManager[Any]] | None = None
    ended: Callable[[], str | None] | None = None
    # Called by every adapter with nothing awaited between it and the paid request's send
    # (a job-style provider's submit; a synchronous provider's one call): raises
    # ``NeverSent`` when the job is no longer this run's (afc_cli/pipeline.py, ``_last_look``).
    # The run's own look after the attempt row's commit can come long before the send: a
    # job-style call waits for its task to be scheduled, an adapter reads and encodes the
    # reference images, a process is frozen (SIGSTOP, a paused VM, a laptop's sleep).
    last_look: Callable[[], None] = no_look
    # A paid render's known cost (micro-USD) and its source, awaited before the later rounds
    # of fetching its output (``HttpProvider.fetch_output``), which may last an hour: it is
    # written on the attempt at once (afc_cli/pipeline.py), not held in memory until the
    # fetch ends, so a process killed meanwhile leaves the attempt at the cost it was paid
    on_priced: Callable[[int, str], Awaitable[None]] | None = None
    # The output URL a synchronous provider's paid answer named, the render's known cost
    # (None: unknown), the answer's id and its usage (keyword ``usage``), awaited before its
    # download begins: committed on the attempt (afc_cli/pipeline.py), so a run stopped or
    # killed during the download leaves the next run that URL to fetch for free
    # (``HttpProvider.fetch_left``) rather than a new render to pay for. A job-style
    # provider's request id serves so already: not asked of those
    on_answer_url: Callable[..., Awaitable[None]] | None = None
    # where an output download too large to hold in memory is spilled (``Spilled``): the
    # spool's folder, so the spool step's copy stays on one disk; None: the system's temp
    scratch: str | None = None


@dataclass
class AttemptResult:
    data: Output
    ext: str
    usage: dict[str, Any] = field(default_factory=dict)
    cost_micros: int | None = None
    cost_source: str | None = None
    provider_request_id: str | None = None


# The most of a provider's error message afc keeps. A provider, or a gateway in front of it,
# may quote the whole request back (a reference image's base64 is megabytes) or answer with a
# page of any size: kept whole, one 20 MB message was written to the ledger three times (the
# attempt, the job, its event), printed whole on stderr and by every 'afc status'.
MAX_MESSAGE_CHARS = 4000


def bounded(message: str) -> str:
    """``message`` scrubbed (``secrets.scrub``) and cut to ``MAX_MESSAGE_CHARS``, the cut said.
    Only its head is scrubbed (twice what is kept), so a huge message costs no more.

    A secret the head's cut falls in is not whole in the head, and is left there: its start,
    at the head's end, at most as long as the longest secret. Kept only the first half, it
    was cut off, unless scrubbing had shrunk the head by half (a key quoted a hundred times,
    percent-encoded text decoded): then the start of the cut secret was kept (outside audit
    55g). The scrubbed head's last stretch that long is dropped."""
    if len(message) <= MAX_MESSAGE_CHARS:
        return scrub(message)
    scrubbed = scrub(message[: 2 * MAX_MESSAGE_CHARS])
    cut = len(scrubbed) - (longest_secret() if len(message) > 2 * MAX_MESSAGE_CHARS else 0)
    head = scrubbed[: max(0, min(MAX_MESSAGE_CHARS, cut))]
    return f"{head}... (cut: the message had {len(message)} characters)"


class ProviderError(Exception):
    """A failed attempt, classified into one of afc's error classes (afc_cli/attempts.py)."""

    def __init__(
        self,
        error_class: str,
        message: str,
        *,
        http_status: int | None = None,
        retry_after: float | None = None,
        usage: dict[str, Any] | None = None,
        cost_micros: int | None = None,
        cost_source: str | None = None,
        request_id: str | None = None,
    ):
        # a provider may quote the API key back, send megabytes, or a terminal's escapes
        message = visible(bounded(message))
        super().__init__(message)
        self.error_class = error_class
        self.message = message
        self.http_status = http_status
        self.retry_after = retry_after
        self.usage = usage or {}
        self.cost_micros = cost_micros
        self.cost_source = cost_source
        self.request_id = request_id  # the provider's id for the call, when it gave one


GONE_PREFIX = "the provider no longer has request"
# ``Provider.cancel_answer`` when the provider said the request completed before the cancel
# came: rendered and billed, its result there to fetch by its id (nothing was stopped)
COMPLETED = "completed"
# ``Provider.cancel_answer`` when the provider said the request had ended by itself before the
# cancel came (a failed render: nothing was stopped, and what it billed is read by its id)
ENDED = "ended"


class RequestGone(ProviderError):
    """A resumed request is unknown to the provider (404)."""

    def __init__(self, provider: str, request_id: str, detail: str = ""):
        super().__init__(
            "unavailable",
            f"{GONE_PREFIX} {request_id} ({provider}{': ' + detail if detail else ''}); "
            "it may have been paid for",
        )


class OutputNotKept(ProviderError):
    """A paid render's output was being downloaded and could not be written where a large
    one is spilled (``AttemptRequest.scratch``, the spool's folder: a full disk, say). The
    run records the paid attempt and stops, as when a spool write fails (afc_cli/pipeline.py,
    ``_not_kept``): every other render would land on the same disk."""

    def __init__(self, message: str):
        super().__init__("server", message)


class Provider:
    name: str = ""
    key_env: str | None = None  # the environment variable holding the API key
    resumable = False  # job-style: a submitted request can be polled again by id
    # An ``auth`` answer is about the key, the account or the model (a 401, a 402, OpenAI's
    # insufficient_quota, a 403 for a model the key may not use), not the one request: the
    # model's other jobs are not sent in the run that met it (``pipeline.render``). The
    # ``local`` provider's failures are each job's own (its ``fail`` param): False.
    refusal_holds_model = True
    # The params this adapter reads or sends. None: the params are the model's own inputs,
    # passed through as they are (Replicate, fal), so any name may be meaningful.
    params: frozenset[str] | None = None
    # The param that asks one request for several images (OpenAI's ``n``), each produced and
    # billed (every adapter reports them all as ``images``); None: one image a request.
    images_param: str | None = None
    # The rate card prices this adapter's answers can be priced by (RateCards.price in
    # afc_cli/costs.py): the units its answers report. A card naming none of them could
    # never price an answer, so the manifest refuses it (manifest.rate_problems).
    priced_by: frozenset[str] = frozenset({"per_image"})

    def images_requested(self, params: dict[str, Any]) -> int:
        """How many images a request with ``params`` asks for, for the estimates of plans and
        budgets (``RateCards.estimate``): ``images_param``'s value when it is a whole number
        from 1 up (also written as ``"4"`` or ``4.0``, which a model's input may accept),
        else 1, the providers' default (a value they cannot read is refused, unbilled)."""
        from decimal import Decimal, InvalidOperation

        value = params.get(self.images_param) if self.images_param else None
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            return 1
        try:
            count = Decimal(str(value).strip())
        except InvalidOperation:
            return 1
        if not count.is_finite() or count < 1 or count != count.to_integral_value():
            return 1
        return int(min(count, Decimal(10**9)))  # the estimate is bounded anyway

    def megapixels_requested(self, params: dict[str, Any]) -> int | None:
        """The megapixels a request with ``params`` asks for, all its images', where they are
        known before the call (a card's ``per_megapixel`` then estimates it: ``RateCards.
        estimate``); None where the request does not say its size (fal's ``FalProvider``
        says; the others' answers report no size)."""
        return None

    def params_problems(self, params: dict[str, Any]) -> list[str]:
        """Problems with a job's params, each 'field: message'. Checked with the manifest."""
        return []

    def param_defaults(self, params: dict[str, Any]) -> dict[str, Any]:
        """The params this adapter itself fills in when a job leaves them out, with the value
        it uses (given the job's other params). Sending such a param or leaving it out is the
        same request, so the manifest drops it before hashing (afc_cli/manifest.py). Only
        defaults the adapter applies belong here, never a provider's server-side ones (those
        can change, and a param sent is not the same request as one left out)."""
        return {}

    def api_key(self) -> str:
        key = os.environ.get(self.key_env or "")
        if not key:
            raise ProviderError("auth", f"{self.key_env} is not set")
        return key

    def warm(self) -> None:
        """Make what the first call needs (an HTTP client) before its attempt row is
        committed, so the row's commit and the request leaving are moments apart."""

    async def render(self, request: AttemptRequest) -> AttemptResult:
        raise NotImplementedError

    async def stop_left(self, request_id: str, model: str) -> str | None:
        """Ask the provider to stop a request an attempt's window left behind (``cancel_answer``).
        None when the request is taken for stopped; else why its result is to be read by its
        id (within one more window): it answered that the request had completed already,
        rendered and paid for, its result there to fetch (an adapter may also say so of a
        request that had ended otherwise, whose end its id then reads: Replicate's; or of one
        whose cancel it did not take, which renders on, billed: fal's)."""
        if await self.cancel_answer(request_id, model) == COMPLETED:
            return "the provider says it had completed"
        return None

    async def cancel_answer(self, request_id: str, model: str) -> str | None:
        """``cancel``'s answer as the provider gave it: None when it took the request,
        ``COMPLETED`` when it said the request had completed before the cancel came (rendered
        and billed; fal's ALREADY_COMPLETED, a Replicate prediction the cancel answers as
        ``succeeded``), ``ENDED`` when it said the request had ended otherwise by itself (a
        Replicate prediction answered ``failed``: billed its seconds, nothing to fetch), else
        why it may not have stopped it. Job-style adapters implement
        it; a synchronous provider has nothing to stop."""
        return None

    async def completed_usage(
        self, request_id: str, model: str, params: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The usage a job-style request reports once it completed or ended (``cancel_answer``
        said ``COMPLETED`` or ``ENDED``), read by its id with one free GET: what prices an attempt a cancel
        found rendered and billed (``ops._stop_at_providers``). ``params``: the job's, for
        one whose output the provider already removed, which made the images its request
        asked for (``images_requested``), as a poll prices it. None when it cannot be read
        or reports none; a synchronous provider has nothing to read."""
        return None

    async def close(self) -> None:
        """Release connections."""


def require_ca_file() -> None:
    """Refuse, before anything is done, an ``SSL_CERT_FILE`` that cannot be read as
    certificate authorities (a path mistyped, a folder, a file that is no PEM). The provider
    calls (``transport.PoolTransport``) and the webhook deliveries (``webhooks._ProxyTransport``)
    read it as httpx does, making their TLS context when their client is made; a file that
    cannot be loaded raised there an OSError without its path, and every run, worker and
    'afc webhooks deliver' ended 'afc: [Errno 2] No such file or directory; every job stays
    resumable: fix it, then run 'afc resume'', exit 1: naming neither the variable nor the
    file, and sending a drain of webhooks to a run. ``SSL_CERT_DIR`` is only read when a
    certificate is checked (a folder that is not there trusts nothing: a failed connection
    that says so)."""
    import ssl

    from afc_cli.errors import UsageError

    path = os.environ.get("SSL_CERT_FILE")
    if not path:  # unset or empty: httpx uses its own bundle
        return
    try:
        ssl.create_default_context(cafile=path)
    except OSError as exc:  # FileNotFoundError, IsADirectoryError, PermissionError, SSLError
        why = exc.strerror or getattr(exc, "reason", None) or exc.__class__.__name__
        raise UsageError(
            f"SSL_CERT_FILE names {path!r}, which cannot be read as certificate authorities "
            f"({why}): point it at a PEM file of the certificate authorities to trust (the "
            "provider calls and webhook deliveries read it), or unset it; nothing was done"
        ) from None


def named_proxy(scheme: str, host: str | None, port: int | None) -> str | None:
    """The proxy the environment names for a URL of this scheme, host and port, as curl,
    boto3 and httpx read it: ``HTTPS_PROXY`` or ``HTTP_PROXY`` by the scheme, upper or lower
    case, none where ``NO_PROXY`` lists the host (an entry may name a port too,
    ``minio.lan:9000``: the standard library matches it against the host alone and against
    host:port); never ``ALL_PROXY``. A proxy written without a scheme
    (``HTTPS_PROXY=proxy.studio:3128``) is an http one. None: the URL is reached straight.
    The provider calls (``transport.env_proxy``) and the webhook deliveries
    (``webhooks._ProxyTransport``) read it here."""
    import urllib.request

    if host is not None and urllib.request.proxy_bypass(host if port is None else f"{host}:{port}"):
        return None
    named = urllib.request.getproxies().get(scheme)
    if not named:
        return None
    return named if "://" in named else f"http://{named}"
