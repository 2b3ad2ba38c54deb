"""What every storage backend offers the pipeline: head, create-only put, read-back."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ObjectInfo:
    """What is at an output key. ``exists`` is about the object; ``meta`` may exist without it
    (a store interrupted between writing metadata and the object)."""

    exists: bool
    size: int | None = None
    meta: dict[str, Any] | None = None


# the metadata fields afc writes as numbers; the others it reads are text
META_INTS = ("size", "attempt")
# the digits of a size or attempt written as a string: none has more (an output of up to 2 GiB,
# 100 attempts); Python reads no integer of more than 4,300 digits, and a sidecar's size of
# 5,000 stopped the whole run as 'unexpected error', every later run the same way
META_INT_DIGITS = 18
META_TEXTS = ("job_id", "key", "batch", "request_hash", "provider", "model", "cost", "cost_source")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def typed_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """An object's metadata as the pipeline reads it, each field afc writes of its type or
    None: a size or attempt an int (a decimal string read as one), the texts text, the
    SHA-256 64 hex digits. A sidecar edited by hand or rewritten by a script (sizes as
    strings, a list where a name was, a size of thousands of digits: ``META_INT_DIGITS``)
    stopped the whole run at the probe ('cannot write to the ledger ... fix the disk', or
    'unexpected error'), and every later run the same way."""
    typed = dict(meta)
    for field in META_INTS:
        value = meta.get(field)
        if (
            isinstance(value, str)
            and value.isascii()
            and value.strip().isdigit()
            and len(value.strip()) <= META_INT_DIGITS
        ):
            value = int(value)
        typed[field] = value if isinstance(value, int) and not isinstance(value, bool) else None
    for field in META_TEXTS:
        value = meta.get(field)
        typed[field] = value if isinstance(value, str) else None
    sha256 = meta.get("sha256")
    sha256 = sha256.lower() if isinstance(sha256, str) else None
    typed["sha256"] = sha256 if sha256 and _SHA256.fullmatch(sha256) else None
    return typed


# how ``Storage.verify`` ends its finding when no object is at the key at all: the job's
# failure then asks no one to delete it first (``pipeline._verified``)
NOT_THERE = "is not there"


class ObjectExists(Exception):
    """A create-only write found the key taken: head it again and decide as in probe."""


# the file in a ``file://`` storage folder that names it apart from another folder of its path
# on another host (``Storage.folder_mark``, ``FileStorage.folder_mark``): dot-named as afc's
# temporary files are; no output key may begin with it (afc_cli/manifest.py
# ``output_key_problem``)
MARK_NAME = ".afc-folder"


class Storage:
    url: str
    local = False  # True where head and small reads are quick local-disk operations

    def head(self, key: str) -> ObjectInfo:
        raise NotImplementedError

    def put_if_absent(
        self, key: str, source: Path, meta: dict[str, Any], *, sync: bool = True
    ) -> None:
        """Create the object from ``source`` with ``meta``; raise ObjectExists if taken.

        ``sync=False``: a backend whose writes become durable with a directory fsync leaves
        that fsync to the caller, who syncs ``unsynced_dirs(key)`` (coalesced across jobs)."""
        raise NotImplementedError

    def unsynced_dirs(self, key: str) -> tuple[Path, ...]:
        """Directories to fsync after ``put_if_absent(key, ..., sync=False)``."""
        return ()

    def check(self) -> None:
        """Before a run renders anything: fail fast (UsageError) if this storage cannot be
        used at all, so no render is paid for that could not be stored."""

    def folder_mark(self, make: bool = True) -> str | None:
        """The mark of the folder this storage stores in (``FileStorage``: its ``.afc-folder``
        file, made if it has none), which a run records on each batch it stores for and holds
        later runs to (``run.hold_folder``); None where a storage names one place for every
        host (S3: its bucket and endpoint) or no mark can be read or made. ``make`` False
        (``afc plan``, which writes nothing): a folder without one is ``NO_MARK``."""
        return None

    def check_again(self) -> None:
        """``check`` during a run (``pipeline._storage_broke``): a storage that cannot be used
        said as a StorageError, not retried. A method here, not a function of the pipeline:
        a file storage's call runs in the file helper (afc_cli/offload.py), which would
        otherwise import the whole pipeline to load it."""
        from afc_cli.errors import StorageError, UsageError

        try:
            self.check()
        except UsageError as exc:
            raise StorageError(exc.message, retryable=False) from None

    def check_keys(self, keys: list[str]) -> None:
        """Before a run renders anything: fail fast (UsageError) if these output keys could not
        be stored (on a file system: a folder on their path that is a file, or not writable;
        on S3: an object key, the prefix included, longer than S3 takes)."""

    def name_of(self, key: str) -> str:
        """The name this storage stores ``key`` under, where two keys may name one object
        (a file storage on a case-insensitive folder: ``FileStorage.name_of``); the key itself
        everywhere else (S3 tells every two keys apart)."""
        return key

    def folds_names(self) -> bool:
        """Whether two keys may name one object here (``name_of`` is not the key itself)."""
        return False

    def verify(self, key: str, size: int, sha256: str, source: Path | None) -> str | None:
        """None if the stored object is exactly ``size`` bytes with this SHA-256; otherwise
        what is wrong (ending ``NOT_THERE`` when no object is at the key). Trusts the
        read-back, not the write's success."""
        raise NotImplementedError

    def describe(self, key: str) -> str:
        return f"{self.url.rstrip('/')}/{key}"

    def held_at(self, key: str) -> str:
        """What holds the object at ``key``, as a person deleting it by hand names it (a
        VERIFY_FAILED job's way out): the object, here."""
        return self.describe(key)

    def read(self, key: str, limit: int | None = None) -> bytes:
        """The stored object's bytes (a job's output used as another job's input). With
        ``limit``, at most ``limit + 1`` bytes are read (the object's stream closed there): a
        result longer than ``limit`` says the object is larger, without holding all of it."""
        parts, size = [], 0
        chunks = self.read_chunks(key)
        try:
            for part in chunks:
                parts.append(part)
                size += len(part)
                if limit is not None and size > limit:
                    break
        finally:
            chunks.close()  # type: ignore[attr-defined]  # a generator: closes the stream
        data = b"".join(parts)
        return data if limit is None else data[: limit + 1]

    def read_chunks(self, key: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        """The stored object's bytes, a chunk at a time (for a picture in ``afc report --html``
        and ``afc serve``: never the whole of a large object in memory). Raises StorageError
        naming the object when it is missing or cannot be read; the error comes on the first
        ``next()``, before any byte."""
        raise NotImplementedError


def store_and_verify(
    storage: Storage, key: str, source: Path, meta: dict[str, Any]
) -> tuple[str, str | None]:
    """Store and read back in one call, for local storage (one trip to the file helper):
    ``("missing", None)`` if the spool file is gone, ``("damaged", what)`` if it is not what
    its checkpoint says (``spool.damage``: nothing stored), else ``("stored", problem)`` where
    problem is what ``verify`` found wrong, or None. Raises ObjectExists if the key is taken.
    The directory fsync is left to the caller (``unsynced_dirs``)."""
    from afc_cli.spool import damage

    if not source.exists():
        return "missing", None
    wrong = damage(source, meta.get("size"), meta.get("sha256"))
    if wrong:
        return "damaged", wrong
    storage.put_if_absent(key, source, meta, sync=False)
    return "stored", storage.verify(key, meta["size"], meta["sha256"], source)
