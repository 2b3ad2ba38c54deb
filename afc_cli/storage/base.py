"""What every storage backend offers the pipeline: head, create-only put, read-back."""

from __future__ import annotations

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


class ObjectExists(Exception):
    """A create-only write found the key taken: head it again and decide as in probe."""


class Storage:
    url: str
    local = False  # True where head and small reads are quick local-disk operations

    def head(self, key: str) -> ObjectInfo:
        raise NotImplementedError

    def put_if_absent(self, key: str, source: Path, meta: dict[str, Any]) -> None:
        """Create the object from ``source`` with ``meta``; raise ObjectExists if taken."""
        raise NotImplementedError

    def read_back(self, key: str) -> tuple[int, str]:
        """(size, sha256 hex) of the object as stored."""
        raise NotImplementedError

    def describe(self, key: str) -> str:
        return f"{self.url.rstrip('/')}/{key}"
