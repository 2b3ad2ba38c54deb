"""Thumbnails made from the stored outputs (``file://`` and ``s3://``), with Pillow.

A thumbnail fits in ``SIZE`` x ``SIZE`` pixels (twice the 120 CSS pixels a card shows, so it
stays sharp on a high-density screen), keeps the aspect ratio and is encoded as WebP: about
3 KB a picture, so a 5,000-job report file stays in the tens of megabytes. The object is read
through the storage backend (``Storage.read_chunks``), never a path or URL of its own.

What cannot be shown is said on the card, never left blank: an output missing from storage,
one that cannot be read, a video or another file that is not a picture, one over
``MAX_BYTES``, or over Pillow's ``MAX_IMAGE_PIXELS`` (about 89 million), or one whose bytes
are not the SHA-256 afc verified (changed in storage since).
"""

from __future__ import annotations

import base64
import io
import mimetypes
import os
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

SIZE = 240
QUALITY = 70
MAX_BYTES = 64 * 1024 * 1024  # a picture bigger than this is not read for a preview
HELD_BYTES = 4 * 1024 * 1024  # a picture's stored bytes held in memory; the rest in a temp file
# pixels the thumbnails being made at once may hold decoded (about 4 bytes each: 512 MB); a
# picture past it waits for the others (one alone is always made). Each decoded whole at once,
# a contact sheet of 81-megapixel upscales (a PNG of a few hundred KB each) opened in a
# browser, six pictures at a time, took afc serve past 3 GB, and two reviewers past 7 GB
DECODE_PIXELS = 128 * 10**6
# the kinds of picture previewed (Pillow's names; HEIF where pillow-heif is installed): those a
# model renders, as ``afc serve`` names its outputs' types (``inputs.image_type``). An output's
# bytes are a provider's, and Pillow opens forty formats by their first bytes: an EPS one made
# it run Ghostscript (``gs``, an interpreter of PostScript, a program) on them, on the
# report's machine and the server's, where one is installed
PREVIEWED = ("PNG", "JPEG", "WEBP", "GIF", "HEIF", "AVIF", "TIFF", "BMP")


@dataclass(frozen=True)
class Thumb:
    data: bytes | None  # WebP bytes, or None when there is no preview
    note: str | None = None  # why there is none
    # whether the answer is the stored bytes' own (a picture, or what they are not), which a
    # server may keep by their SHA-256; False for a storage read that failed, asked again
    lasting: bool = True

    def data_uri(self) -> str | None:
        if self.data is None:
            return None
        return "data:image/webp;base64," + base64.b64encode(self.data).decode("ascii")


def make(storage: Any, key: str, size: int = SIZE, sha256: str | None = None) -> Thumb:
    """The thumbnail of the object at ``key`` in ``storage`` (an afc_cli.storage backend).
    ``sha256``: the output's as the ledger verified it. A picture of other bytes (the file
    saved over in place, by a retoucher's editor or a sync, an object replaced) is not shown
    as the job's: a review page showed it, its "Approve the N shown" approved the verified
    output on its strength, and the jobs using that output as a reference then failed
    (``inputs.read_inputs`` checks the bytes). The digest is taken as the bytes are read."""
    import hashlib

    from afc_cli.errors import StorageError, UsageError

    kind = mimetypes.guess_type(key)[0] or ""
    if kind.startswith(("video/", "audio/")):
        return Thumb(None, f"{kind.split('/')[0]}: no preview")
    # past HELD_BYTES in a temporary file: held in memory whole (up to MAX_BYTES), each
    # request waiting for the decoding budget below held its buffer, which nothing bounded
    digest = hashlib.sha256()
    with tempfile.SpooledTemporaryFile(max_size=HELD_BYTES) as buffer:
        try:
            for chunk in storage.read_chunks(key):
                digest.update(chunk)
                try:
                    buffer.write(chunk)
                except OSError as exc:  # the temporary file's disk (full)
                    why = f"cannot hold the picture to preview it: {exc.strerror or exc}"
                    return Thumb(None, why, lasting=False)
                if buffer.tell() > MAX_BYTES:
                    return Thumb(None, f"over {MAX_BYTES >> 20} MiB: no preview")
        except (StorageError, UsageError) as exc:  # a usage error: the store's configuration
            return Thumb(None, exc.message, lasting=False)
        buffer.seek(0)
        made = _decoded(buffer, size)
    now = digest.hexdigest()
    if sha256 is not None and now != sha256:
        # asked again at the next request (not lasting): the verified bytes may be put back.
        # Whatever the bytes now are: a verified picture cut short in storage (a sync or a
        # copy half done, a disk that lost its end) was "not a picture this afc can preview",
        # a paid render read by its reviewer as broken, and kept so by afc serve after the
        # file was put back whole, until it restarted
        return Thumb(
            None,
            f"changed in storage since afc verified it (SHA-256 now {now[:12]}..., verified "
            f"{sha256[:12]}...): not shown as this job's output",
            lasting=False,
        )
    return made


def _decoded(buffer: Any, size: int) -> Thumb:
    """The thumbnail of the picture in ``buffer`` (``make``)."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    # Pillow warns on stderr (a line naming its own source, 'could be decompression bomb DOS
    # attack') when it opens a picture over its MAX_IMAGE_PIXELS: such a picture is not
    # previewed here (below), so the warning says nothing a card does not
    warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
    try:
        Image.init()  # every plugin registered: those of PREVIEWED this Pillow has
        kinds = [kind for kind in PREVIEWED if kind in Image.OPEN]
        with Image.open(buffer, formats=kinds) as image:
            image.draft("RGB", (size, size))  # JPEG: decode at a reduced scale
            if image.width * image.height > Image.MAX_IMAGE_PIXELS:
                # decoded whole, a few hundred MB each, in every thread of make_all at once
                pixels = image.width * image.height
                return Thumb(None, f"{pixels // 10**6} million pixels: no preview")
            with _DECODING.held(image.width * image.height):
                # in place: a copy of the whole decoded picture otherwise, even with no turn
                ImageOps.exif_transpose(image, in_place=True)
                # reduce by a whole factor first, then bilinear: a quarter of LANCZOS's time,
                # and no visible difference at this size
                image.thumbnail((size, size), Image.Resampling.BILINEAR, reducing_gap=1.0)
            if image.mode not in ("RGB", "RGBA"):
                image = image.convert("RGBA" if "A" in image.getbands() else "RGB")
            out = io.BytesIO()
            image.save(out, "WEBP", quality=QUALITY, method=0)  # fastest; 15 % bigger
    except Image.DecompressionBombError as exc:
        # a picture past twice MAX_IMAGE_PIXELS, which Pillow refuses to open (a 16,384-pixel
        # square upscale): said as "not a picture", a reviewer read a paid upscale as broken
        return Thumb(None, f"{_pixels_said(str(exc))}: no preview")
    except UnidentifiedImageError:
        return Thumb(None, "not a picture this afc can preview")
    except Exception as exc:
        # a picture's bytes are the provider's: Pillow's decoders fail on broken ones with
        # more than OSError and ValueError (a PNG whose chunk length lies is a SyntaxError;
        # others raise struct.error, EOFError...), and one such output ended the whole report
        return Thumb(None, f"cannot decode the picture: {str(exc) or exc.__class__.__name__}")
    return Thumb(out.getvalue())


def _pixels_said(refusal: str) -> str:
    """The size Pillow's DecompressionBombError names ("Image size (268435456 pixels) exceeds
    limit of ..."), as a card says a picture's size: "268 million pixels"."""
    import re

    from PIL import Image

    found = re.search(r"\((\d+) pixels\)", refusal)
    if found is None:
        return f"over {2 * Image.MAX_IMAGE_PIXELS // 10**6} million pixels"
    return f"{int(found.group(1)) // 10**6} million pixels"


class _Budget:
    """Decoded pixels held at once by the threads making thumbnails (``DECODE_PIXELS``)."""

    def __init__(self, total: int):
        self.total = total
        self.used = 0
        self.changed = threading.Condition()

    @contextmanager
    def held(self, pixels: int) -> Iterator[None]:
        with self.changed:
            self.changed.wait_for(lambda: self.used == 0 or self.used + pixels <= self.total)
            self.used += pixels
        try:
            yield
        finally:
            with self.changed:
                self.used -= pixels
                self.changed.notify_all()


_DECODING = _Budget(DECODE_PIXELS)


class _Unreachable:
    """A store read for many thumbnails: once one read finds no connection to it (an endpoint
    down, a VPN not up), the others are not tried, each one more connect or read timeout (10
    to 120 s) with nothing said; their cards say why."""

    def __init__(self, store: Any):
        self.store = store
        self.down: str | None = None

    def read_chunks(self, key: str) -> Any:
        from afc_cli.errors import StorageError, StorageUnreachable
        from afc_cli.storage import shown_url

        if self.down is not None:
            raise StorageError(f"not read: {self.down}", retryable=False)
        try:
            yield from self.store.read_chunks(key)
        except StorageUnreachable as exc:
            self.down = f"{shown_url(self.store.url)} could not be reached ({exc.message})"
            raise


def make_all(
    jobs: Iterable[dict[str, Any]],
    opener: Callable[[str], Any],
    *,
    workers: int | None = None,
    stores: dict[str, Any] | None = None,
) -> dict[str, Thumb]:
    """Thumbnails of the jobs' stored outputs by job id, made in parallel threads (Pillow and
    the S3 reads release the GIL). ``opener(storage_url)`` gives a storage backend.
    ``stores``: each storage as read (``_Unreachable``, by URL), kept by a caller that makes
    thumbnails a page at a time (``html.pieces``): made anew for each call, a store found
    down was asked again on every page of the report, each page waiting out its own
    timeout (a 10,000-job report of a hung store: 50 pages of 10 to 120 s)."""
    wanted = [job for job in jobs if job["output"]]
    stores = {} if stores is None else stores
    for job in wanted:
        if job["storage"] not in stores:
            stores[job["storage"]] = _Unreachable(opener(job["storage"]))
    workers = workers or min(16, (os.cpu_count() or 2) * 2)

    def one(job: dict[str, Any]) -> tuple[str, Thumb]:
        from afc_cli.storage.file import FileStorage
        from afc_cli.web.server import Checked

        store = stores[job["storage"]]
        if isinstance(store.store, FileStorage):
            # as afc serve reads it: a symbolic link at the output's name to another picture
            # was embedded in the file as the job's output; a FIFO there held the report
            return job["id"], make(
                Checked(store.store, job["sha256"]), job["output_key"], sha256=job["sha256"]
            )
        return job["id"], make(store, job["output_key"], sha256=job["sha256"])

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(pool.map(one, wanted))
