"""The spool: where a render's bytes become durable the moment they arrive.

A spool file is written as ``<job id>.part``, fsynced, renamed to ``<job id>.spool`` and its
directory fsynced. The rename is the commit: a ``.spool`` file is always complete. From then on
a crash costs an upload, never a render: a run that finds a job's ``.spool`` file adopts it
instead of calling the provider again. The spool lives beside the ledger (``<ledger>-spool/``)
and a job's file is removed only after its output is stored, verified and the job succeeded.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 20


@dataclass(frozen=True)
class SpoolFile:
    path: Path
    size: int
    sha256: str


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_digest(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


class Spool:
    def __init__(self, root: str | Path):
        self.root = Path(root).absolute()

    @classmethod
    def beside(cls, ledger_path: str | Path) -> Spool:
        ledger_path = Path(ledger_path)
        return cls(ledger_path.with_name(ledger_path.name + "-spool"))

    def path(self, job_id: str) -> Path:
        return self.root / f"{job_id}.spool"

    def write(self, job_id: str, data: bytes) -> SpoolFile:
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.path(job_id)
        part = final.with_suffix(".part")
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(part, final)
        fsync_dir(self.root)
        return SpoolFile(final, len(data), hashlib.sha256(data).hexdigest())

    def find(self, job_id: str) -> SpoolFile | None:
        """A complete spool file left for this job, if any (a leftover ``.part`` is not)."""
        final = self.path(job_id)
        if not final.exists():
            return None
        size, sha = file_digest(final)
        return SpoolFile(final, size, sha)

    def job_ids(self) -> set[str]:
        """Jobs with a file (complete or partial) in the spool."""
        try:
            names = [entry.name for entry in os.scandir(self.root)]
        except FileNotFoundError:
            return set()
        return {name.rsplit(".", 1)[0] for name in names if name.endswith((".spool", ".part"))}

    def remove(self, job_id: str) -> None:
        for path in (self.path(job_id), self.path(job_id).with_suffix(".part")):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
