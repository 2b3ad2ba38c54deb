"""``s3://bucket/prefix`` storage through boto3: AWS S3, Cloudflare R2, MinIO.

Configured by boto3's own conventions: the credential chain and profiles (``AWS_PROFILE``,
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``), the region (``AWS_REGION``, else
``AWS_DEFAULT_REGION`` or the profile's, default us-east-1: ``region``), and the endpoint (``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``) for R2 and
MinIO; with a custom endpoint, path-style addressing is used. boto3 is imported only here.

botocore's own retries are off (one try per call): afc's storage policy in the pipeline owns
retries, so a retry is counted, backed off with full jitter and honours Retry-After.

- head: ``HeadObject``; the object's metadata names the job (``x-amz-meta-afc-*``).
- put: a create-only ``PutObject`` with ``If-None-Match: *`` from the spool file, with the
  metadata and a SHA-256 checksum S3 verifies on arrival. Outputs above 64 MiB go up as a
  multipart upload streamed part by part from the spool (memory holds one part), completed
  with ``If-None-Match: *``; a failed multipart upload is aborted, and once one completed, the
  uploads of its key a killed run left in progress are aborted. 412 means the key is taken.
- verify: ``HeadObject`` with checksum mode: size and the SHA-256 checksum S3 computed (for a
  multipart upload, the checksum of the parts' checksums, recomputed from the spool).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from afc_cli.errors import StorageDenied, StorageError, StorageUnreachable, UsageError
from afc_cli.storage.base import NOT_THERE, ObjectExists, ObjectInfo, Storage, typed_meta

MULTIPART_THRESHOLD = 64 * 1024 * 1024
PART_SIZE = 16 * 1024 * 1024
MAX_PARTS = 10_000
MAX_KEY_BYTES = 1024  # S3's limit on an object key, prefix included
RETRYABLE_CODES = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestTimeout",
    "RequestTimeoutException",
    "InternalError",
    "ServiceUnavailable",
    "ConditionalRequestConflict",  # a concurrent conditional write: try again
    # the body did not match its SHA-256 checksum or signed payload hash: the bytes were
    # damaged on the way (the spool file is checked against its render before each upload,
    # spool.damage), so the same bytes sent again land; a 400 not retried left the job
    # waiting at store for the next run
    "BadDigest",
    "XAmzContentSHA256Mismatch",
    # fewer bytes arrived than the request's Content-Length said: the body was cut on the way
    # (a connection dropped mid-upload behind a proxy), so the same bytes sent again land
    "IncompleteBody",
}
META_FIELDS = {
    "job_id": "afc-job-id",
    "key": "afc-key",
    "batch": "afc-batch",
    "request_hash": "afc-request-hash",
    "provider": "afc-provider",
    "model": "afc-model",
    "attempt": "afc-attempt",
    "sha256": "afc-sha256",
    "size": "afc-size",
    "cost": "afc-cost",
    "cost_source": "afc-cost-source",
}
# what botocore itself accepts as a bucket name (its regex, less the ARN forms): checked here,
# so a bad name is a usage error before anything is written, not a retried validation error
_BUCKET = re.compile(r"[a-zA-Z0-9.\-_]{1,255}")


def _token_sent(request: Any, **kwargs: Any) -> None:
    """Before each request goes (botocore's ``before-send``): the session token it carries
    (``X-Amz-Security-Token``) is a secret ``secrets.scrub`` removes, as ``AWS_SESSION_TOKEN``'s
    value is. botocore reads one from a profile, an SSO cache or the instance's role, never
    the environment: an endpoint echoing the request's headers in its error message (a proxy
    in front of the store) had it shown on stderr, kept in the ledger and posted in the job's
    webhook event. (The secret key is never sent: no endpoint can echo it.) Returns None:
    botocore sends the request."""
    from afc_cli import secrets

    token = request.headers.get("X-Amz-Security-Token")
    if token:
        secrets.register_value(token.decode() if isinstance(token, bytes) else str(token))


def parse_url(url: str) -> tuple[str, str]:
    rest = url[len("s3://") :]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise UsageError(f"storage {url!r} names no bucket (use s3://BUCKET/PREFIX)")
    if "@" in bucket or ":" in bucket:
        # s3://KEY:SECRET@bucket (a secret may hold '/', which splits it here): the URL is
        # not shown at all, no part of the secret can reach the message
        raise UsageError(
            "storage: an s3:// URL carries no credentials (s3://BUCKET/PREFIX); set "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the environment"
        )
    if not _BUCKET.fullmatch(bucket):
        raise UsageError(
            f"storage {url!r}: {bucket!r} is not a bucket name (letters, digits, '.', '-' "
            "and '_' only)"
        )
    prefix = prefix.strip("/")
    # the prefix is held to the output keys' rule (manifest.output_key_problem): a '..'
    # segment is a literal key on AWS, but a proxy or an S3-compatible store in front of
    # path-style URLs may resolve it, into another bucket
    if prefix and (
        {"", ".", ".."} & set(prefix.split("/")) or re.search(r"[\x00-\x1f\x7f\\]", prefix)
    ):
        raise UsageError(
            f"storage {url!r}: the prefix {prefix!r} has a '..', '.' or empty path segment, a "
            "backslash or a control character; name the folder plainly (s3://BUCKET/PREFIX)"
        )
    return bucket, prefix


def _ascii(value: str) -> str:
    """An object metadata value as S3 takes it: ASCII. Other text (a model named ``démo``)
    is RFC 2047-encoded (``=?utf-8?b?...?=``), as AWS's documentation advises, and read back
    by ``_unascii``; a value afc writes in ASCII is kept as it is."""
    if value.isascii() and not value.startswith("=?"):  # "=?": read back as encoded
        return value
    from email.header import Header

    return Header(value, "utf-8", maxlinelen=10_000).encode().replace("\n", "")


def _unascii(value: str) -> str:
    from email.header import decode_header, make_header

    try:
        return str(make_header(decode_header(value)))
    except (ValueError, LookupError):
        return value


# the headers afc's writes carry that an S3-compatible store may not take
_NEEDED_HEADERS = ("x-amz-checksum", "checksum-algorithm", "if-none-match")
_REFUSAL_WORDS = ("unsupported", "not supported", "not implemented", "notimplemented")


def _header_refused(status: int, error: dict[str, Any]) -> bool:
    """A 400 whose message says the store does not take a header afc's writes need (a SHA-256
    checksum, create-only): Backblaze B2 answers ``InvalidArgument`` 'Unsupported header
    'x-amz-checksum-sha256' received for this API call.' where others answer 501
    ``NotImplemented``. As any 4xx it was the one upload's failure: every other job of the
    batch was rendered and paid for, each one's upload refused the same way."""
    message = str(error.get("Message", "")).lower()
    return (
        status == 400
        and any(header in message for header in _NEEDED_HEADERS)
        and any(word in message for word in _REFUSAL_WORDS)
    )


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


def _endpoint_problem(exc: Exception) -> str:
    """What is wrong with the endpoint the environment names, which botocore refused (a value
    without its scheme, ``minio:9000``, was an 'unexpected error' exiting 1). Where neither
    variable is set, no variable is named: the endpoint is botocore's own (from the region)."""
    from botocore.exceptions import InvalidRegionError

    if isinstance(exc, InvalidRegionError):
        # a region botocore refuses (``us_east_1``, a carriage return from a .env file) was
        # said to be AWS_ENDPOINT_URL's fault, a variable not even set
        return (
            f"the AWS region is not a region name ({exc}); set AWS_REGION (or "
            "AWS_DEFAULT_REGION, or the AWS profile's region) to one such as us-east-1"
        )
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        if os.environ.get(name):
            return f"{name} is not an S3 endpoint URL ({exc}); set it to http(s)://HOST[:PORT]"
    return f"the S3 endpoint cannot be used ({exc})"


def _tls_problem(exc: Exception) -> str:
    """What a person can mend in a TLS failure (botocore's ``SSLError``), or "": a CA bundle
    that AWS_CA_BUNDLE names and that is not a readable file was said only as "SSL validation
    failed ... [Errno 2] No such file or directory", naming neither the variable nor the path;
    a certificate this host does not trust (a MinIO's own CA) did not say where to name it."""
    from botocore.exceptions import SSLError

    if not isinstance(exc, SSLError):
        return ""
    bundle = os.environ.get("AWS_CA_BUNDLE")
    if bundle and not os.access(bundle, os.R_OK):
        return (
            f" (AWS_CA_BUNDLE names {bundle!r}, which is not a readable file here: point it "
            "at a PEM file of the certificate authorities the store's certificate is signed "
            "by, or unset it)"
        )
    if "CERTIFICATE_VERIFY_FAILED" in str(exc):
        return (
            " (this host does not trust the store's certificate: AWS_CA_BUNDLE names a PEM "
            "file of the certificate authorities to trust, as for the aws command)"
        )
    return ""


def custom_endpoint() -> str | None:
    """The S3 endpoint the environment names (``AWS_ENDPOINT_URL_S3``, else
    ``AWS_ENDPOINT_URL``: R2, MinIO), or None for AWS's own."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def endpoint() -> str | None:
    """The endpoint as a batch records it (``storage.endpoint_of``): the environment's, its
    credentials (a URL's user and password, which botocore does not use) and a closing '/'
    left out; '' for AWS's own. None for a value that is no http(s) URL (``minio:9000``),
    which no S3 call can use (``_endpoint_problem``): not recorded, nor held against one."""
    from urllib.parse import urlsplit, urlunsplit

    value = (custom_endpoint() or "").strip()
    if not value:
        return ""
    try:
        parts = urlsplit(value)
        netloc = parts.netloc.rpartition("@")[2]
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not netloc:
        return None
    return urlunsplit((parts.scheme.lower(), netloc.lower(), parts.path, "", "")).rstrip("/")


def region(session: Any) -> str:
    """The region afc's S3 client uses: ``AWS_REGION`` (the variable every other AWS SDK and
    the AWS CLI read, which botocore does not: README's examples set it, and it was
    ignored), else botocore's own (``AWS_DEFAULT_REGION``, the profile's), else us-east-1."""
    return os.environ.get("AWS_REGION") or session.region_name or "us-east-1"


# boto3 clients made in this process, by the environment each was made from (``_shared_client``)
_CLIENTS: dict[tuple[tuple[str, str], ...], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _shared_client() -> Any:
    """The S3 client of this process for its environment as it is now (every ``AWS_``
    variable: credentials, profile, region, endpoint), made on first use and shared by every
    ``S3Storage`` (boto3's clients are thread-safe; a bucket and prefix are each call's
    arguments). One a storage, each with a session of its own, cost some 12 MiB (the S3
    service model loaded and parsed again); a worker's loop opens a storage for every batch it
    meets and keeps it for as long as work comes, and fed 300 batches of 5 instant jobs on one
    bucket it grew from 74 MiB to 3.4 GiB."""
    key = tuple(sorted((name, value) for name, value in os.environ.items() if name[:4] == "AWS_"))
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = _new_client()
        return client


def _new_client() -> Any:
    import boto3
    from botocore.config import Config

    session = boto3.session.Session()
    custom = custom_endpoint()
    config = Config(
        retries={"total_max_attempts": 1, "mode": "standard"},  # afc owns retries
        connect_timeout=10,
        read_timeout=120,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        s3={"addressing_style": "path"} if custom else None,
    )
    try:
        client = session.client("s3", region_name=region(session), config=config)
    except ValueError as exc:  # "Invalid endpoint: minio:9000", a region refused
        raise UsageError(_endpoint_problem(exc)) from None
    client.meta.events.register("before-send.s3", _token_sent)
    return client


class S3Storage(Storage):
    local = False

    def __init__(self, url: str):
        self.bucket, self.prefix = parse_url(url)
        self.url = f"s3://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = _shared_client()
        return self._client

    def object_key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def check_keys(self, keys: list[str]) -> None:
        """An object key is at most 1024 bytes (S3's limit; a longer one is refused
        KeyTooLongError). The manifest holds an output key to that limit, and the prefix comes
        before it: an output key within it but not with the prefix was rendered, paid for and
        refused at every store, until dead-lettered."""
        for key in keys:
            size = len(self.object_key(key).encode("utf-8", "surrogatepass"))
            if size > MAX_KEY_BYTES:
                raise UsageError(
                    f"cannot store {key!r} in {self.url}: with the prefix its object key is "
                    f"{size} bytes, longer than S3's {MAX_KEY_BYTES}; shorten the output "
                    "template or the prefix"
                )

    # --- errors -----------------------------------------------------------------------------

    def _error(
        self, exc: Exception, action: str, key: str | None = None, *, multipart: bool = False
    ) -> StorageError:
        """``exc`` as a StorageError saying what to mend. ``multipart``: it failed a multipart
        upload (an output over ``MULTIPART_THRESHOLD``), whose requests a store may refuse
        while it takes single uploads."""
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            ConfigParseError,
            ConnectionError,
            CredentialRetrievalError,
            EndpointResolutionError,
            HTTPClientError,
            InvalidConfigError,
            NoCredentialsError,
            ParamValidationError,
            PartialCredentialsError,
            ProfileNotFound,
            ReadTimeoutError,
            SSOError,
            TokenRetrievalError,
            UnknownCredentialError,
        )

        where = f"s3://{self.bucket}/{self.object_key(key)}" if key else f"bucket {self.bucket}"
        if isinstance(exc, NoCredentialsError):
            return StorageError(
                f"{action} {where}: no AWS credentials found; set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY or AWS_PROFILE",
                retryable=False,
            )
        if isinstance(
            exc,
            PartialCredentialsError
            | CredentialRetrievalError
            | UnknownCredentialError
            | ProfileNotFound
            | InvalidConfigError
            | ConfigParseError
            | TokenRetrievalError
            | SSOError,
        ):
            # the credentials or profile the environment names (AWS_PROFILE misspelt, an SSO
            # session expired, a credential_process failing): no retry mends them; a retried
            # BotoCoreError, they were three tries and exit 1 before a run, 'aws sso login'
            # unsaid
            return StorageError(
                f"{action} {where}: {exc} (fix the AWS credentials or profile: AWS_PROFILE, "
                "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY; for an SSO profile, 'aws sso "
                "login')",
                retryable=False,
            )
        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            meta = exc.response.get("ResponseMetadata", {})
            status = int(meta.get("HTTPStatusCode") or 0)
            headers = meta.get("HTTPHeaders", {})
            from afc_cli.attempts import parse_retry_after

            retry_after = parse_retry_after(headers.get("retry-after"), date=headers.get("date"))
            refused_request = (
                code == "NotImplemented" or status == 501 or _header_refused(status, error)
            )
            # a store that takes no more bytes: MinIO's XMinioStorageFull (507, below its
            # free-drive threshold), a 507 of any other, a Ceph or quota'd store's
            # QuotaExceeded. Retried (a 5xx), each upload gave up in turn while the bucket's
            # HEAD and the probes passed: every job of the batch was rendered and paid for,
            # the renders piling up in the spool until its disk filled too
            full = status == 507 or code in ("XMinioStorageFull", "QuotaExceeded")
            # a store that wants larger multipart parts than afc's refuses every completion
            # (EntityTooSmall): a 4xx of one upload, each large output of the batch was
            # rendered and paid for in turn, none of them storable
            small_parts = multipart and code == "EntityTooSmall"
            skew = _clock_skew(headers) if status == 403 else None
            if code in ("NoSuchBucket",) or (action == "cannot use" and status == 404):
                fix = f"create bucket {self.bucket!r} or point --storage at an existing one"
            elif status == 403 and (skew is not None or code == "RequestTimeTooSkewed"):
                # S3 (and MinIO) refuse every request signed more than 15 minutes off their
                # clock, a HEAD's with a bare 403: blamed on the credentials or the bucket
                # policy, a host whose clock was off had its user check both in vain
                off = (
                    f"this host's clock is {abs(skew) / 60:.0f} minutes "
                    f"{'ahead of' if skew > 0 else 'behind'} the storage's (its answer's Date)"
                    if skew is not None
                    else "this host's clock is off the storage's"
                )
                fix = (
                    f"{off}: S3 refuses a request signed more than 15 minutes off its clock "
                    "(RequestTimeTooSkewed); set this host's clock (NTP: timedatectl set-ntp "
                    "true), then run again"
                )
            elif code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch") or (
                # a HEAD's 403 has no body to name its code: botocore gives the status (the
                # probe and the verify said only '403 Forbidden')
                (action == "cannot use" or code == "403") and status == 403
            ):
                fix = (
                    "check the credentials (AWS_ACCESS_KEY_ID / AWS_PROFILE) and that the "
                    f"bucket policy lets them list, read and write {self.bucket!r}: "
                    "s3:ListBucket on the bucket, s3:GetObject and s3:PutObject on its keys (S3 "
                    "answers a HEAD 403, not 404, without s3:ListBucket)"
                )
            elif code in ("ExpiredToken", "TokenRefreshRequired", "InvalidToken") or (
                # a HEAD's 400 has no body to name its code: botocore gives the status. S3
                # answers so for temporary credentials run out (an assumed role's session
                # token, an SSO session: an hour by default, less than an overnight batch)
                code == "400" and status == 400
            ):
                fix = (
                    "temporary credentials (AWS_SESSION_TOKEN, an assumed role, an SSO "
                    "session) that expired are answered so: refresh them ('aws sso login', "
                    "assume the role again); else check that AWS_REGION is the bucket's region"
                )
            elif full:
                fix = (
                    "the store is full or its quota spent: free space in it or raise its "
                    "quota; the paid render waits in the spool and the next run stores it"
                )
            elif code == "InvalidBucketName":
                fix = f"{self.bucket!r} is not a valid bucket name; fix --storage"
            elif small_parts:
                fix = (
                    f"this store wants multipart upload parts larger than afc's "
                    f"{PART_SIZE >> 20} MiB, and an output over {MULTIPART_THRESHOLD >> 20} MiB "
                    "goes up as a multipart upload; smaller outputs go up in one request, which "
                    "this store may take. Use a store that takes parts of that size (AWS S3, "
                    "MinIO), or change this one's minimum part size"
                )
            elif refused_request:
                # an S3-compatible store without create-only writes (If-None-Match: *) or
                # SHA-256 checksums: no retry mends it, and afc never writes without them.
                # Every upload of the batch is refused so while the bucket's HEAD and the
                # probes' pass: a StorageDenied (below), or every job of the batch was
                # rendered and paid for, each one's upload refused
                fix = (
                    "this store does not support a request afc needs: create-only writes "
                    "(If-None-Match: *) and SHA-256 checksums; use one that does (AWS S3, "
                    "Cloudflare R2, a recent MinIO)"
                )
                if multipart:
                    # the batch's smaller outputs stored with the very requests named above:
                    # said so, a person read the store as lacking what it had just done
                    fix = (
                        "this store does not support a request afc needs for an output over "
                        f"{MULTIPART_THRESHOLD >> 20} MiB, which goes up as a multipart "
                        "upload: SHA-256 checksums of its parts (x-amz-checksum-algorithm) "
                        "and a create-only completion (If-None-Match: *); smaller outputs go "
                        "up in one request, which this store may take. Use a store that "
                        "supports both for multipart uploads (AWS S3, a recent MinIO)"
                    )
            else:
                fix = None
            retryable = (
                status >= 500 and status != 501 or status == 429 or code in RETRYABLE_CODES
            ) and not (refused_request or full or small_parts)
            message = f"{action} {where}: {code or status} {error.get('Message', '')}".strip()
            if fix:
                message += f" ({fix})"
            if (
                action == "cannot write"
                and not retryable
                and (status == 403 or refused_request or full or small_parts)
            ):
                # no bucket check sees it (_storage_broke)
                return StorageDenied(
                    message, large_only=multipart and (refused_request or small_parts)
                )
            return StorageError(message, retryable=retryable, retry_after=retry_after)
        if isinstance(exc, EndpointResolutionError):  # the endpoint named: no retry mends it
            return StorageError(f"{action} {where}: {_endpoint_problem(exc)}", retryable=False)
        if isinstance(exc, ParamValidationError):  # afc's own request: no retry mends it
            return StorageError(f"{action} {where}: {exc}", retryable=False)
        if isinstance(exc, ConnectionError | HTTPClientError | ReadTimeoutError):
            return StorageUnreachable(
                f"{action} {where}: connection problem: {exc}{_tls_problem(exc)}"
            )
        if isinstance(exc, BotoCoreError):
            return StorageError(f"{action} {where}: {exc}", retryable=True)
        if isinstance(exc, OSError):
            return StorageError(f"{action} {where}: {exc}", retryable=True)
        raise exc

    @staticmethod
    def _is_missing(exc: Exception) -> bool:
        from botocore.exceptions import ClientError

        if not isinstance(exc, ClientError):
            return False
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return code in ("404", "NoSuchKey", "NotFound") or status == 404 and code != "NoSuchBucket"

    @staticmethod
    def _is_precondition(exc: Exception) -> bool:
        from botocore.exceptions import ClientError

        if not isinstance(exc, ClientError):
            return False
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return code == "PreconditionFailed" or status == 412

    # --- the storage interface ------------------------------------------------------------

    def check(self) -> None:
        """The bucket's HEAD: a retryable failure is raised as a StorageError, tried again
        under the storage policy by the run (``pipeline.check_storage``)."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except Exception as exc:  # noqa: BLE001 - classified below
            error = self._error(exc, "cannot use")
            if not error.retryable:
                raise UsageError(error.message) from None
            raise error from None

    def _head(self, key: str) -> dict[str, Any] | None:
        try:
            return self.client.head_object(
                Bucket=self.bucket, Key=self.object_key(key), ChecksumMode="ENABLED"
            )
        except Exception as exc:  # noqa: BLE001 - classified below
            if self._is_missing(exc):
                return None
            raise self._error(exc, "cannot read", key) from None

    def head(self, key: str) -> ObjectInfo:
        found = self._head(key)
        if found is None:
            return ObjectInfo(exists=False)
        # names as the server spelt them (botocore keeps their case): a Go proxy in front of
        # the store, or a store, answering ``X-Amz-Meta-Afc-Job-Id`` made afc's own object
        # one it 'did not write'; header names are case-insensitive (RFC 9110)
        raw = {str(name).lower(): value for name, value in (found.get("Metadata") or {}).items()}
        meta: dict[str, Any] | None = None
        if any(name.startswith("afc-") for name in raw):
            meta = {}
            for field, header in META_FIELDS.items():
                value = raw.get(header)
                if value is not None and value.startswith("=?"):
                    value = _unascii(value)
                meta[field] = value
            meta = typed_meta(meta)
        return ObjectInfo(exists=True, size=found.get("ContentLength"), meta=meta)

    def put_if_absent(
        self, key: str, source: Path, meta: dict[str, Any], *, sync: bool = True
    ) -> None:
        metadata = {
            header: _ascii(str(meta[field]))
            for field, header in META_FIELDS.items()
            if meta.get(field)
        }
        size = 0
        try:
            # measured inside: a spool file gone at this instant (removed by hand, its disk
            # remounted) is a failed upload, as its open in ``_put`` is, not an error of
            # afc's own that stopped the whole run (outside audit 55g)
            size = source.stat().st_size
            if size <= MULTIPART_THRESHOLD:
                self._put(key, source, metadata, meta["sha256"])
            else:
                self._multipart(key, source, metadata, size)
        except ObjectExists:
            raise
        except StorageError:
            raise
        except Exception as exc:  # noqa: BLE001 - classified below
            if self._is_precondition(exc):
                raise ObjectExists(key) from None
            multipart = size > MULTIPART_THRESHOLD
            raise self._error(exc, "cannot write", key, multipart=multipart) from None

    def _put(self, key: str, source: Path, metadata: dict[str, str], sha256: str) -> None:
        with open(source, "rb") as body:
            self.client.put_object(
                Bucket=self.bucket,
                Key=self.object_key(key),
                Body=body,
                IfNoneMatch="*",
                Metadata=metadata,
                ChecksumAlgorithm="SHA256",
                ChecksumSHA256=_b64(bytes.fromhex(sha256)),
                ContentType=_content_type(key, source),
            )

    def _part_size(self, size: int) -> int:
        return max(PART_SIZE, -(-size // MAX_PARTS))

    def _abort_left(self, object_key: str) -> None:
        """Abort the uploads of this key a run left in progress when it died mid-upload
        (SIGKILL, a host lost): S3 bills their parts as stored bytes until they are aborted
        (or a bucket lifecycle rule ends them), and no run would ever complete them. Called
        once this run's upload completed: every afc upload completes with ``If-None-Match:
        *``, so none in progress can complete now, while before it one may be a live writer's
        that completes first (a job of another batch whose output template gives it the same
        key; a run that stalled past its lease storing its late result, pipeline._found_own):
        the job's lease does not make a run the key's one writer. A listing refused (no
        ``s3:ListBucketMultipartUploads``) only leaves them."""
        try:
            found = self.client.list_multipart_uploads(Bucket=self.bucket, Prefix=object_key)
        except Exception:  # noqa: BLE001 - the upload goes on; leftovers cost storage only
            return
        for upload in found.get("Uploads", []):
            if upload.get("Key") != object_key:
                continue
            try:
                self.client.abort_multipart_upload(
                    Bucket=self.bucket, Key=object_key, UploadId=upload["UploadId"]
                )
            except Exception:  # noqa: BLE001, S110 - as the listing
                pass

    def _multipart(self, key: str, source: Path, metadata: dict[str, str], size: int) -> None:
        object_key = self.object_key(key)
        upload = self.client.create_multipart_upload(
            Bucket=self.bucket,
            Key=object_key,
            Metadata=metadata,
            ChecksumAlgorithm="SHA256",
            ContentType=_content_type(key, source),
        )
        upload_id = upload["UploadId"]
        parts = []
        try:
            part_size = self._part_size(size)
            with open(source, "rb") as fh:
                number = 1
                while chunk := fh.read(part_size):
                    digest = _b64(hashlib.sha256(chunk).digest())
                    answer = self.client.upload_part(
                        Bucket=self.bucket,
                        Key=object_key,
                        UploadId=upload_id,
                        PartNumber=number,
                        Body=chunk,
                        ChecksumAlgorithm="SHA256",
                        ChecksumSHA256=digest,
                    )
                    etag = answer.get("ETag")
                    if not etag:  # a store's answer the completion cannot name the part by
                        raise StorageError(
                            f"cannot write {self.describe(key)}: the store answered part "
                            f"{number} of the multipart upload with no ETag (an S3-compatible "
                            "store or a proxy in front of it that drops the header); afc "
                            "cannot complete an upload without it",
                            retryable=False,
                        )
                    parts.append({"ETag": etag, "PartNumber": number, "ChecksumSHA256": digest})
                    del chunk
                    number += 1
            self.client.complete_multipart_upload(
                Bucket=self.bucket,
                Key=object_key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
                IfNoneMatch="*",
            )
        except BaseException as exc:
            # An aborted upload leaves no parts behind to be billed for storage.
            try:
                self.client.abort_multipart_upload(
                    Bucket=self.bucket, Key=object_key, UploadId=upload_id
                )
            except Exception:  # noqa: BLE001, S110 - the original error is the one to report
                pass
            if isinstance(exc, Exception) and not self._is_precondition(exc):
                # an upload that completed first aborted this one (``_abort_left``), whose
                # part or completion then failed: the key is taken, as a 412 says
                try:
                    taken = self._head(key) is not None
                except StorageError:
                    taken = False
                if taken:
                    raise ObjectExists(key) from None
            raise
        self._abort_left(object_key)  # the key is taken: no other upload of it can complete

    def expected_checksum(self, source: Path) -> str:
        """The SHA-256 checksum S3 reports for this file uploaded by ``put_if_absent``."""
        size = source.stat().st_size
        if size <= MULTIPART_THRESHOLD:
            digest = hashlib.sha256()
            with open(source, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
            return _b64(digest.digest())
        part_size = self._part_size(size)
        digests = []
        with open(source, "rb") as fh:
            while chunk := fh.read(part_size):
                digests.append(hashlib.sha256(chunk).digest())
        return f"{_b64(hashlib.sha256(b''.join(digests)).digest())}-{len(digests)}"

    def verify(self, key: str, size: int, sha256: str, source: Path | None) -> str | None:
        found = self._head(key)
        if found is None:
            if source is None or not source.exists():  # found stored, not rendered here
                return f"{self.describe(key)} {NOT_THERE}"
            # uploaded from this spool file, the store answering 200: not there *yet* (an
            # S3-compatible store, or a cache or replica in front of it, not consistent at
            # once) is a storage failure tried again under the storage policy, then the job
            # waits at verify with its spool file. Returned as a finding, it failed the job
            # VERIFY_FAILED at once, its paid render stored a moment later, and a person had
            # to 'afc retry' it.
            raise StorageError(
                f"cannot read back {self.describe(key)}: not there, though the store took "
                "the upload (a store not yet consistent, or the object removed since)",
                retryable=True,
            )
        if found.get("ContentLength") != size:
            return f"{self.describe(key)} holds {found.get('ContentLength')} bytes, expected {size}"
        if not sha256:  # the job's own object found with no SHA-256 in its metadata
            return f"{self.describe(key)} has no SHA-256 in its metadata to check it against"
        reported = found.get("ChecksumSHA256")
        if reported == _b64(bytes.fromhex(sha256)):
            return None  # S3's own SHA-256 of what it stored is ours
        if reported and source is not None and source.exists():
            # a multipart upload: S3 reports the checksum of the parts' checksums (some
            # S3-compatible stores without the "-N" part count)
            expected = self.expected_checksum(source)
            if reported.split("-")[0] == expected.split("-")[0]:
                return None
            # not the spool's parts: another render of the job may have landed first (its
            # own object, pipeline._found_own), so the object itself is read and checked
        return self._verify_by_reading(key, size, sha256)

    def read_chunks(self, key: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self.object_key(key))["Body"]
        except Exception as exc:  # noqa: BLE001 - classified below
            if self._is_missing(exc):
                raise StorageError(
                    f"cannot read {self.describe(key)}: missing", retryable=False
                ) from None
            raise self._error(exc, "cannot read", key) from None
        try:
            yield from body.iter_chunks(chunk)
        except Exception as exc:  # noqa: BLE001 - classified below
            raise self._error(exc, "cannot read", key) from None
        finally:
            body.close()

    def _verify_by_reading(self, key: str, size: int, sha256: str) -> str | None:
        """No usable checksum from S3: read the object back and hash it."""
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self.object_key(key))["Body"]
            digest = hashlib.sha256()
            read = 0
            for chunk in body.iter_chunks(1 << 20):
                digest.update(chunk)
                read += len(chunk)
        except Exception as exc:  # noqa: BLE001 - classified below
            if self._is_missing(exc):
                # its HEAD, a moment ago, showed it: a store (or a replica behind a load
                # balancer) not consistent at once, or the object removed since. Tried again
                # under the storage policy, as the HEAD's 404 is (``verify``, which looks at
                # the key again first); a 4xx not retried, the job waited at verify at the end
                # of the run for a person's resume, the object there a moment later
                raise StorageError(
                    f"cannot read back {self.describe(key)}: not there, though its HEAD just "
                    "showed it (a store not yet consistent, or the object removed since)",
                    retryable=True,
                ) from None
            raise self._error(exc, "cannot read back", key) from None
        if (read, digest.hexdigest()) != (size, sha256):
            return f"{self.describe(key)} reads back {read} bytes sha256 {digest.hexdigest()}"
        return None


def _content_type(key: str, source: Path) -> str:
    """The object's Content-Type: what its bytes are where their first bytes say so
    (``inputs.media_type``: PNG, JPEG, WebP, GIF, HEIF, AVIF, TIFF, BMP), else what its key's
    extension says. An output key's ``{ext}`` is ``params.output_format`` (default png) and a
    model may answer another format (Replicate's flux answers WebP unless asked otherwise):
    stored as ``image/png``, a browser or CDN was handed WebP bytes labelled PNG."""
    from afc_cli.inputs import media_type

    try:
        with open(source, "rb") as fh:
            head = fh.read(32)
    except OSError:
        head = b""
    return media_type(head, key)


# S3's limit on how far a request's signing time may be from its own clock
SKEW_LIMIT_S = 15 * 60


def _clock_skew(headers: Any) -> float | None:
    """How far this host's clock is ahead of the storage's (negative: behind), by its answer's
    ``Date`` header, when that is past S3's limit (``SKEW_LIMIT_S``); else None."""
    import time

    from afc_cli.attempts import _http_date

    theirs = _http_date(headers.get("date")) if hasattr(headers, "get") else None
    if theirs is None:
        return None
    skew = time.time() - theirs
    return skew if abs(skew) > SKEW_LIMIT_S else None
