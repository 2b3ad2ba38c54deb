"""``--json`` output, apart from ``afc_cli/output.py`` (which imports the run's reporters, and
so pydantic and YAML): a command that only reads figures (``afc queue stats --json``) prints
them without those imports."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from afc_cli.secrets import REDACTED, json_structure_free, scrub, scrub_data

# distinct strings whose scrub a streamed document keeps (rows repeat their keys and most
# values); past it the cache starts again, so what is held does not grow with the rows
SEEN_STRINGS = 4096


class Streamed:
    """A list of a document's top level written as its items come (``afc status --json``'s
    jobs, ``afc outputs --json``'s outputs): each item is encoded, scrubbed and written in
    turn, never the whole list held."""

    def __init__(self, items: Iterable[Any]) -> None:
        self.items = items


class ResultNotWritten(OSError):
    """A command's ``--json`` result that stdout refused (written to a file on a full disk),
    after what the command did was committed: a review decision, a cancel, a retry, a ledger
    copy. Said as the runs' 'every job stays resumable: fix it, then run afc resume', it
    read as nothing done, and the approval made again was refused as not awaiting review."""


def emit_json(value: Any) -> None:
    """``value`` as JSON on stdout, scrubbed twice: each string before encoding (JSON escapes
    a secret holding a quote, a backslash or a non-ASCII character, which the text scrub would
    no longer recognise) and the encoded text after (keys and shapes split across values).

    A dict whose values include ``Streamed`` lists is written piece by piece, the same bytes
    as the whole document: each key with its value, and each item of a streamed list, is
    encoded and scrubbed on its own (a secret lives inside one value, never across two); an
    item JSON writes without escapes has its strings scrubbed the second time instead of its
    text, the same bytes (``_settled``)."""
    if isinstance(value, dict) and any(isinstance(v, Streamed) for v in value.values()):
        for piece in _pieces(value):  # its rows read as it goes: their errors are their own
            _write(piece)
        _write("\n")
    else:
        text = json.dumps(scrub_data(value), indent=2, sort_keys=False)
        _write(scrub(text, decode=False) + "\n")
    try:
        sys.stdout.flush()
    except OSError as exc:  # a stdout that raises: not a run's (below)
        raise _not_written(exc) from None
    lost = getattr(sys.stdout, "lost", None)  # a run's stdout, whose failed write never raises
    if lost is not None and lost.errno != errno.EPIPE:  # a reader gone ('| head') chose to go
        # the run went on, its exit code its jobs'; a script reading the JSON from a file on
        # a full disk finds it empty or cut short, so say so (to stderr, if that still works)
        sys.stderr.write(
            f"afc: the --json result could not be written to stdout ({lost}); what this "
            "command did is recorded in the ledger ('afc status --json' shows the jobs)\n"
        )


def _write(text: str) -> None:
    """``text`` to stdout; a write it refuses is ``ResultNotWritten``."""
    try:
        sys.stdout.write(text)
    except OSError as exc:
        raise _not_written(exc) from None


def _not_written(exc: OSError) -> ResultNotWritten:
    """The result stdout refused, said once, by afc: the rest of it, left in stdout's buffer,
    goes to /dev/null. Outside ``PYTHONUNBUFFERED`` (a crontab's, a script's) Python's own
    flush of that buffer at exit failed again after afc's line, 'Exception ignored in:
    <_io.TextIOWrapper name='<stdout>'...> OSError', and the exit code was 120, not afc's."""
    with contextlib.suppress(AttributeError, OSError, ValueError):  # a stdout with no fd
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, sys.stdout.fileno())
        finally:
            os.close(null)
    return ResultNotWritten(exc.errno, exc.strerror)


def scrubbed_in_turn(value: Any, seen: dict[str, str]) -> Any:
    """``scrub_data(value)`` for one of many items (a document's, a table's rows), with the
    scrubs of the items before it (``seen``, at most ``SEEN_STRINGS`` kept)."""
    if len(seen) > SEEN_STRINGS:
        seen.clear()
    return scrub_data(value, seen)


def _encoded(value: Any, seen: dict[str, str], indent: str) -> str:
    """``value`` as ``json.dumps(..., indent=2)`` writes it at ``indent`` inside a document."""
    return json.dumps(scrubbed_in_turn(value, seen), indent=2).replace("\n", "\n" + indent)


class _Escaped(Exception):
    """An item whose text is not its strings' characters as they are (``_settled``)."""


def _settled(value: Any, seen: dict[str, str], again: dict[Any, str]) -> Any:
    """``value`` as ``_item``'s scrub of its encoded text would leave it, found string by
    string: each string scrubbed (``seen``), then scrubbed again as that text is
    (``decode=False``). ``_Escaped`` where JSON would write a string with an escape (a quote,
    a backslash, a control or non-ASCII character), or a number's text holds a secret.

    Why that is the same: a string's scrub that changed nothing (and holds no mask) changes
    nothing scrubbed again, since every step of the second is a step of the first; an
    escape-free document's text is its strings and numbers as they are, between quotes,
    commas, colons, blanks, line breaks and brackets; no token shape matches across those,
    nor does a secret value or piece where none holds them (``json_structure_free``)."""
    if isinstance(value, str):
        done = again.get(value)
        if done is None:
            first = scrub_data(value, seen)
            if not (first.isascii() and first.isprintable()) or '"' in first or "\\" in first:
                raise _Escaped
            if first != value or REDACTED in value:
                first = scrub(first, decode=False)
            done = again[value] = first
        return done
    if isinstance(value, dict):
        settled, firsts = {}, set()
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Escaped
            firsts.add(scrub_data(key, seen))
            settled[_settled(key, seen, again)] = _settled(item, seen, again)
        if len(settled) != len(firsts):
            # two keys the second scrub made one (both masked whole): the text holds both
            raise _Escaped
        return settled
    if isinstance(value, list | tuple):
        return [_settled(item, seen, again) for item in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        text = json.dumps(value)
        done = again.get(("number", text))
        if done is None:
            done = again[("number", text)] = scrub(text, decode=False)
        if done != text:
            raise _Escaped
    return value


def _item(item: Any, seen: dict[str, str], again: dict[Any, str], before: str) -> str:
    """A streamed list's ``item`` after ``before`` (its comma and line break), as
    ``json.dumps`` writes it inside the document and ``emit_json``'s scrub of that text gives
    it. The text is scrubbed whole only where its strings' scrub cannot stand for it
    (``_settled``): scrubbing each row's whole text again was a fifth of 'afc status --json'
    (120,000 jobs: 2.3 s of 9 s of CPU), where a second scrub of the strings that the first
    changed gives the same bytes."""
    if len(seen) > SEEN_STRINGS or len(again) > SEEN_STRINGS:
        seen.clear()
        again.clear()
    if json_structure_free():
        try:
            settled = _settled(item, seen, again)
        except _Escaped:
            pass
        else:
            return before + json.dumps(settled, indent=2).replace("\n", "\n    ")
    return scrub(before + _encoded(item, seen, "    "), decode=False)


def _pieces(document: dict[str, Any]) -> Iterator[str]:
    """``document``'s text, as ``json.dumps(document, indent=2)`` and ``emit_json``'s scrub
    give it, in scrubbed pieces."""
    seen: dict[str, str] = {}
    again: dict[Any, str] = {}
    yield "{"
    for number, (key, value) in enumerate(document.items()):
        head = ("," if number else "") + "\n  " + _encoded(key, seen, "  ") + ": "
        if not isinstance(value, Streamed):
            yield scrub(head + _encoded(value, seen, "  "), decode=False)
            continue
        yield scrub(head, decode=False) + "["
        empty = True
        for item in value.items:
            yield _item(item, seen, again, "\n    " if empty else ",\n    ")
            empty = False
        yield "]" if empty else "\n  ]"
    yield "\n}" if document else "}"
