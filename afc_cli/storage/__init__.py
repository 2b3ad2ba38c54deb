"""Storage backends by URL scheme."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote

from afc_cli.errors import UTF8_LOCALE, UsageError, unnamable_here
from afc_cli.storage.base import ObjectExists, ObjectInfo, Storage

DEFAULT_STORAGE = "file://./afc-outputs"

__all__ = [
    "DEFAULT_STORAGE",
    "ObjectExists",
    "ObjectInfo",
    "Storage",
    "endpoint_of",
    "normalize_url",
    "object_url",
    "open",
    "shown_url",
]

# RFC 3986 path characters that need no escape beside letters, digits and -._~ (pchar)
_PATH_SAFE = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~/:@!$&'()*+,;="
)


def _escaped(path: str) -> str:
    """``path`` as a URL's path (RFC 8089 ``file:`` URLs are percent-encoded): a space, '%',
    '#', '?' and every other character a URL path cannot hold are escaped as UTF-8 bytes; a
    printable letter of another script is kept as it is (an IRI, RFC 3987: what a person
    reads), an invisible or control character is escaped."""
    out = []
    for ch in path:
        if ch in _PATH_SAFE or (not ch.isascii() and ch.isprintable()):
            out.append(ch)
        else:
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass")))
    return "".join(out)


def shown_url(url: str) -> str:
    """A batch's storage as afc prints it. The ledger records a ``file://`` storage as
    ``file://`` and the directory's path as it is (what afc always recorded); printed, the
    path is percent-encoded, so the URL reads back (``--storage``, ``storage:``) as the
    same directory."""
    if url.startswith("file://"):
        return "file://" + _escaped(url[len("file://") :])
    return url


def object_url(url: str, key: str) -> str:
    """The URL of output ``key`` in the batch storage ``url`` (as the ledger records it)."""
    return shown_url(f"{url.rstrip('/')}/{key}")


def object_path(url: str, key: str) -> str | None:
    """The local path of output ``key`` in ``file://`` storage ``url``; None elsewhere."""
    if not url.startswith("file://"):
        return None
    return f"{url[len('file://') :].rstrip('/')}/{key}"


def home_expanded(raw: str, given_as: str) -> str:
    """``raw`` with a leading ``~`` or ``~name`` made the home folder, as a shell would; with no
    home to make it (HOME unset for a user the password database does not know: a bare
    container's uid, an 'env -i' script; or '~name' of no such user) refused, naming it as
    ``given_as``. Read as a relative path, it was a folder named '~' under the working folder
    (a file:// storage's outputs, a spool's paid renders), where no one looked for them."""
    expanded = os.path.expanduser(raw)
    if raw.startswith("~") and expanded.startswith("~"):
        named = raw.split("/", 1)[0]
        why = (
            "HOME is not set, and this user has none in the password database"
            if named == "~"
            else f"no user {named[1:]!r}"
        )
        raise UsageError(
            f"{given_as}: {named!r} names no home folder here ({why}); write the folder's full path"
        )
    return expanded


def normalize_url(url: str, base: Path | None = None) -> str:
    """Canonical form recorded with a batch, of a URL a person gave: ``file://`` URLs become
    absolute, so a batch's outputs do not move when afc runs from another directory, and
    their percent-escapes are decoded (RFC 8089: ``file:///tmp/my%20renders`` is the
    directory ``/tmp/my renders``; a '%' not followed by two hex digits is itself). A
    scheme is read whatever its case (RFC 3986 3.1), as the ledger's ``SQLITE:///`` is:
    ``FILE://`` and ``S3://`` were refused as schemes 'not supported'."""
    url = _lower_scheme(url.strip())
    if url.startswith("file://"):
        try:
            raw = unquote(url[len("file://") :], errors="strict")
        except UnicodeDecodeError:
            raise UsageError(
                f"storage {url!r}: its percent-escapes are not UTF-8 text (a file URL's "
                "path is percent-encoded UTF-8: a space is %20, a '%' is %25)"
            ) from None
        if raw.startswith("localhost/"):
            # RFC 8089's file://localhost/PATH is /PATH: read as a relative path, a batch's
            # outputs went to ./localhost/PATH while a person looked for them in /PATH
            raw = raw[len("localhost") :]
        if not raw:
            raise UsageError(f"storage {url!r} names no directory")
        if "\x00" in raw:
            raise UsageError(f"storage {url!r}: a path cannot hold a NUL character (%00)")
        path = Path(home_expanded(raw, f"storage {url!r}"))
        if not path.is_absolute():
            path = (base or Path.cwd()) / path
        folder = os.path.normpath(path)
        try:
            folder.encode("utf-8")
        except UnicodeEncodeError:
            # a folder named in another encoding (Latin-1 from an old share, a zip's cp437),
            # met as the working folder, AFC_STORAGE or the home folder: the ledger records
            # the URL as text, and writing it was 'unexpected error: UnicodeEncodeError'
            # (exit 1) after the ledger and the folder were made
            shown = folder.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise UsageError(
                f"storage folder {shown} is not UTF-8 text (a folder named in another "
                "encoding); afc records a batch's storage as UTF-8: rename the folder, or name "
                "a storage whose path is UTF-8 (--storage, AFC_STORAGE or the manifest's "
                "storage)"
            ) from None
        said = unnamable_here(folder)
        if said is not None:
            # the converse: UTF-8 text this system's file names cannot hold (a Latin-1 locale,
            # LANG=en_US on an older server, and a folder named in Japanese): the storage
            # check's first call raised it, 'unexpected error ... (a bug in afc)', exit 1
            raise UsageError(
                f"storage {url!r}: {said}, which cannot write that folder's name: "
                f"{UTF8_LOCALE} or name another folder"
            )
        return "file://" + folder
    if url.startswith("s3://"):
        from afc_cli.storage.s3 import parse_url

        _no_query(url)
        bucket, prefix = parse_url(url)
        return f"s3://{bucket}" + (f"/{prefix}" if prefix else "")
    if "://" in url:
        scheme = url.split("://", 1)[0]
        raise UsageError(
            f"storage {url!r}: the {scheme}:// scheme is not supported by this version of afc "
            "(supported: file://PATH, s3://BUCKET/PREFIX)"
        )
    raise UsageError(f"storage {url!r} is not a URL; use file://PATH or s3://BUCKET/PREFIX")


def _no_query(url: str) -> None:
    """Refuse an ``s3://`` URL a person gave with a query string: ``s3://BUCKET/PREFIX`` has
    none. Read as part of the prefix, ``s3://renders/films?region=eu-west-1`` (the Go CDK's
    and other tools' way to name a region, an endpoint or credentials) stored every output
    under a prefix literally named ``films?region=eu-west-1``, the region unread, and
    ``?aws_secret_access_key=...`` put the secret in the ledger's record of the batch and
    in every object's key in the bucket. The URL is said up to its '?' only: the rest may
    be a secret. A batch recorded so before is still opened (``open``)."""
    if "?" in url:
        raise UsageError(
            f"storage {url.split('?', 1)[0] + '?…'!r}: an s3:// URL takes no query string "
            "(s3://BUCKET/PREFIX): set the region with AWS_REGION, the endpoint with "
            "AWS_ENDPOINT_URL_S3 and the credentials with AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the environment"
        )


def _lower_scheme(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if sep and scheme.lower() in ("file", "s3"):
        return scheme.lower() + sep + rest
    return url


def endpoint_of(url: str) -> str | None:
    """The endpoint through which this environment reaches storage ``url``, as a batch records
    it beside its storage URL: an S3-compatible store's (``AWS_ENDPOINT_URL_S3``, one bucket
    name on two endpoints being two stores), '' for AWS's own and for ``file://``; None
    when the environment names one no S3 call can use (``s3.endpoint``)."""
    if url.startswith("s3://"):
        from afc_cli.storage.s3 import endpoint

        return endpoint()
    return ""


def open(url: str) -> Storage:  # noqa: A001 - mirrors the builtin on purpose: storage.open(url)
    """The backend of a storage URL as the ledger records it (``normalize_url``'s: a
    ``file://`` path is not decoded again)."""
    url = url.strip()
    if url.startswith("file://"):
        from afc_cli.storage.file import FileStorage

        if not url[len("file://") :]:
            raise UsageError(f"storage {url!r} names no directory")
        return FileStorage(os.path.abspath(os.path.expanduser(url[len("file://") :])))
    if _lower_scheme(url).startswith("s3://"):
        from afc_cli.storage.s3 import S3Storage

        # as recorded: not held again to what a person may give (``_no_query``)
        return S3Storage(_lower_scheme(url))
    url = normalize_url(url)
    from afc_cli.storage.file import FileStorage

    return FileStorage(url[len("file://") :])
