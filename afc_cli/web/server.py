"""``afc serve``: the report's views live from the ledger, and the review queue.

Starlette (routing, forms, streaming responses) on uvicorn. Every request reads the ledger
afresh (its own read connection: a run may be writing beside it; WAL lets both go on). On
PostgreSQL a page's reads take a connection kept open between requests (``Pages.reading``),
checked with one statement for a newer afc's migration before each use; a decision opens its
own, as every command does.

Who may do what:

- It binds 127.0.0.1 by default, and then answers only requests addressed to a loopback name
  (``Host`` 127.0.0.1, localhost or [::1]): a web page elsewhere cannot reach it through DNS
  rebinding. Without a token, only connections of the user running it or root (``peer_uid``).
- Any other ``--host`` needs ``AFC_SERVE_TOKEN`` (at least 16 characters), else it is refused
  with exit 2 before binding. With the variable set (on any host), every request needs it:
  opening ``/?token=...`` once sets a cookie (HttpOnly, SameSite=Lax; a value derived from
  the token and the port, ``cookie_value``, never the token) and redirects to the same page
  without the token in its address. The token is never printed or logged.
- A GET never changes anything. Approve and reject are POSTs only (a GET of their address
  is 405 and decides nothing), and each must carry this server's form token: a random value
  made when the server starts, written into its own pages' forms, compared in constant time.
  A page elsewhere cannot read it, so it cannot post a decision (403), nor show a page of
  this server in a frame of its own for a visitor to click in (``PAGE_HEADERS``). A post over
  ``FORM_BYTES`` is 413 before more of it is read (``FormLimit``).

Full-size outputs are streamed from storage a chunk at a time (``Storage.read_chunks``),
sandboxed (``OUTPUT_HEADERS``: an SVG's script never runs on this server's origin);
thumbnails are made on first request and kept in memory, keyed by the output's storage, key
and SHA-256 (not one storage could not be read for: it is read again on the next request).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import ipaddress
import os
import secrets
import signal
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from afc_cli.errors import AfcError, LedgerError, UsageError, first_named
from afc_cli.ledger_file import is_postgres
from afc_cli.ops import os_user
from afc_cli.web.thumbs import HELD_BYTES, _Unreachable

LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", "[::1]"}
TOKEN_ENV = "AFC_SERVE_TOKEN"
TOKEN_MIN = 16
COOKIE = "afc_serve_token"
PAGE = 120
DECIDED = {"approve": "approved", "reject": "rejected"}
# No page is shown inside another site's frame: a page elsewhere could lay this server's
# review page under its own and have a visitor click Approve or Reject (clickjacking).
PAGE_HEADERS = {"X-Frame-Options": "DENY", "Content-Security-Policy": "frame-ancestors 'none'"}
# A stored output is a provider's bytes: an SVG or HTML one is shown as a document with no
# script and an origin of its own (sandbox), never run on this server's origin, where it could
# read a review page's form token; nor is any output's type guessed from its bytes. Nor does
# one opened full size fetch anything from elsewhere (default-src 'none'): an SVG's <image
# href> or an HTML output's <img>/meta refresh told its sender the reviewer's address and
# when the review was made; its own pictures and clips still show ('self', data:).
OUTPUT_HEADERS = {
    "Content-Security-Policy": (
        "sandbox; default-src 'none'; img-src 'self' data:; media-src 'self'; "
        "style-src 'unsafe-inline'"
    ),
    "X-Content-Type-Options": "nosniff",
    # nor embedded by a page elsewhere (<img src=http://127.0.0.1:8765/output/ID>): a job's
    # id is uuid5 of its batch and key, so a site that guessed them learnt whether the
    # output exists, and its size, from the reviewer's browser
    "Cross-Origin-Resource-Policy": "same-origin",
}


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_problem(host: str) -> str | None:
    """Why ``--host`` is no address to listen on, or None: an address with its port or a URL
    (``127.0.0.1:9000``, ``http://localhost``) was told it 'would serve the ledger to other
    machines' and to set a token, 'or serve on 127.0.0.1', and with a token set, that it was
    no name ('Name or service not known')."""
    bare = host.strip("[]")
    if "/" in host or (":" in bare and not _is_ip(bare)):
        return (
            f"--host {host}: give the address alone (127.0.0.1, 0.0.0.0, ::1, a host name), "
            "without a scheme, path or port: the port goes in --port"
        )
    return None


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def access_token(host: str, environ: dict[str, str]) -> str | None:
    """The token every request must carry, or None; refuses (exit 2) a host that is no
    address (``host_problem``), a host other than loopback without a token, and a token too
    short to be a secret."""
    problem = host_problem(host)
    if problem:
        raise UsageError(problem)
    token = environ.get(TOKEN_ENV) or None
    if token is not None and len(token) < TOKEN_MIN:
        raise UsageError(f"{TOKEN_ENV} is too short: use a random value of {TOKEN_MIN} or more")
    if token is None and not is_loopback(host):
        raise UsageError(
            f"--host {host} would serve the ledger to other machines: set {TOKEN_ENV} to a "
            f"random secret of {TOKEN_MIN} or more characters (a visitor opens the address once "
            f"with the query parameter token set to it), or serve on 127.0.0.1"
        )
    return token


# what every page says under its header when ``afc ledger copy`` moved the ledger's work away
# (``moved``): its review queue offered Approve and Reject, each refused on its click, and its
# sheet showed queued jobs no run here will take, with no word of where they went
MOVED_THERE = (
    "its jobs run and are decided there; these pages show its history, and an Approve or "
    "Reject here is refused"
)

# thumbnails a server keeps (about 3 KB each: afc_cli/web/thumbs.py), the least recently shown
# forgotten first: 34 pages of a contact sheet. Kept all, a server left open for weeks over a
# 100,000-job ledger kept every picture anyone had scrolled past (~300 MB).
THUMBS = 4096
# PostgreSQL ledgers the pages keep open between their reads (``Pages.reading``), at most: a
# browser asks one server six things at a time (a contact sheet's thumbnails)
IDLE_LEDGERS = 6
# how long a store that a read found no connection to (an S3 endpoint down or hung, a VPN not
# up) is not asked again: its cards and full-size views say so at once meanwhile. Asked for
# each picture, every thumbnail of a page waited out its own connect or read timeout (10 to
# 120 s), six at a time in a browser, whose every other click on this server queued behind them
DOWN_S = 30.0


class Pages:
    """The live pages. ``form_token`` guards every POST; ``thumbs`` caches thumbnails."""

    def __init__(self, ledger_path: str, batch: str | None, form_token: str):
        from afc_cli.web.html import environment, stylesheet

        self.ledger_path = ledger_path
        self.ledger_name = ledger_name(ledger_path)  # shown on every page: no password
        self.batch = batch
        self.form_token = form_token
        # Thumbs by (storage, output key, SHA-256), the most recently shown last; at most
        # THUMBS (``_thumb``)
        self.thumbs: OrderedDict[tuple[str, str, str], Any] = OrderedDict()
        # why the last read of an output's picture could not show it when that is not kept as
        # its thumbnail (missing from storage, refused, changed since verified: read again at
        # the next request), by the same key, at most THUMBS: "Approve the N shown" names it
        # for each card it leaves undecided, as the card said it (``_seen``)
        self.missed: OrderedDict[tuple[str, str, str], str] = OrderedDict()
        self.lock = threading.Lock()
        # stores a read found no connection to: storage URL -> (until, on time.monotonic; why)
        self.down: dict[str, tuple[float, str]] = {}
        # one storage backend per storage URL for the server's life: an S3 one made anew for
        # each picture made a boto3 client each time (a third of a second of CPU each: a page
        # of 120 thumbnails took a minute to fill, each full-size output a second)
        self.stores: dict[str, Any] = {}
        # PostgreSQL ledgers open for the next read (``reading``), at most IDLE_LEDGERS
        self.idle: list[Any] = []
        self.pooled = is_postgres(ledger_path)
        self.css = stylesheet()
        self.env = environment()

    # --- helpers ----------------------------------------------------------------------------

    def book(self):
        from afc_cli.ledger import Ledger

        return Ledger(self.ledger_path, create=False)

    @contextlib.contextmanager
    def reading(self) -> Iterator[Any]:
        """The ledger for one request's reads (a page, a thumbnail, a full-size output).

        A PostgreSQL ledger's open is a connection and seven statements (its session's
        settings, its applied migrations: 28 ms on this machine's own server, a dozen round
        trips to a remote one, more with TLS), which every thumbnail of a contact sheet paid,
        and its 304s too. The pages keep up to IDLE_LEDGERS open between requests instead;
        each is asked first, in one statement, whether a newer afc migrated the ledger since
        (``newer_migrations``), and one that says so or fails (its server restarted, its
        session ended) is closed and the ledger opened afresh, with every check an open
        makes (refusing a newer afc's ledger, a database that holds none). One a read failed
        in is closed, never kept. Decisions open their own (``book``). A SQLite ledger is
        opened for each request (3 ms): its open checks the file is still the ledger's."""
        book = self._kept() if self.pooled else None
        if book is None:
            book = self.book()
        try:
            yield book
        except BaseException:
            book.close()
            raise
        if self.pooled:
            with self.lock:
                if len(self.idle) < IDLE_LEDGERS:
                    self.idle.append(book)
                    return
        book.close()

    def _kept(self) -> Any:
        """An idle ledger of ``reading``'s that no newer afc migrated since, or None."""
        while True:
            with self.lock:
                if not self.idle:
                    return None
                book = self.idle.pop()
            try:
                if not book.newer_migrations():
                    return book
            except Exception:  # noqa: BLE001 - a lost session: the ledger opened afresh
                pass
            book.close()

    def close(self) -> None:
        """Close the ledgers kept open (``reading``): the server stopped."""
        with self.lock:
            kept, self.idle = self.idle, []
        for book in kept:
            with contextlib.suppress(Exception):
                book.close()

    def page(self, request: Any, template: str, status: int = 200, **context: Any):
        from starlette.responses import HTMLResponse

        from afc_cli.secrets import scrub_data

        text = self.env.get_template(template).render(
            url=lambda name, *args: request.url_for(name, **_params(name, args)),
            css=self.css,
            view=template.removeprefix("serve_").removesuffix(".html"),
            batch=self.batch,
            form_token=self.form_token,
            ledger=self.ledger_name,
            **scrub_data({"moved": None, **context}),
        )
        return HTMLResponse(text, status_code=status, headers=PAGE_HEADERS)

    @staticmethod
    def moved(book: Any) -> str | None:
        """What the pages say of a ledger ``afc ledger copy`` moved (or an unfinished copy),
        as ``afc status`` and ``afc review list`` say it; None for one that runs here."""
        from afc_cli.ledger.core import moved_line

        found = book.moved_to()
        return None if found is None else moved_line(found["destination"], MOVED_THERE)

    def unavailable(self, request: Any, exc: AfcError):
        """What a page could not read (the ledger moved away or upgraded by a newer afc, a
        PostgreSQL server restarting, an S3 endpoint the environment misnames): a 503 page
        saying it, and its one line on serve's stderr, not a 500 and a traceback each
        request. The next request reads afresh: once mended, the pages are back."""
        import sys

        from afc_cli.secrets import scrub, visible

        # the path as visibly as the message: it is anyone's to write (a page of any site can
        # have the reviewer's browser ask for /thumb/%1b]0;...), and its escape sequences,
        # decoded, were written to the operator's terminal (its title set, its screen cleared)
        path = visible(request.url.path)
        sys.stderr.write(f"afc: serve: {path}: {visible(scrub(exc.message))}\n")
        return self.page(request, "serve_error.html", status=503, message=exc.message)

    def unopened(self, request: Any, exc: LedgerError):
        """A decision whose ledger could not be opened (its PostgreSQL server down or
        restarting, the file moved away): the 503 page of a decision the ledger could not
        take, saying nothing was decided. It was the 409 page of a decision refused, the
        connection's error alone, which did not say whether anything was decided."""
        from afc_cli.review import NotDecided

        fix = "reload the review page once the ledger answers"
        return self.unavailable(request, NotDecided(exc.message, fix))

    def store(self, url: str) -> Any:
        """The storage backend of ``url`` (``afc_cli.storage.open``), kept: its S3 client is
        thread-safe, and read by every thumbnail and output request of that storage."""
        from afc_cli import storage

        with self.lock:
            found = self.stores.get(url)
        if found is None:
            found = storage.open(url)
            with self.lock:
                found = self.stores.setdefault(url, found)
        return found

    def unreachable(self, url: str) -> str | None:
        """Why the store of ``url`` is not asked now (a read found no connection to it less
        than ``DOWN_S`` ago), else None."""
        with self.lock:
            found = self.down.get(url)
        return found[1] if found is not None and time.monotonic() < found[0] else None

    def watched(self, url: str) -> Any:
        """The store of ``url`` for one read, noted as down (``unreachable``) when the read
        finds no connection to it."""

        def noted(why: str) -> None:
            with self.lock:
                self.down[url] = (time.monotonic() + DOWN_S, why)

        return Watched(self.store(url), noted)

    # --- views --------------------------------------------------------------------------

    def sheet(self, request: Any):
        from afc_cli.listing import counts_line
        from afc_cli.web.sheet import cards, counts

        with self.reading() as book:
            by_status = counts(book, batch=self.batch)
            number, pages = page_number(request, sum(by_status.values()))
            jobs = cards(book, batch=self.batch, limit=PAGE, offset=(number - 1) * PAGE)
            moved = self.moved(book)
        return self.page(
            request,
            "serve_sheet.html",
            jobs=jobs,
            number=number,
            pages=pages,
            counts_line=counts_line(by_status),
            moved=moved,
        )

    def failures(self, request: Any):
        """Every failure's cause counted, the failures themselves listed a page at a time:
        a night's 10,000 failures were one table of 10,000 rows."""
        from afc_cli.web.sheet import FAILED, cards, causes

        with self.reading() as book:
            jobs = cards(book, batch=self.batch, statuses=FAILED)
            moved = self.moved(book)
        number, pages = page_number(request, len(jobs))
        shown = jobs[(number - 1) * PAGE : number * PAGE]
        return self.page(
            request,
            "serve_failures.html",
            jobs=shown,
            groups=causes(jobs),
            total=len(jobs),
            shown=len(shown),
            number=number,
            pages=pages,
            moved=moved,
        )

    def spend(self, request: Any):
        from afc_cli.costs_report import footer
        from afc_cli.ledger.core import moved_line
        from afc_cli.web.charts import charts
        from afc_cli.web.sheet import spend

        report = spend(self.ledger_path, batch=self.batch, since=None)
        moved_to = report["provider"]["moved_to"]
        return self.page(
            request,
            "serve_spend.html",
            spend=report,
            charts=charts(report),
            notes=footer(report["provider"]),
            moved=None if moved_to is None else moved_line(moved_to, MOVED_THERE),
        )

    def review(self, request: Any):
        try:
            from afc_cli import review
        except ImportError:
            return self.page(request, "serve_review.html", available=False, pending=[])
        with self.reading() as book:
            pending = review.pending(book, batch=self.batch)
            moved = self.moved(book)
        # a page at a time, as the contact sheet: 10,000 jobs awaiting review on one page
        # were a 14 MB page and 10,000 thumbnails, over a minute and a half in a browser
        total = len(pending)
        number, pages = page_number(request, total)
        pending = pending[(number - 1) * PAGE : number * PAGE]
        for item in pending:
            # as ``afc status`` and ``afc review list`` show it (review.pending)
            cost, unpriced = item["cost"], item["unpriced_attempts"]
            item["cost"] = (
                "unpriced"
                if cost is None
                else f"{cost} USD" + (f" + {unpriced} unpriced" if unpriced else "")
            )
            item["age"] = age(item.get("age_s") or 0)
        query = request.query_params
        return self.page(
            request,
            "serve_review.html",
            available=True,
            pending=pending,
            total=total,
            number=number,
            pages=pages,
            decided=query["decided"] if self.told(query) else None,
            decided_key=query.get("key"),
            left=query.get("left") if self.told(query) else None,
            error=None,
            moved=moved,
        )

    async def decide(self, request: Any):
        """POST /review/approve and /review/reject: what ``afc review`` does."""
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import RedirectResponse

        form = await request.form()
        forged = self._forged(request, form)
        if forged is not None:
            return forged
        action = request.path_params["action"]
        if action not in DECIDED:
            return self.page(
                request, "serve_error.html", status=404, message=f"no action {action!r}"
            )
        key = str(form.get("key", "")).strip()
        batch = str(form.get("batch", "")).strip() or None
        outside = self._outside(request, {batch} - {None})
        if outside is not None:
            return outside
        batch = batch or self.batch  # a key is looked up in the served batch only
        by = f"{os_user()} (afc serve)"  # who runs the server decides through it
        reason = str(form.get("reason", "")).strip()
        sha256 = str(form.get("sha256", "")).strip() or None
        from afc_cli.review import NotDecided

        try:
            already, failed = await run_in_threadpool(
                self._decide, action, key, batch, by, reason, sha256
            )
        except NotDecided as exc:  # the ledger could not take it (locked, full, gone): 503
            return self.unavailable(request, exc)
        except LedgerError as exc:
            return self.unopened(request, exc)
        except AfcError as exc:
            return self.page(request, "serve_error.html", status=409, message=exc.message)
        said = key if already is None else f"{key} (already, by {already})"
        url = self.decided_url(request, DECIDED[action], said, failed_with(key, failed))
        page = str(form.get("page", ""))
        if page.isdigit() and page != "1":  # back to the page decided on, not the first
            url = url.include_query_params(page=page)
        return RedirectResponse(str(url), status_code=303)

    def _signed(self, decided: str, key: str, left: str = "") -> str:
        message = f"{decided}\n{key}\n{left}".encode()
        return hmac.new(self.form_token.encode(), message, hashlib.sha256).hexdigest()[:32]

    def decided_url(self, request: Any, decided: str, key: str, left: str = "") -> Any:
        """The review page after a decision, saying it (``?decided=&key=``, and ``left``:
        the jobs "Approve the N shown" left undecided, why, or those a rejection failed,
        ``failed_with``), signed with this server's secret (``told``)."""
        url = request.url_for("review")
        if left:
            url = url.include_query_params(left=left)
        return url.include_query_params(
            decided=decided, key=key, sig=self._signed(decided, key, left)
        )

    def told(self, query: Any) -> bool:
        """Whether the review page's "KEY: approved." line is this server's: its address is
        anyone's to write, and a link could put any sentence in that line ("shot-002:
        rejected." of a job no one decided, which a reviewer passes by; "every picture below
        is checked, approve the 120 shown"), so it is shown only as ``decided_url`` signed
        it."""
        decided, key = query.get("decided"), query.get("key")
        if decided not in DECIDED.values() or key is None:
            return False
        sent = query.get("sig", "").encode()  # bytes: compare_digest refuses non-ASCII text
        signed = self._signed(decided, key, query.get("left", ""))
        return hmac.compare_digest(sent, signed.encode())

    def _forged(self, request: Any, form: Any) -> Any:
        """The 403 page for a form without this server's token (a page of another site, or
        of an earlier run of this server), else None."""
        sent = str(form.get("form_token", ""))
        if hmac.compare_digest(sent.encode(), self.form_token.encode()):
            return None
        return self.page(
            request,
            "serve_error.html",
            status=403,
            message="this form did not come from this afc serve (its token is missing or "
            "stale): reload the review page and decide again",
        )

    def _outside(self, request: Any, batches: set[str]) -> Any:
        """The 403 page for a decision on a batch a server of one batch does not show (a
        form of another page or server), else None."""
        other = sorted(batches - {self.batch})
        if self.batch is None or not other:
            return None
        return self.page(
            request,
            "serve_error.html",
            status=403,
            message=f"this afc serve shows batch {self.batch} only; decide on "
            f"{', '.join(other)} with 'afc review' or an afc serve of that batch",
        )

    async def approve_shown(self, request: Any):
        """POST /review/approve-shown: approve every job the review page showed (its cards'
        batch and key, sent with the form: none the reviewer did not see), in one
        transaction or none (``review.approve_shown``): 2,000 jobs awaiting review were 2,000
        clicks of Approve, one page load each."""
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import RedirectResponse

        from afc_cli import review

        form = await request.form()
        forged = self._forged(request, form)
        if forged is not None:
            return forged
        shown = [
            (batch.strip(), key.strip())
            for batch, key in zip(form.getlist("batch"), form.getlist("key"), strict=False)
            if isinstance(batch, str) and isinstance(key, str) and key.strip()
        ]
        # the SHA-256 of the output each card showed, sent beside its batch and key (a page of
        # an older afc sends none: its cards are judged by the picture this server sent)
        shas = [str(sha).strip().lower() for sha in form.getlist("sha256")]
        showed = dict(zip(shown, shas, strict=False)) if len(shas) == len(shown) else {}
        if not shown or len(shown) > PAGE:
            return self.page(
                request,
                "serve_error.html",
                status=409,
                message=f"send the jobs one page shows (1 to {PAGE}): reload the review page",
            )
        outside = self._outside(request, {batch for batch, _ in shown})
        if outside is not None:
            return outside
        by = f"{os_user()} (afc serve)"

        def decide() -> tuple[list[str], list[tuple[str, str]], str | None]:
            book = self.book()
            try:
                seen, unseen, made = self._seen(book, shown, showed)
                try:
                    decided = review.approve_shown(book, seen, by=by, sha256=made) if seen else []
                except review.OutputChanged as exc:
                    raise UsageError(
                        f"cannot approve the shown: {exc.key}'s output changed since this page "
                        "showed it (it was rendered again); reload the review page and look at "
                        "it again. Nothing was decided"
                    ) from None
                except UsageError:
                    already = self._already(book, seen, "approved")
                    if already is None:
                        raise
                    return [key for _, key in seen], unseen, already
                return decided, unseen, None
            finally:
                book.close()

        try:
            decided, unseen, already = await run_in_threadpool(decide)
        except review.NotDecided as exc:  # the ledger could not take it (locked, full, gone)
            return self.unavailable(request, exc)
        except LedgerError as exc:
            return self.unopened(request, exc)
        except AfcError as exc:
            return self.page(request, "serve_error.html", status=409, message=exc.message)
        said = f"{len(decided)} job{'' if len(decided) == 1 else 's'}"
        if already is not None:
            said += f" (already, by {already})"
        url = self.decided_url(request, "approved", said, left_undecided(unseen))
        return RedirectResponse(str(url), status_code=303)

    def _seen(
        self,
        book: Any,
        shown: list[tuple[str, str]],
        showed: dict[tuple[str, str], str] | None = None,
    ) -> tuple[list[tuple[str, str]], list[tuple[str, str]], dict[tuple[str, str], str]]:
        """The cards of ``shown`` whose picture this server sent (its thumbnail, kept by
        ``_picture``: a picture, not a placeholder), the others as (key, why), and the
        SHA-256 of each seen card's output, for the decision's transaction to check. A card
        whose picture could not be shown (its store out of reach, over 64 MiB, no picture,
        a video) or was never asked for is not the reviewer's to approve by the page: "Approve
        the N shown" approved it all the same, a picture nobody saw. Nor is a card whose job
        has another output than the one the page showed (``showed``: rendered again since,
        its new picture sent to another page). A pair naming no single job is kept with the
        seen, for ``review.approve_shown`` to refuse, naming it."""
        from afc_cli import review
        from afc_cli.errors import StorageError
        from afc_cli.web.sheet import card

        seen, unseen, shas = [], [], {}
        pictured: list[dict[str, Any]] = []  # the rows of the jobs whose picture was sent
        for batch, key in shown:
            found = book.jobs_by_key(key, batch)
            job = card(book, found[0]["id"]) if len(found) == 1 else None
            if job is None or found[0]["status"] != "awaiting_review":
                seen.append((batch, key))  # refused whole, naming it (decided meanwhile)
                continue
            if (showed or {}).get((batch, key)) not in ("", None, job["sha256"]):
                unseen.append((key, "rendered again since this page showed it"))
                continue
            made = None
            if job["output"]:
                with self.lock:
                    made = self.thumbs.get((job["storage"], job["output_key"], job["sha256"]))
            if made is not None and made.data is not None:
                seen.append((batch, key))
                shas[(batch, key)] = job["sha256"]
                pictured.append(found[0])
            elif made is not None:
                unseen.append((key, made.note or "no preview"))
            else:
                down = self.unreachable(job["storage"]) if job["output"] else None
                with self.lock:
                    missed = self.missed.get((job["storage"], job["output_key"], job["sha256"]))
                why = f"not read: {down}" if down else missed or "its picture was not shown"
                unseen.append((key, why))
        # Its picture is the thumbnail kept since it was first made, maybe hours ago: the
        # output is looked for in its storage now, as a card's own Approve looks for it
        # (``review.approve``). Taken as just read, an output deleted, cut short or saved over
        # since was approved: a succeeded job with nothing of its own stored, never rendered
        # again, which the card's own Approve refused. Left undecided, said why.
        try:
            gone = review.gone_each(book, pictured)
        except StorageError as exc:
            raise review.NotDecided(
                exc.message,
                "once its storage can be read here (an approval looks for each output there first)",
            ) from None
        for job, why in gone:
            seen.remove((job["batch"], job["key"]))
            shas.pop((job["batch"], job["key"]), None)
            unseen.append((job["key"], why.removeprefix(f"{job['key']!r}: ")))
        return seen, unseen, shas

    def _decide(
        self,
        action: str,
        key: str,
        batch: str | None,
        by: str,
        reason: str,
        sha256: str | None = None,
    ) -> tuple[str | None, int]:
        """Make the decision: None, or who made it already (``_already``), and how many
        blocked jobs that needed the job a rejection failed (``review.reject``). ``sha256``: the
        output the page showed (its card's form sends it); a job awaiting review with another
        output now (rejected or cancelled, retried and rendered again meanwhile) is refused,
        nothing decided: an Approve on a page loaded before approved the new picture
        unseen. Checked in the decision's own transaction (``review.approve``'s), as
        ``afc review approve --sha256`` is: a check read before it let a re-render in
        between."""
        from afc_cli import review  # the review gates (afc_cli/review.py)

        if not key:
            raise UsageError("no job key was sent with the decision")
        book = self.book()
        failed = 0
        try:
            if action == "approve":
                review.approve(book, [key], by=by, note=reason or None, batch=batch, sha256=sha256)
            else:
                if not reason:
                    raise UsageError(f"rejecting {key} needs a reason: write one and try again")
                _, failed = review.reject(
                    book, [key], by=by, reason=reason, batch=batch, sha256=sha256
                )
        except review.OutputChanged:
            raise UsageError(
                f"cannot {action} {key}: its output changed since this page showed it (it "
                "was rendered again); reload the review page and look at it again. "
                "Nothing was decided"
            ) from None
        except UsageError:
            already = self._already(book, [(batch, key)], DECIDED[action])
            if already is None:
                raise
            return already, 0
        finally:
            book.close()
        return None, failed

    @staticmethod
    def _already(book: Any, named: list[tuple[str | None, str]], decision: str) -> str | None:
        """Who made ``decision`` on every job ``named`` ((batch, key) pairs), when each has
        it already (its last review's, and its status the decision's), else None: a form
        sent twice (a double click, the back button), whose second was refused with "cannot
        approve, nothing was decided" though the first had decided, and the reviewer read
        that it had failed. A job decided otherwise is refused as before."""
        status = "succeeded" if decision == "approved" else "rejected"
        who: list[str] = []
        for batch, key in named:
            found = book.jobs_by_key(key, batch)
            if len(found) != 1 or found[0]["status"] != status:
                return None
            made = book.reviews(found[0]["id"])
            if not made or made[-1]["decision"] != decision:
                return None
            who.append(made[-1]["decided_by"])
        names = list(dict.fromkeys(who))
        return first_named(names, 3)

    def _card(self, job_id: str) -> dict[str, Any] | None:
        """A job's card for its picture, or None: also None for a job outside the served
        batch (``--batch``), whose pictures this server does not show."""
        from afc_cli.web.sheet import card

        with self.reading() as book:
            job = card(book, job_id)
        if job is None or (self.batch is not None and job["batch"] != self.batch):
            return None
        return job

    def thumb(self, request: Any):
        from starlette.responses import Response

        found = self._picture(request.path_params["job_id"])
        if found is None:
            return Response(status_code=404)
        if found.data is None:
            # the card says why, as the report's does (missing from storage, not a picture,
            # a video), where a bare 404 was a broken-image icon
            return Response(
                placeholder(found.note or "no preview"),
                media_type="image/svg+xml",
                headers={**OUTPUT_HEADERS, "Cache-Control": "no-store"},
            )
        # asked for again at each use (no-cache) and answered 304 while the picture is the
        # same: kept for an hour (max-age) under its address, /thumb/<job id>, where a job's id
        # is its batch's and key's, a browser showed another ledger's picture for a job of the
        # same batch and key (a batch re-run in a fresh ledger and served on the same port),
        # on the review page too, where a reviewer approved a picture the job never made
        tag = f'"{hashlib.blake2b(found.data, digest_size=16).hexdigest()}"'
        headers = {
            "ETag": tag,
            "Cache-Control": "private, no-cache",
            "Cross-Origin-Resource-Policy": "same-origin",  # as OUTPUT_HEADERS says
        }
        sent = request.headers.get("if-none-match", "")
        if tag in (value.strip().removeprefix("W/") for value in sent.split(",")):
            return Response(status_code=304, headers=headers)
        return Response(found.data, media_type="image/webp", headers=headers)

    def _thumb(self, job_id: str) -> bytes | None:
        """The job's thumbnail (WebP bytes), or None."""
        found = self._picture(job_id)
        return None if found is None else found.data

    def _picture(self, job_id: str) -> Any:
        """The job's ``Thumb`` (its data None when there is no preview, with the note why), or
        None for no such job or no stored output."""
        from afc_cli.storage.file import FileStorage
        from afc_cli.web.thumbs import Thumb, make

        job = self._card(job_id)
        if job is None or not job["output"]:
            return None
        down = self.unreachable(job["storage"])
        if down is not None:
            return Thumb(None, f"not read: {down}", lasting=False)
        # by the object and its bytes: by SHA-256 alone, two jobs of the same bytes shared one,
        # and a job whose own output was gone showed the other's picture
        kept = (job["storage"], job["output_key"], job["sha256"])
        with self.lock:
            if kept in self.thumbs:
                self.thumbs.move_to_end(kept)
                return self.thumbs[kept]
        store = self.store(job["storage"])
        if isinstance(store, FileStorage):
            # read as the full-size view reads it (``file_chunks``): a symbolic link at the
            # output's name to another picture the server's user can read was shown,
            # downscaled, on the contact sheet and the review page
            made = make(Checked(store, job["sha256"]), job["output_key"], sha256=job["sha256"])
        else:
            made = make(self.watched(job["storage"]), job["output_key"], sha256=job["sha256"])
        if not made.lasting:
            # storage could not be read (an S3 blip, an output deleted and then restored):
            # not kept, or the card's picture stayed broken until the server restarted
            with self.lock:
                self.missed[kept] = made.note or "no preview"
                self.missed.move_to_end(kept)
                while len(self.missed) > THUMBS:
                    self.missed.popitem(last=False)
            return made
        with self.lock:
            self.missed.pop(kept, None)
            self.thumbs[kept] = made
            while len(self.thumbs) > THUMBS:
                self.thumbs.popitem(last=False)
        return made

    def output(self, request: Any):
        from starlette.responses import PlainTextResponse, Response, StreamingResponse

        from afc_cli.errors import StorageError
        from afc_cli.inputs import media_type

        job = self._card(request.path_params["job_id"])
        if job is None or not job["output"]:
            return PlainTextResponse("no stored output for this job", status_code=404)
        down = self.unreachable(job["storage"])
        if down is not None:
            return PlainTextResponse(f"not read: {down}", status_code=503)
        from afc_cli.storage.file import FileStorage

        store = self.store(job["storage"])
        if isinstance(store, FileStorage):
            chunks = file_chunks(store.root / job["output_key"], job["sha256"], root=store.root)
        else:
            chunks = self.watched(job["storage"]).read_chunks(job["output_key"])
        try:
            first = next(chunks, b"")  # a missing object is a 404 here, not a broken stream
        except StorageError as exc:
            gone = self.unreachable(job["storage"]) is None  # else a store out of reach
            return PlainTextResponse(exc.message, status_code=404 if gone else 503)

        def body():
            # the last chunk is held back until the bytes are known to be the job's: ended
            # on other bytes, the response is broken off rather than finished (below)
            held = ahead[-1]
            yield from ahead[:-1]
            try:
                for data in chunks:
                    digest.update(data)
                    yield held
                    held = data
                if job["sha256"] is not None and digest.hexdigest() != job["sha256"]:
                    raise StorageError(changed(digest.hexdigest()), retryable=False)
                yield held
            except (StorageError, OSError) as exc:
                # the response has started (its status and first chunk are sent): the read
                # broken off mid-way (an S3 connection reset) went up to uvicorn, whose
                # "Exception in ASGI application" printed some 70 lines of tracebacks each
                # time. One line says it, and ``OutputCut`` still breaks the response off
                # (``serve`` keeps its traceback out of uvicorn's log): ended as a whole one,
                # the browser would show the picture's first bytes as if they were all of it
                import sys

                from afc_cli.secrets import scrub, visible

                why = (
                    exc.message
                    if isinstance(exc, StorageError)
                    else f"cannot read {job['output_url']}: {exc.strerror or exc}"
                )
                sys.stderr.write(
                    f"afc: serve: {visible(request.url.path)}: the full-size view was cut short: "
                    f"{visible(scrub(why))}\n"
                )
                raise OutputCut(why) from None

        # what its bytes are, as S3 storage labels an object (``inputs.media_type``), else its
        # key's: from the name alone, a .webp output was application/octet-stream, a file
        # to download (nosniff), where Python finds no mime.types (3.11 and 3.12 know no
        # .webp of their own: a slim container image), and a .png key holding a model's WebP
        # (``pipeline._named_as``) was said to be a PNG
        kind = media_type(first[:32], job["output_key"])
        if request.method == "HEAD":
            # its headers alone: streamed as for a GET, the whole object was read from
            # storage to be dropped (a clip of a gigabyte from S3 at each 'curl -I')
            chunks.close()
            head = Response(media_type=kind, headers=dict(OUTPUT_HEADERS))
            del head.headers["content-length"]  # not 0: the body is not known here
            return head

        def changed(now: str) -> str:
            return (
                f"{job['output_url']} changed in storage since afc verified it (SHA-256 now "
                f"{now[:12]}..., verified {job['sha256'][:12]}...): not shown as this job's output"
            )

        # Only the bytes afc verified are shown as the job's output, as its thumbnail shows
        # only them (``thumbs.make``): a card left undecided as "changed in storage" asks
        # for a look at the full size, which showed the other bytes (an editor's save over
        # it, a copy cut short) as the job's, and its own Approve then approved the verified
        # output unseen. Up to HELD_BYTES (most pictures whole) is read before the response
        # starts, so other bytes are a 404 saying so; past it, the response is broken off
        # before its last chunk (``body``)
        digest = hashlib.sha256(first)
        ahead, size = [first], len(first)
        try:
            while size <= HELD_BYTES:
                data = next(chunks, None)
                if data is None:
                    break
                digest.update(data)
                ahead.append(data)
                size += len(data)
            else:
                data = b""
        except StorageError as exc:
            gone = self.unreachable(job["storage"]) is None
            return PlainTextResponse(exc.message, status_code=404 if gone else 503)
        if data is None and job["sha256"] is not None and digest.hexdigest() != job["sha256"]:
            return PlainTextResponse(changed(digest.hexdigest()), status_code=404)
        # no Content-Length from the ledger: the object in storage is what is sent (chunked),
        # and one replaced there since (another size) would break the response
        return StreamingResponse(body(), media_type=kind, headers=dict(OUTPUT_HEADERS))


class OutputCut(Exception):
    """A full-size output's read broke off after its response started (``Pages.output``): the
    connection is closed unfinished, said in one line on stderr, not in uvicorn's log."""


# How long a connection to 'afc serve' may take to send its first request's headers
HEADER_TIMEOUT_S = 10.0


def header_timed(base: type) -> type:
    """uvicorn's HTTP protocol ``base``, closing a connection that has not sent a whole
    request's headers ``HEADER_TIMEOUT_S`` after it opened. uvicorn has no such timeout: a
    connection that sent half a request, or nothing, stayed open for good, and a few hundred
    of them (a slow client's, or anyone's on the network who can reach the port: the token
    is asked for after the headers) took every file descriptor the process may open (1,024
    by default). Each new connection was then refused at its accept ('Too many open files',
    a traceback a second on stderr), and the pages and a person's review decision being
    posted hung for everyone, for as long as those connections stayed open."""

    class HeaderTimed(base):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self.header_timer = self.loop.call_later(HEADER_TIMEOUT_S, self.header_overdue)

        def header_overdue(self) -> None:
            # a request begun (its headers read) and not yet answered is the app's; one
            # answered leaves the connection to uvicorn's keep-alive timeout, which the first
            # byte of a next request lets go: that request's headers are timed from the
            # answer's end (``on_response_complete``)
            idle = self.cycle is None or self.cycle.response_complete
            if idle and not self.transport.is_closing():
                self.transport.close()

        def on_response_complete(self) -> None:
            # timed from the connection's start alone, a connection that sent one whole
            # request and then half of the next one's headers was left open for good
            self.header_timer.cancel()
            self.header_timer = self.loop.call_later(HEADER_TIMEOUT_S, self.header_overdue)
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self.header_timer.cancel()
            super().connection_lost(exc)

    return HeaderTimed


def http_protocol() -> type:
    """The HTTP protocol 'afc serve' gives uvicorn: h11's, whether httptools is installed or
    not, with its headers' timeout (``header_timed``)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    return header_timed(H11Protocol)


def _not_a_cut(record: Any) -> bool:
    """A filter of uvicorn's error log: it drops the traceback of an ``OutputCut`` (already
    said in one line), and lets every other record through."""
    return not (record.exc_info and isinstance(record.exc_info[1], OutputCut))


def file_chunks(path: Any, sha256: str | None, chunk: int = 1 << 20, root: Any = None) -> Any:
    """A ``file://`` object's bytes for the full-size view, a chunk at a time, read from the
    one file opened. afc stores an object as a file of its own (a hard link), never a symbolic
    link: one at an object's name (made by someone who can write the store, or a studio's
    link to a render kept elsewhere) is sent only when it holds the bytes the ledger has for
    the job (its SHA-256), else StorageError. Followed blindly, a link to the server user's
    ~/.aws/credentials or a provider key file put at an output's name was sent to whoever
    opened that output's full-size view."""
    import errno
    import stat

    from afc_cli.errors import StorageError

    # O_NONBLOCK: open() of a FIFO put at the name waited for a writer, holding the request's
    # thread for ever (no effect on a regular file's reads)
    nofollow = os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        try:
            handle = open(path, "rb", opener=lambda name, flags: os.open(name, flags | nofollow))
            linked = False
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            handle = open(
                path, "rb", opener=lambda name, flags: os.open(name, flags | os.O_NONBLOCK)
            )
            linked = True
    except OSError as exc:
        reason = "missing" if isinstance(exc, FileNotFoundError) else exc.strerror
        raise StorageError(f"cannot read {path}: {reason}", retryable=False) from None
    except UnicodeEncodeError:
        # a locale that is not UTF-8 and a name in another script (FileStorage._encodable):
        # 'afc report --html' ended 'unexpected error ... (a bug in afc)'
        from afc_cli.errors import UTF8_LOCALE, unnamable_here

        raise StorageError(
            f"cannot read {str(path)!r}: {unnamable_here(str(path))}, which cannot write that "
            f"name: {UTF8_LOCALE}",
            retryable=False,
        ) from None
    if not linked and root is not None:
        # a folder on the way to it a symbolic link (the store's b1/ linked to another
        # folder, by someone who can write the store but not read that folder): O_NOFOLLOW
        # guards the name's last part only, and a file of that name there, past the 4 MiB
        # read before the answer starts, was sent but for its last MiB before the SHA-256
        # told it was not the job's. Read as a link at its name is: checked whole first
        linked = _opened_at(handle, path) != os.path.join(
            os.path.realpath(root), os.path.relpath(path, root)
        )
    if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
        # a FIFO, a device (a link to /dev/zero was hashed without end), a folder: afc
        # stores none, and reading one may never end
        handle.close()
        raise StorageError(
            f"{path} is not a file (a FIFO, a device or a folder): afc does not read it",
            retryable=False,
        )
    with handle:
        if linked:
            digest = hashlib.sha256()
            while data := _read(handle, chunk, path):
                digest.update(data)
            if sha256 is None or digest.hexdigest() != sha256:
                raise StorageError(
                    f"{path} leads through a symbolic link to other bytes than this job's "
                    f"output (SHA-256 {sha256}): afc does not show them",
                    retryable=False,
                )
            handle.seek(0)
        while data := _read(handle, chunk, path):
            yield data


def _opened_at(handle: Any, path: Any) -> str:
    """Where the file ``handle`` was opened from really is (Linux tells it of the open file
    itself; elsewhere, the path's symbolic links resolved)."""
    try:
        return os.readlink(f"/proc/self/fd/{handle.fileno()}")
    except OSError:
        return os.path.realpath(path)


def _read(handle: Any, size: int, path: Any) -> bytes:
    """The next ``size`` bytes of an output's file, a read the disk refuses (EIO: a failing
    sector; ESTALE: an NFS store's file replaced) a StorageError naming it: as an OSError it
    was taken by ``afc report`` for a failure to write the report's own file (exit 2, no
    report), and by ``afc serve`` for a bug (a 500 and a traceback)."""
    from afc_cli.errors import StorageError

    try:
        return handle.read(size)
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc.strerror or exc}", retryable=False) from None


class Checked:
    """A ``file://`` store read for one job's thumbnail through ``file_chunks``: a symbolic
    link at its name is read only when it holds the job's bytes (``sha256``), a FIFO or a
    device never."""

    def __init__(self, store: Any, sha256: str | None):
        self.store, self.sha256 = store, sha256

    def read_chunks(self, key: str) -> Any:
        return file_chunks(self.store.root / key, self.sha256, root=self.store.root)


class Watched(_Unreachable):
    """A store read by one request, which tells ``noted`` why when the read finds no
    connection to it (``thumbs._Unreachable``)."""

    def __init__(self, store: Any, noted: Callable[[str], None]):
        super().__init__(store)
        self.noted = noted

    def read_chunks(self, key: str) -> Any:
        try:
            yield from super().read_chunks(key)
        finally:
            if self.down is not None:
                self.noted(self.down)


def placeholder(note: str) -> bytes:
    """A card's picture that says why it has none: an SVG of the sentence, a line at a time
    (its whole in the title), no script, nothing fetched."""
    import textwrap
    from html import escape

    from afc_cli.secrets import scrub

    note = scrub(note)
    lines = textwrap.wrap(note, 34)[:7] or ["no preview"]
    top = 80 - 8 * (len(lines) - 1)
    spans = "".join(
        f'<tspan x="120" dy="{"0" if i == 0 else "16"}">{escape(line)}</tspan>'
        for i, line in enumerate(lines)
    )
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" width="240" height="160" viewBox="0 0 240 160">'
        f"<title>{escape(note)}</title>"
        f'<text x="120" y="{top}" font-family="system-ui, sans-serif" font-size="12" '
        f'fill="#6b6b70" text-anchor="middle">{spans}</text></svg>'
    ).encode()


# jobs "Approve the N shown" names, with why, when it leaves some undecided (the rest counted)
LEFT_NAMED = 5


def left_undecided(unseen: list[tuple[str, str]]) -> str:
    """What "Approve the N shown" left undecided, as the review page says it: how many, the
    first few keys with why (their picture not shown, their output not in storage as
    verified: ``Pages._seen``), and what to do."""
    from afc_cli.secrets import scrub

    if not unseen:
        return ""
    # scrubbed here: it goes in the address (the browser's history), not only the page
    named = "; ".join(f"{key} ({scrub(why)})" for key, why in unseen[:LEFT_NAMED])
    more = len(unseen) - LEFT_NAMED
    one = len(unseen) == 1
    return (
        f"{len(unseen)} job{'' if one else 's'} left undecided: {'its' if one else 'their'} "
        f"picture{'' if one else 's'} could not be shown, or {'was' if one else 'were'} not "
        f"shown, or {'its' if one else 'their'} output{'' if one else 's'} "
        f"{'is' if one else 'are'} no longer in storage as verified: "
        f"{named}{f'; and {more} more' if more > 0 else ''}. Look at "
        f"{'it' if one else 'each'} full size and use {'its' if one else 'their'} own Approve "
        "or Reject."
    )


def failed_with(key: str, failed: int) -> str:
    """What the review page says under a rejection that failed the blocked jobs needing the
    job (DEPENDENCY_FAILED), as 'afc review reject' says it; "" when none did. A style
    frame's Reject failed the 2,000 shots behind it, and the page said "style-frame:
    rejected." alone."""
    if not failed:
        return ""
    jobs = "1 blocked job" if failed == 1 else f"{failed:,} blocked jobs"
    return (
        f"{jobs} that needed {key} failed with it (DEPENDENCY_FAILED: the Failures page lists "
        f"{'it' if failed == 1 else 'them'}); to run {'it' if failed == 1 else 'them'}, a new "
        "job under a new key replaces the rejected one, and the jobs that needed it go under "
        "new keys of their own whose needs name it"
    )


def page_number(request: Any, total: int) -> tuple[int, int]:
    """The page asked for (``?page=N``, from 1) and how many pages of ``PAGE`` there are; a
    page past the last (``?page=10**20``) is the last one, anything not a number the first."""
    try:
        number = max(1, int(request.query_params.get("page", "1")))
    except ValueError:
        number = 1
    pages = max(1, -(-total // PAGE))
    return min(number, pages), pages


def age(seconds: float) -> str:
    """How long a job has waited for review, as a person says it: 40 s, 12 min, 3 h, 2 days."""
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size or (unit != "days" and seconds >= size):
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s"


def _params(name: str, args: tuple[Any, ...]) -> dict[str, Any]:
    """``url('thumb', job_id)`` in a template: the route's one path parameter."""
    if not args:
        return {}
    return {"action": args[0]} if name == "decide" else {"job_id": args[0]}


def ledger_name(ledger_path: str) -> str:
    """The ledger as pages, messages and ``--json`` show it: a PostgreSQL URL's password
    masked (``afc_cli.ledger.postgres.display_url``), any other secret scrubbed."""
    from afc_cli.ledger.postgres import display_url

    return display_url(ledger_path)


def build_app(ledger_path: str, *, batch: str | None, host: str, token: str | None):
    """The ASGI application, with its form token (``app.state.form_token``)."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.routing import Route

    pages = Pages(ledger_path, batch, secrets.token_urlsafe(32))
    routes = [
        Route("/", pages.sheet, name="sheet"),
        Route("/failures", pages.failures, name="failures"),
        Route("/spend", pages.spend, name="spend"),
        Route("/review", pages.review, name="review"),
        Route(
            "/review/approve-shown",
            pages.approve_shown,
            methods=["POST"],
            name="approve_shown",
        ),
        Route("/review/{action:str}", pages.decide, methods=["POST"], name="decide"),
        Route("/thumb/{job_id:str}", pages.thumb, name="thumb"),
        Route("/output/{job_id:str}", pages.output, name="output"),
    ]
    middleware = []
    if is_loopback(host):
        middleware.append(Middleware(LoopbackHosts, own_user=token is None))
    if token is not None:
        middleware.append(Middleware(TokenGate, token=token))
    middleware.append(Middleware(FormLimit))
    app = Starlette(
        routes=routes, middleware=middleware, exception_handlers={AfcError: pages.unavailable}
    )
    app.state.form_token = pages.form_token
    app.state.pages = pages
    return app


def host_name(header: str) -> str:
    """The name in a Host header, without its port: ``[::1]:8765`` is ``::1``."""
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class LoopbackHosts:
    """Bound to loopback: answer only requests addressed to a loopback name (400 otherwise),
    so a page on another site cannot reach this server by rebinding its own name to
    127.0.0.1; and, without a token (``own_user``), only connections of the user running the
    server (403 otherwise, ``peer_uid``): on a machine others log in to (a render box reached
    through an SSH tunnel), any of them could open 127.0.0.1:8765 and approve or reject, each
    decision recorded as this user's. Plain ASGI middleware."""

    def __init__(self, app: Any, own_user: bool = True):
        self.app = app
        self.own_user = own_user

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            from starlette.responses import PlainTextResponse

            header = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            if not is_loopback(host_name(header)):
                response = PlainTextResponse("not a loopback address", status_code=400)
                await response(scope, receive, send)
                return
            uid = peer_uid(scope.get("client"), scope.get("server")) if self.own_user else None
            # root too: it can read the ledger itself, and it makes the connections of a
            # container runtime's port forwarding (kubectl port-forward)
            if uid is not None and uid not in (0, os.getuid()):
                response = PlainTextResponse(
                    f"this afc serve answers its own user (uid {os.getuid()}) and root only, not uid "
                    f"{uid}: to share it on this machine, start it with {TOKEN_ENV} set and "
                    "open the address once with the query parameter token set to it",
                    status_code=403,
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


# the most a POST may carry: a page's "Approve the N shown" sends 120 cards' batch, key and
# SHA-256 (tens of KB); a reason to reject is a line of text
FORM_BYTES = 1 << 20


class FormLimit:
    """A POST's body read whole, up to FORM_BYTES, before the application sees it: 413 past
    that, nothing parsed. The form token is in the body, so a post is read before it can be
    refused: a page of any site the reviewer opened could post to 127.0.0.1:8765 (a form's
    post needs no permission) a body of gigabytes, which afc serve read into memory (1,000
    fields of 1 MB each) or onto disk (files) before its 403, the server and the runs beside
    it taken past the machine's memory. Plain ASGI middleware."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        from starlette.responses import PlainTextResponse

        too_big = PlainTextResponse(
            f"this post is larger than afc serve takes ({FORM_BYTES >> 20} MiB): nothing was "
            "decided; reload the review page and decide again",
            status_code=413,
        )
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > FORM_BYTES:
            await too_big(scope, receive, send)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > FORM_BYTES:
                await too_big(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def peer_uid(client: Any, server: Any) -> int | None:
    """The uid of the process end of a TCP connection from this machine (``client``, to this
    server's ``server`` address), from Linux's /proc/net/tcp or tcp6; None where it cannot be
    told (no such file: another system)."""
    import struct

    if not client or not server:
        return None

    def proc(address: str, port: int) -> tuple[str, str]:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        packed = socket.inet_pton(family, address)
        words = struct.unpack(f"={len(packed) // 4}I", packed)  # each word as the kernel has it
        return "".join(f"{word:08X}" for word in words) + f":{port:04X}", (
            "tcp6" if family == socket.AF_INET6 else "tcp"
        )

    try:
        near, table = proc(str(client[0]), int(client[1]))
        far, _ = proc(str(server[0]), int(server[1]))
        with open(f"/proc/net/{table}", encoding="ascii") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) > 7 and fields[1] == near and fields[2] == far:
                    return int(fields[7])
    except (OSError, ValueError, TypeError):  # TypeError: an address with no port (ASGI tests)
        return None
    return None


def cookie_name(scope: Any) -> str:
    """The cookie that holds the token, one per port this server listens on: a browser sends
    a host's cookies to each of its ports, and two afc serve of one machine (two ledgers, each
    with its own token) wrote one cookie, the second opened logging the browser out of the
    first."""
    server = scope.get("server") or (None, None)
    return f"{COOKIE}_{server[1]}" if server[1] else COOKIE


def cookie_value(token: bytes, scope: Any) -> str:
    """What the token's cookie holds: an HMAC-SHA-256 of this server's port keyed with the
    token, never the token. A browser sends a host's cookies to every port of it, so any
    other web app of the machine the reviewer opens receives it: it held the token itself,
    which opens every afc serve started with it; this value opens this server only."""
    server = scope.get("server") or (None, None)
    message = f"afc serve cookie\n{server[1]}".encode()
    return hmac.new(token, message, hashlib.sha256).hexdigest()


class TokenGate:
    """Every request carries ``AFC_SERVE_TOKEN``: as ``?token=`` (which sets a cookie, of a
    value derived from it, ``cookie_value``, and redirects to the address without it) or
    through that cookie. Plain ASGI middleware."""

    def __init__(self, app: Any, token: str):
        self.app = app
        self.token = token.encode()

    def _ok(self, value: str | None) -> bool:
        return value is not None and hmac.compare_digest(value.encode(), self.token)

    def _cookie_ok(self, value: str | None, scope: Any) -> bool:
        wanted = cookie_value(self.token, scope).encode()
        return value is not None and hmac.compare_digest(value.encode(), wanted)

    def _sent(self, query: bytes) -> bool:
        """Whether the query string's ``token`` is this server's, read as a form reads it (a
        ``+`` a space) or as it was pasted in the address bar (a ``+`` a plus): a base64
        token (``openssl rand -base64 24``) holds a ``+`` two times in five, and opened as
        the 401 page asks, ``?token=`` followed by the value, it was a 401 saying to do just
        that."""
        from urllib.parse import unquote, unquote_plus

        found = False
        for part in query.decode("latin-1").split("&"):
            name, sep, value = part.partition("=")
            if sep and unquote_plus(name) == "token":
                for read in {unquote_plus(value), unquote(value)}:
                    found = self._ok(read) or found  # each compared: constant time
        return found

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from starlette.requests import Request
        from starlette.responses import PlainTextResponse, RedirectResponse

        request = Request(scope)
        cookie = cookie_name(scope)
        if self._sent(scope.get("query_string", b"")):
            url = request.url.remove_query_params("token")
            response = RedirectResponse(str(url), status_code=303)
            # Lax, not Strict: a browser sends a Strict cookie on no navigation that comes from
            # another site, so a link to the review page followed from a chat message or a
            # ticket was a 401 every time; Lax is sent on a link followed (a GET: it changes
            # nothing) and on no other site's POST (a decision also needs the form token)
            response.set_cookie(
                cookie, cookie_value(self.token, scope), httponly=True, samesite="lax", path="/"
            )
            await response(scope, receive, send)
            return
        if self._cookie_ok(request.cookies.get(cookie), scope):
            await self.app(scope, receive, send)
            return
        response = PlainTextResponse(
            f"this afc serve needs its token: open the address once with the query parameter "
            f"token set to the value of {TOKEN_ENV}",
            status_code=401,
        )
        await response(scope, receive, send)


def serve(
    ledger_path: str,
    *,
    host: str,
    port: int,
    batch: str | None,
    environ: dict[str, str],
    announce: Callable[[str, str], None],
) -> None:
    """Serve until Ctrl-C, SIGTERM or SIGHUP; then stop cleanly (requests in flight finish)."""
    from afc_cli.errors import STOP_SIGNALS
    from afc_cli.ledger import Ledger
    from afc_cli.web import SERVE_MODULES, require

    require(SERVE_MODULES)
    token = access_token(host, environ)
    book = Ledger(ledger_path, create=False)  # a missing or foreign ledger: exit 2 now
    try:
        book.require_batch(batch)
    finally:
        book.close()
    import uvicorn

    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    for _ in range(20):  # --port 0: until the other loopback's port is free as well
        sock = _listen(family, host.strip("[]"), port, host)
        bound = sock.getsockname()[1]
        try:
            twin = _loopback_twin(host, bound)
        except UsageError:
            sock.close()
            if port:
                raise
            continue
        break
    else:
        raise UsageError(f"cannot listen on {host}: no port free on both loopback addresses")
    sockets = [sock] if twin is None else [sock, twin]
    app = build_app(ledger_path, batch=batch, host=host, token=token)
    shown = f"[{host.strip('[]')}]" if family == socket.AF_INET6 else host
    url = f"http://{shown}:{bound}/"
    # no X-Forwarded-For without a token: uvicorn took it, from any process of 127.0.0.1, as
    # the connection's address, which LoopbackHosts looks up to tell whose connection it is
    config = uvicorn.Config(
        app,
        http=http_protocol(),
        log_level="warning",
        access_log=False,
        lifespan="off",
        proxy_headers=token is not None,
    )
    server = uvicorn.Server(config)
    import logging

    uvicorn_log = logging.getLogger("uvicorn.error")  # set up by uvicorn.Config
    uvicorn_log.addFilter(_not_a_cut)

    def stop(signum: int, frame: Any) -> None:
        # Ctrl-C or SIGTERM before uvicorn takes the signals (from the announce on: a script
        # that read the address may stop it at once) asks it to stop as soon as it serves;
        # uvicorn's own handlers take over while it serves, and re-raise what they caught on
        # the way out, which lands here again, harmlessly. SIGHUP (the terminal or ssh
        # session closed), which uvicorn leaves alone, stops it here all the while: it killed
        # the server (exit 129), requests in flight cut off and no 'serve stopped'
        server.should_exit = True

    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        announce(
            f"serving {ledger_name(ledger_path)} at {url}"
            + (
                f" (open it once with the query parameter token set to {TOKEN_ENV})"
                if token
                else ""
            )
            + "; Ctrl-C stops",
            url,
        )
        server.run(sockets=sockets)
    finally:
        app.state.pages.close()
        uvicorn_log.removeFilter(_not_a_cut)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for each in sockets:
            each.close()


def _bound(family: int, address: str, port: int, v6only: bool = False) -> socket.socket:
    """A socket listening on ``address`` ``port`` (IPv6 alone with ``v6only``); the
    ``OSError`` of its making otherwise, the socket closed."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if v6only:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((address, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def _listen(family: int, address: str, port: int, shown: str) -> socket.socket:
    """A listening socket on ``address`` ``port``, or exit 2."""
    try:
        return _bound(family, address, port)
    except OSError as exc:
        raise UsageError(f"cannot listen on {shown} port {port}: {exc.strerror}") from None


def _loopback_twin(host: str, port: int) -> socket.socket | None:
    """Served on one loopback address (127.0.0.1, the default), afc serve holds the same port
    of the other (::1) too, and the other way round: a browser opening ``localhost:PORT``
    tries ::1 first, and another process listening there, unseen, got the reviewer's requests
    (with a token, ``?token=`` handed it the token). Refused (exit 2) when that port is
    another process's; None where this host has no such address (no IPv6: ``localhost``
    then reaches only the one held)."""
    name = host.strip("[]").lower()
    if name in ("127.0.0.1", "localhost"):
        family, other = socket.AF_INET6, "::1"
    elif name == "::1":
        family, other = socket.AF_INET, "127.0.0.1"
    else:
        return None
    try:
        return _bound(family, other, port, v6only=family == socket.AF_INET6)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            return None  # no such address here (no IPv6 in this kernel, say)
        shown = f"[{other}]" if ":" in other else other
        raise UsageError(
            f"cannot listen on {host} port {port}: {shown} port {port} is another process's, "
            f"and a browser opening localhost:{port} would reach it instead of afc serve; "
            "choose another --port"
        ) from None
