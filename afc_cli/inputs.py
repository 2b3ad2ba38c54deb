"""Reference images (a manifest's ``inputs``), read just before a job's attempts.

A ``path`` input is read from the file the manifest named (its absolute path is kept on the
job row) and must still have the SHA-256 it was admitted with: the request hash covers that
digest, so a changed file is a changed request, refused here rather than sent under the old
hash. A ``job`` input is the stored output of another job of the batch (which the job needed,
so it has succeeded) as the request this job's hash covers (its request hash, kept beside
the input), read from that batch's storage and checked against the SHA-256 its verify step
recorded. Either way, what an attempt sends is recorded on its row with the
digest (``Ledger.set_attempt_inputs``) and shown by ``afc show``.
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
import threading
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from typing import Any

from afc_cli.errors import StorageError
from afc_cli.providers.base import InputImage

# the bytes of stored outputs sent as reference images that a run keeps to send again
# (``SharedReads``): a style frame or two of the usual sizes, well under one output's upload
INPUT_CACHE_BYTES = 64 * 1024 * 1024


class SharedReads:
    """Stored outputs read as reference images in one run (``read_inputs``), kept by (storage,
    key, the SHA-256 they were verified with) to be sent again without reading them again,
    the most recently used first, up to ``limit`` bytes in all (one larger is sent, not kept).
    A style frame that every shot of a batch sends was read from storage by each shot's
    attempt: 30 GETs of one object for 30 shots, some 50 GB moved for a 10,000-shot batch on
    a 5 MB frame (S3 bills transfer out), each call waiting for its own copy. Jobs asking at
    once wait for one read (a thread each: ``RunContext.network``), and meet its storage
    failure (``fetch``); a read that fails keeps nothing, and the next job to ask reads
    again. Only bytes that passed their checks are kept, so a job sends what its request
    names even once the object in storage is changed: such a change is met by the jobs of a
    later run, as before."""

    def __init__(self, limit: int = INPUT_CACHE_BYTES):
        self.limit = limit
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple, Any] = OrderedDict()
        self._size = 0
        self._reading: dict[tuple, _Read] = {}  # the reads in flight, by key

    def fetch(self, key: tuple, read: Callable[[], Any]) -> Any:
        """``key``'s value, kept or read now (``read()``: bytes, or a tuple whose first item
        is its bytes). The jobs asking while a read of it is in flight wait for that read:
        its value, or its StorageError (a storage hanging to its read timeout, 120 s on S3,
        was read again by each of them in turn, the last of 8 shots waiting 16 minutes
        holding its slot: tests/test_audit60a_shared_read_failing.py); another failure
        names the job that met it (InputProblem: 'afc retry KEY'), and each reads for
        itself."""
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key]
            flight = self._reading.get(key)
            if flight is None:
                flight = self._reading[key] = _Read()
                leads = True
            else:
                leads = False
        if not leads:
            flight.done.wait()
            if flight.ok:
                return flight.value
            if isinstance(flight.error, StorageError):
                raise flight.error  # of the storage alone, no job's own
            return read()  # its own problem, said of it (not kept)
        try:
            value = read()
        except BaseException as exc:
            flight.error = exc
            raise
        else:
            flight.value, flight.ok = value, True
            size = len(value[0] if isinstance(value, tuple) else value)
            with self._lock:
                if size <= self.limit and key not in self._kept:
                    self._kept[key] = value
                    self._size += size
                    while self._size > self.limit:
                        _, old = self._kept.popitem(last=False)
                        self._size -= len(old[0] if isinstance(old, tuple) else old)
            return value
        finally:
            with self._lock:  # after the value is kept: a job asking now finds it
                self._reading.pop(key, None)
            flight.done.set()


class _Read:
    """A read of ``SharedReads`` in flight: set ``done`` once it has its value or failed."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.ok = False
        self.value: Any = None
        self.error: BaseException | None = None


class InputProblem(Exception):
    """An input cannot be sent as admitted (changed, gone): the job fails with the reason."""


IMAGE_KINDS = "PNG, JPEG, WebP, GIF, HEIC/HEIF, AVIF, TIFF or BMP"
# ISO base media files (HEIF, AVIF): the brand in their ``ftyp`` box names the image kind
_FTYP_BRANDS = {
    b"heic": "image/heic",
    b"heix": "image/heic",
    b"heim": "image/heic",
    b"heis": "image/heic",
    b"hevc": "image/heic",
    b"mif1": "image/heif",
    b"msf1": "image/heif",
    b"avif": "image/avif",
    b"avis": "image/avif",
}


def image_type(data: bytes) -> str | None:
    """The media type of an image (``IMAGE_KINDS``) from its first bytes, else None. Which
    kinds a provider takes is the provider's to say (OpenAI's edits take PNG, JPEG and WebP;
    an other kind is its 400, not billed); what is never sent is a file that is no image."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[4:8] == b"ftyp" and data[8:12] in _FTYP_BRANDS:
        return _FTYP_BRANDS[data[8:12]]
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return "image/tiff"
    if (  # BMP: its reserved bytes zero, its DIB header one of the sizes the format has
        data[:2] == b"BM"
        and data[6:10] == bytes(4)
        and int.from_bytes(data[14:18], "little") in (12, 40, 52, 56, 64, 108, 124)
    ):
        return "image/bmp"
    return None


def media_type(data: bytes, name: str) -> str:
    """The image's media type from its first bytes, else from its name."""
    return image_type(data) or mimetypes.guess_type(name)[0] or "application/octet-stream"


def needed_outputs(job: dict[str, Any], ledger: Any) -> dict[str, Any]:
    """The ledger rows of the jobs whose outputs are this job's inputs (read in the run's
    loop: the ledger connection belongs to it; ``read_inputs`` then runs in a thread)."""
    items = json.loads(job.get("inputs_json") or "[]")
    return {item["job_id"]: ledger.stored_output(item["job_id"]) for item in items if "job" in item}


def read_inputs(
    job: dict[str, Any],
    outputs: dict[str, Any],
    storages: dict[str, Any],
    shared: SharedReads | None = None,
) -> tuple:
    """The job's inputs as ``InputImage`` values, in the manifest's order (``outputs``: from
    ``needed_outputs``). Raises InputProblem, or StorageError when a needed job's output
    cannot be read (retryable). ``shared``: the run's stored outputs read as inputs already
    (``SharedReads``)."""
    images = []
    for index, item in enumerate(json.loads(job.get("inputs_json") or "[]")):
        if "path" in item:
            try:
                data = _read_file(item["path"])
            except OSError as exc:
                raise InputProblem(
                    f"input file {item['path']!r} cannot be read ({exc.strerror or exc}); the "
                    "request hash covers its content: restore it, then 'afc retry "
                    f"{job['key']}'"
                ) from None
            digest = hashlib.sha256(data).hexdigest()
            if digest != item["sha256"]:
                raise InputProblem(
                    f"input file {item['path']!r} changed since it was admitted (sha256 "
                    f"{item['sha256']}, now {digest}); the request hash covers its content: "
                    "restore it, or submit the changed request under a new key"
                )
            images.append(InputImage(data, media_type(data, item["path"]), digest, item["name"]))
            continue
        need = outputs.get(item["job_id"])
        if need is None or need["status"] != "succeeded":
            raise InputProblem(
                f"input job {item['job']!r} has no approved, stored output "
                f"({'not in the ledger' if need is None else need['status']})"
            )
        covered = _covered_hash(job, index, item)
        if covered not in (None, need["request_hash"]) and not _restated_is(need, covered):
            raise InputProblem(
                f"input job {item['job']!r} is request {need['request_hash']} in the ledger, "
                f"but this job's request hash covers {item['job']!r} as request {covered} (a "
                f"change to {item['job']!r} refused as a conflict): its stored output is not "
                "the image this job's request names, so nothing was sent. Submit this job "
                f"under a new key to render it from {item['job']!r} as the ledger has it"
            )
        storage = storages[need["batch"]]
        read = partial(_read_stored, job, item, need, storage)
        if shared is not None and need["output_sha256"]:
            # read once for every job of the run sending it (``SharedReads``): its bytes as
            # verified, checked against that SHA-256 as they were read
            data, kind, digest = shared.fetch(
                (storage.url, need["output_key"], need["output_sha256"]), read
            )
        else:
            data, kind, digest = read()
        images.append(InputImage(data, kind, digest, f"job:{item['job']}"))
    return tuple(images)


def _read_stored(
    job: dict[str, Any], item: dict[str, Any], need: dict[str, Any], storage: Any
) -> tuple[bytes, str, str]:
    """A need's stored output as ``job``'s input ``item``: its bytes, image kind and SHA-256,
    read from ``storage`` and checked (no larger than a reference image may be, the SHA-256
    it was verified with, an image). Raises InputProblem, or StorageError (retryable)."""
    from afc_cli.manifest import MAX_INPUT_BYTES

    try:
        data = storage.read(need["output_key"], MAX_INPUT_BYTES)
    except StorageError:
        # gone for good (deleted from storage), not a storage failure to wait out
        if not storage.head(need["output_key"]).exists:
            # the way out without those bytes too, as for an object changed in storage:
            # 'afc retry' of the need refuses a succeeded job ("its output is stored")
            raise InputProblem(
                f"the stored output of input job {item['job']!r} "
                f"({storage.describe(need['output_key'])}) is gone from storage: restore "
                f"it, then 'afc retry {job['key']}' (a succeeded job is never rendered "
                f"again: without those bytes, a new key for {item['job']!r}, and one for "
                "this job naming it, renders them anew)"
            ) from None
        raise
    if len(data) > MAX_INPUT_BYTES:
        # read no further: an object replaced by a huge one in storage (or a render larger
        # than any provider takes as a reference) is not held in memory to be refused there
        raise InputProblem(
            f"the stored output of input job {item['job']!r} "
            f"({storage.describe(need['output_key'])}) is larger than "
            f"{MAX_INPUT_BYTES // (1024 * 1024)} MiB, more than a reference image may be; "
            "nothing was sent"
        )
    digest = hashlib.sha256(data).hexdigest()
    if need["output_sha256"] and digest != need["output_sha256"]:
        raise InputProblem(
            f"the stored output of input job {item['job']!r} "
            f"({storage.describe(need['output_key'])}) reads back sha256 "
            f"{digest}, not the {need['output_sha256']} it was verified with (changed in "
            "storage since), so nothing was sent: restore the object it was verified with, "
            f"then 'afc retry {job['key']}' (a succeeded job is never rendered again: "
            f"without those bytes, a new key for {item['job']!r}, and one for this job "
            "naming it, renders them anew)"
        )
    kind = image_type(data)
    if kind is None:
        # sent as a reference image, as a ``path`` input is, which must be one (refused at
        # admission): a video model's clip named here went to a paid API as an 'image'
        named = mimetypes.guess_type(need["output_key"])[0]
        raise InputProblem(
            f"the stored output of input job {item['job']!r} "
            f"({storage.describe(need['output_key'])}"
            + (f", {named} by its name" if named else "")
            + f") is not a {IMAGE_KINDS} image, and an input is sent as a reference "
            "image; nothing was sent. A job that waits for it alone names it in needs, "
            "not inputs: its inputs are part of its request, so submit that job under a "
            f"new key (this key, {job['key']!r}, with other inputs is refused as a "
            "conflict)"
        )
    return data, kind, digest


def _read_file(path: str) -> bytes:
    """The input file at ``path``, read as admitted: a regular file of at most
    ``MAX_INPUT_BYTES`` (one byte more is read, so a grown file reads as changed). What was
    put in its place since is not read whole or waited on: a named pipe held the run for
    ever (its signals too), a link to /dev/zero read until the memory ran out."""
    import os
    import stat

    from afc_cli.manifest import MAX_INPUT_BYTES

    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a pipe: no wait
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "no longer a regular file")
        return handle.read(MAX_INPUT_BYTES + 1)


def _covered_hash(job: dict[str, Any], index: int, item: dict[str, Any]) -> str | None:
    """The request hash of a ``job`` input that this job's own request hash covers: kept
    beside the input (``inputs_json``), or, for a job admitted before it was, read from the
    hashed body (``request_json``: ``inputs[index].job.request_hash``)."""
    if "request_hash" in item:
        return item["request_hash"]
    try:
        hashed = json.loads(job.get("request_json") or "{}")["inputs"][index]["job"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return hashed.get("request_hash") if hashed.get("key") == item["job"] else None


def _restated_is(need: dict[str, Any], digest: str) -> bool:
    """Whether a need admitted before the rule for defaults is, under it, the request
    ``digest`` (a replay, as ``manifest.same_request`` finds it): its output is that one's."""
    from afc_cli.manifest import request_hash, restated

    try:
        return request_hash(restated(json.loads(need["request_json"]))) == digest
    except Exception:
        return False


def recorded(images: tuple) -> list[dict[str, Any]]:
    """What an attempt row keeps of its inputs: where each came from, its size and SHA-256."""
    return [
        {"source": image.source, "sha256": image.sha256, "size": len(image.data)}
        for image in images
    ]
