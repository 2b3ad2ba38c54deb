"""Job lists: a manifest's ``jobs_from: FILE``, JSON Lines or CSV, read one line at a time.

Each line is one job with the fields of a manifest's ``jobs`` entry, validated by the same
model and rules (``afc_cli/manifest.py``: ``JobSpec`` and ``resolve_jobs``); a problem names the
file and its line number. The file is relative to the manifest's folder.

- **JSON Lines** (``.jsonl``, ``.ndjson``): one JSON object per line; blank lines are skipped; a
  key given twice in one object is an error, as in the manifest's YAML.
- **CSV** (``.csv``, UTF-8, a header row): columns ``key``, ``prompt``, ``output``; ``params``,
  ``chain``, ``webhook``, ``review``, ``needs`` and ``inputs`` as JSON text; and
  ``params.NAME`` columns, one param each, whose cell is read as JSON when it is a JSON
  number, ``true``, ``false``, an object, a list or a quoted string, and as plain
  text otherwise (``64x64``, ``007``). An empty cell leaves the field out. A quoted cell
  never closed, or a cell longer than the csv module's limit (128 KiB), refuses the list at
  its line (the rest of the file cannot be split reliably after it); so does the header row
  again (two lists joined), which would be a job keyed ``key``. A header whose columns are
  separated by ``;`` (a European locale's export) is refused saying so, not read.

Either format: a byte order mark opening the file is skipped, and one opening a later line (two
lists joined, each saved with one) refuses the list at that line, named as such (``BOM_LINE``;
a CSV header row after it is the header row again); a zip archive (an Excel workbook named
jobs.csv) or a compressed file is refused as such by its first bytes (``JobFile._archive``);
a byte that is not UTF-8 refuses
the list at its line (named, with the byte); a line longer than
``MAX_LINE_CHARS`` (1 Mi characters: a job's line is a few hundred) refuses the list at that
line, unread (a file of one endless line, such as a binary or a log named by mistake, would
otherwise be held in memory whole, and a CSV line of commas as millions of cells); JSON nested more than 64 levels
deep (the manifest YAML's limit) is a line's problem, as is a line that is valid JSON but not
an object; a list that holds no job, with no inline ``jobs`` beside it, is refused as an empty
``jobs`` is.

Nothing here keeps more than one line: the manifest loader (``resolve_jobs`` in
afc_cli/manifest.py) reads the file once, checking every line (and finding duplicate keys and
output keys across the whole manifest), and keeps the resolved jobs in a temporary file
(``manifest.JobList``) that admission reads back in chunks.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}
CSV_FIELDS = ("key", "prompt", "output")
CSV_JSON_FIELDS = ("params", "chain", "webhook", "review", "needs", "inputs")
# what each JSON column's cell looks like, for a cell that is not JSON: a spreadsheet's
# 'needs' cell written 'style-frame' was refused 'Expecting value: line 1 column 1 (char 0)'
CSV_JSON_EXAMPLES = {
    "params": '{"size": "64x64"}',
    "chain": '[{"provider": "openai", "model": "gpt-image-1"}]',
    "webhook": '{"url": "https://...", "secret_env": "AFC_WEBHOOK_SECRET"}',
    "review": "true",
    "needs": '["style-frame"] (a list, in double quotes)',
    "inputs": '[{"path": "refs/palette.png"}, {"job": "style-frame"}]',
}


# the first bytes of an archive named as a job list (JobFile._archive): a zip's (an Excel
# workbook's, .xlsx, is one) and a compressed file's (gzip, bzip2, xz, zstd)
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
COMPRESSED_MAGIC = (b"\x1f\x8b", b"BZh", b"\xfd7zX", b"\x28\xb5\x2f\xfd")


class _Duplicate(ValueError):
    pass


# the characters of a number's integer as written, in a manifest's YAML (``manifest.py``'s
# ``_construct_number``) and in a job list's JSON: Python reads no integer of more than 4,300
# digits (a JSON Lines line's was refused "use sys.set_int_max_str_digits() to increase the
# limit", a CSV params.NAME cell's was read as text and sent so); no field afc reads holds
# one of even a hundred
MAX_NUMBER_CHARS = 1000


class _LongNumber(ValueError):
    """An integer written with more than ``MAX_NUMBER_CHARS`` characters (``_json_int``)."""

    def __init__(self, chars: int) -> None:
        super().__init__(f"a number {chars:,} characters long")
        self.chars = chars


def _json_int(text: str) -> int:
    """``json.loads``'s ``parse_int``: the integer, or ``_LongNumber`` for a long one."""
    if len(text) > MAX_NUMBER_CHARS:
        raise _LongNumber(len(text))
    return int(text)


# how a long number is kept as text: a JSON string, in a line or in a CSV cell
_AS_TEXT = "write it in double quotes, as a JSON string, to keep it as text"


class _Bad(str):
    """Why a line could not be read as a job (a line holding a JSON string is not one);
    ``key``, the job's key where the line gave one (a CSV row's key cell), for the message."""

    key: str | None = None


# JSON nested deeper than the manifest's YAML may be (MAX_YAML_DEPTH) is refused the same way;
# deeper still, Python's decoder would raise RecursionError, also a line's problem
MAX_DEPTH = 64
NESTING = f"nested more than {MAX_DEPTH} levels deep"
MAX_LINE_CHARS = 1 << 20
TOO_LONG = (
    f"a line longer than {MAX_LINE_CHARS:,} characters (is this a job list?); the rest of the "
    "file was not read"
)


class _TooLong(Exception):
    pass


# a byte order mark opening a line other than the first: two lists joined one after another
# ('cat a.csv b.csv', each saved with one, as Excel's "CSV UTF-8" and Notepad save), invisible
# in an editor; a JSON line so opened read 'Expecting value: line 1 column 1 (char 0)'
BOM = "\ufeff"
BOM_LINE = (
    "a byte order mark (U+FEFF, invisible in most editors) opens this line, as it opens a "
    "file: two lists joined one after another? remove it"
)


# a byte that is not UTF-8, as the ``surrogateescape`` handler the list is read with gives it
_NOT_UTF8 = re.compile("[\udc80-\udcff]")


class _NotUtf8(Exception):
    """A line holding a byte that is not UTF-8 (a list saved as Latin-1 or Windows-1252): the
    list is refused at that line, named, instead of at a decoder's chunk with no line."""

    def __init__(self, line: int, column: int, byte: int, utf16: bool = False) -> None:
        super().__init__(line)
        self.line = line
        saved = (
            "saved as UTF-16, as 'Unicode text' exports are:"
            if utf16
            else "saved as Latin-1 or Windows-1252?"
        )
        self.problem = (
            f"not UTF-8 text: byte 0x{byte:02X} at column {column} ({saved} save the list as "
            "UTF-8); the rest of the file was not read"
        )


def _lines(handle: Any) -> Iterator[str]:
    """``handle``'s lines, as iterating it gives them; ``_TooLong`` at a line longer than
    ``MAX_LINE_CHARS``, which is never read whole; ``_NotUtf8`` at a line with a byte that is
    not UTF-8 (``handle`` decodes with ``surrogateescape``)."""
    number = 0
    while True:
        text = handle.readline(MAX_LINE_CHARS + 1)
        if not text:
            return
        number += 1
        if len(text) > MAX_LINE_CHARS:
            raise _TooLong
        if not text.isascii() and (bad := _NOT_UTF8.search(text)) is not None:
            utf16 = number == 1 and text[:2] in ("\udcff\udcfe", "\udcfe\udcff")  # its BOM
            raise _NotUtf8(number, bad.start() + 1, ord(bad.group()) - 0xDC00, utf16)
        yield text


def unnamable(path: Any) -> str | None:
    """Why ``path`` cannot be named on this system, or None: a locale that is not UTF-8
    (ISO-8859-1) cannot name a file in another script ('参考.png'), which was said as 'no such
    file' of a file that is there."""
    from afc_cli.errors import UTF8_LOCALE, unnamable_here

    said = unnamable_here(str(path))
    if said is None:
        return None
    return f"{str(path)!r} cannot be named here: {said}; {UTF8_LOCALE}, or rename the file"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise _Duplicate(f"duplicate key {key!r}")
            seen.add(key)
    return out


# one decoder for every line (json.loads with a hook makes a new one per call)
_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_int=_json_int)
# the C scanner without the hook: for lines that show they cannot hold a key twice (_flat)
_SCAN = json.JSONDecoder().scan_once


def _flat(text: str) -> dict[str, Any] | None:
    """A line that is one JSON object of string members, decoded without the duplicate-key
    hook (a third of a line's decoding), or None (then the hooked decoder reads it). Exact:
    with no backslash in the line, every ``"`` opens or closes a string, and an object whose
    members are all strings has exactly two strings a member, so four quotes a member; a key
    written twice would leave the decoded object with fewer members than the quotes count."""
    if "\\" in text:
        return None
    try:
        value, end = _SCAN(text, 0)
    except (StopIteration, ValueError, RecursionError):
        return None  # the hooked decoder reads it and says what is wrong
    if (
        end != len(text)
        or type(value) is not dict
        or text.count('"') != 4 * len(value)
        or not all(type(item) is str for item in value.values())
    ):
        return None
    return value


def _not_json(name: str) -> Any:
    """``json.loads``'s ``parse_constant``: ``NaN``, ``Infinity`` and ``-Infinity``, which
    Python's reader takes, are no JSON (a cell holding one is its text)."""
    raise ValueError(f"{name} is not JSON")


def _cell(text: str) -> Any:
    """A ``params.NAME`` cell: JSON when it reads as a JSON value, else the text itself (a
    number too long to read, ``_LongNumber``, is raised: it is a JSON number all the same)."""
    if text[:1] in '{["-0123456789' or text in ("true", "false"):
        try:
            return _nested(
                json.loads(
                    text,
                    object_pairs_hook=_no_duplicates,
                    parse_constant=_not_json,
                    parse_int=_json_int,
                )
            )
        except _LongNumber:
            raise
        except (ValueError, RecursionError):
            pass
    return text


def _nested(value: Any, depth: int = 0) -> Any:
    """``value`` itself; RecursionError when its lists and objects nest more than
    ``MAX_DEPTH`` deep."""
    if isinstance(value, dict):
        items: Any = value.values()
    elif isinstance(value, list):
        items = value
    else:
        return value
    if depth >= MAX_DEPTH:
        raise RecursionError
    for item in items:
        _nested(item, depth + 1)
    return value


def _csv_problem(exc: csv.Error) -> str:
    text = str(exc)
    if "field larger than field limit" in text:
        return f"a cell is longer than {csv.field_size_limit():,} characters"
    if "unexpected end of data" in text:
        return "a quoted cell is never closed (its closing quote is missing)"
    if "expected after" in text:
        return (
            "text after a quoted cell's closing quote (a space after it, or a quote inside a "
            'quoted cell not written as "")'
        )
    return f"not valid CSV: {text}"


class JobFile:
    def __init__(self, path: Path, name: str) -> None:
        self.path = path
        self.name = name  # as the manifest wrote it, for messages
        self.format = FORMATS.get(path.suffix.lower())

    def problem(self) -> str | None:
        if self.format is None:
            return f"{self.name!r}: a job list is a .jsonl (JSON Lines) or .csv file"
        if not self.path.is_file():
            import os

            unnamed = unnamable(self.path)
            if unnamed is not None:
                return unnamed
            if os.path.lexists(self.path):  # a directory, a FIFO, a device, a symlink loop
                return f"{self.name!r} next to the manifest is not a regular file"
            return f"no file {self.name!r} next to the manifest"
        return self._archive()

    def _archive(self) -> str | None:
        """What to say of a list that is an archive, not text (an Excel workbook named
        jobs.csv, a gzip'd jobs.jsonl), read as text it was 'not UTF-8 text ... (saved as
        Latin-1 or Windows-1252?)'; None for any other file (read, and judged, line by line)."""
        try:
            with open(self.path, "rb") as handle:
                magic = handle.read(4)
        except OSError:
            return None  # said when the list is read
        text = "CSV text" if self.format == "csv" else "JSON Lines text"
        if magic in ZIP_MAGIC:
            kind = "a zip archive (an Excel workbook?)" if self.format == "csv" else "a zip archive"
            how = (
                "export the sheet as CSV UTF-8 (Excel: Save As, 'CSV UTF-8')"
                if self.format == "csv"
                else "unzip it and name the list inside"
            )
            return f"{self.name!r} is {kind}, not {text}: {how}"
        if any(magic.startswith(mark) for mark in COMPRESSED_MAGIC):
            return (
                f"{self.name!r} is compressed (gzip, bzip2, xz or zstd), not {text}: decompress it"
            )
        return None

    def specs(self, start: int, problems: list[str]) -> Iterator[tuple[int, str, Any]]:
        """``(index, where, JobSpec)`` for each valid line (indexes follow ``start``, the
        manifest's inline jobs); each invalid line's problems go to ``problems``."""
        from afc_cli.manifest import MAX_PROBLEMS, JobSpec

        rows = self._jsonl() if self.format == "jsonl" else self._csv(problems)
        index = start
        try:
            for line, row in rows:
                where = f"{self.name} line {line}"
                if isinstance(row, _Bad):  # the line could not be read as a job
                    # named by its key too where the line gave one, as a field's problem is
                    # (_line_problems): the file, the job (line and key) and the field
                    who = where + (f" (key {row.key!r})" if row.key else "")
                    problems.append(f"{who}: {row}")
                elif not isinstance(row, dict):
                    problems.append(f"{where}: a job is a JSON object, got {type(row).__name__}")
                else:
                    spec = plain_spec(row)  # the common line, checked without pydantic
                    if spec is None:
                        try:
                            spec = JobSpec.model_validate(row)
                        except ValidationError as exc:
                            problems.extend(_line_problems(where, row, exc))
                            spec = None
                    if spec is not None:
                        yield index, where, spec
                index += 1
                if len(problems) >= MAX_PROBLEMS:
                    return
        except OSError as exc:
            problems.append(f"{self.name}: cannot read: {exc}")

    def _jsonl(self) -> Iterator[tuple[int, Any]]:
        number = 0
        # a byte order mark is skipped; a byte that is not UTF-8 is named with its line
        with open(self.path, encoding="utf-8-sig", errors="surrogateescape") as handle:
            try:
                for number, text in enumerate(_lines(handle), 1):
                    line = text.strip()
                    if not line:
                        continue
                    if line.startswith(BOM):
                        yield number, _Bad(BOM_LINE)
                        continue
                    value = _flat(line)
                    if value is not None:
                        yield number, value
                        continue
                    try:
                        yield number, _nested(_DECODER.decode(text))
                    except _Duplicate as exc:
                        yield number, _Bad(exc)
                    except _LongNumber as exc:
                        yield number, _Bad(f"{exc}; {_AS_TEXT}")
                    except RecursionError:
                        yield number, _Bad(NESTING)
                    except ValueError as exc:
                        yield number, _Bad(f"not valid JSON: {exc}")
            except _TooLong:
                yield number + 1, _Bad(TOO_LONG)
            except _NotUtf8 as exc:
                yield exc.line, _Bad(exc.problem)

    def _semicolons(self) -> str | None:
        """What to say of a header row whose columns are separated by ';', as a spreadsheet
        set to a European locale exports 'CSV' (its decimal comma taking ','); None if it is
        not one. Such a list is refused, not read: the same locale writes a number 1,5, which
        a params.NAME cell would take for text."""
        try:
            with open(self.path, encoding="utf-8-sig", errors="replace", newline="") as handle:
                first = handle.readline(4096)
            cells = next(csv.reader([first.rstrip("\r\n")], delimiter=";"), [])
        except (OSError, csv.Error):
            return None
        if len(cells) < 2 or not {"key", "prompt"} & set(cells):
            return None
        return (
            "the columns seem separated by ';' (a spreadsheet set to a European locale exports "
            "CSV so); afc reads comma-separated CSV only: export it with ',' as the field "
            "separator, or write the list as JSON Lines"
        )

    def _csv(self, problems: list[str]) -> Iterator[tuple[int, Any]]:
        with open(self.path, encoding="utf-8-sig", errors="surrogateescape", newline="") as handle:
            # strict: a quote left open is an error, not a cell that swallows the file's rest
            reader = csv.reader(_lines(handle), strict=True)
            try:
                header = next(reader, None)
            except csv.Error as exc:
                problems.append(f"{self.name} line 1: {self._semicolons() or _csv_problem(exc)}")
                return
            except _TooLong:
                problems.append(f"{self.name} line 1: {TOO_LONG}")
                return
            except _NotUtf8 as exc:
                problems.append(f"{self.name} line {exc.line}: {exc.problem}")
                return
            if header is None:
                problems.append(f"{self.name}: empty; the first row names the columns")
                return
            bad = [
                column
                for column in header
                if column not in CSV_FIELDS + CSV_JSON_FIELDS
                and not (column.startswith("params.") and len(column) > len("params."))
            ]
            if bad and (semicolons := self._semicolons()):
                problems.append(f"{self.name} line 1: {semicolons}")
                return
            if bad or len(set(header)) != len(header):
                why = (
                    f"unknown column(s) {', '.join(map(repr, bad))}"
                    if bad
                    else "a column is named twice"
                )
                problems.append(
                    f"{self.name} line 1: {why} (columns: key, prompt, output, params, chain, "
                    "webhook, review, needs, inputs, params.NAME)"
                )
                return
            last = reader.line_num
            while True:
                try:
                    cells = next(reader, None)
                except csv.Error as exc:  # the rest of the file cannot be split reliably
                    yield last + 1, _Bad(_csv_problem(exc))
                    return
                except _TooLong:
                    yield last + 1, _Bad(TOO_LONG)
                    return
                except _NotUtf8 as exc:  # the line itself, inside a cell of many lines too
                    yield exc.line, _Bad(exc.problem)
                    return
                if cells is None:
                    return
                line, last = last + 1, reader.line_num
                if not any(cells):
                    continue
                if len(cells) != len(header):
                    yield line, _Bad(f"{len(cells)} cells where the header names {len(header)}")
                    continue
                # the header row again (two lists joined, 'cat a.csv b.csv'): read as a job
                # keyed 'key' whose prompt is 'prompt', it was admitted and paid for
                # also after a byte order mark, the second list's (its first cell '\ufeffkey')
                again = cells == header or (
                    cells[0].startswith(BOM) and [cells[0][1:], *cells[1:]] == header
                )
                row = (
                    _Bad(
                        "the header row again"
                        + (", after a byte order mark" if cells != header else "")
                        + " (two lists joined one after another?): remove this line"
                    )
                    if again
                    else self._row(header, cells)
                )
                if isinstance(row, _Bad) and "key" in header:
                    row.key = cells[header.index("key")] or None
                yield line, row

    @staticmethod
    def _row(header: list[str], cells: list[str]) -> dict[str, Any] | _Bad:
        row: dict[str, Any] = {}
        params: dict[str, Any] = {}
        for column, text in zip(header, cells, strict=True):
            if text == "":
                continue
            if column in CSV_FIELDS:
                row[column] = text
            elif column in CSV_JSON_FIELDS:
                try:
                    row[column] = _nested(
                        json.loads(text, object_pairs_hook=_no_duplicates, parse_int=_json_int)
                    )
                except _LongNumber as exc:
                    return _Bad(f"column {column!r}: {exc}; {_AS_TEXT}")
                except RecursionError:
                    return _Bad(f"column {column!r}: {NESTING}")
                except ValueError as exc:
                    return _Bad(
                        f"column {column!r}: not valid JSON ({exc}); this column holds JSON "
                        f"text, such as {CSV_JSON_EXAMPLES[column]}"
                    )
            else:
                try:
                    params[column[len("params.") :]] = _cell(text)
                except _LongNumber as exc:
                    return _Bad(f"column {column!r}: {exc}; {_AS_TEXT}")
        if params:
            if not isinstance(row.get("params", {}), dict):
                return _Bad("column 'params': must be a JSON object")
            twice = sorted(set(row.get("params", {})) & set(params))
            if twice:  # a param given twice, as a key twice in JSON or YAML: refused
                return _Bad(
                    f"param {twice[0]!r} is given twice: in column 'params' and in column "
                    f"'params.{twice[0]}'"
                )
            row["params"] = {**row.get("params", {}), **params}
        return row


class PlainSpec:
    """A line of only ``key``, ``prompt`` and ``output`` text that ``JobSpec`` would accept as
    it is, with the attributes ``resolve_jobs`` reads: made without pydantic, which took a
    quarter of a 100,000-job list's validation. Any other line goes through ``JobSpec``, so
    its problems read the same."""

    __slots__ = ("key", "prompt", "output")
    params: dict[str, Any] = {}  # never mutated: resolve_jobs merges it into a new dict
    chain = None
    webhook = None
    review = None  # JobSpec's defaults for a line without them (issue 17's fields)
    needs = None
    inputs = None

    def __init__(self, key: str, prompt: str, output: str | None) -> None:
        self.key = key
        self.prompt = prompt
        self.output = output


def plain_spec(row: dict[str, Any]) -> PlainSpec | None:
    """The line as a ``PlainSpec`` when ``JobSpec`` would accept it unchanged (its constraints:
    a key of 1 to 200 characters, a prompt of at most ``MAX_PROMPT_CHARS``, all of them
    ``str``), else None (then ``JobSpec`` validates it and names each problem)."""
    key, prompt, output = row.get("key"), row.get("prompt"), row.get("output")
    if (
        type(key) is str
        and type(prompt) is str
        and (output is None or type(output) is str)
        and len(row) == 2 + ("output" in row)
        and 0 < len(key) <= 200
        and len(prompt) <= _max_prompt_chars()
        and _unicode(key)
        and _unicode(prompt)
        and (output is None or _unicode(output))
    ):
        return PlainSpec(key, prompt, output)
    return None


def _max_prompt_chars() -> int:
    global _MAX_PROMPT
    if _MAX_PROMPT is None:  # afc_cli/manifest.py's, read once (it imports this module)
        from afc_cli.manifest import MAX_PROMPT_CHARS

        _MAX_PROMPT = MAX_PROMPT_CHARS
    return _MAX_PROMPT


_MAX_PROMPT: int | None = None


def _unicode(text: str) -> bool:
    """Whether pydantic reads ``text`` as a string: JSON can spell a lone surrogate
    (``"\\ud800"``), which it refuses."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _line_problems(where: str, row: dict[str, Any], exc: ValidationError) -> list[str]:
    from afc_cli.manifest import _dotted, too_many_inputs

    key = row.get("key")
    who = where + (f" (key {key!r})" if isinstance(key, str) else "")
    problems = []
    for err in exc.errors(include_url=False):
        if err["type"] == "extra_forbidden":
            message = "unknown field"
        elif err["type"] == "missing":
            message = "required field is missing"
        elif err["type"] == "too_long" and err["loc"][-1:] == ("inputs",):
            message = too_many_inputs(err.get("input"))
        else:
            message = err["msg"]
        problems.append(f"{who}: field '{_dotted(tuple(err['loc']))}': {message}")
    return problems
