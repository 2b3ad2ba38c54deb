"""Storage backends by URL scheme."""

from __future__ import annotations

import os
from pathlib import Path

from afc_cli.errors import UsageError
from afc_cli.storage.base import ObjectExists, ObjectInfo, Storage

DEFAULT_STORAGE = "file://./afc-outputs"

__all__ = [
    "DEFAULT_STORAGE",
    "ObjectExists",
    "ObjectInfo",
    "Storage",
    "endpoint_of",
    "normalize_url",
    "open",
]


def normalize_url(url: str, base: Path | None = None) -> str:
    """Canonical form recorded with a batch: ``file://`` URLs become absolute, so a batch's
    outputs do not move when afc runs from another directory."""
    url = url.strip()
    if url.startswith("file://"):
        raw = url[len("file://") :]
        if not raw:
            raise UsageError(f"storage {url!r} names no directory")
        path = Path(os.path.expanduser(raw))
        if not path.is_absolute():
            path = (base or Path.cwd()) / path
        return "file://" + os.path.normpath(path)
    if url.startswith("s3://"):
        from afc_cli.storage.s3 import parse_url

        bucket, prefix = parse_url(url)
        return f"s3://{bucket}" + (f"/{prefix}" if prefix else "")
    if "://" in url:
        scheme = url.split("://", 1)[0]
        raise UsageError(
            f"storage {url!r}: the {scheme}:// scheme is not supported by this version of afc "
            "(supported: file://PATH, s3://BUCKET/PREFIX)"
        )
    raise UsageError(f"storage {url!r} is not a URL; use file://PATH or s3://BUCKET/PREFIX")


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
    url = normalize_url(url)
    if url.startswith("s3://"):
        from afc_cli.storage.s3 import S3Storage

        return S3Storage(url)
    from afc_cli.storage.file import FileStorage

    return FileStorage(url[len("file://") :])
