"""What the HTTP adapters share: one httpx client each, with explicit timeouts and no retries
of its own (afc's attempt runner is the one retry loop), and error classification."""

from __future__ import annotations

import asyncio
import math
import os
import random
import re
import time
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from functools import partial
from typing import Any

from afc_cli.attempts import parse_retry_after
from afc_cli.providers.base import (
    AttemptRequest,
    AttemptResult,
    OutputNotKept,
    Provider,
    ProviderError,
    RequestGone,
)
from afc_cli.spool import Output, Spilled, head_of

MAX_OUTPUT_BYTES = 2 * 1024**3
# An output download larger than this is written to a file as it arrives (``Spilled``), not
# held in memory; the file is written a batch of ``SPILL_BATCH_BYTES`` at a time. A download
# then holds at most this, a batch and one decoded piece (some 4 MiB for a gzip body of
# zeros: afc_cli/providers/transport.py, ``DECODE_SLICE``) in memory, whatever its size
IN_MEMORY_OUTPUT_BYTES = 16 << 20
SPILL_BATCH_BYTES = 4 << 20


# Connections per provider when nothing sizes the pool (run_jobs sizes it: ``size_pool``).
DEFAULT_CONNECTIONS = 100


def new_client(read_s: float = 300.0, connections: int = DEFAULT_CONNECTIONS) -> Any:
    import httpx

    from afc_cli.providers.transport import (
        ACCEPT_ENCODING,
        LeanClient,
        new_transport,
        pool_limits,
    )

    # httpx sends each request once (no transport retries unless asked): a paid POST that
    # timed out is never resent behind afc's back. Nor does an API call follow a redirect: httpx
    # sends a POST's body again to a 307/308's Location (a second paid request), and keeps
    # every header but ``Authorization`` on a redirect to another host (Gemini's
    # ``x-goog-api-key`` went wherever a proxy's Location pointed); a redirect is the call's
    # answer, classified by its status. Only free GETs follow them: ``download`` (no key), and
    # a poll and fal's result (fal's own client follows them), whose key is in
    # ``Authorization``, which httpx drops on a redirect to another origin. The transport is
    # aiohttp's pool (see afc_cli/providers/transport.py for why, and for its error mapping).
    # Only the codings whose answers stay bounded as they decode (transport.ACCEPT_ENCODING),
    # whatever decoders httpx finds installed.
    return LeanClient(
        headers={"Accept-Encoding": ACCEPT_ENCODING},
        timeout=httpx.Timeout(connect=15.0, read=read_s, write=60.0, pool=60.0),
        follow_redirects=False,
        limits=pool_limits(connections),
        transport=new_transport(connections),
    )


class HttpProvider(Provider):
    """A provider behind an HTTP API: its base URL (overridable from the environment, so
    tests point it at a local fake server) and one lazily made client, whose connection pool
    a run sizes to the calls it may have in flight (``size_pool``)."""

    base_env = ""
    default_base = ""
    read_s = 300.0  # how long one answer may take (a synchronous render, or one poll)
    # how long the provider keeps what a finished request made (its output URLs, fal's
    # result) fetchable, less a margin: paid outputs out of reach are fetched again for this
    # long (``outlast``); 0, one round only
    keeps_outputs_s = 0.0
    # whether its outputs come as URLs to download, through a pool of their own beside the
    # API's (transport.PUBLIC_ONLY): a second socket per call to room for (run.open_files)
    download_pool = False
    # polling's clock and dice, replaceable in tests
    sleep: Callable[[float], Awaitable[None]] = staticmethod(asyncio.sleep)
    rand: Callable[[], float] = staticmethod(random.random)
    clock: Callable[[], float] = staticmethod(time.monotonic)
    # on ``clock``: no poll of this provider is due before it (a poll's 429 said when to come
    # back: ``hold_polls``)
    _polls_held_until = 0.0

    def __init__(self) -> None:
        self._client: Any = None
        self._private_bases: dict[str, Any] = {}
        self.connections = DEFAULT_CONNECTIONS
        self._urls: dict[str, Any] = {}
        self.watch_polls(lambda message: None)

    def url(self, path: str) -> Any:
        """``{base}{path}`` as an ``httpx.URL``, parsed once: httpx parses a URL given as text
        on every request (measured: a sixth of the client's CPU per call). For the fixed
        endpoints of a run (a model's submit URL), not for per-request ones (a poll's)."""
        text = self.base + path
        url = self._urls.get(text)
        if url is None:
            import httpx

            url = self._urls[text] = httpx.URL(text)
        return url

    def size_pool(self, connections: int) -> None:
        """Size the next client's pool: one connection per call the run may have in flight,
        so no call queues for a connection or reconnects. A client already made keeps its
        pool (a run closes its clients at its end, so the next run makes new ones)."""
        self.connections = max(1, connections)

    @property
    def base(self) -> str:
        # set but empty (``OPENAI_BASE_URL=`` in a .env file) is not set, as for AWS_ENDPOINT_URL
        return (os.environ.get(self.base_env) or self.default_base).rstrip("/")

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = new_client(read_s=self.read_s, connections=self.connections)
        return self._client

    def warm(self) -> None:
        self.client  # noqa: B018 - made on first use: importing aiohttp takes ~0.1-0.5 s

    def call_timeout(self, request: AttemptRequest) -> Any:
        """The timeouts of a synchronous provider's paid call (OpenAI's, Gemini's): the
        client's, its read timeout (how long the answer may take: the whole render) made the
        attempt's ``window_s`` and a margin (so the window ends it first) when the window is
        longer than ``read_s``. The run ends
        the call at its window itself (``window_expired``, afc_cli/pipeline.py); cut at the
        read timeout first, a render a user allowed 600 s was a ``timeout`` at 300 s, of
        unknown cost, and the next attempt on the same model paid for it again."""
        import httpx

        window = request.window_s
        if not window or window <= self.read_s:
            return httpx.USE_CLIENT_DEFAULT
        timeout = self.client.timeout
        return httpx.Timeout(
            connect=timeout.connect,
            read=window + WINDOW_MARGIN_S,
            write=timeout.write,
            pool=timeout.pool,
        )

    async def poll_wait(self, polls: int, last: tuple[float, float] | None) -> tuple[float, float]:
        """Wait for a job-style request's next poll (``next_poll``), ``polls`` polls made so far,
        ``last`` the previous poll's (due, sent) times on ``clock`` (None before the first:
        the submit returned just now). Returns this poll's (due, sent)."""
        now = self.clock()
        due, sent = last if last is not None else (now, now)
        interval = poll_interval()
        due = next_poll(interval, polls, self.rand, due, sent)
        if self._polls_held_until > due:
            # a poll of this provider was throttled (``hold_polls``): every request's next
            # poll waits as long as the 429 said, in the first slot of its own grid after it,
            # so the requests polled together before do not all come back at one instant
            due += interval * math.ceil((self._polls_held_until - due) / interval)
        await self.sleep(max(0.0, due - now))
        return due, self.clock()

    def hold_polls(self, seconds: float | None) -> None:
        """A poll was answered 429, saying to come back in ``seconds`` (None: it did not say):
        no poll of this provider, for any request, goes out before then (``poll_wait``).
        Polled again at each one's next interval, a thousand requests in flight went on
        polling an API that had asked to be spared (at most ``MAX_POLL_HOLD_S``)."""
        if seconds is None or seconds <= 0:
            return
        until = self.clock() + min(seconds, MAX_POLL_HOLD_S)
        self._polls_held_until = max(self._polls_held_until, until)

    def poll_throttled_for(self, response: Any) -> float | None:
        """The wait a poll's 429 names (``hold_polls``): its Retry-After, by default."""
        return retry_after_of(response.headers)

    async def poll(
        self, url: Any, request_id: str, headers: dict[str, str]
    ) -> tuple[Any, dict[str, Any]] | None:
        """One poll of the job-style request ``request_id`` at ``url``: its answer and the
        answer's JSON object (``json_or_empty``), or None when the poll got nothing (a
        transport error, a redirect loop, or a status that says it failed for a moment:
        ``passing``), which
        the caller meets by polling again at the next interval (``poll_failed`` keeps count,
        so an outage is said). A 200 or 202 whose body
        is no JSON object is returned for the caller to count (``unreadable_poll``). A 404
        means the request is gone at the provider (``RequestGone``)."""
        import httpx

        try:
            # a free GET follows redirects (``new_client``): its key is in ``Authorization``,
            # which httpx drops on a redirect to another origin
            response = await self.client.get(url, headers=headers, follow_redirects=True)
        except httpx.TransportError as exc:
            self.poll_failed(type(exc).__name__)
            return None
        except httpx.TooManyRedirects:
            # a proxy's or a captive portal's redirect loop: no word from the provider, whose
            # request may run on; no transport error (httpx's), it stopped the run as a bug
            self.poll_failed("too many redirects")
            return None
        if passing(response.status_code):
            if response.status_code == 429:
                self.hold_polls(self.poll_throttled_for(response))
            self.poll_failed(f"HTTP {response.status_code}")
            return None
        state = json_or_empty(response)
        if response.status_code in (200, 202) and not state:
            return response, state  # no word about the request: not an answer (the caller's)
        self.poll_answered()
        if response.status_code == 404:
            raise RequestGone(self.name, request_id, "404")
        return response, state

    def unreadable_poll(self, seen: int, status: int = 200) -> bool:
        """A poll answered ``status`` (200, or fal's 202) with no status afc can read (an
        HTML page from a proxy, a body cut short), the ``seen``-th in a row for one request:
        a failed poll, made again, as ending the attempt there would pay again for a request
        that may still run. True at the ``UNREADABLE_POLLS``-th: an answer that never makes
        sense (a status URL serving something else) would otherwise be polled until the
        window ends, or for ever."""
        self.poll_failed(f"HTTP {status} without a status afc can read")
        return seen >= UNREADABLE_POLLS

    async def send_cancel(self, send: Callable[[], Awaitable[Any]]) -> Any:
        """``send()`` (a cancel: free, and the same each time it is asked) again while the
        provider throttles it (429), after the wait it names (``Retry-After``, at most
        ``CANCEL_WAIT_CAP_S``), ``CANCEL_TRIES`` times in all: the last answer is returned. A
        throttled cancel stopped nothing; taken as the answer, the request rendered on,
        billed, and no later cancel asked again ('afc cancel' of a batch asks eight at once,
        which meets a provider's rate limit sooner than one at a time)."""
        for _ in range(CANCEL_TRIES - 1):
            response = await send()
            if response.status_code != 429:
                return response
            told = retry_after_of(response.headers)
            await self.sleep(min(poll_interval() if told is None else told, CANCEL_WAIT_CAP_S))
        return await send()

    async def fetch_output(
        self,
        request: AttemptRequest,
        began: float,
        url: str,
        usage: dict[str, Any],
        cost: int | None,
        request_id: str | None = None,
        kept_s: float | None = None,
    ) -> Output:
        """``download`` of a paid render's output, in rounds while it stays out of reach for
        a moment (``outlast``): a failure that outlasts them carries the render's usage and
        cost (it was paid) and its request id. ``began``: the call's start on ``clock``;
        ``kept_s``: how much longer than that the provider keeps the output (None: for
        ``keeps_outputs_s`` after the first round failed)."""
        answered = request.on_answer_url is not None and not self.resumable
        answered = answered and not is_data_url(url)
        if answered:
            # the URL with the known cost and the answer's id (OpenAI's x-request-id: what
            # its support asks for about a bill), which a killed run's row keeps too
            await request.on_answer_url(url, cost, request_id, usage=usage)
        public_only = await self._output_rule()
        priced = None
        if cost is not None and request.on_priced is not None and not answered:
            priced = partial(request.on_priced, cost, "derived")
        try:
            return await self.outlast(
                request,
                began,
                lambda: download(
                    self.client,
                    self.name,
                    url,
                    sleep=self.sleep,
                    rand=self.rand,
                    public_only=public_only,
                    spill_to=request.scratch,
                ),
                priced,
                kept_until=None if kept_s is None else began + kept_s,
            )
        except ProviderError as exc:
            exc.usage, exc.cost_micros = usage, cost
            exc.cost_source = "derived" if cost is not None else None
            exc.request_id = exc.request_id or request_id
            raise

    async def fetch_left(
        self,
        request: AttemptRequest,
        url: str,
        cost: int | None,
        source: str | None,
        age: float = 0.0,
        usage: dict[str, Any] | None = None,
    ) -> AttemptResult:
        """The output of a paid render a stopped or killed run left at ``url`` (its answer's,
        committed with its known ``cost`` before the download began: ``on_answer_url``),
        fetched as that run would have, nothing sent to the provider's API and nothing paid,
        while the provider keeps it: ``keeps_outputs_s`` from the render, made ``age``
        seconds ago (a URL left 50 minutes ago behind a failing CDN is tried for five more
        minutes, not for another 55). A URL the provider answers 403, 404 or 410 for (it let
        the output go) fails the attempt at its cost, as for any output; the caller says so,
        and a new render follows. ``usage``: the answer's, committed with the URL (the
        attempt's end keeps it, where it was written ``{}``)."""
        usage = usage or {}
        data = await self.fetch_output(
            request, self.clock(), url, usage, cost, kept_s=max(self.keeps_outputs_s - age, 0.0)
        )
        ext = request.params.get("output_format") or output_ext(url)
        return AttemptResult(
            data=data,
            ext=str(ext),
            usage=usage,
            cost_micros=cost,
            cost_source=source if cost is not None else None,
        )

    async def _output_rule(self) -> Any:
        """Where this provider's output URLs may lead (``transport.PUBLIC_ONLY``'s value):
        public addresses only (True), unless its base URL is on this host (a proxy here, a
        test's server: anywhere, False) or on its private network (a proxy on the studio's
        network: anywhere but this host, ``transport.NOT_THIS_HOST``; all this host's
        addresses were allowed too, so a model's output URL naming a Docker API on
        127.0.0.1:2375 was fetched and stored as the job's output). A base whose name does
        not resolve is taken as public, and looked up again at the next output (a proxy's name
        that failed once would otherwise have every output of the run refused); one that
        resolved is looked up once a base URL."""
        import httpx

        from afc_cli.providers.transport import NOT_THIS_HOST, not_this_host, public_address

        base = self.base
        found = self._private_bases.get(base)
        if found is None:
            host = httpx.URL(base).host
            try:
                infos = await asyncio.get_running_loop().getaddrinfo(host, None)
            except (OSError, UnicodeError):
                infos = []
            addresses = [info[4][0] for info in infos]
            if not addresses or all(public_address(a) for a in addresses):
                found = True
            elif all(not_this_host(a) for a in addresses):
                found = NOT_THIS_HOST
            else:
                found = False
            if addresses:  # a name that did not resolve this time is looked up again next
                self._private_bases[base] = found
        return found

    async def outlast(
        self,
        request: AttemptRequest,
        began: float,
        fetch: Callable[[], Awaitable[Any]],
        priced: Callable[[], Awaitable[None]] | None = None,
        kept_until: float | None = None,
    ) -> Any:
        """``fetch()`` (free GETs of what a paid render made: a round of ``FETCH_TRIES``)
        made again in later rounds while it fails with ``OutputUnreachable``, each after a
        pause (``refetch_pause``), for as long as the provider keeps what it made
        (``keeps_outputs_s`` after the first round failed) and the attempt's window leaves a
        round's room (``began``: the call's start on ``clock``). The render was paid for: a
        new one would be paid again, and would land behind the same CDN. The first pause of an
        outage is said once (``Reporter.notice``), and so is the first fetch after it.
        ``priced()`` is awaited once, before the first pause: the render's known cost is
        written on its attempt then (``AttemptRequest.on_priced``). ``kept_until``: when, on
        ``clock``, the provider lets the output go, where known (a render a stopped run left:
        ``fetch_left``): no round begins after it."""
        rounds, first_failed = 0, None
        last: OutputUnreachable | None = None
        # the run's own limit on the call (afc_cli/pipeline.py, render), less a margin: a
        # round cut off by it would record the paid render's cost as unknown, so each round
        # is cut here first (its GETs' own time is no part of FETCH_ROUND_INTERVALS: a
        # gateway's 504 or a connect timeout takes seconds each)
        window_end = None
        if request.window_s:
            limit = request.window_s * (1.25 if self.resumable else 1)
            window_end = began + limit - min(WINDOW_MARGIN_S, limit / 10)
        while True:
            try:
                result = await self._round(fetch, window_end, last)
            except OutputUnreachable as exc:
                last = exc
                now = self.clock()
                first_failed = now if first_failed is None else first_failed
                rounds += 1
                pause = refetch_pause(rounds, self.rand)
                end = first_failed + self.keeps_outputs_s
                if kept_until is not None:
                    end = min(end, kept_until)
                if window_end is not None:
                    end = min(end, window_end)
                stopped = self._stopped(request)
                if now + pause + FETCH_ROUND_INTERVALS * poll_interval() > end or stopped:
                    if rounds > 1 or stopped:
                        _rounds_said(exc, rounds, stopped)
                    raise
                if rounds == 1 and priced is not None:
                    await priced()
                if not self._fetch_failing_said:
                    self._fetch_failing_said = True
                    self._notice(
                        f"{self.name}: an output it rendered (and billed) is out of reach "
                        f"({exc.message}); afc fetches it again every "
                        f"{_seconds(REFETCH_PAUSE_INTERVALS[-1] * poll_interval())} at most, "
                        f"for up to {_minutes(self.keeps_outputs_s)} while {self.name} keeps it, "
                        "rather than pay for a new render (Ctrl-C stops the run)"
                    )
                # the job's slot serves another meanwhile
                async with request.idle() if request.idle is not None else nullcontext():
                    await self._pause(pause, request)
                ended = request.ended() if request.ended is not None else None
                if self._stopped(request) or ended:
                    _rounds_said(exc, rounds, not ended, ended)
                    raise
                continue
            if rounds and self._fetch_failing_said:
                self._fetch_failing_said = False
                self._notice(f"{self.name}: an output out of reach was fetched again")
            return result

    def _stopped(self, request: AttemptRequest) -> bool:
        """Whether the run is stopping and this call is awaited to its end: a synchronous
        provider's (a job-style one's is left polling, ``abandon_poll``, and the next run
        fetches its output with no new payment)."""
        return not self.resumable and request.stopping is not None and request.stopping.is_set()

    async def _pause(self, seconds: float, request: AttemptRequest) -> None:
        """``sleep(seconds)``, cut short when the run stops (``_stopped``)."""
        if self.resumable or request.stopping is None:
            await self.sleep(seconds)
            return
        waits = [asyncio.ensure_future(self.sleep(seconds))]
        waits.append(asyncio.ensure_future(request.stopping.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    async def _round(
        self,
        fetch: Callable[[], Awaitable[Any]],
        window_end: float | None,
        last: OutputUnreachable | None,
    ) -> Any:
        """One round of ``fetch``, cut at ``window_end`` (on ``clock``; None: not cut): then
        ``last`` (the previous round's failure) is raised, or a timeout's."""
        if window_end is None:
            return await fetch()
        left = window_end - self.clock()
        try:
            if left <= 0:
                raise TimeoutError
            return await asyncio.wait_for(fetch(), left)
        except TimeoutError:
            if last is not None:
                raise last from None
            raise OutputUnreachable(
                "timeout",
                f"{self.name}: the output was not fetched within the attempt window",
                cost_micros=None,
            ) from None

    def watch_polls(self, notice: Callable[[str], None]) -> None:
        """Tell ``notice`` (a run's ``Reporter.notice``) when every poll of this provider has
        failed for a while, and when one answers again (``poll_failed``, ``poll_answered``);
        and when a paid output is fetched again in later rounds, and got (``outlast``)."""
        self._notice = notice
        self._fetch_failing_said = False
        self._failing_since: float | None = None
        self._failing_said = False

    def poll_failed(self, why: str) -> None:
        """A poll got nothing it could use (``why``: an HTTP status, a transport error's
        name). Polling goes on: it is free, the request id is recorded, and giving up would
        leave a render that may yet be paid for. But an outage should not be silent: when
        every poll of this provider (whatever request it was for) has failed for
        ``POLLS_FAILING_INTERVALS`` poll intervals, the run says so once; and once more when a
        poll answers again."""
        now = self.clock()
        if self._failing_since is None:
            self._failing_since = now
        failing = now - self._failing_since
        if not self._failing_said and failing >= POLLS_FAILING_INTERVALS * poll_interval():
            self._failing_said = True
            self._notice(
                f"{self.name}: every poll has failed for {_seconds(failing)} (last: {why}); afc "
                "keeps polling: the requests' ids are recorded and nothing is paid again "
                "(Ctrl-C stops the run; 'afc resume' polls them later)"
            )

    def poll_answered(self) -> None:
        """A poll got an answer (``poll_failed``)."""
        if self._failing_said:
            failing = self.clock() - self._failing_since
            self._notice(f"{self.name}: polls answer again (after {_seconds(failing)} of failures)")
        self._failing_since, self._failing_said = None, False

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


# poll intervals in which every poll of a provider failed before a run says so (about 10 s at
# the default interval): a blip of a few failed polls is normal, an outage is not
POLLS_FAILING_INTERVALS = 5
# the longest a poll's 429 holds a provider's polls (``hold_polls``): a Retry-After of an hour
# (a misconfigured proxy) would leave every request in flight unpolled past its window
MAX_POLL_HOLD_S = 120.0
# a cancel the provider throttles (429) is asked this many times in all, each after the wait
# it names, at most this long (Replicate's throttle resets "in ~30s")
CANCEL_TRIES = 3
CANCEL_WAIT_CAP_S = 30.0
# unreadable poll answers in a row for one request before its adapter stops polling it (a
# minute at the default interval): Replicate's prediction is then asked to stop, fal's result
# asked for (free)
UNREADABLE_POLLS = 30


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"


def _rounds_said(exc: ProviderError, rounds: int, stopped: bool, ended: str | None = None) -> None:
    """An output's fetch failure said with its rounds, and what ended them: the run's stop,
    or the job's end elsewhere (``ended``: why)."""
    said = [f"{rounds} rounds of {FETCH_TRIES} tries"] if rounds > 1 else []
    if ended:
        said.append(f"not fetched further: the job {ended}")
    elif stopped:
        said.append("afc stopped")
    exc.message = f"{exc.message} ({'; '.join(said)})"
    exc.args = (exc.message,)
    # ended by the run's stop, the output still kept by the provider: a URL committed with
    # the attempt is left to the next run (afc_cli/pipeline.py, ``_resumable``)
    exc.stopped_run = stopped and not ended
    # ended by the job's end elsewhere (why: ``afc cancel``'s 'is cancelled', a takeover)
    exc.job_ended = ended


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else _seconds(seconds)


def poll_interval() -> float:
    """Seconds between polls of a job-style provider (``AFC_POLL_S``, default 2; blank is the
    default, and a run refuses a bad value before it starts: ``run.poll_seconds``)."""
    value = os.environ.get("AFC_POLL_S", "").strip()
    return float(value) if value else 2.0


def next_poll(
    interval: float, polls: int, rand: Callable[[], float], due: float, sent: float
) -> float:
    """When a request's next poll is due, ``polls`` polls made so far, the last one due at
    ``due`` and sent at ``sent`` (before the first poll: both the submit's time).

    One poll per request per interval, however many are in flight, and never more: the first
    is due a random time between half an interval and one and a half after the submit (a
    thousand predictions submitted at once poll spread over a whole interval, not in step, and
    on average one interval after the submit); the later ones on a grid of whole intervals
    from it, at most one in each slot. A poll the run loop sent late (a busy loop wakes its
    timers late) does not push the next one back: it stays due on the grid. Were each due an
    interval after the previous was *sent*, every late wake-up would add to every interval:
    measured at 1,000 predictions in flight on a loaded machine, polls came 3.9 s apart for a
    2 s interval. A poll sent later than its whole slot moves the next to the slot after the
    one it went out in, so a late loop never catches up with two polls in a row. A request in
    flight for a time T is so polled T / interval times on average, whatever its length."""
    if polls == 0:
        return sent + interval * (0.5 + rand())
    slots_late = int(max(0.0, sent - due) // interval)  # whole slots the last poll missed
    return due + interval * (1 + slots_late)


def class_for_status(status: int) -> str:
    """An error answer's class (README: "Error classes"). 408 (the request timed out at the
    server) and 409 (a conflict, Gemini's ABORTED) say "send it again", as the providers' own
    SDKs do: ``unavailable``, retried within the model's attempts."""
    if status in (401, 403):
        return "auth"
    if status == 429:
        return "rate_limited"
    if status in (408, 409, 502, 503, 504):
        return "unavailable"
    if status >= 500:
        return "server"
    return "invalid"


def never_sent(exc: Exception) -> bool:
    """Whether a transport error proves the request never left this machine: no connection
    was made (refused, DNS, TLS handshake, connect timeout) or none was free in the pool. An
    error after the connection was made (a write, a read, a dropped connection) proves
    nothing: the provider may have the request and may bill it."""
    import httpx

    return isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)


def transport_error(
    provider: str, exc: Exception, *, paid_call: bool, fetching: str = "the output"
) -> ProviderError:
    """A request that got no answer. For a call that may have started paid work, its cost is
    unknown (null), unless the request provably never left (``never_sent``): then it is a
    known 0 with the source ``unsent``. For a download or a poll nothing was charged by it.

    A free GET of what a paid render made (``paid_call`` False: ``fetching``, the output or
    fal's result) that never left says so of itself: its failure ends the paid attempt, which
    the adapter gives the render's cost, and "the request was never sent" stood beside that
    cost, as if the render had not been asked for (a CDN's host that did not resolve, or
    refused the connection)."""
    import httpx

    from afc_cli.providers.transport import (
        AnswerTooLarge,
        AnswerUndecodable,
        ProxyRefused,
        ProxyUnsupported,
    )

    unsent = never_sent(exc)
    if isinstance(exc, httpx.TimeoutException):
        cls, what = "timeout", "no connection in time" if unsent else "no answer in time"
    else:
        cls, what = "unavailable", f"connection failed ({exc.__class__.__name__})"
        if isinstance(exc, ProxyRefused | ProxyUnsupported):  # what a person fixes
            what = f"connection failed ({exc})"
        elif isinstance(exc, AnswerTooLarge | AnswerUndecodable):
            # the body came and was refused: 'connection failed (AnswerUndecodable)' sent a
            # person to the network, where a CDN serving plain bytes as 'Content-Encoding:
            # gzip' (or in brotli, unasked) is what to fix
            what = f"{exc}, not read" if paid_call else f"fetching {fetching}: {exc}"
    if unsent:
        what += (
            "; the request was never sent"
            if paid_call
            else f"; fetching {fetching} never reached its host (the paid request was sent)"
        )
    if paid_call and not unsent:
        return ProviderError(cls, f"{provider}: {what}", cost_micros=None, cost_source=None)
    return ProviderError(
        cls, f"{provider}: {what}", cost_micros=0, cost_source="unsent" if unsent else "derived"
    )


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def parse_reset(value: str | None) -> float | None:
    """OpenAI's x-ratelimit-reset-* ("1s", "6m0s", "20ms") in seconds."""
    if not value:
        return None
    total = 0.0
    found = False
    for number, unit in _DURATION.findall(value):
        found = True
        total += float(number) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    return total if found else None


def retry_after_of(headers: Any, limit: str = "requests") -> float | None:
    """A 429's wait: its ``Retry-After`` (or ``retry-after-ms``), else the reset OpenAI names
    for the limit it hit (``x-ratelimit-reset-requests``, or ``x-ratelimit-reset-tokens`` for
    a 429 of ``type: tokens``, whose requests' reset is a moment away)."""
    seconds = _said_retry_after(headers)
    if seconds is None:
        seconds = parse_reset(headers.get(f"x-ratelimit-reset-{limit}"))
    return seconds


def _said_retry_after(headers: Any) -> float | None:
    seconds = parse_retry_after(headers.get("retry-after"), date=headers.get("date"))
    if seconds is None:
        ms = headers.get("retry-after-ms")
        if ms:
            try:
                seconds = float(ms) / 1000
            except ValueError:
                seconds = None
    return seconds


def refused_free(status: int) -> bool:
    """Whether an error answer to a paid synchronous call (OpenAI, Gemini) is known to have
    cost nothing: a refused request (a 4xx) or one sent elsewhere (a 3xx, not followed) made
    nothing; a 5xx may come after the image was made, and so may a 408 from a gateway that
    stopped waiting. A success status (2xx) says the request was taken: never free (a 204
    with no body was recorded as a known 0)."""
    return 300 <= status < 500 and status != 408


def succeeded(status: int) -> bool:
    """Whether a paid synchronous call's status is a success, its answer read as the
    provider's (a gateway in front of it may answer 201 or 202 for the provider's 200: the
    paid image in it was thrown away as an error)."""
    return 200 <= status < 300


def is_data_url(url: str) -> bool:
    """An output sent inline (RFC 2397), not a URL to fetch."""
    return url[:5].lower() == "data:"


def retry_after_for(cls: str, headers: Any, limit: str = "requests") -> float | None:
    """The wait an error answer of class ``cls`` asks for before the next attempt: a 429's
    (``retry_after_of``: its Retry-After, or the rate-limit reset it names), or the explicit
    ``Retry-After`` of an overloaded or failing server (a 503 that says when to come back),
    which backoff honours up to its cap (afc_cli/attempts.py). Not a 503's rate-limit
    headers: OpenAI sends ``x-ratelimit-reset-requests`` on every answer."""
    if cls == "rate_limited":
        return retry_after_of(headers, limit)
    if cls in ("unavailable", "server"):
        return _said_retry_after(headers)
    return None


# An output (or a result) the provider made is fetched with free GETs: one that fails for a
# moment (a 503 from a CDN, a dropped connection) is fetched again, these many times in all,
# after full-jitter waits of up to a half, one and two poll intervals (1, 2, 4 s by default;
# a Retry-After up to FETCH_WAIT_CAP_S): the attempt that paid for the render ends failed
# (and the next attempt pays again) only when the output stays out of reach that long. The
# cap keeps the tries inside the slack a run gives a job-style provider's window (a quarter
# of it, and 5 s), so a render done near its window's end is not lost to the fetch.
FETCH_TRIES = 4
FETCH_WAIT_CAP_S = 5.0
# the most a round of FETCH_TRIES waits between its tries, in poll intervals (0.5 + 1 + 2)
FETCH_ROUND_INTERVALS = 3.5
# An output still out of reach after a round is fetched again in later rounds (``outlast``),
# after pauses of 8, 16, then 30 poll intervals at most (16, 32 and 60 s by default; each
# between half and the whole of that, at random), for as long as the provider keeps it.
REFETCH_PAUSE_INTERVALS = (8, 16, 30)
# a round of fetches ends this long (at most a tenth of the limit) before the run's own limit
# on the call would cut it (the run's clock starts a moment before the adapter's)
WINDOW_MARGIN_S = 1.0


def refetch_pause(rounds: int, rand: Callable[[], float] = random.random) -> float:
    """Seconds to pause after the ``rounds``-th round of fetches (>= 1) failed: between half
    and the whole of ``REFETCH_PAUSE_INTERVALS``'s step for it (the last one from then on).
    Pure: the random source is injected."""
    step = REFETCH_PAUSE_INTERVALS[min(rounds, len(REFETCH_PAUSE_INTERVALS)) - 1]
    return step * poll_interval() * (0.5 + rand() / 2)


class OutputUnreachable(ProviderError):
    """A round of free GETs of what a paid render made (its output, fal's result) failed for
    a moment each time (a transport error, 408, 409, 429, 5xx): worth another round later
    (``HttpProvider.outlast``), where a definite answer (a 404, a 403) is not."""


async def fetched(
    get: Callable[[], Awaitable[Any]],
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rand: Callable[[], float] = random.random,
) -> Any:
    """``get()`` (a free GET: a response, or an ``httpx.TransportError``) made again while it
    fails for a moment: a transport error, a ``passing`` status, or an output's 200 that
    carried no output (``NotAnOutput``). The last failure is
    returned (a response) or raised (a transport error); any other answer at once."""
    import httpx

    for tried in range(1, FETCH_TRIES + 1):
        wait = rand() * poll_interval() / 2 * 2 ** (tried - 1)
        try:
            response = await get()
        except httpx.UnsupportedProtocol:  # not an http(s) URL: no try fetches it
            raise
        except (httpx.TransportError, NotAnOutput):
            if tried == FETCH_TRIES:
                raise
        else:
            if not passing(response.status_code) or tried == FETCH_TRIES:
                return response
            told = retry_after_of(response.headers)
            if told is not None:  # a floor over the draw, as every retry's (attempts.py)
                wait = max(wait, min(told, FETCH_WAIT_CAP_S))
            await response.aclose()
        await sleep(wait)
    raise AssertionError("unreachable")


async def download(
    client: Any,
    provider: str,
    url: str,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rand: Callable[[], float] = random.random,
    public_only: Any = False,
    spill_to: str | None = None,
) -> Output:
    """Fetch an output URL at once (providers delete them within minutes to an hour), again
    when it fails for a moment (``fetched``; a body cut short is a transport error too). A
    failure that outlasts the tries raises a ProviderError with the cost unknown; the
    adapter, which knows what the render cost, puts its usage and cost on it
    (``HttpProvider.fetch_output``).

    A ``data:`` URL (fal with the model input ``sync_mode: true`` sends its images inline so)
    is the output itself: decoded here, nothing fetched. It failed as a URL afc cannot fetch,
    and each retry paid for a new render that came back the same way. One that holds no
    whole output (``inline_not_whole``) fails at once (``unavailable``): fetched again, it
    is the same bytes.

    An output URL's redirects are followed (a CDN's signed URL may redirect; no key goes with
    a download, see ``new_client``), up to httpx's 20: more is the download's failure, not an
    exception that stopped the run with the paid render's cost unknown.

    A 200 (or 203: ``OUTPUT_STATUSES``) whose body is no output (``not_an_output``: empty, or
    an HTML page such as a captive portal's login page) or is cut short (``cut_short``), or
    another success (a 206's part of the output: ``_NOT_WHOLE``), fails the try as a 503
    does, and is never returned.

    ``public_only``: the URL, and each redirect, must be on a public address (True:
    ``transport.PUBLIC_ONLY``), one on this host or its private network not fetched; or
    (``transport.NOT_THIS_HOST``) on any address but this host's.

    An output of more than ``IN_MEMORY_OUTPUT_BYTES`` is returned as a ``Spilled`` file in
    ``spill_to`` (the spool's folder), not as bytes."""
    import httpx

    if is_data_url(url):
        data = data_url_bytes(provider, url)
        instead = inline_not_whole(url[5:].split(",", 1)[0].split(";", 1)[0], data)
        if instead is not None:  # the same bytes each time: nothing to fetch again
            raise ProviderError(
                "unavailable",
                f"{provider}: the output's data URL holds {instead}; never stored as the output",
                cost_micros=None,
            )
        return data
    from afc_cli.providers.transport import NOT_THIS_HOST, PUBLIC_ONLY, NotPublic

    extensions = {PUBLIC_ONLY: public_only} if public_only else None

    async def get() -> Any:
        async with client.stream(
            "GET", url, follow_redirects=True, extensions=extensions
        ) as response:
            if response.status_code not in OUTPUT_STATUSES and response.is_success:
                raise NotAnOutput(
                    _NOT_WHOLE.get(
                        response.status_code,
                        "a body afc does not take for the output (a 200 or 203 carries it)",
                    ),
                    response.status_code,
                )
            if response.status_code in OUTPUT_STATUSES:  # its body read here: a cut fails the try
                declared = response.headers.get("content-length", "").strip()
                if declared.isdigit() and int(declared) > MAX_OUTPUT_BYTES:
                    # refused before a byte is read (it was read until 2 GiB had come: minutes
                    # of a slot and 2 GiB of memory, or, from a CDN that stalled, rounds)
                    raise ProviderError("invalid", f"{provider}: output larger than 2 GiB")
                response.limited = False  # counted here (MAX_ANSWER_BYTES is for JSON)
                response.output = await _read_output(response, provider, spill_to)
                head = head_of(response.output)
                instead = not_an_output(
                    response.headers.get("content-type"),
                    head,
                    url,
                    empty=not response.output,
                )
                if instead is not None:
                    instead += ", not the output (a login page, or a proxy's or CDN's error page)"
                elif isinstance(response.output, Spilled):
                    instead = await asyncio.to_thread(cut_short, response.output)
                else:
                    instead = cut_short(response.output)
                if instead is None:
                    instead = not_the_image_said(
                        response.headers.get("content-type"), head, len(response.output)
                    )
                if instead is not None:
                    if isinstance(response.output, Spilled):
                        response.output.close()
                    raise NotAnOutput(instead, response.status_code)
            return response

    try:
        response = await fetched(get, sleep, rand)
    except NotPublic as exc:
        rule = (
            "a provider on the private network from there or from public addresses, never "
            "from this host"
            if public_only == NOT_THIS_HOST
            else "a provider on a public address from public addresses only, never from this "
            "host or its private network"
        )
        raise ProviderError(
            "server",
            f"{provider}: the output URL leads to {exc}; afc fetches the outputs of {rule}",
            cost_micros=None,
        ) from None
    except (httpx.UnsupportedProtocol, httpx.InvalidURL, UnicodeError):
        # (a UnicodeError: a host name IDNA refuses, 'xn--', which httpx raises as it is)
        raise ProviderError(
            "server", f"{provider}: the answer's output URL cannot be fetched", cost_micros=None
        ) from None
    except httpx.TooManyRedirects:
        raise ProviderError(
            "server", f"{provider}: the output URL redirects too many times", cost_micros=None
        ) from None
    except NotAnOutput as exc:
        raise unreachable(
            ProviderError(
                "unavailable",
                f"{provider}: the output URL answered HTTP {exc.status} with {exc}; never "
                "stored as the output",
                cost_micros=None,
            )
        ) from None
    except httpx.TransportError as exc:
        raise unreachable(transport_error(provider, exc, paid_call=False)) from None
    status = response.status_code
    if status not in OUTPUT_STATUSES:
        failure = ProviderError(
            "server" if status >= 500 else "unavailable",
            f"{provider}: output download answered HTTP {status}",
            http_status=status,
            cost_micros=None,
        )
        # the URL refused for good (403, 404, 410: the output let go, a signature expired):
        # a request a run that ended left is rendered again, not failed (pipeline.render)
        failure.output_gone = 400 <= status < 500 and not passing(status)
        raise unreachable(failure) if passing(status) else failure
    return response.output


async def _read_output(response: Any, provider: str, spill_to: str | None) -> Output:
    """An output download's body: bytes, or once it passes ``IN_MEMORY_OUTPUT_BYTES`` a
    ``Spilled`` file in ``spill_to`` (written from a thread a batch of chunks at a time,
    which a 2 GiB body on a slow disk would otherwise block the run loop with). A body past
    ``MAX_OUTPUT_BYTES`` is refused; a spill that cannot be written (a full disk) is an
    ``OutputNotKept`` the paid render's fetch ends with (``HttpProvider.fetch_output`` puts
    its cost on it): the run records the attempt and stops, as for a spool write's failure."""
    chunks: list[bytes] = []
    size = held = 0
    spilled: Spilled | None = None

    async def spill(chunks: list[bytes]) -> Spilled:
        """``chunks`` written to the spill file (made first, once); its OSError, never a
        network read's, is the spill's failure."""
        nonlocal spilled
        try:
            if spilled is None:
                spilled = await asyncio.to_thread(Spilled, spill_to)
            await asyncio.to_thread(_spill, spilled, chunks)
        except OSError as exc:
            raise OutputNotKept(
                f"{provider}: its output ({size} bytes so far) could not be written to "
                f"{spill_to or 'the temporary folder'}: {exc.strerror or exc}"
            ) from None
        return spilled

    try:
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > MAX_OUTPUT_BYTES:
                raise ProviderError("invalid", f"{provider}: output larger than 2 GiB")
            chunks.append(chunk)
            held += len(chunk)
            if spilled is None and size <= IN_MEMORY_OUTPUT_BYTES:
                continue
            if spilled is None or held >= SPILL_BATCH_BYTES:
                await spill(chunks)
                chunks, held = [], 0
        if spilled is None:
            return b"".join(chunks)
        return await spill(chunks)
    except BaseException:
        if spilled is not None:
            spilled.close()
        raise


def _spill(spilled: Spilled, chunks: list[bytes]) -> None:
    for chunk in chunks:
        spilled.write(chunk)


class NotAnOutput(Exception):
    """A free GET's 200 whose body is not what it fetches (an output URL's: ``not_an_output``;
    fal's result that is no JSON object), or an output URL's other success that carries no
    whole output (``_NOT_WHOLE``): failed for a moment, as a 503 is (``fetched`` tries again,
    then ``outlast``'s rounds). ``status``: the answer's."""

    def __init__(self, what: str, status: int = 200) -> None:
        super().__init__(what)
        self.status = status


# The statuses of an output URL's GET whose body is the output: 200, and 203 (Non-Authoritative
# Information: a transforming proxy's 200, RFC 9110 15.3.4; a 203 failed the paid attempt at
# once, and the next attempt paid again for an output that had come)
OUTPUT_STATUSES = (200, 203)
# what the other successes carry instead (fetched again, never stored: ``download``)
_NOT_WHOLE = {
    202: "no output yet (202 Accepted)",
    204: "no body (204 No Content)",
    205: "no body (205 Reset Content)",
    206: "a part of the output only (206 Partial Content; afc asks for the whole)",
}


# what a page starts with (after a byte-order mark and white space), in lower case
_PAGE_STARTS = (b"<!doctype html", b"<html", b"<head", b"<body")
_PAGE_TYPES = ("text/html", "application/xhtml+xml")
# the endings of an output URL's path that name a web page: its page is the output
_PAGE_FILES = (".html", ".htm", ".xhtml")
# an API's or a store's error document answered 200 in place of an output: JSON served as
# JSON, or an XML <Error> (S3's, a CDN's) served as XML, where the URL names no such file
_DOC_TYPES = {
    "application/json": "a JSON document",
    "application/problem+json": "a JSON document",
    "text/json": "a JSON document",
    "application/xml": "an XML error document",
    "text/xml": "an XML error document",
}
_DOC_FILES = (".json", ".jsonl", ".xml")


def not_an_output(
    content_type: str | None, data: bytes, url: str | None = None, *, empty: bool | None = None
) -> str | None:
    """What an output download's 200 carried instead of an output, or None when it may be
    one: an empty body, an HTML page (its first bytes an HTML document's, or markup
    served as ``text/html``), or an error document: JSON served as JSON, or an XML
    ``<Error>`` served as XML, from a URL that names no such file (an API gateway's or an
    object store's error answered with 200; an SVG is ``image/svg+xml``, never taken). A
    captive portal's login page, or a CDN's or proxy's error page answered with 200, was stored as the job's output and the job succeeded: the paid render
    was lost with nothing said. An output afc stores is an image, a video or another file a
    model made (which kinds a model makes is its own: the bytes are not held to a list of
    formats); a page is one only where the output ``url`` the provider gave names an HTML
    file (a model's web page: README 'afc serve' sends such an output sandboxed), which
    every try fetched again and the attempt then failed, paid, for the next to pay again.

    ``data``: the body, or its first bytes with ``empty`` saying whether the body was."""
    if (not data) if empty is None else empty:
        return "an empty body"
    if _url_names(url, _PAGE_FILES):
        return None
    head = data[:256].lstrip(b"\xef\xbb\xbf \t\r\n\x0c").lower()
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if head.startswith(_PAGE_STARTS) or (media in _PAGE_TYPES and head.startswith(b"<")):
        return f"an HTML page ({media or 'no Content-Type'})"
    document = _DOC_TYPES.get(media)
    if document is not None and not _url_names(url, _DOC_FILES):
        is_json = "JSON" in document
        if head[:1] in (b"{", b"[") if is_json else b"<error" in head:
            return f"{document} ({media})"
    return None


def cut_short(data: Output) -> str | None:
    """What an output download's body is, when it is an image or video of a format that says
    its own length and it holds less than that, else None: a PNG whose chunks run past its end
    or with no ``IEND``, a JPEG with no end of image after its scan, a RIFF file (WebP)
    shorter than its header's size, an ISO media file (MP4, MOV, HEIC, AVIF) whose last box
    runs past its end. HTTP cannot tell such a body from a whole one where the server's
    ``Content-Length`` is shorter than what it sends (the rest came after the answer had
    ended), or where a body without one ends as its connection does: a 20-byte piece of a
    PNG was stored as the job's output, and the job succeeded. Other bytes (another format,
    a model's own) are not judged, nor what follows a format's own end. ``data`` may be
    ``Spilled`` (read from its file: call from a thread)."""
    if isinstance(data, Spilled):
        data.file.flush()
        fd, size = data.file.fileno(), len(data)

        def read(offset: int, count: int) -> bytes:
            return os.pread(fd, count, offset)
    else:
        size = len(data)

        def read(offset: int, count: int) -> bytes:
            return data[offset : offset + count]

    head = read(0, 16)
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return _png_cut(read, size)
    if head.startswith(b"\xff\xd8\xff"):
        return _jpeg_cut(read, size)
    if head[:4] == b"RIFF" and len(head) >= 8:
        declared = int.from_bytes(head[4:8], "little") + 8
        return (
            None
            if size >= declared
            else f"a RIFF file ({head[8:12].decode('latin-1')}) cut short ({size} of its "
            f"{declared} bytes)"
        )
    if head[4:8] == b"ftyp":
        return _boxes_cut(read, size)
    return None


# a PNG's last chunk when it ends where its IEND does (most do): the walk is then not needed
_IEND = b"\x00\x00\x00\x00IEND\xaeB`\x82"
# the most chunks or boxes ``cut_short`` walks: a body of millions of tiny ones is not judged
# (a 2 GiB PNG in libpng's 8 KiB IDAT chunks has some 260,000)
_WALK_MAX = 500_000


def _png_cut(read: Callable[[int, int], bytes], size: int) -> str | None:
    if size >= 20 and read(size - 12, 12) == _IEND:
        return None
    offset = 8
    for _ in range(_WALK_MAX):
        if offset + 12 > size:
            break
        chunk = read(offset, 8)
        if not chunk[4:].isalpha():
            return None  # not what a PNG's chunks look like: not judged
        offset += 12 + int.from_bytes(chunk[:4], "big")
        if offset > size:
            break
        if chunk[4:] == b"IEND":
            return None
    else:
        return None
    return f"a PNG cut short ({size} bytes, no IEND chunk)"


def _jpeg_cut(read: Callable[[int, int], bytes], size: int) -> str | None:
    """A JPEG is whole when an end of image (FF D9) follows its first scan's header: its
    segments before the scan say their lengths, and a scan's coded data never holds FF D9."""
    offset, scan, walked = 2, None, 0
    while scan is None:
        walked += 1
        if walked > _WALK_MAX:
            return None
        if offset + 4 > size:
            return f"a JPEG cut short ({size} bytes, in its headers)"
        segment = read(offset, 4)
        if segment[0] != 0xFF:
            return None  # not what a JPEG's segments look like: not judged
        marker = segment[1]
        if marker == 0xFF:  # a fill byte
            offset += 1
        elif marker == 0xD9:
            return None
        elif 0xD0 <= marker <= 0xD7 or marker in (0x01, 0xD8):  # no length
            offset += 2
        else:
            scan = offset if marker == 0xDA else None
            offset += 2 + int.from_bytes(segment[2:4], "big")
    if size - 2 >= offset and read(size - 2, 2) == b"\xff\xd9":  # most end there
        return None
    # the end of image, looked for from the end back (what follows it, if anything, is short)
    end, block = size, 1 << 20
    while end > offset:
        start = max(offset, end - block)
        if b"\xff\xd9" in read(start, end - start + 1):
            return None
        end = start
    return f"a JPEG cut short ({size} bytes, no end of image)"


def _boxes_cut(read: Callable[[int, int], bytes], size: int) -> str | None:
    offset = 0
    for _ in range(_WALK_MAX):
        if offset >= size:
            return None
        if offset + 8 > size:
            break
        header = read(offset, 16)
        box = int.from_bytes(header[:4], "big")
        if not header[4:8].isascii() or not header[4:8].decode().isprintable():
            return None  # not what a box looks like: not judged
        if box == 1:  # its size in the next 8 bytes
            if offset + 16 > size:
                break
            box = int.from_bytes(header[8:16], "big")
        elif box == 0:  # to the end of the file
            return None
        if box < 8:
            return None
        if offset + box > size:
            break
        offset += box
    else:
        return None
    return f"an ISO media file ({read(8, 4).decode('latin-1')}) cut short ({size} bytes)"


def _url_names(url: str | None, endings: tuple[str, ...]) -> bool:
    """Whether an output URL's path ends with one of ``endings``: a model's own web page,
    or its JSON or XML output, which is then the output."""
    if url is None:
        return False
    from urllib.parse import urlsplit

    return urlsplit(url).path.lower().endswith(endings)


def passing(status: int) -> bool:
    """Whether an HTTP status says a free GET (a poll, an output, a result) failed for a
    moment and is asked again: 408, 409, 429, 5xx (``fetched``, ``HttpProvider.poll``)."""
    return status in (408, 409, 429) or status >= 500


def unreachable(failure: ProviderError) -> OutputUnreachable:
    """``failure`` (of a round of free GETs) as an ``OutputUnreachable``, its cost unknown:
    the render behind it was paid for, and the adapter says what it cost."""
    return OutputUnreachable(
        failure.error_class,
        failure.message,
        http_status=failure.http_status,
        retry_after=failure.retry_after,
        cost_micros=None,
    )


# Python reads no integer of more digits than this from text (``sys.int_info``'s default
# limit is 4,300): a longer one in an answer is read as a float, out of range
_INT_DIGITS = 4000


def _json_int(digits: str) -> int | float:
    """``json.loads``'s ``parse_int``: an integer of up to ``_INT_DIGITS`` digits as it is, a
    longer one as a float (infinite: ``usage_amount`` in afc_cli/costs.py reads it as not
    reported). Python refused it with a ``ValueError``, so a paid answer holding its image and
    one usage count of 5,000 digits read as no JSON at all: the image lost, and the next
    attempt paid for it again."""
    return int(digits) if len(digits) <= _INT_DIGITS else float(digits)


# No provider's answer nests deeper than a few levels (Gemini's image: candidates, content,
# parts, inlineData); a value this deep is read as none (``_shallow``)
MAX_JSON_DEPTH = 32


# No provider's answer holds more than a few hundred values (its images are long strings):
# one with more than this many (counted by the commas between them) is read as no JSON
MAX_JSON_VALUES = 1_000_000


def _answer_json(response: Any) -> Any:
    """An answer's body read as JSON (``ValueError`` or ``RecursionError`` when it is not
    JSON, or nested too deep to read), its integers read by ``_json_int``, cut at
    ``MAX_JSON_DEPTH`` (``_shallow``). A body of more than ``MAX_JSON_VALUES`` values is not
    read (``ValueError``): a value takes up to some 30 times its text's bytes once read, so
    a 50 MB answer of empty objects (51 KB on the wire, gzipped) took 1.3 GB and 4 s of the
    run's thread, and one at the 256 MiB an answer may decode to (``transport.
    MAX_ANSWER_BYTES``) some 7 GB: the kernel killed the run, every call in flight left
    possibly paid. Counted by the commas between them in the bytes (base64 has none)."""
    if response.content.count(b",") > MAX_JSON_VALUES:
        raise ValueError(f"an answer of more than {MAX_JSON_VALUES} values")
    try:
        value = response.json()
    except ValueError:
        if getattr(response, "head_only", False):
            value = _head_json(response.content)
        else:  # an integer too long for Python (or no JSON: refused again)
            value = response.json(parse_int=_json_int)
    return _shallow(value)


def _head_json(head: bytes) -> Any:
    """The JSON of an error answer read only to its head (``transport._Answer.head_only``,
    ``MAX_ERROR_ANSWER_BYTES``): the values the head holds whole, and the string it cuts as
    far as it goes (pydantic_core's partial JSON). Read as no JSON, a 400 whose 20 MB
    message quoted the request back (a reference image's base64) was said 'openai: HTTP 400'
    alone, the provider's own words ('Invalid prompt: ...') lost. The message's cut, where it
    is longer than a message is kept (``base.bounded``), counts the characters read.
    ``ValueError`` when the head is no JSON's start."""
    from pydantic_core import from_json

    return from_json(head.decode("utf-8", "replace"), allow_partial="trailing-strings")


def _shallow(value: Any) -> Any:
    """``value`` with each array or object nested deeper than ``MAX_JSON_DEPTH`` replaced by
    None (a field left out), walked without recursion. A usage count nested 600 deep was read
    (Python's parser takes up to about a thousand levels) and then walked by recursion where
    the ledger keeps it (its floats made text, its strings scrubbed): a ``RecursionError``
    stopped the run, the paid call left ``unknown``, and each resume paid again."""
    if not isinstance(value, dict | list):
        return value
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        for key, item in list(node.items() if isinstance(node, dict) else enumerate(node)):
            if isinstance(item, dict | list):
                if depth >= MAX_JSON_DEPTH:
                    node[key] = None
                else:
                    stack.append((item, depth + 1))
    return value


def json_object(response: Any) -> bool:
    """Whether an answer's body is a JSON object (an empty one too)."""
    try:
        return isinstance(_answer_json(response), dict)
    except (ValueError, RecursionError):
        return False


def json_or_empty(response: Any) -> dict[str, Any]:
    """An answer's JSON object: ``{}`` for a body that is not JSON (or nested too deep to
    read), ``{"value": ...}`` for JSON that is not an object."""
    try:
        value = _answer_json(response)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {"value": value}


# Reading a provider's JSON answer. A field of another type than the API documents (an array
# where an object belongs, a number where a string does) reads as a field left out, which each
# adapter already answers with a classified ProviderError: a malformed answer to a paid call is
# one failed attempt with its cost unknown, never an exception that stops the run and cancels
# the other calls in flight (tests/test_provider_answers.py sends adapters arbitrary JSON).


def obj(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else ``{}``."""
    return value if isinstance(value, dict) else {}


def objs(value: Any) -> list[dict[str, Any]]:
    """The objects in ``value`` if it is a JSON array (its other items skipped), else ``[]``."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def text(value: Any) -> str | None:
    """``value`` if it is a non-empty string, else None."""
    return value if isinstance(value, str) and value else None


_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}")


def request_id_of(value: Any) -> str | None:
    """A provider's id for a submitted request, if it is one afc can put in a URL path (its
    polls) and record: letters, digits, ``._:-``, at most 200 (Replicate's ids and fal's UUIDs
    are). Anything else is no id: the submit is a ``server`` failure, its cost unknown."""
    return value if isinstance(value, str) and _REQUEST_ID.fullmatch(value) else None


def http_url(value: Any) -> str | None:
    """``value`` if it is an absolute http(s) URL that httpx can request, else None: an answer's
    URL that is not would be polled or fetched in vain (a poll that fails is tried again)."""
    import httpx

    if not isinstance(value, str) or not value.startswith(("https://", "http://")):
        return None
    try:
        # and its host name decoded, as a request and ``same_origin`` decode it: IDNA's
        # refusal ('xn--') is raised as it is, not as an InvalidURL
        _ = httpx.URL(value).host
    except (httpx.InvalidURL, UnicodeError):
        return None
    return value


def same_origin(url: str, base: str) -> bool:
    """Whether ``url`` (an absolute http(s) URL, ``http_url``) is on ``base``'s origin: the same
    scheme, host and port, where the provider's key may go. A URL an answer names elsewhere
    (fal's status and result URLs, from a proxy in front of it or a provider gone wrong) would
    be sent the key with every poll."""
    import httpx

    a, b = httpx.URL(url), httpx.URL(base)
    return (a.scheme, a.host, a.port) == (b.scheme, b.host, b.port)


def data_url_bytes(provider: str, url: str) -> bytes:
    """The bytes an RFC 2397 ``data:`` URL carries (``data:image/png;base64,....``, or
    percent-encoded without ``;base64``)."""
    from urllib.parse import unquote_to_bytes

    header, comma, payload = url[5:].partition(",")
    if not comma or not payload:  # an empty output is none (``not_an_output``)
        raise ProviderError(
            "server", f"{provider}: the output's data URL has no data", cost_micros=None
        )
    if len(payload) > MAX_OUTPUT_BYTES * 4 // 3 + 4:
        raise ProviderError("invalid", f"{provider}: output larger than 2 GiB")
    data = (
        decode_b64(provider, payload)
        if header.lower().endswith(";base64")
        else unquote_to_bytes(payload)
    )
    if len(data) > MAX_OUTPUT_BYTES:  # text without base64 decodes a byte a character
        raise ProviderError("invalid", f"{provider}: output larger than 2 GiB")
    return data


def inline_not_whole(media: str, data: bytes) -> str | None:
    """What an output sent inline (a ``data:`` URL of ``media``) holds instead of a whole
    one, else None: an image or video cut short (``cut_short``), or bytes that are no image
    where ``media`` names one of the formats a provider answers (PNG, JPEG, WebP). fal's
    ``sync_mode`` image of a PNG's first 40 bytes, or of a line of text, was stored as the
    job's output and the job succeeded. Other media types are not judged, as a download's
    other bytes are not."""
    media = media.strip().lower()
    if media in _INLINE_IMAGES:
        return not_whole_image(data, f"{media} said")
    return cut_short(data)


def not_whole_image(data: bytes, told: str) -> str | None:
    """What bytes given as an image hold instead of a whole one, else None: an image cut
    short (``cut_short``), or bytes that are no image at all (``image_type``: a line of text,
    an HTML page); ``told``, said beside the latter, is why they were to be one."""
    from afc_cli.inputs import image_type

    instead = cut_short(data)
    if instead is None and image_type(data[:32]) is None:
        instead = f"{len(data)} bytes that are no image ({told})"
    return instead


_INLINE_IMAGES = ("image/png", "image/jpeg", "image/jpg", "image/webp")


def not_the_image_said(content_type: str | None, head: bytes, size: int) -> str | None:
    """What an output download's body of ``size`` bytes (``head``: its first ones) holds where
    its ``Content-Type`` names one of the image formats providers answer (PNG, JPEG, WebP, as
    a data URL's media type is read: ``inline_not_whole``) and its bytes are no image at all
    (``image_type``), else None. A CDN's or a proxy's error text answered 200 under the
    output's own image type ('upstream error' as ``image/png``) was stored as the job's
    ``.png`` and the job succeeded, the paid image lost with nothing said. Other types, and
    bytes of another image kind than the one said, are not judged (a model's output is its
    own: afc says a kind its key does not name, ``pipeline._named_as``)."""
    from afc_cli.inputs import image_type

    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media not in _INLINE_IMAGES or image_type(head[:32]) is not None:
        return None
    return f"{size} bytes that are no image ({media} said)"


def output_ext(url: str, default: str = "png") -> str:
    """An output's file extension from its URL: the last path segment's (``.../x.webp?sig``),
    or a ``data:`` URL's media type (``data:image/jpeg;base64,...``)."""
    if is_data_url(url):
        media = url[5:].split(",", 1)[0].split(";", 1)[0]
        subtype = media.split("/", 1)[1] if "/" in media else ""
        return subtype.split("+", 1)[0] or default
    last = url.rsplit("/", 1)[-1]
    return last.rsplit(".", 1)[-1].split("?")[0] if "." in last else default


def decode_b64(
    provider: str,
    value: str,
    usage: dict[str, Any] | None = None,
    cost: int | None = None,
    request_id: str | None = None,
    *,
    image: bool = False,
) -> bytes:
    """An image sent inline as base64; a text that is not base64, or that decodes to no
    bytes (``====``: stored, it was an empty file as the job's output, the job succeeded and
    the paid image was lost), is the provider's fault (``server``). The render behind it was
    made and billed: the answer's ``usage``, its ``cost`` by the card and its ``request_id``
    stay with the failed attempt, as an output URL out of reach keeps them
    (``fetch_output``); unknown (None) where the answer said none.

    ``image``: the answer's field holds an image and nothing else (OpenAI's ``b64_json``,
    Gemini's ``inlineData``): bytes that are no image (``image_type``: a line of text, an
    HTML page) or an image cut short (``cut_short``) fail the attempt as such a body fails
    an output URL's download (``unavailable``), its cost kept. They were stored as the job's
    ``.png`` and the job succeeded: the paid image was lost with nothing said."""
    try:
        data = _b64_bytes(value)
        problem = None if data else "decodes to no bytes at all"
    except ValueError:  # binascii.Error, or a character outside ASCII
        data, problem = b"", "could not be decoded"
    cls = "server"
    if problem is None and image:
        from afc_cli.inputs import IMAGE_KINDS

        what = not_whole_image(data, f"not {IMAGE_KINDS}")
        if what is not None:
            cls, problem = "unavailable", f"decodes to {what}; never stored as the output"
    if problem is None:
        return data
    raise ProviderError(
        cls,
        f"{provider}: the image's base64 {problem}",
        usage=usage,
        cost_micros=cost,
        cost_source="derived" if cost is not None else None,
        request_id=request_id,
    )


_URL_SAFE = str.maketrans("-_", "+/")


def _b64_bytes(value: str) -> bytes:
    """The bytes of base64 text, read strictly (``ValueError`` otherwise): a data URL's base64
    (an OpenAI-compatible gateway's ``b64_json`` written as ``data:image/jpeg;base64,...``),
    lines of it (MIME's), and the URL-safe alphabet are read too. Python's ``b64decode`` read
    any text, skipping each character outside base64's alphabet: the data URL's prefix read
    as base64 made bytes that were no image, stored as the job's output, and the job
    succeeded (with ``data:image/png``'s prefix the letters left made it undecodable)."""
    import binascii

    if value[:5].lower() == "data:":
        header, comma, payload = value.partition(",")
        if comma and header.lower().endswith(";base64"):
            value = payload
    try:
        return binascii.a2b_base64(value, strict_mode=True)
    except binascii.Error:
        pass
    value = "".join(value.split()).translate(_URL_SAFE)
    return binascii.a2b_base64(value, strict_mode=True)


def size_pools(
    providers: dict[str, Any], concurrency: int, limits: dict[str, dict[str, int | None]]
) -> None:
    """Size each HTTP provider's pool to the calls a run may have in flight with it: the run's
    ``--concurrency``, or the provider's own ``limits`` concurrency when that is lower."""
    for name, provider in providers.items():
        if isinstance(provider, HttpProvider):
            own = (limits.get(name) or {}).get("concurrency")
            provider.size_pool(min(concurrency, own) if own else concurrency)
