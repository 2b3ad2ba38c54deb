"""``file://PATH`` storage: atomic, create-only writes with metadata beside each object.

The object for key ``a/b.png`` is ``PATH/a/b.png``; its metadata is ``PATH/a/b.png.afc.json``
(the ``.afc.json`` suffix is reserved: no output key may end with it).

A store writes the metadata first and the object second, each as an exclusive create (a
fsynced temporary file hard-linked into place, which fails if the name exists), then fsyncs the
directory. Folders the key needs are made first, each made durable in the folder above it
(``spool.make_dirs``), up to the storage root. So an object never appears without the
metadata that names its job, and a file that someone else put at a key is never overwritten.
The object is hard-linked straight from the spool file when both are on one file system (no
second copy, no second fsync of the bytes); on another, a copy a killed run left half written
is removed by the next copy of its object.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import unicodedata
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from afc_cli.errors import (
    UTF8_LOCALE,
    StorageDenied,
    StorageError,
    UsageError,
    unnamable_here,
)
from afc_cli.spool import file_digest, fsync_dir, make_dirs
from afc_cli.storage import object_url, shown_url
from afc_cli.storage.base import (
    MARK_NAME,
    NOT_THERE,
    ObjectExists,
    ObjectInfo,
    Storage,
    typed_meta,
)

META_SUFFIX = ".afc.json"
_MADE: set[Path] = set()  # directories this process made or found (skips a mkdir per store)
# at most this many remembered (then forgotten, and found again by one mkdir each): a layout
# with a folder per job (``{batch}/{key}/frame.png``) made the set grow by one path a job, in
# the file helper that a worker's loop keeps for weeks (30,000 folders: 12 MB)
MADE_DIRS = 4096
# storage folders this process has seen exist: one gone since (a share unmounted mid-run) is
# not made again on this machine's disk (``FileStorage._gone``); one never seen is (a new
# batch's folder, made by its first store where no check before the run made it)
_SEEN: set[Path] = set()
MARK_READ = 128  # the most of it read: a mark is 32 characters
BAD_MARK = "not a mark"  # ``folder_mark`` of a mark file that holds none: never recorded
NO_MARK = "no mark"  # ``folder_mark(make=False)`` of a folder without a mark file
_MARK = re.compile(r"[0-9a-f]{32}")


def _in_the_way(root: Path) -> str | None:
    """What keeps ``root`` from being a directory, said plainly: mkdir's 'File exists' named
    a symbolic link to a drive or share not mounted (or a file) as if it were a directory."""
    for path in [*reversed(root.parents), root]:
        if path.is_dir():  # a link to a directory is one
            continue
        if path.is_symlink():
            try:
                target = os.readlink(path)
                path.stat()
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    return f"{path} is a symbolic link that leads back to itself ({target})"
                return (
                    f"{path} is a symbolic link to {target}, which does not exist (a drive or "
                    "share not mounted?)"
                )
            return f"{path} is a symbolic link to {target}, a file, not a directory"
        if os.path.lexists(path):
            return f"{path} is a file, not a directory"
        return None
    return None


class FileStorage(Storage):
    local = True
    offload_stable = True  # its state never changes: the file helper may keep it (offload.py)

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.url = f"file://{self.root}"  # as the ledger records it (the path not encoded)
        self.shown = shown_url(self.url)  # as afc prints it (storage.shown_url)
        self._folds: tuple[bool, bool] | None = None  # ``name_folds``, once probed

    def describe(self, key: str) -> str:
        return object_url(self.url, key)

    def held_at(self, key: str) -> str:
        """``Storage.held_at``: the file and its metadata beside it."""
        return f"{self._object(key)} and its metadata {self._meta(key)}"

    def unsynced_dirs(self, key: str) -> tuple[Path, ...]:
        return (self._object(key).parent,)

    def _object(self, key: str) -> Path:
        self._encodable(key, "read")
        return self.root / key

    def _meta(self, key: str) -> Path:
        self._encodable(key, "read")
        return self.root / (key + META_SUFFIX)

    def _encodable(self, key: str, doing: str) -> None:
        """Refuse a key this system's file names cannot hold: a locale that is not UTF-8
        (ISO-8859-1) and a key in another script ('出力/a.png'). Every look at such a path
        raised UnicodeEncodeError: 'unexpected error ... (a bug in afc)' from the first job's
        probe once it was admitted, and from 'afc plan' and 'afc report --html'."""
        said = None if key.isascii() else unnamable_here(key)
        if said is not None:
            raise UsageError(
                f"cannot {doing} {key!r} in {self.shown}: {said}, which cannot write that "
                f"name: {UTF8_LOCALE}"
                + (" or change the output template" if doing == "store" else "")
            )

    def head(self, key: str) -> ObjectInfo:
        obj = self._object(key)
        meta = self._read_meta(key)
        if meta is not None:
            meta = typed_meta(meta)
        try:
            size = obj.stat().st_size
        except OSError as exc:
            if os.path.islink(obj):
                # a link whose target is gone (or a loop) takes the name: no create can go
                # there, and it is not afc's (it read as a free key: a render paid, then no
                # store possible)
                return ObjectInfo(exists=True, meta=meta)
            if isinstance(exc, FileNotFoundError):
                return ObjectInfo(exists=False, meta=meta)
            raise StorageError(f"cannot read {obj}: {exc}") from None
        return ObjectInfo(exists=True, size=size, meta=meta)

    def read_chunks(self, key: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        path = self._object(key)
        try:
            handle = open(path, "rb")  # noqa: SIM115 - closed by the generator below
        except OSError as exc:
            reason = "missing" if isinstance(exc, FileNotFoundError) else exc.strerror
            raise StorageError(f"cannot read {path}: {reason}", retryable=False) from None
        with handle:
            while data := handle.read(chunk):
                yield data

    def _read_meta(self, key: str) -> dict[str, Any] | None:
        path = self._meta(key)
        try:
            with open(path, encoding="utf-8") as fh:
                value = json.load(fh)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in (errno.EISDIR, errno.ELOOP, errno.ENXIO):
                # a folder, a link loop or a socket at its name: not afc's metadata
                return {"unreadable": str(path)}
            # The disk's or the system's failure to read it (too many open files, EIO, a
            # stale NFS handle, its permissions changed), not a foreign object: read as
            # one, it failed the job OUTPUT_KEY_CONFLICT, a person's decision, where a try
            # later reads it (outside audit 55g)
            retryable = exc.errno not in (errno.EACCES, errno.EPERM)
            raise StorageError(
                f"cannot read {path}: {exc.strerror or exc}", retryable=retryable
            ) from None
        except ValueError:
            return {"unreadable": str(path)}
        return value if isinstance(value, dict) else {"unreadable": str(path)}

    def put_if_absent(
        self, key: str, source: Path, meta: dict[str, Any], *, sync: bool = True
    ) -> None:
        obj = self._object(key)
        try:
            if obj.parent not in _MADE:
                if self.root.is_dir():
                    _SEEN.add(self.root)
                elif self.root in _SEEN:  # gone since: not made again (``_gone``)
                    raise StorageError(f"cannot write {obj}: {self._gone()}", retryable=False)
                make_dirs(obj.parent)  # the folders it makes durable up to the root
                if len(_MADE) >= MADE_DIRS:
                    _MADE.clear()
                _MADE.add(obj.parent)
            meta_bytes = json.dumps(meta, sort_keys=True, indent=2).encode()
            wrote_meta = False
            try:
                self._create(self._meta(key), data=meta_bytes)
                wrote_meta = True
            except FileExistsError:
                existing = self._read_meta(key) or {}
                if (
                    existing.get("job_id") != meta["job_id"]
                    or existing.get("request_hash") != meta["request_hash"]
                    # another render of this same job holds the key (the metadata is created
                    # first, so its writer owns it): a stalled run's late result and the run
                    # that took the job over may store at once; this one stands back
                    or existing.get("sha256") not in (None, meta.get("sha256"))
                ):
                    raise ObjectExists(key) from None
            try:
                self._create(obj, source=source)
            except FileExistsError:
                # The key was taken since the probe. If by someone else's file, the metadata
                # just written beside it would name this job as its author: it goes, so the
                # key reads as theirs (OUTPUT_KEY_CONFLICT). If by this same job's output
                # (another afc process storing it, as two ledgers over one storage can), the
                # metadata describes that object and stays.
                if wrote_meta and not self._holds(obj, meta):
                    self._meta(key).unlink(missing_ok=True)
                raise ObjectExists(key) from None
            if sync:
                fsync_dir(obj.parent)
        except ObjectExists:
            raise
        except OSError as exc:
            _MADE.discard(obj.parent)  # e.g. removed meanwhile: the retry makes it again
            if self.root in _SEEN and not self.root.is_dir():  # no retry makes it again
                raise StorageError(f"cannot write {obj}: {self._gone()}", retryable=False) from None
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                # the folder's file system full, or this user's quota spent (which no free
                # space check sees: ``room`` reads the file system's): retried, each store
                # gave up in turn while the folder's check passed, and every job of the batch
                # was rendered and paid for, its render left in the spool
                raise StorageDenied(
                    f"cannot write {obj}: {exc.strerror} (the storage folder's file system is "
                    "full or this user's disk quota spent: free space there; the paid render "
                    "waits in the spool and the next run stores it)"
                ) from None
            retryable = exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR)
            raise StorageError(f"cannot write {obj}: {exc}", retryable=retryable) from None

    @staticmethod
    def _holds(obj: Path, meta: dict[str, Any]) -> bool:
        """Whether ``obj`` holds the output ``meta`` describes (its size and SHA-256)."""
        try:
            return file_digest(obj) == (meta.get("size"), meta.get("sha256"))
        except OSError:
            return False

    def _create(self, final: Path, *, data: bytes | None = None, source: Path | None = None):
        """Exclusive create of ``final``: raises FileExistsError if the name is taken."""
        if source is not None:
            try:
                os.link(source, final)
                return
            except OSError as exc:
                if exc.errno == errno.EEXIST:
                    raise FileExistsError(final) from None
                if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                    raise
        # not named after ``final``: a name near the file system's limit (255 bytes) made the
        # temporary name too long, and the output was never stored. One name per object
        # (``_copy_name``): a copy a run killed mid-way left there (a video's gigabytes in a
        # storage folder on another disk than the spool) is found by the next copy into
        # ``final``, which writes a name of its own and removes it once ``final`` is there
        left = _copy_name(final)
        tmp = left
        try:
            out = open(tmp, "xb")  # noqa: SIM115 - closed below
        except FileExistsError:  # a copy a killed run left, or one under way now
            tmp = final.with_name(f".afc-{uuid.uuid4().hex}.tmp")
            out = open(tmp, "xb")  # noqa: SIM115 - closed below
        try:
            with out:
                if source is not None:
                    with open(source, "rb") as src:
                        shutil.copyfileobj(src, out, 1 << 20)
                else:
                    out.write(data or b"")
                out.flush()
                os.fsync(out.fileno())
            try:
                os.link(tmp, final)
            except OSError as exc:
                if exc.errno == errno.EEXIST:
                    raise FileExistsError(final) from None
                raise
            finally:
                if tmp != left and final.exists():
                    # ``final`` is there (this copy's, or another writer's): a copy under
                    # way into ``left`` could not be linked into place any more (each write
                    # here is create-only), and one a killed run left never will be
                    with contextlib.suppress(OSError):
                        left.unlink()
        finally:
            try:
                tmp.unlink()
            except FileNotFoundError:
                pass

    def room(self) -> tuple[int, int]:
        """The device of the file system this storage folder is on (the folder, or the nearest
        one above it that exists) and the bytes free to this process there: a render starts
        only with room for its output where it is stored (``pipeline._storage_low``).
        Raises ``OSError``."""
        folder = self.root
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        stats = os.statvfs(folder)
        return os.stat(folder).st_dev, stats.f_bavail * stats.f_frsize

    def _gone(self) -> str:
        return (
            f"the storage folder {self.root} does not exist (a drive or share not mounted?); "
            "afc does not make it again during a run: the outputs stored in it would be on "
            "this machine's disk, hidden once the drive is mounted again"
        )

    def check_again(self) -> None:
        """``check`` during a run: the folder is not made again (``_gone``)."""
        if self.root in _SEEN and not self.root.is_dir():
            raise StorageError(f"cannot use storage {self.shown}: {self._gone()}", retryable=False)
        super().check_again()

    def check(self) -> None:
        try:
            make_dirs(self.root)
        except OSError as exc:
            said = _in_the_way(self.root) or str(exc)
            raise UsageError(f"cannot use storage {self.shown}: {said}") from None
        _SEEN.add(self.root)
        if not os.access(self.root, os.W_OK):
            raise UsageError(f"cannot use storage {self.shown}: the directory is not writable")
        self._check_links()

    def folder_mark(self, make: bool = True) -> str | None:
        """The storage folder's mark: 32 hexadecimal digits in its ``MARK_NAME`` file, written
        there (create-only, fsynced) by the first run that found none. One folder, one mark,
        whichever host reads it through a shared mount; two folders of one path on two hosts
        (a share not mounted on one, each host's own disk), two marks: ``run.hold_folder``
        refuses the second, where each host stored its part of the batch on its own disk and
        every job said it succeeded. None when the folder has no mark and none can be made, or
        it cannot be read (then nothing is held to it); ``BAD_MARK`` when its mark file holds
        no mark; ``NO_MARK`` for a folder without a mark file when not to ``make`` one (the
        plan of a run, which writes nothing)."""
        path = self.root / MARK_NAME
        for _ in range(2):
            try:
                with open(path, "rb") as found:
                    text = found.read(MARK_READ).decode("ascii", "replace").strip()
            except FileNotFoundError:
                if not make:
                    return NO_MARK if self.root.is_dir() else None
                try:
                    self._create(path, data=uuid.uuid4().hex.encode() + b"\n")
                    fsync_dir(self.root)
                except FileExistsError:
                    continue  # another run made it meanwhile: read
                except OSError:
                    return None
                continue
            except OSError:
                return None
            # a file of that name that is no mark (damaged, written by hand): not this
            # folder's mark, whatever the batch's is (``run.hold_folder``)
            return text if _MARK.fullmatch(text) else BAD_MARK
        return None

    def _check_links(self) -> None:
        """Every create-only write here ends in a hard link (``_create``): on a file system
        without them (FAT, exFAT: an external drive; a FUSE mount such as rclone's) every
        store failed after its render was paid, each job waiting at store until dead-lettered.
        One link of an empty file finds it before anything is rendered. So does the create
        itself where it is refused though ``os.access`` said the folder is writable (a
        security module's denial, as SELinux gives a container's volume not labelled for it:
        every store failed 'Permission denied' after its render was paid)."""
        probe = self.root / f".afc-{uuid.uuid4().hex}.tmp"
        linked = probe.with_name(f".afc-{uuid.uuid4().hex}.tmp")
        try:
            try:
                os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            except OSError as exc:
                if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                    raise UsageError(
                        f"cannot use storage {self.shown}: a file cannot be created in it "
                        f"({exc.strerror}), though its permissions allow it (an SELinux or "
                        "AppArmor denial: a container's volume needs its label, e.g. ':Z')"
                    ) from None
                return  # not afc's question here: the store's own error says what is wrong
            try:
                os.link(probe, linked)
            except OSError as exc:
                if exc.errno in (errno.EPERM, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
                    raise UsageError(
                        f"cannot use storage {self.shown}: its file system does not support "
                        f"hard links ({exc.strerror}), which afc's create-only writes need (an "
                        "object never half-written, never over another's); use a folder on "
                        "another file system (ext4, XFS, APFS, NTFS, NFS)"
                    ) from None
        finally:
            for path in (linked, probe):
                try:
                    path.unlink()
                except OSError:
                    pass

    def check_keys(self, keys: list[str]) -> None:
        """Every folder the batch will write must be a folder (not a file someone left there)
        and writable where it already exists; an output key must not be a folder. Checked before
        the first render, so no render is paid for whose output could not be stored. One look
        per distinct folder (a 10,000-job batch in one folder costs one listing)."""
        root = str(self.root)
        by_folder: dict[str, list[str]] = {}
        for key in keys:
            self._encodable(key, "store")
            folder, _, name = key.rpartition("/")
            by_folder.setdefault(folder, []).append(name)
        exists: dict[str, bool] = {"": os.path.isdir(root)}
        for folder, names in by_folder.items():
            deepest = ""  # the deepest folder on the way that exists
            parts = folder.split("/") if folder else []
            for end in range(1, len(parts) + 1):
                rel = "/".join(parts[:end])
                if rel not in exists:
                    full = os.path.join(root, rel)
                    if os.path.isdir(full):
                        exists[rel] = True
                    elif os.path.lexists(full) and exists["/".join(parts[: end - 1])]:
                        raise UsageError(
                            f"cannot store {folder + '/' + names[0]!r} in {self.shown}: {full} is "
                            "a file, not a folder; move it, or change the output template"
                        )
                    else:
                        exists[rel] = False
                if not exists[rel]:
                    break
                deepest = rel
            where = os.path.join(root, deepest) if deepest else root
            if os.path.isdir(where) and not os.access(where, os.W_OK | os.X_OK):
                raise UsageError(f"cannot store outputs in {self.shown}: {where} is not writable")
            if exists.get(folder, False):
                full = os.path.join(root, folder) if folder else root
                try:
                    with os.scandir(full) as entries:
                        folders = {entry.name for entry in entries if _is_dir(entry)}
                except OSError:  # a folder that may be written but not listed: the probe looks
                    continue
                for name in names:
                    if name in folders:
                        raise UsageError(
                            f"cannot store {folder + '/' + name if folder else name!r} in "
                            f"{self.shown}: {os.path.join(full, name)} is a folder; move it, or "
                            "change the output template"
                        )
        if len(keys) > 1:
            self._one_name(keys)

    def _one_name(self, keys: list[str]) -> None:
        """Two output keys this folder's file system takes for one name (``name_folds``):
        ``Shot1.png`` and ``shot1.png`` on macOS or a Windows share. Both jobs' renders were
        paid for, and the second store met the first's file (OUTPUT_KEY_CONFLICT), found
        only then. Refused with the two keys before anything is rendered; where the file
        system tells them apart (ext4, XFS; and S3 always does) nothing is refused. The fold
        is Python's ``casefold``, a little wider than some shares' (``ß`` and ``ss`` are one
        here): such a pair is refused though it could have been stored. Probed at the storage
        folder: a folder under it on another file system, or one with its own setting (ext4's
        per-folder casefold), is not probed."""
        case, accents = self._folding()
        if not (case or accents):
            return
        seen: dict[str, str] = {}
        for key in keys:
            other = seen.setdefault(self.name_of(key), key)
            if other != key:
                told = "letters in another case" if case else "accented letters composed or not"
                raise UsageError(
                    f"cannot store both {other!r} and {key!r} in {self.shown}: its file system "
                    f"does not tell {told} apart, so they name one file and the second job's "
                    "render would be paid for and never stored; change one job's key or the "
                    "output template"
                )

    def _folding(self) -> tuple[bool, bool]:
        """``name_folds``, probed once per storage (a worker's refills check new keys often);
        neither where the probe could not be made."""
        if self._folds is None:
            self._folds = self.name_folds()
        return self._folds or (False, False)

    def folds_names(self) -> bool:
        return any(self._folding())

    def name_of(self, key: str) -> str:
        """``key`` as this folder's file system takes it (``name_folds``): casefolded where it
        does not tell case apart, composed (NFC) where it does not tell accents composed or not
        apart, so two keys of one file have one name. Two batches of this storage whose keys
        differ only so (``Shot1.png``, ``shot1.png``) are run one after the other, as equal keys
        are (``run._note_outputs``): side by side, both renders were paid and the second store
        met the first's file (OUTPUT_KEY_CONFLICT)."""
        case, accents = self._folding()
        if accents:
            key = unicodedata.normalize("NFC", key)
        if case:
            key = unicodedata.normalize("NFC", key.casefold())
        return key

    def name_folds(self) -> tuple[bool, bool] | None:
        """Whether this folder's file system takes two spellings for one name: letters in
        another case (macOS's APFS and HFS+ as set up by default, a Windows server's share, FAT
        and exFAT drives, ext4 with casefold), and accented letters composed or decomposed
        (NFC and NFD: macOS). One probe: a name created, its other spellings looked up.
        None where the probe cannot be made (the stores' own errors say why; probed again
        at the next check)."""
        root = os.fsencode(self.root)
        name = b".afc-" + uuid.uuid4().hex.encode() + b"-A\xc3\xa9.tmp"  # 'Aé', é composed
        probe = os.path.join(root, name)
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except OSError:
            return None
        try:
            case = os.path.lexists(os.path.join(root, name.replace(b"-A", b"-a")))
            accents = os.path.lexists(os.path.join(root, name.replace(b"\xc3\xa9", b"e\xcc\x81")))
        finally:
            with contextlib.suppress(OSError):
                os.unlink(probe)
        return case, accents

    def verify(self, key: str, size: int, sha256: str, source: Path | None) -> str | None:
        try:
            found = file_digest(self._object(key))
        except FileNotFoundError:
            return f"{self._object(key)} {NOT_THERE}"
        except OSError as exc:
            raise StorageError(f"cannot read back {self._object(key)}: {exc}") from None
        if found != (size, sha256):
            return f"{self._object(key)} reads back {found[0]} bytes sha256 {found[1]}"
        return None


def _copy_name(final: Path) -> Path:
    """The temporary file a copy into ``final`` writes first (``FileStorage._create``), one
    name per object: ``.afc-`` and 32 hex digits of its name's SHA-256 (a fixed length, where
    ``final``'s own name may be near the file system's limit)."""
    digest = hashlib.sha256(os.fsencode(final.name)).hexdigest()[:32]
    return final.with_name(f".afc-{digest}.tmp")


def _is_dir(entry: os.DirEntry) -> bool:
    """Whether a folder entry is a folder; a link that cannot be followed (a loop) is not:
    the probe finds it taken, where it stopped the whole submit with exit 1, no ledger
    written, and advice to 'afc resume' a ledger that did not exist."""
    try:
        return entry.is_dir()
    except OSError:
        return False
