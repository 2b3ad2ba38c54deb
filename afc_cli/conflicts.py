"""What changed in a conflicting request: the fields, with old and new values.

A key admitted with one request and submitted again with another is an
``IDEMPOTENCY_CONFLICT``. The ledger keeps each job's resolved request body (``request_json``:
chain, prompt, params, output template, after defaults), so a conflict can say what changed
— ``prompt``, ``params.size``, ``chain[0].model`` — rather than only two hashes. Paths name
mapping keys with dots and list items with ``[i]``; a field present on one side only is
``(not set)`` on the other. Values are shown whole in ``--json`` and shortened in messages.
"""

from __future__ import annotations

import json
import os
import unicodedata
from typing import Any

from afc_cli.errors import first_named

SHOWN_CHARS = 60  # a longer value is cut to this in messages (prompts can be paragraphs)
SHOWN_CHANGES = 6  # fields named in one message; the rest are counted
_ABSENT = object()


def request_changes(old: Any, new: Any) -> list[dict[str, Any]]:
    """The fields that differ between two request bodies, in a stable order: each
    ``{"field", "old", "new"}``, with ``old`` or ``new`` left out where that side lacks it."""
    changes: list[dict[str, Any]] = []
    _walk("", old, new, changes)
    return changes


def changes_since(stored_json: str | None, new_body: dict[str, Any]) -> list[dict[str, Any]]:
    """What changed from an admitted request (its stored body, under today's rule for defaults,
    so a default written out then is no change) to a new one."""
    from afc_cli.manifest import restated

    try:
        stored = json.loads(stored_json) if stored_json else {}
    except ValueError:
        stored = {}
    return request_changes(restated(stored) if isinstance(stored, dict) else {}, new_body)


def _walk(path: str, old: Any, new: Any, out: list[dict[str, Any]]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            child = f"{path}.{key}" if path else str(key)
            _walk(child, old.get(key, _ABSENT), new.get(key, _ABSENT), out)
        return
    if isinstance(old, list) and isinstance(new, list):
        for i in range(max(len(old), len(new))):
            _walk(
                f"{path}[{i}]",
                old[i] if i < len(old) else _ABSENT,
                new[i] if i < len(new) else _ABSENT,
                out,
            )
        return
    if _same(old, new):
        return
    change: dict[str, Any] = {"field": path}
    if old is not _ABSENT:
        change["old"] = old
    if new is not _ABSENT:
        change["new"] = new
    out.append(change)


def _same(old: Any, new: Any) -> bool:
    if old is _ABSENT or new is _ABSENT:
        return old is new
    # as the request hash sees them (canonical JSON: 1 and 1.0 are one number, True is not 1)
    from afc_cli.manifest import canonical_json

    try:
        return canonical_json(old) == canonical_json(new)
    except Exception:
        return old == new


SHOWN_BEFORE = 20  # of two long values differing past their shown start, shown before it


def shown(value: Any, dump: Any = None) -> str:
    """A value as a message shows it: JSON, cut to SHOWN_CHARS with an ellipsis."""
    if value is _ABSENT:
        return "(not set)"
    text = (dump or _json)(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


# characters that print as a plain space, as nothing, or on the letter before them
_UNSEEN = frozenset(("Zs", "Zl", "Zp", "Cf", "Mn", "Me", "Co", "Cn"))


def _marked(value: Any) -> str:
    """``_json`` with each character that prints alike or not at all escaped (``\\u00a0``)."""
    return "".join(
        (f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}")
        if ch != " " and unicodedata.category(ch) in _UNSEEN
        else ch
        for ch in _json(value)
    )


def _seen(text: str) -> str:
    """What a person reads of a shown value: every space alike, invisible characters gone,
    accents composed."""
    return unicodedata.normalize(
        "NFKC",
        "".join(
            " " if unicodedata.category(ch) == "Zs" else ch
            for ch in text
            if unicodedata.category(ch) != "Cf"
        ),
    )


def shown_change(old: Any, new: Any) -> tuple[str, str]:
    """Both sides of a change as a message shows them. Two values that print alike (a prompt
    pasted again with a no-break space, a list saved with its accents decomposed: another
    request, whose conflict showed ``"a café" -> "a café"``) are shown with the characters
    that print alike or not at all escaped, so the message shows the change it names."""
    said = _shown_change(old, new, _json)
    if old is not _ABSENT and new is not _ABSENT and _seen(said[0]) == _seen(said[1]):
        said = _shown_change(old, new, _marked)
    return said


def _shown_change(old: Any, new: Any, dump: Any) -> tuple[str, str]:
    """Two long values whose first difference lies past what ``shown`` keeps of them (a
    prompt edited near its end, as prompts are: a style appended, '35mm film' made '70mm
    film') were cut to the same start, the message naming a change it showed none of
    (``prompt: "a lighthouse…" -> "a lighthouse…"``): both are then shown from a little
    before that difference."""
    if old is _ABSENT or new is _ABSENT:
        return shown(old, dump), shown(new, dump)
    before, after = dump(old), dump(new)
    same = len(os.path.commonprefix([before, after]))
    if max(len(before), len(after)) <= SHOWN_CHARS or same < SHOWN_CHARS - SHOWN_BEFORE:
        return shown(old, dump), shown(new, dump)
    start = same - SHOWN_BEFORE
    width = SHOWN_CHARS - 2  # an ellipsis each side

    def window(text: str) -> str:
        part = text[start : start + width]
        return "…" + part + ("…" if start + width < len(text) else "")

    return window(before), window(after)


def describe_changes(changes: list[dict[str, Any]]) -> str:
    """``prompt: "a" -> "b"; params.size: "64x64" -> (not set)``, at most SHOWN_CHANGES."""
    parts = []
    for c in changes[:SHOWN_CHANGES]:
        old, new = shown_change(c.get("old", _ABSENT), c.get("new", _ABSENT))
        parts.append(f"{c['field']}: {old} -> {new}")
    if len(changes) > SHOWN_CHANGES:
        parts.append(f"and {len(changes) - SHOWN_CHANGES} more")
    return "; ".join(parts)


def inputs_changed(admitted_json: str | None, named: list[dict[str, Any]] | None) -> list[str]:
    """The input files an admitted job reads (its ``inputs_json``: each file's absolute path
    and SHA-256) that the manifest names again at the same path with other content: the file
    changed on disk since the job was admitted. Its run then fails the job (INPUT_UNAVAILABLE,
    nothing paid) unless the file is put back, where a conflict's message said the next run
    renders the admitted request. Named as the manifest names them."""
    try:
        admitted = json.loads(admitted_json or "[]")
    except ValueError:
        return []
    now = {i["path"]: i for i in named or () if isinstance(i, dict) and "path" in i}
    return [
        str(now[old["path"]].get("name") or old["path"])
        for old in admitted
        if isinstance(old, dict)
        and old.get("path") in now
        and now[old["path"]].get("sha256") != old.get("sha256")
    ]


def changed_files_line(changed: list[str]) -> str:
    """What becomes of an unfinished admitted request a conflict leaves in place when files it
    was admitted with changed since (``inputs_changed``): its run fails it, not renders it."""
    files = first_named(changed, 3)
    return (
        f"a file it was admitted with changed on disk since ({files}), so the next run of the "
        "batch fails it (INPUT_UNAVAILABLE, nothing paid) unless the file is put back as it was"
    )


def conflict_message(conflict: dict[str, Any], where: str | None = None) -> str:
    """The IDEMPOTENCY_CONFLICT message: the key, what changed, both hashes, what to do.
    ``where``: the line of a jobs_from list the job is on (``jobs.csv line 4``), said last,
    as the loader names a line's problems by file and line."""
    message = _conflict_message(conflict)
    return f"{message} Key {conflict['key']!r} is {where}." if where else message


def _conflict_message(conflict: dict[str, Any]) -> str:
    need = conflict.get("refused_need")
    if need is not None:  # refused with a job it needs (afc_cli/gates.py)
        return (
            f"IDEMPOTENCY_CONFLICT: key {conflict['key']!r} needs {need!r}, whose changed "
            f"request was refused as a conflict, so {conflict['key']!r} is refused too and "
            f"nothing is rendered for it: it would wait for, or be sent the output of, the "
            f"admitted {need!r} this manifest changed. Give the changed {need!r} a new key and "
            f"name that key here (request hash {conflict['new_hash']})."
        )
    changes = conflict.get("changes") or []
    what = (
        f"changed {describe_changes(changes)}"
        if changes
        else "its request differs from the admitted one"
    )
    status = conflict.get("status")
    changed = conflict.get("inputs_changed") or []
    unfinished = (
        f" Its admitted request has not finished ({status}): "
        + (
            f"{changed_files_line(changed)}; 'afc cancel {conflict['key']}' drops it."
            if changed
            else (
                # a run holds it, in its call or storing it: the next one does not render it
                "an afc run is rendering it now (its run gone, the next run of the batch takes "
                "it over)"
                if status == "running"
                else "the next run of the batch renders it ('afc resume', a worker, or a "
                "submit of a manifest leaving this key out)"
            )
            + f" unless 'afc cancel {conflict['key']}' drops it."
        )
        if status in UNFINISHED
        else ""
    )
    # its output only where it has one: a job failed before its store, or not yet run, was
    # said to have an output 'untouched' (outside audit 55g)
    if status in ("succeeded", "awaiting_review", "rejected"):
        kept = "The stored job and its output are untouched"
    elif status in UNFINISHED:
        kept = "The stored job is untouched"
    else:
        kept = "The stored job, and any output it stored, are untouched"
    return (
        f"IDEMPOTENCY_CONFLICT: key {conflict['key']!r} {what}. {kept}; use a new key for a "
        "changed request (request hash admitted "
        f"{conflict['stored_hash']}, now {conflict['new_hash']}).{unfinished}"
    )


# an admitted job's statuses in which a run still renders its request (``conflict_message``)
UNFINISHED = ("queued", "blocked", "waiting", "running")
