"""``afc report --html FILE``: one self-contained HTML file of a batch (or the ledger).

Everything is inside the file: the style, the charts (inline SVG), the thumbnails (WebP data
URIs) and a few lines of script that page the contact sheet. Nothing is fetched when it
opens, so it opens offline and can be mailed. The contact sheet, and the jobs awaiting
review, are cut into pages of ``PAGE`` cards; the browser lays out only the page shown (and,
without script, skips the off-screen ones: ``content-visibility``), so a 5,000-job report
opens in seconds.

The file is written to a temporary name beside ``FILE`` and renamed into place: an
interrupted report never leaves half a file under the name asked for. It is written as the
ledger is read, a page of cards at a time with their thumbnails (``pieces``): a report of a
ledger of months (100,000 jobs) held every card, thumbnail and the whole text (516 MiB).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from afc_cli.errors import UsageError

PAGE = 200
# a prompt's characters in its card's tooltip (``title``), the rest cut ('...'): Chromium shows
# 1,024 at most, and a prompt may hold 32,000. Written whole, the tooltips of a report of 1,000
# jobs with 30,000-character prompts were 60 MB of its 62 MB (each card's prompt twice: the
# contact sheet and the review pages), far past what mail takes, and a page of afc serve 3.7 MB.
# The whole prompt: 'afc show KEY'.
TIP_CHARS = 1000


def environment(**globals_: Any):
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
    from markupsafe import Markup

    from afc_cli.secrets import visible
    from afc_cli.web.sheet import CAUSE_ROWS, causes

    def written(value: Any) -> Any:
        """Every value a page or the report writes (Jinja's ``finalize``): outside text (a
        prompt) with its control and invisible format characters as ``\\xNN`` /
        ``\\uNNNN`` (``secrets.visible``), as every table and ``afc show`` write them; what
        a template marks safe (the style, the charts, a macro's own markup) as it is.
        Written as they were, a bidirectional override (U+202E) in a prompt reordered the
        prompt a reviewer reads beside the picture on the review page ('a red car
        \\u202eeulb' read 'a red car blue')."""
        return value if isinstance(value, Markup) else visible(value)

    env = Environment(
        loader=PackageLoader("afc_cli.web", "templates"),
        autoescape=select_autoescape(["html"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=written,
    )
    from afc_cli.review import command

    env.globals.update(
        causes=causes,
        cause_rows=CAUSE_ROWS,
        tip_chars=TIP_CHARS,
        decide_command=command,  # a key beginning with '-' after '--' (``review.command``)
        **globals_,
    )
    return env


def stylesheet() -> str:
    return (Path(__file__).parent / "templates" / "style.css").read_text(encoding="utf-8")


def counts_line(counts: dict[str, int]) -> str:
    from afc_cli.listing import counts_line as line

    return line(counts)


def pieces(sheet: dict[str, Any], jobs: Any, opener: Any, made: dict[str, Any]) -> Any:
    """The report's text in pieces, the contact sheet's cards taken from the iterator ``jobs``
    a page at a time, each page's thumbnails made as it comes (``streamed_sheet``): those of
    the page and of the jobs awaiting review are held, not every job's. ``made`` counts the
    jobs, the pictures and the keys of outputs without one, for the command's summary."""
    from afc_cli.costs_report import footer
    from afc_cli.jsonout import SEEN_STRINGS
    from afc_cli.secrets import scrub_data
    from afc_cli.web.charts import charts
    from afc_cli.web.thumbs import make_all

    sheet = scrub_data(sheet)  # the last line of defence: no secret reaches the file
    review = sheet["review"]
    review_pages = [review[i : i + PAGE] for i in range(0, len(review), PAGE)]
    seen: dict[str, str] = {}  # strings scrubbed, shared by the pages (``scrub_data``)
    thumbs: dict[str, Any] = {}
    kept: dict[str, Any] = {}  # the review cards' thumbnails, shown again under the sheet
    stores: dict[str, Any] = {}  # the storages as read, those found out of reach noted

    def shown(page: list[dict[str, Any]]) -> list[dict[str, Any]]:
        now = make_all(page, opener, stores=stores)  # a store found down: on no page asked
        for job in page:
            if job["output"]:
                if now[job["id"]].data:
                    made["pictures"] += 1
                else:
                    made["without_picture"].append(job["key"])
            if job["status"] == "awaiting_review" and job["id"] in now:
                kept[job["id"]] = now[job["id"]]
        made["jobs"] += len(page)
        thumbs.clear()
        thumbs.update(kept)
        thumbs.update(now)
        if len(seen) > SEEN_STRINGS:
            seen.clear()
        return scrub_data(page, seen)

    def pages() -> Any:
        page: list[dict[str, Any]] = []
        for job in jobs:
            page.append(job)
            if len(page) == PAGE:
                yield shown(page)
                page = []
        if page:
            yield shown(page)

    title = sheet["batch"] or ", ".join(sheet["batches"]) or "empty ledger"
    return (
        environment()
        .get_template("report.html")
        .generate(
            sheet=sheet,
            title=title,
            pages=pages(),
            review_pages=review_pages,
            thumbs=thumbs,
            charts=charts(sheet["spend"]),
            notes=footer(sheet["spend"]["provider"]),
            counts_line=counts_line(sheet["counts"]),
            css=stylesheet(),
            job_count=sheet["job_count"],
            page_count=-(-sheet["job_count"] // PAGE),
        )
    )


def _is_html(path: Path) -> bool:
    """Whether ``path`` may be replaced by a report: an empty file (``mktemp --suffix
    .html``), or an HTML document, whose text opens (after comments) with a doctype or an
    ``<html>`` tag."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError:
        return False
    head = head.removeprefix(b"\xef\xbb\xbf").lstrip().lower()
    while head.startswith(b"<!--") and b"-->" in head:
        head = head.split(b"-->", 1)[1].lstrip()
    if not head:  # empty: replaceable when named as HTML (not a ledger's empty -wal file)
        return path.suffix.lower() in (".html", ".htm")
    return head.startswith((b"<!doctype html", b"<html"))


def write_report(
    ledger_path: str, out: str, *, batch: str | None, since: str | None
) -> dict[str, Any]:
    """Write the report to ``out``; what it holds, for the command's summary and --json."""
    from afc_cli import storage
    from afc_cli.spool import fsync_dir
    from afc_cli.web import require
    from afc_cli.web.sheet import streamed_sheet

    require()
    if out == "-":
        # the usual name for stdout, which made a file named '-' in the current folder while
        # the script that asked for the report on its stdout got the summary line: refused
        # like /dev/stdout below (the report is written whole, then renamed into place)
        raise UsageError(
            "--html -: afc writes the report to a file, not to stdout; name the HTML file to "
            "write; nothing was written"
        )
    target = Path(out)
    if target.is_dir():
        raise UsageError(f"--html {out}: is a folder; name the file to write")
    if not target.parent.is_dir():
        raise UsageError(f"--html {out}: the folder {target.parent} does not exist")
    folder = os.path.realpath(target.parent)
    if folder in ("/dev", "/proc") or folder.startswith("/proc/"):
        # a file descriptor's name (/dev/stdout, /dev/fd/1, /proc/self/fd/1): the report
        # takes its name by a rename, which replaced the /dev/stdout link itself (as root) with
        # a regular file, for every program on the machine, when stdout was an HTML file
        raise UsageError(
            f"--html {out}: names a device or a file descriptor, not a file; name the HTML "
            "file to write (the report is written whole, then renamed into place); nothing "
            "was written"
        )
    if target.exists() and not target.is_file():
        # a pipe, a FIFO or a terminal (--html /dev/stdout): reading its head to see whether
        # it is a report waited for ever on the command's own output, and a device's name is
        # not one to replace with the report (the report is one file, written whole)
        raise UsageError(
            f"--html {out}: is not a regular file (a pipe, a terminal or a device); name the "
            "HTML file to write; nothing was written"
        )
    if target.exists() and not _is_html(target):
        # a slip of the argument (--html afc.db, --html manifest.yaml) must not cost the
        # ledger's history or a manifest: only an HTML file is ever replaced
        raise UsageError(
            f"--html {out}: exists and is not an HTML file; afc replaces only an HTML report "
            "(remove it, or name another file)"
        )
    # a folder it cannot be written in (no permission, a read-only or full disk) is said of
    # the file asked for, exit 2, before the thumbnails are made (minutes for a big batch):
    # not of the temporary name, nor with the generic advice to 'afc resume' (which would
    # start the batch's unfinished jobs, to mend a report)
    unwritable = f"--html {out}: cannot write it ({{}}); nothing was written under that name"
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    except OSError as exc:
        raise UsageError(unwritable.format(exc.strerror or exc)) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            # written as it is read: a ledger of months holds 100,000s of jobs
            data, jobs = streamed_sheet(ledger_path, batch=batch, since=since)
            made: dict[str, Any] = {"jobs": 0, "pictures": 0, "without_picture": []}
            opened: dict[str, Any] = {}  # a storage opened once, not once a page (an S3 client)

            def opener(url: str) -> Any:
                if url not in opened:
                    opened[url] = storage.open(url)
                return opened[url]

            size = 0
            try:
                for piece in pieces(data, jobs, opener, made):
                    handle.write(piece)
                    size += len(piece.encode("utf-8"))
                handle.flush()
                # durable before it takes the report's name, and the name after: a machine
                # that loses power just after must not leave an empty or cut file in place
                # of the last good report (the spool's rule, afc_cli/spool.py)
                os.fsync(handle.fileno())
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(temp, 0o666 & ~umask)  # as an ordinary new file, not mkstemp's 0600
                os.replace(temp, target)
                try:
                    fsync_dir(target.parent)
                except OSError:
                    pass  # a file system refusing a folder's fsync: as durable as it makes it
            except OSError as exc:
                raise UsageError(unwritable.format(exc.strerror or exc)) from None
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return {
        "file": str(target.resolve()),
        "bytes": size,
        "jobs": made["jobs"],
        "pictures": made["pictures"],
        "without_picture": made["without_picture"],
        "failures": len(data["failures"]),
        # of them, the dead-lettered ones: the stderr line counts them apart, as the
        # page's header and 'afc status' do (one line said '2 failed' for 1 failed, 1 dead)
        "dead": sum(1 for job in data["failures"] if job["status"] == "dead"),
        "awaiting_review": len(data["review"]),
        "total": data["spend"]["provider"]["total"],
        **({"moved_to": data["moved_to"]} if data["moved_to"] else {}),
    }
