"""The spool: where a render's bytes become durable the moment they arrive.

A spool file is written as ``<job id>.part``, fsynced, renamed to ``<job id>.spool`` and its
directory fsynced. The rename is the commit: a ``.spool`` file is always complete. From then on
a crash costs an upload, never a render: a run that finds a job's ``.spool`` file adopts it
instead of calling the provider again. The spool lives beside the ledger (``<ledger>-spool/``)
and a job's file is removed only after its output is stored, verified and the job succeeded.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHUNK = 1 << 20
# The spool's mark of the ledger whose runs use it (``Spool.mark``): a folder shared by two
# ledgers' runs (two PostgreSQL ledgers run from one working folder both spool to
# ``./afc-spool``) is refused to the second, since their job ids are alike (batch and key).
OWNER_FILE = ".afc-ledger"


class Spilled:
    """An output download larger than ``afc_cli/providers/http.py``'s ``IN_MEMORY_OUTPUT_BYTES``, held in an
    unnamed temporary file in the spool's folder (``AttemptRequest.scratch``) instead of in
    memory: outputs may be up to 2 GiB each (a video, or a body that a gzip encoding swells),
    and a run holds one per call in flight, so 500 calls held in memory could take far more
    than the machine has and the kernel killed the run. The file has no name (``O_TMPFILE``
    where the system has it): a process killed with it open leaves nothing behind. The spool
    step gives it the job's spool file's name (``link``), hashed as it was written; where it
    cannot (no ``O_TMPFILE``), it copies it there (``Spool.write``).

    ``head``: its first bytes (what ``not_an_output`` and the image-type check read)."""

    HEAD = 256

    def __init__(self, folder: str | os.PathLike[str] | None) -> None:
        if folder is not None:
            make_dirs(folder)
        self.file = _unnamed_file(folder)
        self.size = 0
        self.head = b""
        self.digest = hashlib.sha256()  # of what is written: the spool file's, when linked

    def write(self, data: bytes) -> None:
        if len(self.head) < self.HEAD:
            self.head += data[: self.HEAD - len(self.head)]
        self.file.write(data)
        self.digest.update(data)
        self.size += len(data)

    def link(self, path: Path) -> bool:
        """Give the file the name ``path``, durable (fsynced), without copying its bytes:
        True when linked. False where it cannot be (a file made without ``O_TMPFILE``, no
        ``/proc``, ``path`` on another file system): the caller copies it then."""
        self.file.flush()
        os.fsync(self.file.fileno())
        try:
            # linkat(AT_SYMLINK_FOLLOW) of the descriptor's /proc name: os.link takes that
            # call only with a directory descriptor given (plain link() would link the
            # /proc symbolic link itself, refused as another file system's)
            folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.link(
                    f"/proc/self/fd/{self.file.fileno()}",
                    path.name,
                    dst_dir_fd=folder,
                    follow_symlinks=True,
                )
            finally:
                os.close(folder)
        except OSError:
            return False
        return True

    def chunks(self, size: int = 1 << 20) -> Iterator[bytes]:
        """Its bytes from the start, ``size`` at a time."""
        self.file.flush()
        self.file.seek(0)
        while chunk := self.file.read(size):
            yield chunk

    def close(self) -> None:
        self.file.close()

    def __len__(self) -> int:
        return self.size

    def __reduce__(self) -> Any:  # never sent to the file helper process (afc_cli/offload.py)
        raise TypeError("a spilled output is written to the spool in this process")


Output = bytes | Spilled  # a render's bytes, in memory or spilled to a file


def _unnamed_file(folder: str | os.PathLike[str] | None) -> Any:
    """A file without a name in ``folder``, opened for reading and writing: one made with
    ``O_TMPFILE`` (and not ``O_EXCL``, which ``tempfile.TemporaryFile`` adds) can be given a
    name later (``Spilled.link``); elsewhere a named file removed at once."""
    import tempfile

    flag = getattr(os, "O_TMPFILE", None)
    if folder is not None and flag is not None:
        try:
            fd = os.open(folder, flag | os.O_RDWR, 0o644)
        except OSError:
            pass  # a file system without it: a file removed at once, as tempfile makes one
        else:
            return os.fdopen(fd, "w+b")
    return tempfile.TemporaryFile(dir=folder)


def head_of(data: Output, size: int = Spilled.HEAD) -> bytes:
    """An output's first ``size`` bytes (at most ``Spilled.HEAD``)."""
    return (data.head if isinstance(data, Spilled) else data)[:size]


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


def make_dirs(path: str | os.PathLike[str]) -> None:
    """``mkdir -p path``, each folder it makes durable: a new folder's name is an entry of the
    folder above it, written to disk by an fsync of that folder, not of the new one. The
    object (or spool file) fsynced into a folder made without it could be recorded stored
    and then, after a power cut, be gone with its folder's name. Raises ``OSError`` as
    ``Path.mkdir(parents=True, exist_ok=True)`` does (a file in the way, permissions)."""
    path = Path(path)
    missing = []
    folder = path
    # up to the first that exists: a file there makes the mkdir below it say so
    # (ENOTDIR: 'Not a directory'), as ``Path.mkdir`` said, not 'File exists' of a file
    while not folder.exists() and folder.parent != folder:
        missing.append(folder)
        folder = folder.parent
    if not missing and not path.is_dir():  # the path itself a file
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path))
    for each in reversed(missing):
        try:
            os.mkdir(each)
        except FileExistsError:
            if not each.is_dir():  # a file, or a link to nothing: not a folder
                raise
            # made meanwhile by another process, whose fsync may not have run yet: synced
            # here as well
    for each in missing:
        fsync_dir(each.parent)


class DirSync:
    """Coalesced directory fsyncs for one run loop.

    A rename or link into a directory is durable once the directory itself is fsynced; one
    fsync covers every entry made before it started. ``await sync(d)`` returns after an fsync
    of ``d`` that started after the call: callers whose entries landed meanwhile share it, so a
    run of many small jobs pays a few directory fsyncs instead of two per job.
    """

    def __init__(self, run: Callable[..., Awaitable[Any]] = asyncio.to_thread) -> None:
        self._run = run  # how to run a blocking call: a thread, or the file helper process
        self._next: dict[Path, asyncio.Future] = {}  # the sync that will cover new callers
        self._running: dict[Path, asyncio.Task] = {}

    async def sync(self, directory: Path) -> None:
        future = self._next.get(directory)
        if future is None:
            future = self._next[directory] = asyncio.get_running_loop().create_future()
            # Its error is read here too: when every caller was cancelled (a stopping run),
            # asyncio.shield stops listening, and an fsync failing after that (the helper was
            # closed) would be reported as "Future exception was never retrieved".
            future.add_done_callback(_read_error)
            if directory not in self._running:
                self._running[directory] = asyncio.create_task(self._drain(directory))
        await asyncio.shield(future)

    async def _drain(self, directory: Path) -> None:
        try:
            while (future := self._next.pop(directory, None)) is not None:
                try:
                    await self._run(fsync_dir, directory)
                except asyncio.CancelledError:
                    future.cancel()
                    raise
                except Exception as exc:  # the callers decide what a failed fsync means
                    future.set_exception(exc)
                else:
                    future.set_result(None)
        finally:
            del self._running[directory]
            left = self._next.pop(directory, None)  # callers who came as we were stopped
            if left is not None:
                left.cancel()


def _read_error(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


def file_digest(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def damage(path: Path, size: int | None, sha256: str | None) -> str | None:
    """What is wrong with a spool file against its checkpoint's size and SHA-256, or None.

    Checked before its upload: a file damaged since its checkpoint (a disk error, another
    process writing in place) was stored under the output key tagged with the checkpoint's
    SHA-256 and failed verify, and every later run found "its own" object there and failed
    the same way (a multipart S3 upload even passed verify: its checksum came from the same
    damaged file). Nothing to check against without a checkpoint (``None``). A file that
    cannot be read (a folder put in its place, a disk's read error) is a ``StorageError``, as
    the upload's own read of it was: the job waits at its store step for the next run, and
    the run goes on (an OSError here broke the whole run, its calls in flight with it)."""
    from afc_cli.errors import StorageError

    if size is None or not sha256:
        return None
    try:
        found = file_digest(path)
    except OSError as exc:
        raise StorageError(
            f"cannot read the spool file {path}: {exc.strerror or exc}", retryable=False
        ) from None
    if found == (size, sha256):
        return None
    return (
        f"it holds {found[0]} bytes sha256 {found[1]}, not the {size} bytes sha256 {sha256} "
        "it was spooled with"
    )


def set_aside(path: Path) -> Path:
    """Move a damaged spool file out of the way (``<job id>.damaged``): never adopted nor
    uploaded, kept for a person to look at. A job's second damaged file goes beside its first
    (``<job id>.damaged-2``, ...), as create-only as every spool name: replaced, the file the
    first message said was kept was gone (the job retried, its new render damaged again)."""
    for n in range(1, 10_000):
        aside = path.with_suffix(".damaged" if n == 1 else f".damaged-{n}")
        try:
            os.link(path, aside)
        except FileExistsError:
            continue
        except OSError:  # a file system without hard links: one not there yet is taken
            if os.path.lexists(aside):
                continue
            os.replace(path, aside)
            return aside
        os.unlink(path)
        return aside
    os.replace(path, aside)  # (ten thousand kept: the last is replaced)
    return aside


class Spool:
    offload_stable = True  # its state never changes: the file helper may keep it (offload.py)

    def __init__(self, root: str | Path):
        self.root = Path(root).absolute()

    def free_bytes(self) -> int:
        """Bytes free to this process on the spool's file system (the ledger's, too)."""
        folder = self.root
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        stats = os.statvfs(folder)
        return stats.f_bavail * stats.f_frsize

    @classmethod
    def beside(cls, ledger_path: str | Path) -> Spool:
        return cls(spool_beside(ledger_path))

    def path(self, job_id: str) -> Path:
        return self.root / f"{job_id}.spool"

    def check(self) -> None:
        """That this process can create, sync and remove a file in the spool (the folder is
        made if missing). A run checks it before its first job: a spool that cannot be
        written (a file in the way, a read-only or over-quota disk, permissions) is then found
        before any render is paid for, not by the first render's bytes, which would be lost.
        Raises ``OSError``."""
        make_dirs(self.root)
        probe = self.root / f".afc-check-{os.getpid()}.probe"
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"afc")
            os.fsync(fd)
        finally:
            os.close(fd)
            probe.unlink(missing_ok=True)

    def write(
        self, job_id: str, data: Output, *, sync_dir: bool = True, late: bool = False
    ) -> SpoolFile:
        """Write, fsync and rename into place. ``sync_dir=False`` leaves the directory fsync
        that makes the rename durable to the caller (a ``DirSync``). ``data``: the bytes, or
        a download spilled to a file (``Spilled``), copied a chunk at a time. ``late``: the
        render of a job this process no longer holds (another process of this host may be
        working on it, writing and reading the job's own names): written under names of its
        own instead, ``<job id>.late`` (``late_path``; ``settle_late``)."""
        final = self.late_path(job_id) if late else self.path(job_id)
        part = final.with_suffix(".late-part" if late else ".part")
        if isinstance(data, Spilled) and _linked(data, part, final):
            sha256 = data.digest.hexdigest()
        else:
            digest = hashlib.sha256()
            _write_whole(part, final, data, digest=digest)
            sha256 = digest.hexdigest()
        if sync_dir:
            fsync_dir(self.root)
        return SpoolFile(final, len(data), sha256)

    def late_path(self, job_id: str) -> Path:
        """Where ``write`` keeps a late render (``late=True``): a render that came back after
        its job was taken over by another process stalled past its lease. Written under the
        job's own name, it replaced the file of the process that took the job over, between
        that one's spool write and its store: its store found the file "damaged" and
        dead-lettered the job SPOOL_DAMAGED, though both renders were paid for."""
        return self.root / f"{job_id}.late"

    def settle_late(self, job_id: str, late: Path) -> Path:
        """Put a late render that could not be stored at the job's own name (``path``) when
        nothing is there, as a spool file a later run on this host adopts; a file there (the
        render of the process that holds the job) is never replaced: the late one stays at
        its own name. Returns where it is."""
        final = self.path(job_id)
        try:
            os.link(late, final)
        except FileExistsError:
            return late
        except OSError:  # a file system without hard links: left at its own name
            return late
        late.unlink(missing_ok=True)
        fsync_dir(self.root)
        return final

    def drop_late(self, job_id: str, sha256: str) -> None:
        """Remove this job's ``.late`` file, stored and read back (``pipeline._drop_stored_late``)
        when it still holds those bytes: another late render of the job written there since
        is left."""
        path = self.late_path(job_id)
        with contextlib.suppress(FileNotFoundError):
            if file_digest(path)[1] == sha256:
                path.unlink()

    def describe(self, job_id: str, about: dict[str, Any]) -> None:
        """Keep beside a job's spool file what its render is (``<job id>.about``: the job's
        request hash, the attempt that paid for it and its cost, the file's size and SHA-256),
        once the render is to outlive its run there (its store failed, the ledger broke, a
        late result the storage refused): a ledger deleted or made anew meanwhile knows
        nothing of it, and its next run stores it instead of paying again (``left_by``).
        Written and renamed into place, not fsynced: one torn by a power cut is unreadable,
        and a render whose record cannot be read is rendered again, as before."""
        import json

        path = self.about_path(job_id)
        record = {**about, "job_id": job_id}
        _write_whole(path.with_suffix(".about-part"), path, json.dumps(record).encode(), sync=False)

    def about_path(self, job_id: str) -> Path:
        """Where ``describe`` keeps what a job's spooled render is (``<job id>.about``)."""
        return self.root / f"{job_id}.about"

    def left_by(self, job_id: str, request_hash: str) -> tuple[SpoolFile, dict[str, Any]] | None:
        """A spool file of this job that a ledger no longer knows of (deleted or made anew
        while the render waited here, its store failing): the file and its ``.about``
        record, when the record names this job and ``request_hash`` and the file is the
        one it describes (its size and SHA-256). None otherwise: a render of another request
        (the ledger was made anew to change the job), or one whose record is missing or
        torn, is never taken for this request's output."""
        try:
            found = self.find(job_id)
        except OSError:
            return None
        record = self.record_of(job_id, found) if found is not None else None
        if record is None or record.get("request_hash") != request_hash:
            return None
        return found, record

    def record_of(self, job_id: str, found: SpoolFile) -> dict[str, Any] | None:
        """The ``.about`` record (``describe``) of ``found``, this job's spool file: None
        where it is missing or torn, or describes another file (its size and SHA-256)."""
        record = self.about_of(job_id)
        if record is None or (found.size, found.sha256) != (
            record.get("size"),
            record.get("sha256"),
        ):
            return None
        return record

    def about_of(self, job_id: str) -> dict[str, Any] | None:
        """This job's ``.about`` record as written, whichever file it describes: None where
        it is missing, torn, or names another job. ``pipeline.render`` compares it with the
        spool file it finds: a record of the render paid for that describes other bytes than
        the file holds now tells a file damaged since (``pipeline._paid_render``)."""
        import json

        try:
            record = json.loads(self.about_path(job_id).read_bytes())
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or record.get("job_id") != job_id:
            return None
        return record

    def copy_in(self, job_id: str, source: Path) -> None:
        """Copy ``source``, this job's spool file in another spool folder of this host, into
        place as ``write`` puts a file: to ``.part``, fsynced, renamed, the folder fsynced.
        Raises ``OSError``."""
        import shutil

        final = self.path(job_id)
        part = final.with_suffix(".part")
        shutil.copyfile(source, part)
        fd = os.open(part, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(part, final)
        fsync_dir(self.root)

    def note_request(self, job_id: str, attempt: int, provider: str, request_id: str) -> None:
        """Keep beside the spool a job-style request's id that the ledger could not record
        (``<job id>.request``: written, fsynced, renamed, the folder fsynced): the next run on
        this host polls that request (``noted_request``) instead of paying for a new one."""
        import json

        final = self.request_path(job_id)
        part = final.with_suffix(".request-part")
        record = {"attempt": attempt, "provider": provider, "request_id": request_id}
        _write_whole(part, final, json.dumps(record).encode())
        fsync_dir(self.root)

    def noted_request(self, job_id: str) -> dict[str, Any] | None:
        """The request ``note_request`` kept for this job, or None (none, or unreadable)."""
        import json

        try:
            record = json.loads(self.request_path(job_id).read_bytes())
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or not isinstance(record.get("request_id"), str):
            return None
        return record

    def noted_jobs(self) -> set[str]:
        """The jobs whose request ids ``note_request`` keeps here (one listing of the folder,
        for ``pipeline.count_adoptions``)."""
        try:
            return {path.stem for path in self.root.glob("*.request")}
        except OSError:
            return set()

    def forget_request(self, job_id: str) -> None:
        self.request_path(job_id).unlink(missing_ok=True)

    def request_path(self, job_id: str) -> Path:
        """Where ``note_request`` keeps a job's request id (``<job id>.request``)."""
        return self.root / f"{job_id}.request"

    def find(self, job_id: str) -> SpoolFile | None:
        """A complete spool file left for this job, if any (a leftover ``.part`` is not)."""
        final = self.path(job_id)
        if not final.exists():
            return None
        size, sha = file_digest(final)
        return SpoolFile(final, size, sha)

    def find_late(self, job_id: str) -> SpoolFile | None:
        """For a run that holds the job and found no spool file at its own name (``find``):
        a late render of it left here (``late_path``: a render that came back after the job
        was cancelled or taken over from its process, which then died before storing it),
        put at the job's own name (``settle_late``) and returned, for the run to adopt as
        any spool file a dead run left. No run read a ``.late`` file: a cancelled job's
        render whose run was killed while storing it was paid for again by the retry's run.
        None when there is none (or a file at the job's own name came first)."""
        late = self.late_path(job_id)
        try:
            if not late.exists() or self.settle_late(job_id, late) == late:
                return None
            return self.find(job_id)
        except OSError:  # unreadable here: rendered again, as before
            return None

    def job_ids(self) -> set[str]:
        """Jobs with a file (complete or partial) in the spool."""
        try:
            names = [entry.name for entry in os.scandir(self.root)]
        except (FileNotFoundError, NotADirectoryError):
            return set()
        return {
            name.rsplit(".", 1)[0]
            for name in names
            if name.endswith(
                (
                    ".spool",
                    ".part",
                    ".request",
                    ".request-part",
                    ".about",
                    ".about-part",
                    ".late",
                    ".late-part",
                )
            )
        }

    def described(self) -> set[str]:
        """Jobs with a complete spool file and its ``.about`` record (``left_by``)."""
        try:
            names = {entry.name for entry in os.scandir(self.root)}
        except (FileNotFoundError, NotADirectoryError):
            return set()
        return {
            name[: -len(".spool")]
            for name in names
            if name.endswith(".spool") and f"{name[: -len('.spool')]}.about" in names
        }

    def owner(self) -> dict[str, Any] | None:
        """The ledger this spool was marked for (``mark``): ``{"ledger": its identity, "named":
        its name for messages}``, or None when unmarked. A mark that cannot be read is
        nobody's identity (``ledger`` None), so no ledger takes the spool for its own."""
        import json

        path = self.root / OWNER_FILE
        try:
            record = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except PermissionError as exc:
            # another user's run made it (its umask 077): whose spool it is cannot be told,
            # which is not the same as another ledger's (``run._another_ledgers``)
            return {"ledger": None, "named": f"unreadable ({path})", "denied": exc.strerror}
        except (OSError, ValueError):
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("ledger"), str):
            return {"ledger": None, "named": f"unreadable ({path})"}
        return record

    def mark(self, identity: str, named: str, *, replace: bool = False) -> dict[str, Any]:
        """Mark an unmarked spool as this ledger's, and return the mark that holds: a mark
        another run made first is kept (it is created with a hard link, which fails when the
        name exists), so of two ledgers starting together one holds the spool. ``replace``:
        the spool changes hands (``afc ledger copy`` moved its ledger's work)."""
        import json

        make_dirs(self.root)
        data = json.dumps({"ledger": identity, "named": named}).encode()
        final = self.root / OWNER_FILE
        part = self.root / f"{OWNER_FILE}-{os.getpid()}.tmp"
        _write_file(part, data, os.O_TRUNC)
        try:
            if replace:
                os.replace(part, final)
            else:
                os.link(part, final)
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links: created whole or not at all
            with contextlib.suppress(FileExistsError):
                _write_file(final, data, os.O_EXCL)
        finally:
            part.unlink(missing_ok=True)
        fsync_dir(self.root)
        return self.owner() or {"ledger": None, "named": "unreadable"}

    def remove(self, job_id: str) -> None:
        for path in (
            self.path(job_id),
            self.path(job_id).with_suffix(".part"),
            self.request_path(job_id),
            self.request_path(job_id).with_suffix(".request-part"),
            self.about_path(job_id),
            self.about_path(job_id).with_suffix(".about-part"),
            self.late_path(job_id),
            self.late_path(job_id).with_suffix(".late-part"),
        ):
            try:
                path.unlink()
            except FileNotFoundError:
                pass


def spool_beside(ledger_path: str | Path) -> Path:
    """The spool folder of the SQLite ledger file ``ledger_path``: beside the file the ledger
    is, a symbolic link to it followed (as SQLite follows it to open the database). Named
    after the link, a ledger reached by two names (``~/afc.db -> /srv/afc/afc.db``) had two
    spools: a render one run spooled and did not record was in the other folder for a run
    through the other name, which paid for it again (outside audit 60d)."""
    path = Path(ledger_path)
    if path.is_symlink():
        path = path.resolve()
    return path.with_name(path.name + "-spool")


def _write_file(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | mode, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _linked(data: Spilled, part: Path, final: Path) -> bool:
    """A spilled download (``Spilled``, in the spool's folder) given the name ``final`` by a
    link, not copied: the copy needed the output's size twice on the spool's disk while the
    free space check before its render (``pipeline._disk_low``) counts it once, so a 20 MiB
    output on a disk with 36 MiB free failed 'No space left on device', and so did every
    later run's fetch of it again, the job never stored. False where it cannot be linked:
    the caller copies it (``_write_whole``)."""
    part.unlink(missing_ok=True)  # a copy a killed run left
    if not data.link(part):
        return False
    try:
        os.replace(part, final)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    return True


def _write_whole(
    part: Path, final: Path, data: Output, *, sync: bool = True, digest: Any = None
) -> None:
    """Write ``data`` to ``part``, fsync it and rename it to ``final`` (the folder is made if
    missing): ``final`` is always whole. The caller fsyncs the folder to make the rename
    durable. A partial file is worth nothing (it is never adopted) and may be large: a full
    disk must not keep it. ``digest``: a hash fed what is written."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        fd = os.open(part, flags, 0o644)
    except FileNotFoundError:
        make_dirs(part.parent)
        fd = os.open(part, flags, 0o644)
    try:
        try:
            for chunk in data.chunks() if isinstance(data, Spilled) else (data,):
                if digest is not None:
                    digest.update(chunk)
                view = memoryview(chunk)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(part, final)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
