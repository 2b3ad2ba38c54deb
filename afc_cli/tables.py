"""Tables a person and a pipe can read (gh's convention).

On a terminal: a rich table laid out to the terminal's width by ``layout`` (a pure function).
Keys, ids, money and counts are ``whole`` columns: never cut, never wrapped. Free text
(``text``: an error message, a URL) wraps; ``tail`` columns (output keys) are shortened from the
left, so the file name stays. Headers wrap at their words. When the whole columns do not fit,
the least useful columns are dropped (``drop``: 1 first) and a note names them; if even the
columns that are never dropped do not fit, the table is printed wider than the terminal (the
terminal wraps the lines) rather than cut a key or a figure; what is said under it (reasons,
notes) wraps at the terminal's width.

On a pipe or a file: one header line of field names (the ``--json`` names), then one line per
row, fields separated by tabs, no box drawing, no colour, nothing shortened. Notes (counts,
warnings) go to stderr there, so stdout holds only rows.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TextIO

from afc_cli.secrets import visible

GAP = 2  # spaces between columns on a terminal
TEXT_MIN = 12  # narrowest a wrapping text column gets before columns are dropped
TAIL_MIN = 16  # narrowest a left-shortened column gets


@dataclass(frozen=True)
class Col:
    name: str  # the row's field (and the header on a pipe)
    kind: Literal["whole", "text", "tail"] = "whole"
    drop: int | None = None  # drop order when the table does not fit; None: never dropped
    header: str | None = None  # shown on a terminal; default: the name, "_" as spaces
    right: bool = False  # numbers and money
    least: int | None = None  # a text or tail column's narrowest (TEXT_MIN, TAIL_MIN)
    # dropped for want of room, its values are printed under the table, one line each after
    # the row's first column ("KEY: value"): a failed job's reason is what the view is for
    below: bool = False

    @property
    def title(self) -> str:
        return self.header if self.header is not None else self.name.replace("_", " ")


@dataclass(frozen=True)
class Layout:
    columns: list[Col]
    widths: list[int]
    dropped: list[Col]
    width: int  # the table's width, gaps included


def cell(value: Any) -> str:
    # a terminal's escapes in outside text (a message kept by an older afc) are shown, not run
    return "" if value is None else visible(str(value))


def cells(text: str) -> int:
    """How many terminal columns ``text`` takes: two a wide character (CJK, most emoji), as
    rich lays them out; counted in characters, such text got half the room it needed."""
    if text.isascii():  # nearly every cell: one column a character (controls are escaped)
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def shorten_left(text: str, width: int) -> str:
    """``…ts/titles/shot-001.png``: the end of a long key is the part that tells keys apart.
    ``width`` is in terminal columns."""
    if cells(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    if text.isascii():
        return "…" + text[len(text) - width + 1 :]
    from rich.cells import get_character_cell_size

    room, kept = width - 1, len(text)
    while kept and get_character_cell_size(text[kept - 1]) <= room:
        kept -= 1
        room -= get_character_cell_size(text[kept])
    return "…" + text[kept:]


def layout(rows: Sequence[dict[str, Any]], columns: Sequence[Col], width: int) -> Layout:
    """Which columns to show, and how wide, for a terminal ``width`` columns wide."""
    natural = {}
    least = {}
    floor_of = {}  # the narrowest a column may get when room is short
    for col in columns:
        longest_cell = max((cells(cell(row.get(col.name))) for row in rows), default=0)
        longest_word = max((cells(word) for word in col.title.split()), default=0)
        if col.kind == "whole":
            natural[col.name] = max(longest_cell, cells(col.title))
            least[col.name] = max(longest_cell, longest_word)
        else:
            natural[col.name] = max(longest_cell, cells(col.title), 1)
            default = TEXT_MIN if col.kind == "text" else TAIL_MIN
            floor = col.least or default
            least[col.name] = max(min(natural[col.name], floor), longest_word)
            floor_of[col.name] = max(min(natural[col.name], default), longest_word)

    shown = list(columns)
    dropped: list[Col] = []

    def needed(cols: list[Col]) -> int:
        return sum(least[c.name] for c in cols) + GAP * max(len(cols) - 1, 0)

    while needed(shown) > width:
        candidates = [c for c in shown if c.drop is not None]
        if not candidates:
            break
        victim = min(candidates, key=lambda c: c.drop)
        if least[victim.name] > floor_of.get(victim.name, least[victim.name]):
            least[victim.name] = floor_of[victim.name]  # narrower before it goes
            continue
        shown.remove(victim)
        dropped.append(victim)

    widths = {c.name: least[c.name] for c in shown}
    slack = width - needed(shown)
    # room left: first let shortened and wrapped columns grow, then unwrap headers
    for kinds in (("tail", "text"), ("whole",)):
        growing = [c for c in shown if c.kind in kinds and widths[c.name] < natural[c.name]]
        while slack > 0 and growing:
            share = max(slack // len(growing), 1)
            for col in list(growing):
                step = min(share, natural[col.name] - widths[col.name], slack)
                widths[col.name] += step
                slack -= step
                if widths[col.name] >= natural[col.name]:
                    growing.remove(col)
                if slack <= 0:
                    break
    total = sum(widths.values()) + GAP * max(len(shown) - 1, 0)
    return Layout(shown, [widths[c.name] for c in shown], dropped, total)


def terminal_width(stream: TextIO) -> int:
    """The width rich would use: ``COLUMNS`` when set, else the terminal's, else 80."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        size = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 80
    # a terminal that reports no size (0x0: `script` on a pipe, some serial consoles and
    # container ttys) is not one column wide: laid out to 0, every column but the key
    # was dropped and the reasons wrapped a word a line
    return size if size > 0 else 80


def emit(
    rows: Iterable[dict[str, Any]],
    columns: Sequence[Col],
    *,
    title: str | None = None,
    notes: Sequence[str] = (),
    group: str | None = None,
    stream: TextIO | None = None,
    total: bool = False,
) -> None:
    """Print ``rows``: a laid-out table on a terminal, tab-separated lines on a pipe.

    ``group`` names a column (the batch) that, on a terminal, becomes a heading over each
    group's rows instead of a column, so it takes no width from the keys. ``total``: the
    last row is the rows' total, which a terminal's table sets apart under a rule (its label
    may also be a row's: a batch named ``total``)."""
    from afc_cli.jsonout import scrubbed_in_turn

    # every table leaves through here: a cell may hold outside text (a webhook URL with
    # user:pass@, a provider's message), scrubbed as every other way out is. Each distinct
    # text once, as ``emit_json`` does: the rows repeat their column names and most values
    # (a status, a step, 'waiting for 1 need: style-frame'), and each row's scrubbed anew
    # was 90% of 'afc status' (2.2 s at 10,000 jobs, 10 s at 50,000)
    seen: dict[str, str] = {}
    out = stream or sys.stdout
    if not out.isatty():
        # each row as it comes: ``rows`` may be an iterator read from the ledger a chunk at a
        # time (``afc status --all``, ``afc outputs`` on a pipe), never held whole
        emit_plain((scrubbed_in_turn(row, seen) for row in rows), columns, out)
        for note in notes:
            sys.stderr.write(note + "\n")
        return
    rows = [scrubbed_in_turn(row, seen) for row in rows]
    emit_terminal(rows, columns, out, title=title, notes=notes, group=group, total=total)


def emit_plain(rows: Iterable[dict[str, Any]], columns: Sequence[Col], out: TextIO) -> None:
    def field(value: Any) -> str:
        return " ".join(cell(value).split("\t")).replace("\r", " ").replace("\n", " ")

    out.write("\t".join(c.name for c in columns) + "\n")
    for row in rows:
        out.write("\t".join(field(row.get(c.name)) for c in columns) + "\n")


def rich_console(**options: Any):
    """A rich Console for a person's terminal. ``NO_COLOR`` set and not empty (no-color.org)
    turns every style off, bold and dim too, not only colour (rich's own ``NO_COLOR`` keeps
    those): what is printed is plain text and cursor moves only."""
    from rich.console import Console

    if os.environ.get("NO_COLOR", ""):
        options["color_system"] = None
    return Console(**options)


def emit_terminal(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[Col],
    out: TextIO,
    *,
    title: str | None = None,
    notes: Sequence[str] = (),
    group: str | None = None,
    total: bool = False,
) -> None:
    from rich.text import Text

    width = terminal_width(out)
    if group is not None and all(c.name != group for c in columns):
        group = None  # one batch: the caller named it already
    if group is not None:
        columns = [c for c in columns if c.name != group]
    plan = layout(rows, columns, width)
    console = rich_console(file=out, width=max(width, plan.width), highlight=False)
    # only the table may be wider than the terminal: what is said under it wraps at the
    # terminal's width (at the table's, the terminal broke each line again)
    below = rich_console(file=out, width=width, highlight=False)
    under = [c for c in plan.dropped if c.below]

    def said_under(members: Sequence[dict[str, Any]]) -> None:
        # under its own table: with several batches, under its batch's heading ("KEY: why"
        # names the key only, and two batches may both have a shot-001)
        for col in under:
            for row in members:
                if row.get(col.name):
                    label = cell(row.get(plan.columns[0].name)) if plan.columns else ""
                    said = cell(row.get(col.name))
                    if cells(label) + 1 > width:
                        # a key longer than the terminal: whole on a line of its own (the
                        # terminal wraps it), never broken into lines; the reason wraps
                        below.print(Text(f"{label}:"), soft_wrap=True)
                        below.print(Text(said))
                    else:
                        below.print(Text(f"{label}: {said}"))

    if title:
        console.print(Text(title, style="bold"))
    if group is None:
        console.print(_table(rows, plan, total=total))
        said_under(rows)
    else:
        sections: dict[Any, list[dict[str, Any]]] = {}
        for row in rows:
            sections.setdefault(row.get(group), []).append(row)
        for name, members in sections.items():
            # the batch name is an id: kept whole on one line, as a key in a table too wide
            # is (the terminal wraps it; a copy of it is the name), never broken into lines
            console.print(Text(f"{group} {cell(name)}", style="bold"), soft_wrap=True)
            console.print(_table(members, plan))
            said_under(members)
    unseen = [c for c in plan.dropped if not c.below]
    if unseen:
        names = ", ".join(c.name for c in unseen)
        below.print(
            Text(
                f"(not shown at {width} columns: {names}; see them on a wider terminal, "
                "with --json, or piped)",
                style="dim",
            )
        )
    for note in notes:
        below.print(Text(note))


def _table(rows: Sequence[dict[str, Any]], plan: Layout, *, total: bool = False):
    from rich import box
    from rich.table import Table
    from rich.text import Text

    def shown(row: dict[str, Any], col: Col, size: int) -> Text:
        text = cell(row.get(col.name))
        return Text(shorten_left(text, size) if col.kind == "tail" else text)

    # the total as the table's footer, under a rule: on a row of its own it looked like any
    # other (a batch named 'total' and the total, two alike rows)
    footer = rows[-1] if total and len(rows) > 1 else None  # no group: the total alone
    if footer is not None:
        rows = rows[:-1]
    table = Table(
        box=box.SIMPLE if footer is not None else box.SIMPLE_HEAD,
        show_footer=footer is not None,
        footer_style="bold",
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
        collapse_padding=True,
        header_style="bold",
    )
    for col, size in zip(plan.columns, plan.widths, strict=True):
        table.add_column(
            col.title,
            footer=shown(footer, col, size) if footer is not None else "",
            width=size,
            justify="right" if col.right else "left",
            overflow="fold",
            no_wrap=col.kind == "tail",
        )
    for row in rows:
        table.add_row(
            *(shown(row, col, size) for col, size in zip(plan.columns, plan.widths, strict=True))
        )
    return table
