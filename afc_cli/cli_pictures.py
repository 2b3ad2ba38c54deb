"""``afc report --html`` and ``afc serve``: the pictures (afc_cli/web/), attached to ``afc``.

Kept out of ``cli.py`` so the commands' options live beside each other; the libraries they
need (the ``afc-cli[web]`` extra) are imported inside them, never at start-up.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from afc_cli.cli import (
    DEFAULT_LEDGER,
    BatchOpt,
    JsonOpt,
    LedgerOpt,
    UnusedConcurrencyOpt,
    UnusedQuietOpt,
    UnusedStorageOpt,
    UnusedVerboseOpt,
    _boundary,
    _err,
    _examples,
    _path_not_option,
    _sigterm_as_ctrl_c,
    app,
)


@app.command(
    "report",
    epilog=_examples(
        "afc report --html report.html",
        "afc report --html trailer.html --batch trailer-shots",
        "afc report --html week.html --since 2026-11-23",
    ),
)
def report_command(
    html: Annotated[
        str,
        typer.Option(
            "--html",
            metavar="FILE",
            callback=_path_not_option,
            help="Write the report to this HTML file.",
        ),
    ],
    batch: BatchOpt = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="DATE",
            help="Only jobs and spend since (ISO; UTC unless it gives an offset).",
        ),
    ] = None,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    json_out: JsonOpt = False,
    storage: UnusedStorageOpt = None,
    concurrency: UnusedConcurrencyOpt = None,
    quiet: UnusedQuietOpt = False,
    verbose: UnusedVerboseOpt = False,
) -> None:
    """A batch as one HTML file: contact sheet, failures, review, spend.

    Self-contained (thumbnails, charts and style inside): it opens offline and can be mailed.
    The spend has the same figures as 'afc costs report'. Needs the web extra
    (pip install 'afc-cli[web]')."""
    with _boundary(reads=ledger):
        # a cron job's timeout as a Ctrl-C: its temporary file removed, exit 130, said so
        _sigterm_as_ctrl_c()
        from afc_cli.web.html import write_report

        result = write_report(ledger, html, batch=batch, since=since)
        if result.get("moved_to"):  # as afc status says it: the report is of the old ledger
            from afc_cli.cli import _moved_line

            _err(_moved_line(result["moved_to"], "its jobs run and are decided there"))
        if json_out:
            from afc_cli.output import emit_json

            emit_json(result)
            return
        sys.stdout.write(f"{result['file']}\n")
        total = result["total"]
        from afc_cli.costs import plural, unknown_cost_part
        from afc_cli.errors import first_named

        _err(
            f"wrote {result['file']} ({result['bytes'] / 1e6:.1f} MB): "
            f"{plural(result['jobs'], 'job')}, {plural(result['pictures'], 'picture')}, "
            f"{result['failures'] - result['dead']} failed, "
            + (f"{result['dead']} dead, " if result["dead"] else "")
            + f"{result['awaiting_review']} awaiting review; spent {total['priced']} USD (priced)"
            # its unpriced attempts beside the figure, never left out (as 'afc costs report')
            + unknown_cost_part(total["unpriced_attempts"])
        )
        if result["without_picture"]:
            _err(
                f"{len(result['without_picture'])} stored outputs have no picture in the report "
                f"({first_named(result['without_picture'], 5)}): their cards say why"
            )


@app.command(
    "serve",
    epilog=_examples(
        "afc serve                       # http://127.0.0.1:8765/",
        "afc serve --batch trailer-shots --port 9000",
        "export AFC_SERVE_TOKEN=$(openssl rand -hex 16)  # keep it: never shown",
        "afc serve --host 0.0.0.0  # open http://HOST:8765/?token=$AFC_SERVE_TOKEN",
    ),
)
def serve_command(
    host: Annotated[
        str,
        typer.Option(
            "--host",
            metavar="H",
            help="Address to listen on. Other than 127.0.0.1 it needs AFC_SERVE_TOKEN.",
        ),
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", metavar="P", min=0, max=65535, help="Port (0: any free).")
    ] = 8765,
    batch: BatchOpt = None,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    json_out: Annotated[
        bool,
        typer.Option("--json", help="Once listening, its address as one JSON line on stdout."),
    ] = False,
    storage: UnusedStorageOpt = None,
    concurrency: UnusedConcurrencyOpt = None,
    quiet: UnusedQuietOpt = False,
    verbose: UnusedVerboseOpt = False,
) -> None:
    """The report's views live, and the review queue, in a browser.

    Contact sheet, failures, spend and the jobs awaiting review, with Approve and Reject
    (with a reason) that do what 'afc review' does. Full-size outputs are streamed from
    storage. Ctrl-C stops it. Needs the web extra (pip install 'afc-cli[web]')."""
    with _boundary():
        from afc_cli.web.server import serve

        def announce(line: str, url: str) -> None:
            _err(line)
            sys.stderr.flush()
            if json_out:  # for a script that started it on --port 0
                import json

                from afc_cli.web.server import ledger_name

                shown = {"url": url, "ledger": ledger_name(ledger), "batch": batch}
                sys.stdout.write(json.dumps(shown) + "\n")
                sys.stdout.flush()

        serve(
            ledger,
            host=host,
            port=port,
            batch=batch,
            environ=dict(os.environ),
            announce=announce,
        )
        _err("serve stopped")
