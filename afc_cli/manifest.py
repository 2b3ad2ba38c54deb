"""The manifest: YAML in, validated and resolved jobs out, before anything is written.

Validation is strict: unknown fields, a missing or duplicated key, duplicate YAML mapping keys,
bad types, an empty chain, an output template that could escape the storage prefix, and two jobs
sharing one output key are all errors. Every problem names the file, the job (index and key) and
the field; ``load_manifest`` raises one ``ManifestError`` listing them all, and the caller has
written nothing yet.

Each job is resolved into a canonical request body. Its SHA-256 over RFC 8785 JSON is the
job's request hash: everything that determines the output (the whole chain, prompt, params,
output template) and nothing else.

The rule for defaults: writing a default out never changes the hash. afc's own defaults are
applied into the body — every chain entry carries all its fields (``attempts``,
``fallback_on``, ``backoff``, ``window_s``), and ``defaults.chain``, ``defaults.params`` and
``defaults.output`` are merged in — so an entry written with its defaults and one without are
one body. A provider param that the adapter itself fills in (``Provider.param_defaults``, e.g.
the local provider's ``size: 64x64``) is dropped from the params when its value is that
default for every provider of the job's chain: sending it or leaving it out is the same
request. A param another provider of the chain would receive is kept. ``same_request``
applies the rule to a body admitted before it existed, and a chain entry admitted before
``window_s`` existed takes its default, so such a body is a replay, not a conflict.
"""

from __future__ import annotations

import difflib
import graphlib
import hashlib
import itertools
import json
import os
import re
import string
import unicodedata
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from json.encoder import encode_basestring as _utf8_string
from json.encoder import encode_basestring_ascii as _ascii_string
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import rfc8785
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from afc_cli.costs import cap_problem, usd_problem
from afc_cli.errors import ManifestError, UsageError
from afc_cli.joblist import MAX_NUMBER_CHARS, PlainSpec
from afc_cli.secrets import token_shaped
from afc_cli.storage.base import MARK_NAME  # a file storage folder's mark

# Stable namespace for job ids: uuid5(namespace, batch NUL key). Never change it: a rebuilt
# ledger must derive the same job ids to recognise outputs already in storage.
JOB_ID_NAMESPACE = uuid.UUID("6f1c8a0e-3f52-5c1e-9a53-1b2f7d0e4a11")
_NAMESPACE_BYTES = JOB_ID_NAMESPACE.bytes

ErrorClassName = Literal[
    "auth",
    "invalid",
    "cancelled",
    "rate_limited",
    "timeout",
    "unavailable",
    "server",
    "refusal",
    "window_expired",
    "exhausted",
]
ERROR_CLASSES: tuple[str, ...] = get_args(ErrorClassName)
FallbackReason = Literal["exhausted", "unavailable", "refusal", "window_expired"]
FALLBACK_REASONS: tuple[str, ...] = get_args(FallbackReason)


def fallback_set(reasons: list[Any]) -> list[Any]:
    """A chain entry's ``fallback_on`` as the request hash takes it: a set of reasons (the
    chain moves on when an attempt's reasons meet it, ``afc_cli/attempts.py``), each once, in
    ``FALLBACK_REASONS``' order, whatever order the manifest wrote them in. Hashed as written,
    ``[unavailable, exhausted]`` re-submitted as ``[exhausted, unavailable]`` was a conflict of
    every job of the chain, whose way out (new keys) paid for each render again. A value that
    is not a reason (in a body this afc did not write) is kept, after them."""
    known = [reason for reason in FALLBACK_REASONS if reason in reasons]
    return known + [r for r in dict.fromkeys(reasons) if r not in FALLBACK_REASONS]


TEMPLATE_FIELDS = {"batch", "key", "ext", "job_id"}
DEFAULT_OUTPUT = "{batch}/{key}.{ext}"
KEY_ALPHABET = set(string.ascii_letters + string.digits + "._-:")
MAX_PROBLEMS = 25
# Limits on hostile or mistaken input, each refused with exit 2 before anything is written.
MAX_MANIFEST_BYTES = 32 * 1024 * 1024  # a 10,000-job manifest is about 1 MiB
MAX_ALIAS_NODES = 10_000  # YAML nodes that aliases may add (a "billion laughs" adds billions)
MAX_YAML_DEPTH = 64  # nesting of mappings and lists
MAX_PROMPT_CHARS = 32_000  # the longest prompt a provider here accepts (OpenAI gpt-image)
MAX_OUTPUT_KEY_BYTES = 1024  # S3's limit on an object key
MAX_SEGMENT_BYTES = 255  # a file name's limit on common file systems
# an output's own file name: file storage keeps its metadata beside it as NAME.afc.json
MAX_NAME_BYTES = MAX_SEGMENT_BYTES - len(".afc.json")
MAX_INPUT_BYTES = 50 * 1024 * 1024  # a reference image (OpenAI's image edits take up to 50 MB)
# reference images a job sends: OpenAI's image edits take up to 16, the most of any provider
# here (Gemini's image models up to 14). Each is read whole into memory when sent (base64 too,
# for Replicate, fal and Gemini): 20 inputs of a 40 MiB file held 870 MB for one job on the
# local provider, and a list of hundreds, a few KB of manifest, more than the host has
MAX_INPUTS = 16


class _Strict(BaseModel):
    # strict: a quoted number is not an integer ("2" is not attempts: 2), true is not 1
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def _usd(value: str | None) -> str | None:
    if value is None:
        return None
    problem = usd_problem(value)
    if problem:
        raise ValueError(problem)
    return value


class Backoff(_Strict):
    base: float = Field(default=2.0, gt=0, description="seconds before the first retry (ceiling)")
    cap: float = Field(default=60.0, gt=0, description="longest single wait, Retry-After included")


class ChainEntry(_Strict):
    provider: str
    model: str = Field(min_length=1)
    attempts: int = Field(default=3, ge=1, le=100)
    fallback_on: list[FallbackReason] = Field(default_factory=lambda: ["exhausted"])
    backoff: Backoff = Field(default_factory=Backoff)
    window_s: float | None = Field(
        default=None, gt=0, description="the provider's own per-attempt limit, in seconds"
    )

    @field_validator("fallback_on")
    @classmethod
    def _as_set(cls, value: list[FallbackReason]) -> list[FallbackReason]:
        # a set: its order and repeats are not part of the request (``fallback_set``)
        return fallback_set(value)

    @field_validator("model")
    @classmethod
    def _printable(cls, value: str) -> str:
        # most adapters put the model's name in the provider's URL, where a control character
        # (a line break or tab from a pasted name) cannot be sent: refused here, not met at
        # the call, where it stopped the run as an answer afc could not read, its attempt
        # recorded as possibly paid though nothing was sent
        if not value.isprintable():
            raise ValueError(
                f"{value!r} has a control or invisible character (no provider names a model "
                "so; a model name goes into the provider's URL)"
            )
        return value


class Rate(_Strict):
    provider: str
    model: str = Field(min_length=1)
    per_image: str | None = None
    per_second: str | None = None
    # fal's models billed by their output's resolution (afc_cli/providers/fal.py: megapixels)
    per_megapixel: str | None = None
    per_1k_input_tokens: str | None = None
    # the input tokens of reference images, where the provider charges them apart
    # (OpenAI's gpt-image models: RateCards.price in afc_cli/costs.py)
    per_1k_input_image_tokens: str | None = None
    per_1k_output_tokens: str | None = None

    @field_validator(
        "per_image",
        "per_second",
        "per_megapixel",
        "per_1k_input_tokens",
        "per_1k_input_image_tokens",
        "per_1k_output_tokens",
    )
    @classmethod
    def _decimal(cls, value: str | None) -> str | None:
        return _usd(value)

    def prices(self) -> dict[str, Decimal]:
        return {
            name: Decimal(getattr(self, name))
            for name in (
                "per_image",
                "per_second",
                "per_megapixel",
                "per_1k_input_tokens",
                "per_1k_input_image_tokens",
                "per_1k_output_tokens",
            )
            if getattr(self, name) is not None
        }


class Webhook(_Strict):
    """Where terminal job events go. The secret never appears here: only the name of the
    environment variable that holds it (``whsec_...`` form)."""

    url: str
    secret_env: str = Field(max_length=200, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    timeout_s: float = Field(default=10.0, gt=0, le=120)

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        from afc_cli.webhooks import webhook_url_problem

        problem = webhook_url_problem(value)
        if problem:
            raise ValueError(f"{problem}, got {value!r}")
        return value


class ProviderLimits(_Strict):
    concurrency: int | None = Field(default=None, ge=1)
    per_minute: int | None = Field(default=None, ge=1)


class InputSpec(_Strict):
    """A reference image: the stored output of another job of the batch (``job: KEY``, which
    implies a need), or a file (``path``, relative to the manifest's folder)."""

    job: str | None = Field(default=None, min_length=1)
    path: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one(self) -> InputSpec:
        if (self.job is None) == (self.path is None):
            raise ValueError("an input names either job: KEY or path: FILE")
        return self


class Defaults(_Strict):
    output: str = DEFAULT_OUTPUT
    chain: list[ChainEntry] | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    review: bool = False
    # a job without needs (or inputs) of its own takes these, less any naming the job itself
    # (``_with_default_gates``): ``needs: [style-frame]`` makes every other job wait for it
    needs: list[str] | None = None
    inputs: list[InputSpec] | None = Field(default=None, max_length=MAX_INPUTS)


class JobSpec(_Strict):
    key: str = Field(min_length=1, max_length=200)
    prompt: str = Field(max_length=MAX_PROMPT_CHARS)
    params: dict[str, Any] = Field(default_factory=dict)
    chain: list[ChainEntry] | None = None
    output: str | None = None
    webhook: Webhook | None = None
    review: bool | None = None  # pause in awaiting_review after verify (afc_cli/review.py)
    needs: list[str] | None = None  # keys of this batch's jobs that must succeed first
    # reference images sent with the request
    inputs: list[InputSpec] | None = Field(default=None, max_length=MAX_INPUTS)


class ManifestModel(_Strict):
    version: Literal[1]
    batch: str = Field(min_length=1, max_length=200)

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: Any) -> Any:
        # YAML's true and 1.0 equal 1 in Python; neither is a version (as 2.0 is no count)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"must be the number 1, got {value!r}")
        return value

    storage: str | None = None

    @field_validator("storage")
    @classmethod
    def _storage(cls, value: str | None) -> str | None:
        # 'storage: "${STORE}"' templated with the variable unset: read as no storage named,
        # the batch was rendered into the default folder on this machine's disk and bound there
        if value is not None and not value.strip():
            raise ValueError(
                "is empty: name the storage, file://PATH or s3://BUCKET/PREFIX, or leave the "
                "field out (--storage or AFC_STORAGE, else file://./afc-outputs)"
            )
        return value

    budget: str | None = None

    @field_validator("budget")
    @classmethod
    def _budget(cls, value: str | None) -> str | None:
        problem = cap_problem(value) if isinstance(value, str) else None
        if problem:
            raise ValueError(problem)
        return _usd(value)

    defaults: Defaults = Field(default_factory=Defaults)
    rates: list[Rate] = Field(default_factory=list)
    limits: dict[str, ProviderLimits] = Field(default_factory=dict)
    webhook: Webhook | None = None
    jobs: list[JobSpec] | None = None
    jobs_from: str | None = Field(default=None, min_length=1)  # a JSON Lines or CSV job list


@dataclass(slots=True)
class ResolvedJob:
    """One job as the ledger admits it. Treated as read-only; not ``frozen``: a frozen
    dataclass sets each field through ``object.__setattr__``, which made each of a
    100,000-job list's two constructions per job (resolved, read back) three times slower."""

    index: int
    key: str
    job_id: str
    prompt: str
    params: dict[str, Any]
    chain: list[dict[str, Any]]
    output_template: str
    output_key: str
    body: dict[str, Any]
    request_hash: str
    webhook: dict[str, Any] | None = None  # not part of the request: it does not change output
    # Neither review nor needs changes the output, so neither is part of the request hash; a
    # re-submit applies them to a job not yet rendered (afc_cli/gates.py). ``needs``: explicit needs and the jobs of ``job``
    # inputs. ``inputs``: where each input is read from at render time (a file's absolute path
    # and SHA-256, or a job); the hashed body has what identifies them (``body["inputs"]``).
    review: bool = False
    needs: tuple[str, ...] = ()
    inputs: list[dict[str, Any]] | None = None
    # ``body`` as the ledger stores it (``body_text``), made from parts the jobs share
    request_json: str | None = None


@dataclass(frozen=True)
class Manifest:
    path: str
    batch: str
    storage: str | None
    rates: list[Rate]
    jobs: list[ResolvedJob]  # with jobs_from, a JobList: sized, streamed on each iteration
    budget: str | None = None
    limits: dict[str, dict[str, int | None]] = field(default_factory=dict)
    # every distinct chain and webhook secret variable of the jobs (inline and jobs_from), for
    # the checks made before anything is written, without walking a big job list again
    chains: list[list[dict[str, Any]]] = field(default_factory=list)
    secret_envs: set[str] = field(default_factory=set)


def without_provider_defaults(
    params: dict[str, Any], chain: list[dict[str, Any]], providers: dict[str, Any]
) -> dict[str, Any]:
    """The params minus those equal to what every adapter of the chain fills in itself (the
    module docstring's rule for defaults). Values compare as the hash sees them."""
    owners = [providers.get(entry.get("provider")) for entry in chain]
    if not owners or any(owner is None for owner in owners):
        return dict(params)
    defaults = [owner.param_defaults(params) for owner in owners]

    def is_default(name: str, value: Any) -> bool:
        try:
            wanted = canonical_json(value)
            return all(name in d and canonical_json(d[name]) == wanted for d in defaults)
        except Exception:  # not canonicalisable: reported by the caller
            return False

    return {name: value for name, value in params.items() if not is_default(name, value)}


def restated(body: dict[str, Any]) -> dict[str, Any]:
    """An admitted request body under the rule for defaults: a body admitted before the rule
    may carry a provider default written out, and one admitted before chain entries had
    ``window_s`` (the afc before m003, commit 670e542) lacks that default, ``null``: a
    re-submit of its unchanged manifest was refused as a conflict of every job (exit 3). A
    chain entry's ``fallback_on`` admitted as written (before audit 64g) is taken as the set
    it is (``fallback_set``)."""
    from afc_cli.providers import PROVIDERS

    try:
        chain = [_restated_entry(entry) for entry in body["chain"]]
        params = without_provider_defaults(body.get("params") or {}, chain, PROVIDERS)
    except Exception:  # not a body this afc wrote: compare it as it is
        return body
    return {**body, "chain": chain, "params": params}


def _restated_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """A chain entry of an admitted body as ``restated`` takes it."""
    entry = entry if "window_s" in entry else {**entry, "window_s": None}
    reasons = entry.get("fallback_on")
    if isinstance(reasons, list) and all(isinstance(r, str) for r in reasons):
        entry = {**entry, "fallback_on": fallback_set(reasons)}
    return entry


def same_request(
    stored_hash: str,
    stored_json: str | None,
    job: ResolvedJob,
    restates: dict[str, str] | None = None,
) -> bool:
    """Whether an admitted request (its hash and body) is the job's request: the same hash,
    or a body admitted before the rule for defaults that the rule makes this job's body.

    ``restates``: one dict per pass over a manifest's jobs (in its order, each need before
    the jobs using it as an input), filled here with each job found the same request by the
    rule (its hash now -> its admitted hash). A job whose input is such a job's output names
    that job's hash in its own body, the admitted one in its admitted body: the input is the
    same request, so its hash is taken as admitted. Without it, a need restated (a
    ``fallback_on`` an earlier afc admitted in another order) replayed and each job using its
    output was refused as 'changed inputs[0].job.request_hash'."""
    if stored_hash == job.request_hash:
        return True
    if not stored_json:
        return False
    try:
        wanted = job.request_hash
        body = job.body
        if restates and body.get("inputs"):
            inputs = [
                {"job": {**item["job"], "request_hash": restates[item["job"]["request_hash"]]}}
                if "job" in item and item["job"].get("request_hash") in restates
                else item
                for item in body["inputs"]
            ]
            if inputs != body["inputs"]:
                wanted = request_hash({**body, "inputs": inputs})
        same = wanted == stored_hash or request_hash(restated(json.loads(stored_json))) == wanted
    except Exception:
        return False
    if same and restates is not None:
        restates[job.request_hash] = stored_hash
    return same


def job_id_for(batch: str, key: str) -> str:
    """Deterministic job id: racing admissions and a rebuilt ledger agree on it.

    ``uuid.uuid5(JOB_ID_NAMESPACE, batch NUL key)``, computed without building UUID objects
    (a third of the time; tests/test_issue15_joblist.py checks it against ``uuid.uuid5``)."""
    base = _BATCH_SHA1.get(batch)
    if base is None:  # the namespace and batch hashed once per batch, copied per job
        base = _BATCH_SHA1[batch] = hashlib.sha1(_NAMESPACE_BYTES + f"{batch}\x00".encode())
    digest = base.copy()
    digest.update(key.encode())
    h = digest.hexdigest()
    # version 5 in the 13th hex digit; the RFC 4122 variant (10xx) in the 17th
    return f"{h[:8]}-{h[8:12]}-5{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:32]}"


_BATCH_SHA1: dict[str, Any] = {}
_VARIANT = {f"{n:x}": f"{(n & 0x3) | 0x8:x}" for n in range(16)}


def canonical_json(value: Any) -> bytes:
    return rfc8785.dumps(value)


def request_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(body)).hexdigest()


def _canonical_text(text: str) -> bytes:
    """``canonical_json`` of a string. Printable ASCII without quotes or backslashes (most
    prompts) needs no escaping in RFC 8785, so it is written as it is. Any other string is
    escaped by the standard library's C encoder with ``ensure_ascii`` off, which escapes the
    same characters the same way as rfc8785 (``"``, ``\\``, ``\\b \\f \\n \\r \\t`` and
    the other controls as lower-case ``\\u00xx``; everything else as UTF-8:
    tests/test_issue15_hashing.py checks it against rfc8785 with hypothesis); a string UTF-8
    cannot encode (a lone surrogate) goes through rfc8785, which refuses it as before."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return b'"' + text.encode() + b'"'
    try:
        return _utf8_string(text).encode()
    except UnicodeEncodeError:
        return canonical_json(text)


def _json_text(value: Any) -> str:
    """The ledger's JSON text of a value (``afc_cli/ledger/core.py`` ``_dumps``: sorted keys, no
    spaces, ASCII)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def body_text(chain_text: str, output: str, params_text: str, prompt: str) -> str:
    """``_json_text`` of a request body from its parts, the chain's and params' text already
    made (shared by the jobs that use the defaults). Sorted keys: chain, output, params,
    prompt; a string is what ``json.dumps`` makes of it."""
    return "".join(
        (
            '{"chain":',
            chain_text,
            ',"output":',
            _ascii_string(output),
            ',"params":',
            params_text,
            ',"prompt":',
            _ascii_string(prompt),
            "}",
        )
    )


def _canonical_body(chain_json: bytes, output: str, params_json: bytes, prompt: str) -> bytes:
    """``canonical_json`` of a request body from its parts, the chain and params already
    canonical (shared by the jobs that use the defaults: a 100,000-job list canonicalises them
    once, not per job). RFC 8785 orders the members chain, output, params, prompt."""
    return b"".join(
        (
            b'{"chain":',
            chain_json,
            b',"output":',
            _canonical_text(output),
            b',"params":',
            params_json,
            b',"prompt":',
            _canonical_text(prompt),
            b"}",
        )
    )


def _chain_problems(
    chain: list[Any], params: dict[str, Any], providers: dict[str, Any], field: str = "chain"
) -> list[str]:
    """A chain's and its params' problems (the same for every job with the same chain and
    params: resolve_jobs finds the default's once). ``field``: where the chain is written
    (a job's ``chain``, or ``defaults.chain`` for a job without one)."""
    problems = []
    checked: set[str] = set()  # a provider's params problems are said once, however many
    for c, entry in enumerate(chain):  # of the chain's models it serves
        provider = providers.get(entry.provider)
        if provider is None:
            problems.append(
                f"field '{field}[{c}].provider': unknown provider {entry.provider!r}"
                + (
                    did_you_mean(entry.provider, list(providers))
                    or f" (available: {', '.join(sorted(providers))})"
                )
            )
            continue
        if entry.provider in checked:
            continue
        checked.add(entry.provider)
        for problem in provider.params_problems(params):
            param, _, message = problem.partition(": ")
            problems.append(f"field 'params.{param}': {message}")
    problems.extend(_unknown_params(params, chain, providers))
    problems.extend(_base60_problems(params))
    return problems


class _Base60Int(int):
    """A YAML 1.1 base-60 number (``16:9`` is 969, ``1:30`` is 90), with the text written:
    in params always a slip (``aspect_ratio: 16:9``), refused by ``_base60_problems``."""

    text = ""


class _Base60Float(float):
    text = ""


class _OctalInt(int):
    """A YAML 1.1 octal number written as a decimal one with leading zeros (``010`` is 8,
    ``0042`` is 34; not ``007``, 7 read either way), with the text written: in params always
    a slip, refused by ``_base60_problems``."""

    text = ""


_OCTAL = re.compile(r"[-+]?0[0-7_]+")


def _construct_number(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    """YAML's int or float, marked when written in base 60 (a plain scalar with a ':'; the
    C loader gives a plain scalar the style '', the Python one None) or as YAML 1.1's octal
    (a plain scalar of digits with a leading zero)."""
    if node.tag == "tag:yaml.org,2002:int":
        if len(node.value) > MAX_NUMBER_CHARS:
            # past what Python reads as an integer (4,300 digits), or names back as one (a
            # hex number's decimal digits: PyYAML's int() of one raised, or the key's problem
            # naming it did): a seed pasted from a hash, a key of digits
            mark = node.start_mark
            raise _YamlRefused(
                f"line {mark.line + 1}, column {mark.column + 1}: YAML reads a number here "
                f"{len(node.value):,} characters long; write it in quotes to keep it as text"
            )
        value = loader.construct_yaml_int(node)
    else:
        value = loader.construct_yaml_float(node)
    if not node.style and ":" in node.value and not isinstance(value, bool):
        marked = (_Base60Int if isinstance(value, int) else _Base60Float)(value)
        marked.text = node.value
        return marked
    if (
        not node.style
        and isinstance(value, int)
        and _OCTAL.fullmatch(node.value)
        and value != int(node.value.replace("_", ""), 10)  # '007' is 7 either way
    ):
        octal = _OctalInt(value)
        octal.text = node.value
        return octal
    return value


def _base60_problems(params: dict[str, Any]) -> list[str]:
    """A param written as YAML read a base-60 number, ``aspect_ratio: 16:9`` (969), or an
    octal one, ``seed: 0042`` (34): it was
    admitted so, refused by the provider only when sent, and the quoted fix was then a
    changed request under the same key (an IDEMPOTENCY_CONFLICT)."""
    problems = []
    for name, value in params.items():
        if isinstance(value, _OctalInt):
            # read as YAML 1.1 octal: '0042' is 34 to YAML, and 'seed: 0089' (no octal digit)
            # the text "0089"; the same job in a JSON Lines or CSV list (42, "0042") was
            # another request, an IDEMPOTENCY_CONFLICT under its key
            digits = value.text.lstrip("+-").replace("_", "").lstrip("0") or "0"
            sign = "-" if value.text.startswith("-") else ""
            problems.append(
                f"field 'params.{name}': YAML read {value.text} as the octal number "
                f"{int(value)}; write {sign}{digits} for the number, or quotes to keep it as "
                f'text ("{value.text}")'
            )
            continue
        if isinstance(value, _Base60Int | _Base60Float):
            number = int(value) if isinstance(value, int) else float(value)
            problems.append(
                f"field 'params.{name}': YAML read {value.text} as the base-60 number "
                f'{number}; write it in quotes to keep it as text ("{value.text}")'
            )
    return problems


# --- YAML -----------------------------------------------------------------------------------

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int):
        self.key = key
        self.line = line


class _YamlRefused(Exception):
    """A YAML document afc will not construct: the message says why (and where)."""


_MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    """Safe loader (the C one when PyYAML has it) that refuses duplicate mapping keys."""

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        """The mapping's merge keys (``<<: *shared``) written out, noting how many of its
        pairs came from them: they come first, and the mapping's own keys override them, as
        YAML says; only a key the mapping itself gives twice is a duplicate.

        Done here, as PyYAML did until 6.0.3, not by PyYAML's own: 6.0.4's lets the last
        mapping of ``<<: [*a, *b]`` win for every key of two or more letters, where YAML says
        the first does (it de-duplicates by the keys' object ids, which only CPython's
        one-letter strings share: yaml/pyyaml#953), so one manifest was two requests under
        the two versions. The mappings of a list are written out last first, so the first
        one's pairs come later and win. The expansion it can make is bounded beforehand by
        ``_check_nodes`` (``MAX_ALIAS_NODES``), the merge-key blow-up 6.0.4 guards against."""
        own = sum(1 for key_node, _ in node.value if key_node.tag != _MERGE_TAG)
        merge: list[tuple[yaml.Node, yaml.Node]] = []
        index = 0
        while index < len(node.value):
            key_node, value_node = node.value[index]
            if key_node.tag == _MERGE_TAG:
                del node.value[index]
                if isinstance(value_node, yaml.MappingNode):
                    self.flatten_mapping(value_node)
                    merge.extend(value_node.value)
                elif isinstance(value_node, yaml.SequenceNode):
                    blocks = []
                    for subnode in value_node.value:
                        if not isinstance(subnode, yaml.MappingNode):
                            raise yaml.constructor.ConstructorError(
                                "while constructing a mapping",
                                node.start_mark,
                                f"expected a mapping for merging, but found {subnode.id}",
                                subnode.start_mark,
                            )
                        self.flatten_mapping(subnode)
                        blocks.append(subnode.value)
                    for pairs in reversed(blocks):
                        merge.extend(pairs)
                else:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        "expected a mapping or list of mappings for merging, but found "
                        f"{value_node.id}",
                        value_node.start_mark,
                    )
            elif key_node.tag == "tag:yaml.org,2002:value":
                key_node.tag = "tag:yaml.org,2002:str"
                index += 1
            else:
                index += 1
        if merge:
            node.value = merge + node.value
        if len(node.value) > own:  # flattened again (an alias): the first count stands
            merged: dict[int, int] = self.__dict__.setdefault("merged_pairs", {})
            merged.setdefault(id(node), len(node.value) - own)


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False):
    loader.flatten_mapping(node)
    merged = loader.__dict__.get("merged_pairs", {}).get(id(node), 0)
    mapping: dict[Any, Any] = {}
    own: set[Any] = set()
    for index, (key_node, value_node) in enumerate(node.value):
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise _YamlRefused(
                f"line {key_node.start_mark.line + 1}: a mapping key must be a plain value"
            ) from None
        if index >= merged:  # the mapping's own key (a merged one is overridden by it)
            if key in own:
                raise _DuplicateKey(key, key_node.start_mark.line + 1)
            own.add(key)
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_StrictLoader.add_constructor("tag:yaml.org,2002:int", _construct_number)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _construct_number)


def _check_nodes(root: yaml.Node) -> None:
    """Refuse, before anything is constructed, a document whose aliases would expand it beyond
    ``MAX_ALIAS_NODES`` extra nodes (a few hundred bytes of nested aliases can stand for
    billions of values), an alias inside its own anchor, nesting deeper than
    ``MAX_YAML_DEPTH``, and mapping keys that are lists or mappings (``? [a, b]``).

    One pass over the node graph: each collection's expanded size and height (the levels it
    nests, itself included) are computed once, and every later reference to it (an alias) adds
    that size to the expansion and is nested that many levels below where the alias is (an
    alias written deeper than its anchor: a few anchors each nesting the one before made
    params ~900 levels deep, past Python's recursion limit in the commands reading them)."""
    sizes: dict[int, int] = {}
    heights: dict[int, int] = {}
    visiting: set[int] = set()
    extra = 0
    deepest = 0  # the height of the collection last sized

    def size(node: yaml.Node, depth: int) -> int:
        nonlocal extra, deepest
        value = node.value
        if isinstance(value, str):  # a scalar
            deepest = 0
            return 1
        nid = id(node)
        known = sizes.get(nid)
        if known is not None:  # reached again: an alias, written out once more
            extra += known
            if extra > MAX_ALIAS_NODES:
                raise _YamlRefused(
                    f"its aliases would add more than {MAX_ALIAS_NODES} values when expanded; "
                    "write the values out, or use fewer aliases"
                )
            deepest = heights[nid]
            if depth + deepest - 1 > MAX_YAML_DEPTH:
                raise _YamlRefused(
                    f"line {node.start_mark.line + 1}: nested more than {MAX_YAML_DEPTH} levels "
                    "deep (once an alias of the value there is written out)"
                )
            return known
        line = node.start_mark.line + 1
        if nid in visiting:
            raise _YamlRefused(f"line {line}: an alias refers to a value that contains it")
        if depth > MAX_YAML_DEPTH:
            raise _YamlRefused(f"line {line}: nested more than {MAX_YAML_DEPTH} levels deep")
        visiting.add(nid)
        total = 1
        height = 0  # of the children
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in value:
                if not isinstance(key_node, yaml.ScalarNode):
                    raise _YamlRefused(
                        f"line {key_node.start_mark.line + 1}: a mapping key must be a plain "
                        "value, not a list or mapping"
                    )
                total += 1 + size(value_node, depth + 1)
                height = max(height, deepest)
        else:
            for child in value:
                total += size(child, depth + 1)
                height = max(height, deepest)
        visiting.discard(nid)
        sizes[nid] = total
        heights[nid] = deepest = height + 1
        return total

    size(root, 1)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error with its line and column in the file (not PyYAML's '<unicode string>')."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is None or not problem:
        return f"not valid YAML: {exc}"
    message = f"line {mark.line + 1}, column {mark.column + 1}: not valid YAML: {problem}"
    context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and context_mark is not None:
        message += f" ({context} at line {context_mark.line + 1})"
    return message


# what PyYAML refuses to read (its Reader's NON_PRINTABLE): C0 controls but tab and line
# breaks, DEL, C1 controls but NEL, surrogates, U+FFFE and U+FFFF
_YAML_UNREADABLE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)


def _utf16(data: bytes) -> bool:
    """Whether ``data`` looks like UTF-16 text (Windows' 'Unicode' saving): its byte order
    mark, or a NUL as either byte of its first character."""
    return data[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\x00" in data[:2]


def _unreadable(data: bytes, start: int, message: str, what: str) -> str:
    """``message`` about the text at byte ``start`` of ``data``, after its line and column
    (in characters, as an editor counts them): a byte offset, or PyYAML's '<unicode string>,
    position N' (a character offset, or a byte offset under the C loader), named no line."""
    line_start = data.rfind(b"\n", 0, start) + 1
    column = len(data[line_start:start].decode("utf-8", errors="replace")) + 1
    line = data.count(b"\n", 0, start) + 1
    if _utf16(data):
        message += f" (saved as UTF-16, as 'Unicode text' exports are: save the {what} as UTF-8)"
    return f"line {line}, column {column}: {message}"


def _not_utf8(data: bytes, exc: UnicodeDecodeError, what: str) -> str:
    byte = data[exc.start]
    message = f"not UTF-8 text: byte 0x{byte:02X}"
    if not _utf16(data):
        message += f" (saved as Latin-1 or Windows-1252? save the {what} as UTF-8)"
    return _unreadable(data, exc.start, message, what)


def _reader_problem(data: bytes, text: str, exc: yaml.reader.ReaderError, what: str) -> str:
    """PyYAML's refusal of a character (a control character pasted into a prompt; the NULs of
    UTF-16 text), at its line and column."""
    found = _YAML_UNREADABLE.search(text)
    if found is None:
        return f"not valid YAML: {exc}"
    start = len(text[: found.start()].encode("utf-8", errors="surrogatepass"))
    char = ord(found.group())
    message = f"not valid YAML: control character U+{char:04X} is not allowed"
    if not _utf16(data):
        message += (
            " (pasted from elsewhere? remove it, or write it as an escape in a double-quoted "
            f'string: "\\x{char:02x}")'
            if char < 0x100
            else " (remove it)"
        )
    return _unreadable(data, start, message, what)


def _read_yaml(path: Path, what: str = "manifest") -> Any:
    name = str(path)
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        raise ManifestError(name, ["file not found"]) from None
    except OSError as exc:
        raise ManifestError(name, [f"cannot read: {exc.strerror or exc}"]) from None
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(name, [f"larger than {MAX_MANIFEST_BYTES // 1024 // 1024} MiB"])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(name, [_not_utf8(data, exc, what)]) from None
    loader = _StrictLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _check_nodes(root)
        return loader.construct_document(root)
    except _DuplicateKey as dup:
        raise ManifestError(name, [f"line {dup.line}: duplicate key {dup.key!r}"]) from None
    except _YamlRefused as exc:
        raise ManifestError(name, [str(exc)]) from None
    except yaml.reader.ReaderError as exc:
        raise ManifestError(name, [_reader_problem(data, text, exc, what)]) from None
    except yaml.YAMLError as exc:
        raise ManifestError(name, [_yaml_problem(exc)]) from None
    except RecursionError:
        raise ManifestError(name, [f"nested more than {MAX_YAML_DEPTH} levels deep"]) from None
    finally:
        loader.dispose()


# --- validation -------------------------------------------------------------------------------


def _without_refused_jobs(
    raw: dict[str, Any], exc: ValidationError
) -> tuple[ManifestModel | None, dict[int, Any]]:
    """The manifest without the jobs whose fields ``exc`` refused, and those jobs by index,
    for the checks across jobs (duplicate keys, needs, inputs, outputs, params): None when a
    problem lies outside the jobs (defaults, rates, the batch), which every job depends on."""
    jobs = raw.get("jobs")
    refused: set[int] = set()
    for err in exc.errors(include_url=False):
        loc = err["loc"]
        if not (len(loc) >= 2 and loc[0] == "jobs" and isinstance(loc[1], int)):
            return None, {}
        refused.add(loc[1])
    if not isinstance(jobs, list):
        return None, {}
    try:
        kept = [job for index, job in enumerate(jobs) if index not in refused]
        model = ManifestModel.model_validate({**raw, "jobs": kept})
    except ValidationError:
        return None, {}
    return model, {index: jobs[index] for index in sorted(refused)}


def _where(raw: Any, loc: tuple[Any, ...]) -> str:
    """Name the job (index and key) and the field for an error location."""
    if len(loc) >= 2 and loc[0] == "jobs" and isinstance(loc[1], int):
        index = loc[1]
        key = None
        jobs = raw.get("jobs") if isinstance(raw, dict) else None
        if isinstance(jobs, list) and index < len(jobs) and isinstance(jobs[index], dict):
            key = jobs[index].get("key")
        field = _dotted(loc[2:])
        # a key YAML read as a date or a number is named as the manifest wrote it, not as
        # Python's ``datetime.date(2026, 12, 4)``
        shown = repr(key) if isinstance(key, str) else _yaml_scalar(key)
        who = f"job {index}" + (f" (key {shown})" if key is not None else "")
        return f"{who}: field '{field}'" if field else who
    return f"field '{_dotted(loc)}'"


def _yaml_scalar(value: Any) -> str:
    import datetime

    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value)


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The field names allowed where ``loc`` points (for "did you mean")."""
    current: Any = model
    for part in loc:
        current = _step(current, part)
        if current is None:
            return []
    current = _model_in(current)
    return list(current.model_fields) if current is not None else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _step(annotation: Any, part: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        info = annotation.model_fields.get(part) if isinstance(part, str) else None
        return info.annotation if info is not None else None
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is list:
        return args[0] if isinstance(part, int) else None
    if origin is dict:
        return args[1]
    for arg in args:  # X | None
        found = _step(arg, part) if arg is not type(None) else None
        if found is not None:
            return found
    return None


def did_you_mean(name: Any, choices: list[str]) -> str:
    """' (did you mean 'x'?)' when ``name`` is close to one of ``choices``, else ''."""
    close = difflib.get_close_matches(str(name), choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _pydantic_problems(
    raw: Any, exc: ValidationError, model: type[BaseModel] | None = None
) -> list[str]:
    problems = []
    model = model or ManifestModel
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden":
            message = "unknown field" + did_you_mean(loc[-1], _fields_at(model, loc[:-1]))
        elif err["type"] == "missing":
            message = "required field is missing"
        elif err["type"] == "model_type":
            # pydantic's words name afc's class ("... or instance of JobSpec")
            message = (
                f"must be a mapping of fields (name: value), got {_yaml_kind(err.get('input'))}"
            )
        elif err["type"] == "string_type" and loc and _money_number(loc[-1], err.get("input")):
            # 'budget: 25', 'per_image: 0.04': YAML reads a number, and money is never a float
            message = (
                f'{err["msg"]}: write USD in quotes, as "{err["input"]}" (money is an exact '
                "decimal string, never a YAML number: 0.1 would be a binary float)"
            )
        elif err["type"] == "string_type" and _key_number(loc, err.get("input")):
            # 'key: 001', 'batch: 2024': YAML reads a number, and its text is gone (001 is 1,
            # 12:30 is 750); said as money's is, not only 'should be a valid string'
            message = (
                f"{err['msg']}: YAML read the number {err['input']!r} here; write it in "
                'quotes to keep it as written ("001", not 001, which YAML reads as the number 1)'
            )
        elif err["type"] == "string_type" and _yaml_text_lost(err.get("input")) is not None:
            message = f"{err['msg']}: {_yaml_text_lost(err.get('input'))}"
        elif err["type"] == "too_long" and loc and loc[-1] == "inputs":
            message = too_many_inputs(err.get("input"))
        elif err["type"] in ("float_type", "int_type") and _exponent_text(err.get("input")):
            message = f"{err['msg']}: {_exponent_text(err.get('input'))}"
        else:
            message = err["msg"]
        problems.append(f"{_where(raw, loc)}: {message}")
    return problems


# a number with an exponent that YAML 1.1 (PyYAML's) reads as text: one with no point before
# the exponent (1e3), or no sign in it (1.5e3); JSON, Python and YAML 1.2 read a number
_EXPONENT = re.compile(r"[-+]?(?:[0-9][0-9_]*)?\.?[0-9_]*[eE][-+]?[0-9]+")


def _exponent_text(value: Any) -> str | None:
    """Where a number was wanted and YAML read text written as a number with an exponent
    (``window_s: 1e3``, ``backoff: {base: 5e-1}``): what it read, and how to write the number;
    None for any other value. Refused 'Input should be a valid number', the value the user
    wrote as a number (a JSON Lines list reads it so) was named no reason."""
    from decimal import InvalidOperation

    if not isinstance(value, str) or not _EXPONENT.fullmatch(value.strip()):
        return None
    try:
        plain = format(Decimal(value.strip().replace("_", "")).normalize(), "f")
    except (InvalidOperation, ValueError):
        return None
    if len(plain) > 40:  # 1e300: no point writing it out
        plain = "it without the exponent"
    return (
        f"YAML 1.1 reads {value} as text (its exponent needs a point before it and a sign: "
        f"1.0e+3); write {plain}"
    )


def too_many_inputs(inputs: Any) -> str:
    """The problem of a job's ``inputs`` longer than ``MAX_INPUTS`` (in a manifest or a job
    list)."""
    count = len(inputs) if isinstance(inputs, list) else "more"
    return (
        f"at most {MAX_INPUTS} reference images a job, got {count}: no provider takes more "
        f"(OpenAI's image edits take up to {MAX_INPUTS}), and each is read whole into memory "
        "to be sent"
    )


def _yaml_text_lost(value: Any) -> str | None:
    """Where text was wanted and YAML read a date (``batch: 2026-12-04``, a nightly batch
    named by its date) or a yes or no (``prompt: no``): what it read, and how to keep the text
    as written; None for any other value."""
    import datetime

    if isinstance(value, datetime.date):
        return (
            f"YAML read the date {value.isoformat()} here; write it in quotes to keep it as "
            f'text ("{value.isoformat()}")'
        )
    if isinstance(value, bool):
        return (
            f"YAML read {str(value).lower()} here (it reads yes, no, on, off, true and false "
            "so); write the text in quotes"
        )
    return None


MONEY_FIELDS = frozenset(
    {
        "budget",
        "per_image",
        "per_second",
        "per_megapixel",
        "per_1k_input_tokens",
        "per_1k_input_image_tokens",
        "per_1k_output_tokens",
    }
)


def _yaml_kind(value: Any) -> str:
    """What a YAML value is, in YAML's words."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return f"the text {value[:40]!r}"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _yaml_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _key_number(loc: tuple[Any, ...], value: Any) -> bool:
    """A YAML number where a name is wanted: the batch, a job's key, a key it needs or whose
    output it takes (``inputs[N].job``)."""
    named = loc[-2] if len(loc) >= 2 and isinstance(loc[-1], int) else loc[-1] if loc else None
    return named in ("batch", "key", "needs", "job") and _yaml_number(value)


def _money_number(field_name: Any, value: Any) -> bool:
    return field_name in MONEY_FIELDS and _yaml_number(value)


def _template_problem(template: str) -> str | None:
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        return f"not a valid template: {exc}"
    for _literal, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in TEMPLATE_FIELDS:
            return f"unknown placeholder {{{name}}} (use {', '.join(sorted(TEMPLATE_FIELDS))})"
        if spec or conversion:
            return f"placeholder {{{name}}} takes no format spec or conversion"
    return None


_INVISIBLE_ASCII = re.compile(r"[\x00-\x1f\x7f]")


def output_key_problem(key: str) -> str | None:
    """Why an output key could escape the storage prefix, or None if it is safe."""
    if not key:
        return "renders to an empty key"
    if key.startswith("/") or "\\" in key or (len(key) > 1 and key[1] == ":"):
        return f"renders to {key!r}, an absolute path outside the storage prefix"
    parts = key.split("/")
    if "" in parts or "." in parts or ".." in parts:
        return f"renders to {key!r}: '..', '.' and empty path segments are not allowed"
    if _INVISIBLE_ASCII.search(key) or (
        not key.isascii()
        and any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") for ch in key)
    ):
        return f"renders to {key!r}, which has control or invisible format characters"
    size = len(key.encode("utf-8", "surrogatepass"))
    if size > MAX_OUTPUT_KEY_BYTES:
        return f"renders to a key longer than {MAX_OUTPUT_KEY_BYTES} bytes"
    if size > MAX_SEGMENT_BYTES and any(  # a key within a segment's limit has no longer segment
        len(part.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES for part in parts
    ):
        return f"renders to {key!r}, with a path segment longer than {MAX_SEGMENT_BYTES} bytes"
    if size > MAX_NAME_BYTES and len(parts[-1].encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        # a longer name was admitted and rendered (paid), then never stored: its metadata
        # file's name passed the file system's limit at every store
        return (
            f"renders to {key!r}, whose file name is longer than {MAX_NAME_BYTES} bytes (file "
            f"storage keeps NAME.afc.json beside it, and a file name has at most "
            f"{MAX_SEGMENT_BYTES})"
        )
    if any(part.casefold().endswith(".afc.json") for part in parts):
        # a folder so named too: 'x.png.afc.json/y.png' took the name of x.png's metadata
        # file, and x.png's render, paid, was never stored. In any case: on a folder that
        # does not tell case apart (macOS, a Windows share) 'x.png.AFC.JSON' is that file too
        return f"renders to {key!r}; names ending in .afc.json are reserved for metadata"
    if parts[0].casefold() == MARK_NAME:
        # (a folder of that name too, and in any case, for the folders that take it so)
        return f"renders to {key!r}; {MARK_NAME} is reserved for the storage folder's mark"
    return None


def nested_output_problems(outputs: dict[str, str]) -> list[tuple[str, str]]:
    """Pairs of output keys where one is a folder of the other (``x/a.png`` and
    ``x/a.png/b.png``): on a file system, and for any tool that mirrors a bucket to one, both
    cannot exist, so the second render would be paid for and never stored. ``outputs`` maps
    each output key to where its job stands (``job 3``, ``jobs.csv line 4``)."""
    problems = []
    for key, where in outputs.items():
        parts = key.split("/")
        for end in range(1, len(parts)):
            folder = "/".join(parts[:end])
            if folder in outputs:
                problems.append(
                    (
                        where,
                        f"output key {key!r} lies inside {outputs[folder]}'s output key "
                        f"{folder!r}; one output key cannot be a folder of another",
                    )
                )
                break
    return problems


def _unknown_params(
    params: dict[str, Any], chain: list[ChainEntry], providers: dict[str, Any]
) -> list[str]:
    """Params that no provider of the chain reads. A provider whose params are the model's own
    inputs (Replicate, fal) may take any name; the others list theirs, so a typo (``sise``)
    is refused instead of being dropped from a paid request."""
    known: set[str] = set()
    for entry in chain:
        provider = providers.get(entry.provider)
        if provider is None:
            return []  # what it reads is not known (the unknown provider is said)
        taken = getattr(provider, "params", None)
        if taken is None:
            return []
        known |= taken
    names = sorted({entry.provider for entry in chain})
    return [
        f"field 'params.{name}': not a parameter of {', '.join(names)}"
        + (did_you_mean(name, sorted(known)) or f" (known: {', '.join(sorted(known))})")
        for name in params
        if name not in known
    ]


def _key_problem(key: str) -> str | None:
    if key in (".", ".."):
        # of the characters allowed, and told to use them: the name itself is the fault
        return (
            f"{key!r} names a folder (itself or its parent), not a file or object of its own; "
            "use a name with a letter or digit"
        )
    if not set(key) <= KEY_ALPHABET:
        # ASCII only, said so: a Hebrew or accented key read 'letters ... only' as if its
        # letters counted (outside audit 59d)
        other = next(c for c in key if c not in KEY_ALPHABET)
        return (
            f"must use ASCII letters (A-Z, a-z), digits and . _ - : only, not {other!r} (it "
            "names files and objects)"
        )
    if token_shaped(key):
        return (
            "has the shape of an API key or secret (sk-…, r8_…, AIza…, whsec_…), which afc hides as <redacted> in every table, --json and log line it prints: its jobs "
            "and their outputs would be shown mangled; rename it"
        )
    return None


def _last_fallback_problem(chain: list[ChainEntry] | None, where: str) -> str | None:
    """``fallback_on`` written on a chain's last entry can never take effect: there is no next
    model. A manifest in that shape expects a fallback that will not happen, so it is refused
    (an explicit empty list, which says just that, is allowed)."""
    if not chain:
        return None
    last = chain[-1]
    if "fallback_on" not in last.model_fields_set or not last.fallback_on:
        return None
    index = len(chain) - 1
    return (
        f"field '{where}[{index}].fallback_on': the last model of a chain has no model to fall "
        f"back to, so fallback_on {list(last.fallback_on)} could never take effect; add the "
        f"model to fall back to after {last.provider}/{last.model}, or remove fallback_on"
    )


def load_manifest(path: str | Path, providers: dict[str, Any] | None = None) -> Manifest:
    """Read, validate and resolve a manifest. Raises ManifestError listing every problem."""
    from afc_cli.providers import PROVIDERS

    providers = PROVIDERS if providers is None else providers
    path = Path(path)
    raw = _read_yaml(path)
    name = str(path)
    if not isinstance(raw, dict):
        raise ManifestError(name, ["the manifest must be a mapping with version, batch and jobs"])
    # the jobs the fields' check refused (index -> their raw mapping): left out of the checks
    # across jobs, which still run on the others, so one try lists both kinds of problem
    refused: dict[int, Any] = {}
    try:
        model = ManifestModel.model_validate(raw)
        problems: list[str] = []
    except ValidationError as exc:
        problems = _pydantic_problems(raw, exc)
        model, refused = _without_refused_jobs(raw, exc)
        if model is None:
            raise ManifestError(name, problems[:MAX_PROBLEMS]) from None
    bad_batch = _key_problem(model.batch)
    if bad_batch:
        problems.append(f"field 'batch': {bad_batch}")
    problems += rate_problems(model.rates, providers)

    for limited in model.limits:
        if limited not in providers:
            problems.append(
                f"field 'limits.{limited}': unknown provider {limited!r}"
                + did_you_mean(limited, list(providers))
            )

    last_fallback = _last_fallback_problem(model.defaults.chain, "defaults.chain")
    if last_fallback:
        problems.append(last_fallback)

    default_template_problem = _template_problem(model.defaults.output)
    if default_template_problem:
        problems.append(f"field 'defaults.output': {default_template_problem}")

    jobs_file = None
    if model.jobs_from is not None:
        from afc_cli.joblist import JobFile

        jobs_file = JobFile(path.parent / model.jobs_from, model.jobs_from)
        missing = jobs_file.problem()
        if missing:
            problems.append(f"field 'jobs_from': {missing}")
            jobs_file = None
    elif not model.jobs and not refused:
        given = raw.get("jobs", ...) if isinstance(raw, dict) else ...
        if given is ...:
            problems.append(
                "field 'jobs': required field is missing (or name a job list: jobs_from)"
            )
        else:  # 'jobs: []' or 'jobs:' is there, with no job in it
            problems.append(
                f"field 'jobs': {'the list is empty' if given == [] else 'it is empty (null)'}: "
                "a manifest names at least one job (or names a job list: jobs_from)"
            )

    seen, aggregate = Seen(), Aggregate()
    seen.base = path.parent
    for index, job in refused.items():
        key = job.get("key") if isinstance(job, dict) else None
        if isinstance(key, str) and key not in seen.keys:
            # known, so a duplicate of it or a need of it is judged as with the job whole; its
            # hash a stand-in (its problems are listed: nothing is admitted)
            seen.keys[key] = f"job {index}"
            seen.hashes[key] = bytes(32)
    inline = [i for i in range(len(model.jobs or []) + len(refused)) if i not in refused]
    specs = (
        (index, f"job {index}", spec) for index, spec in zip(inline, model.jobs or [], strict=True)
    )
    jobs: list[ResolvedJob] | JobList = list(
        resolve_jobs(model, providers, specs, problems, seen, aggregate)
    )
    if jobs_file is not None and len(problems) < MAX_PROBLEMS:
        # every line checked and resolved; the results wait in a temporary file, not memory
        lines = jobs_file.specs(len(model.jobs or []) + len(refused), problems)
        try:
            jobs = JobList(
                jobs,
                itertools.chain(
                    resolve_jobs(model, providers, lines, problems, seen, aggregate),
                    resolve_deferred(model, providers, problems, seen, aggregate),
                ),
            )
            jobs.source = (jobs_file, len(model.jobs or []) + len(refused))
        except OSError as exc:  # the temporary file's (the list's own are a line's problem)
            import tempfile

            try:
                where = f"in {tempfile.gettempdir()} (TMPDIR)"
            except OSError:
                # no usable one at all (a container's read-only root: no TMPDIR, /tmp and the
                # working directory read-only): asking again raised, and the run ended exit 1
                # saying to 'afc resume' a list never admitted
                where = (
                    "in TMPDIR, and there is no folder to make it in (TMPDIR unset or not "
                    "writable, nor are /tmp, /var/tmp and the working directory)"
                )
            raise UsageError(
                f"cannot check the job list {model.jobs_from!r} of {name}: its resolved jobs "
                f"wait in a temporary file {where}, and writing it "
                f"failed: {exc.strerror or exc}. Nothing was admitted: free space there, or "
                "set TMPDIR to a folder with room, then run this command again"
            ) from None
        if not len(jobs) and not problems:  # as a manifest whose jobs are an empty list
            problems.append(f"field 'jobs_from': {model.jobs_from!r} holds no job")
    else:
        jobs.extend(resolve_deferred(model, providers, problems, seen, aggregate))
    problems.extend(dependency_problems(model.batch, seen))

    for where, problem in nested_output_problems(seen.outputs):
        problems.append(f"{seen.named[where]}: field 'output': {problem}")
    if problems:
        raise ManifestError(name, problems[:MAX_PROBLEMS])
    return Manifest(
        path=name,
        batch=model.batch,
        storage=model.storage,
        rates=model.rates,
        jobs=jobs,
        budget=model.budget,
        limits={name: limit.model_dump() for name, limit in model.limits.items()},
        chains=list(aggregate.chains.values()),
        secret_envs=aggregate.secret_envs,
    )


class Seen:
    """Keys and output keys met so far across a manifest's jobs (inline, then its job list),
    each with where it was first met, so a duplicate names both places."""

    def __init__(self) -> None:
        self.keys: dict[str, str] = {}
        self.outputs: dict[str, str] = {}
        self.named: dict[str, str] = {}  # where a job stands -> the same with its key
        # needs and job inputs: a job's request hash covers the request hash of each job whose
        # output it uses, so those are kept (as digests), and a job whose input job comes
        # later in the list is resolved after it (``deferred``, then ``resolve_deferred``)
        self.hashes: dict[str, bytes] = {}
        self.needs: dict[str, list[tuple[str, str]]] = {}  # key -> [(field, reference)]
        self.deferred: list[tuple[int, str, JobSpec]] = []
        self.base = Path(".")  # the manifest's folder: input paths are relative to it
        self.files: dict[str, tuple[str, str] | str] = {}  # input path -> (abs, sha256) | why
        self.said: set[str] = set()  # the defaults' problems said (once, not a job's)


class Aggregate:
    """What the checks before a run need of all jobs: the distinct chains, the webhook secret
    variables, and how many jobs there are."""

    def __init__(self) -> None:
        self.chains: dict[str, list[dict[str, Any]]] = {}
        self.secret_envs: set[str] = set()
        self.count = 0
        self._last: list[dict[str, Any]] | None = None

    def add(self, job: ResolvedJob) -> None:
        self.count += 1
        if job.chain is not self._last:  # jobs with the default chain share one list
            self._last = job.chain
            self.chains.setdefault(repr(job.chain), job.chain)
        if job.webhook:
            self.secret_envs.add(job.webhook["secret_env"])


class JobList:
    """A manifest's jobs when it names ``jobs_from``: its inline jobs, then the file's, kept
    resolved in an unnamed temporary file (``marshal``, in chunks) instead of memory, so a
    100,000-job list is read, validated and hashed once and admitted in chunks. Sized; each
    iteration reads the file again."""

    CHUNK = 1000

    def __init__(self, inline: list[ResolvedJob], resolved: Iterable[ResolvedJob]) -> None:
        import marshal
        import tempfile

        self.inline = inline
        # the list's file and its first job's index (``places``), set by ``load_manifest``
        self.source: tuple[Any, int] | None = None
        self.file = tempfile.TemporaryFile()  # deleted when closed, or when afc exits
        self.count = len(inline)
        self.shared: _PlainJobs | None = None  # what the list's PlainJobs share (one list's)
        chunk: list[tuple] = []
        for job in resolved:
            self.count += 1
            if type(job) is PlainJob and self.shared in (None, job.shared):
                # only its own parts: six fields, no body (tests/test_issue15_plainjob.py)
                self.shared = job.shared
                chunk.append(
                    (job.index, job.key, job.job_id, job.output_key, job.digest, job.prompt)
                )
            else:
                extra = (job.review, job.needs, job.inputs)
                chunk.append(
                    (
                        job.index,
                        job.key,
                        job.job_id,
                        job.output_key,
                        job.request_hash,
                        job.body,
                        job.request_json,
                        job.webhook,
                    )
                    + (extra if any(extra) else ())
                )
            if len(chunk) == self.CHUNK:
                self._write(marshal.dumps(chunk))
                chunk = []
        if chunk:
            self._write(marshal.dumps(chunk))

    def _write(self, blob: bytes) -> None:
        # length-prefixed: marshal.load on a file reads it in tiny pieces, loads is fast
        self.file.write(len(blob).to_bytes(8, "little") + blob)

    def __len__(self) -> int:
        return self.count

    def places(self, keys: set[str]) -> dict[str, str]:
        """Where each of the list's jobs with these keys stands (``jobs.csv line 4``), as
        the loader names a line's problems: for a refusal at admission
        (``refuse_shared_outputs``, a conflict), rare, so the file is read again rather than
        a line kept for every job. A key of an inline job is not among them."""
        if self.source is None or not keys:
            return {}
        jobs_file, start = self.source
        places: dict[str, str] = {}
        for _, where, spec in jobs_file.specs(start, []):
            if spec.key in keys:
                places[spec.key] = where
                if len(places) == len(keys):
                    break
        return places

    def __iter__(self) -> Iterator[ResolvedJob]:
        import marshal

        yield from self.inline
        self.file.seek(0)
        while True:
            size = self.file.read(8)
            if not size:
                return
            shared = self.shared
            for row in marshal.loads(self.file.read(int.from_bytes(size, "little"))):
                if len(row) == 6:  # a PlainJob's own parts
                    yield PlainJob(*row, shared)
                    continue
                index, key, job_id, output_key, digest, body, text, webhook = row[:8]
                yield ResolvedJob(
                    index=index,
                    key=key,
                    job_id=job_id,
                    prompt=body["prompt"],
                    params=body["params"],
                    chain=body["chain"],
                    output_template=body["output"],
                    output_key=output_key,
                    body=body,
                    request_hash=digest,
                    webhook=webhook,
                    request_json=text,
                    review=row[8] if len(row) > 8 else False,
                    needs=tuple(row[9]) if len(row) > 9 else (),
                    inputs=row[10] if len(row) > 10 else None,
                )


def resolve_jobs(
    model: ManifestModel,
    providers: dict[str, Any],
    specs: Iterable[tuple[int, str, JobSpec]],
    problems: list[str],
    seen: Seen,
    aggregate: Aggregate | None,
) -> Iterator[ResolvedJob]:
    """Validate and resolve jobs, given as ``(index, where, spec)`` (``where`` names the job in
    messages: ``job 3``, ``jobs.csv line 4``), appending every problem to ``problems``. The
    same rules hold for the manifest's ``jobs`` and for each line of a ``jobs_from`` list."""
    default_template_problem = _template_problem(model.defaults.output)
    cache: dict[str, Any] = {}  # what jobs with the default chain or params share
    plain: _PlainJobs | None = None
    for index, where, spec in specs:
        spec = _with_default_gates(model, spec)
        if type(spec) is PlainSpec and spec.output is None:
            if plain is None and cache.get("chain_problems") == [] and "params" in cache:
                plain = _PlainJobs(model, cache)  # once a job of the defaults has resolved
            if plain is not None:
                job = plain.resolve(index, where, spec, seen)
                if job is not None:
                    if aggregate is not None:
                        aggregate.add(job)
                    yield job
                    continue
        who = f"{where} (key {spec.key!r})"
        if spec.key in seen.keys and seen.keys[spec.key] != where:
            problems.append(
                f"{who}: field 'key': duplicate key, already used by {seen.keys[spec.key]}"
            )
            continue
        seen.keys[spec.key] = where
        refs = _references(spec)
        if refs:
            seen.needs[spec.key] = refs
            if any(
                _own_key(model.batch, item.job) not in seen.hashes
                for item in spec.inputs or ()
                if item.job is not None
            ):
                seen.deferred.append((index, where, spec))  # its input job's hash comes later
                continue
        bad_key = _key_problem(spec.key)
        if bad_key:
            problems.append(f"{who}: field 'key': {bad_key}")

        chain = spec.chain if spec.chain is not None else model.defaults.chain
        if not chain:
            problems.append(
                f"{who}: field 'chain': the chain is empty (set it here or in defaults)"
            )
            continue
        if spec.chain is not None:
            last_fallback = _last_fallback_problem(spec.chain, "chain")
            if last_fallback:
                problems.append(f"{who}: {last_fallback}")
        params = {**model.defaults.params, **spec.params}
        # a job with the default chain and params has the default's problems (found once)
        as_default = spec.chain is None and not spec.params
        chain_problems = cache.get("chain_problems") if as_default else None
        if chain_problems is None:
            field = "chain" if spec.chain is not None else "defaults.chain"
            chain_problems = _chain_problems(chain, params, providers, field)
            if as_default:
                cache["chain_problems"] = chain_problems
        for problem in chain_problems:
            if as_default and problem.startswith("field 'params."):
                # a job without params of its own has the defaults' params
                problem = "field 'defaults." + problem[len("field '") :]
            if not problem.startswith("field 'defaults."):
                problems.append(f"{who}: {problem}")
            elif problem not in seen.said:
                # the defaults' own problem (an unknown provider in defaults.chain, a
                # parameter of defaults.params), said once where it is written: each job
                # without a chain (or params) of its own was named with it, at a field
                # ('chain[0].provider', 'params.sise') the job does not have
                seen.said.add(problem)
                problems.append(problem)

        template = spec.output if spec.output is not None else model.defaults.output
        if spec.output is not None:
            bad = _template_problem(template)
            if bad:
                problems.append(f"{who}: field 'output': {bad}")
                continue
        elif default_template_problem:
            continue
        ext = str(params.get("output_format", "png"))
        job_id = job_id_for(model.batch, spec.key)
        output_key = template.format(batch=model.batch, key=spec.key, ext=ext, job_id=job_id)
        escape = output_key_problem(output_key)
        if escape:
            problems.append(f"{who}: field 'output': {escape}")
            continue
        if output_key in seen.outputs:
            problems.append(
                f"{who}: field 'output': output key {output_key!r} is also "
                f"{seen.outputs[output_key]}'s; each job needs its own"
            )
            continue
        seen.outputs[output_key] = where
        seen.named[where] = who

        if spec.chain is None:  # the default chain, dumped and canonicalised once
            if "chain" not in cache:
                dumped = [entry.model_dump(mode="json") for entry in chain]
                cache["chain"] = (dumped, canonical_json(dumped), _json_text(dumped))
            chain_dicts, chain_json, chain_text = cache["chain"]
        else:
            chain_dicts = [entry.model_dump(mode="json") for entry in chain]
            chain_json = chain_text = None
        # provider defaults left out of the hashed body (the rule for defaults); a job with the
        # default chain and params shares the default's result
        as_default = spec.chain is None and not spec.params
        if as_default and "params" in cache:
            params, params_json, params_text = cache["params"]
        else:
            params = without_provider_defaults(params, chain_dicts, providers)
            params_json = params_text = None
        body = {"chain": chain_dicts, "prompt": spec.prompt, "params": params, "output": template}
        inputs = _resolve_inputs(model.batch, spec, seen, who, problems) if spec.inputs else None
        if inputs is not None:
            body["inputs"] = inputs[0]
        try:
            if params_json is None:
                params_json, params_text = canonical_json(params), _json_text(params)
                if as_default:
                    cache["params"] = (params, params_json, params_text)
            if inputs is not None:
                digest = request_hash(body)
            else:
                digest = hashlib.sha256(
                    _canonical_body(
                        chain_json or canonical_json(chain_dicts),
                        template,
                        params_json,
                        spec.prompt,
                    )
                ).hexdigest()
        except Exception as exc:  # rfc8785 refuses NaN, huge ints and the like
            problems.append(f"{who}: field 'params': cannot be canonicalised ({exc})")
            continue
        seen.hashes[spec.key] = bytes.fromhex(digest)
        # the ledger's text of the body, from shared parts; a body with inputs has one member
        # more, so the ledger makes its text itself (``request_json`` None)
        text = (
            body_text(chain_text or _json_text(chain_dicts), template, params_text, spec.prompt)
            if inputs is None
            else None
        )
        job = ResolvedJob(
            index=index,
            key=spec.key,
            job_id=job_id,
            prompt=spec.prompt,
            params=params,
            chain=chain_dicts,
            output_template=template,
            output_key=output_key,
            body=body,
            request_hash=digest,
            webhook=(spec.webhook or model.webhook).model_dump()
            if (spec.webhook or model.webhook)
            else None,
            review=spec.review if spec.review is not None else model.defaults.review,
            needs=tuple(dict.fromkeys(k for _, ref in refs if (k := _own_key(model.batch, ref)))),
            inputs=inputs[1] if inputs is not None else None,
            request_json=text,
        )
        if aggregate is not None:
            aggregate.add(job)
        yield job
        if len(problems) >= MAX_PROBLEMS:
            break


class _PlainJobs:
    """``resolve_jobs`` for a job list's common line (``PlainSpec``: a key and a prompt, the
    default chain, params and output template), with what those jobs share made once: the
    output template's fields, the request body's canonical JSON up to the prompt (hashed once,
    its SHA-256 state copied per job), the ledger's text up to the prompt, the webhook. The
    same checks in the same order as the general path; a line that fails any of them (a
    duplicate key or output key, a key outside the alphabet, an output key that escapes)
    returns None and goes through the general path, which names the problem. Only built
    after a job of the defaults resolved with no chain problem, so the shared parts exist."""

    def __init__(self, model: ManifestModel, cache: dict[str, Any]) -> None:
        chain, chain_json, chain_text = cache["chain"]
        params, params_json, params_text = cache["params"]
        template = model.defaults.output
        self.batch = model.batch
        self.chain, self.params, self.template = chain, params, template
        self.ext = str({**model.defaults.params}.get("output_format", "png"))
        self.hashed = hashlib.sha256(
            b"".join(
                (
                    b'{"chain":',
                    chain_json,
                    b',"output":',
                    _canonical_text(template),
                    b',"params":',
                    params_json,
                    b',"prompt":',
                )
            )
        )
        self.text = body_text(chain_text, template, params_text, "")[:-3]  # less '""}'
        self.webhook = model.webhook.model_dump() if model.webhook else None
        self.review = model.defaults.review

    def resolve(self, index: int, where: str, spec: Any, seen: Seen) -> PlainJob | None:
        key = spec.key
        if key in seen.keys or _key_problem(key):
            return None
        job_id = job_id_for(self.batch, key)
        output_key = self.template.format(batch=self.batch, key=key, ext=self.ext, job_id=job_id)
        if output_key in seen.outputs or output_key_problem(output_key):
            return None
        prompt = spec.prompt
        digest = self.hashed.copy()
        digest.update(_canonical_text(prompt) + b"}")
        raw = digest.digest()
        seen.keys[key] = where
        seen.outputs[output_key] = where
        seen.named[where] = f"{where} (key {key!r})"
        seen.hashes[key] = raw
        return PlainJob(index, key, job_id, output_key, raw, prompt, self)


class PlainJob:
    """A job of a list's common line, resolved by ``_PlainJobs``: what is its own (index, key,
    job id, output key, the request's SHA-256 as bytes, prompt), the rest shared with every
    such job of the list. It reads like a ``ResolvedJob`` (the same attributes, read-only),
    each shared or derived part made when read. Before it, each job of a 100,000-job list
    was a full ``ResolvedJob`` with a body dict and a stored text of its own, made twice
    (resolved, then read back from ``JobList``). ``body`` and ``request_json`` are the values
    ``resolve_jobs`` makes for the same line (tests/test_issue15_plainjob.py)."""

    __slots__ = ("index", "key", "job_id", "output_key", "digest", "prompt", "shared")
    needs: tuple[str, ...] = ()
    inputs = None

    def __init__(
        self,
        index: int,
        key: str,
        job_id: str,
        output_key: str,
        digest: bytes,
        prompt: str,
        shared: _PlainJobs,
    ) -> None:
        self.index = index
        self.key = key
        self.job_id = job_id
        self.output_key = output_key
        self.digest = digest
        self.prompt = prompt
        self.shared = shared

    @property
    def request_hash(self) -> str:
        return self.digest.hex()

    @property
    def chain(self) -> list[dict[str, Any]]:
        return self.shared.chain

    @property
    def params(self) -> dict[str, Any]:
        return self.shared.params

    @property
    def output_template(self) -> str:
        return self.shared.template

    @property
    def webhook(self) -> dict[str, Any] | None:
        return self.shared.webhook

    @property
    def review(self) -> bool:
        return self.shared.review

    @property
    def body(self) -> dict[str, Any]:
        shared = self.shared
        return {
            "chain": shared.chain,
            "prompt": self.prompt,
            "params": shared.params,
            "output": shared.template,
        }

    @property
    def request_json(self) -> str:
        return self.shared.text + _ascii_string(self.prompt) + "}"


def resolve_deferred(
    model: ManifestModel,
    providers: dict[str, Any],
    problems: list[str],
    seen: Seen,
    aggregate: Aggregate | None,
) -> Iterator[ResolvedJob]:
    """Resolve the jobs whose input jobs came later in the list, each once the jobs it uses
    are resolved. What is left (a cycle, an unknown key) ``dependency_problems`` reports.

    In waves, as a topological sort: each deferred job counts the input jobs it still waits
    for, and a job resolved makes ready those of its dependents it was the last one of (a
    wave in the list's order). Each job's inputs are looked at once: finding the ready ones
    by scanning every pending job again after each wave, and dropping them from the pending
    list by a list lookup each, made a list whose style frame comes last (100,000 jobs all
    naming it) take 139 s to check where it first took 16, and a chain listed in reverse
    one scan of what is left per link."""
    from collections import deque

    pending, seen.deferred = seen.deferred, []
    waits: list[int] = []  # per pending job (by position): the input jobs not resolved yet
    dependents: dict[str, list[int]] = {}  # an unresolved input job -> the jobs naming it
    wave: list[int] = []
    for position, (_index, _where, spec) in enumerate(pending):
        missing = {
            key
            for i in spec.inputs or ()
            if i.job is not None and (key := _own_key(model.batch, i.job)) not in seen.hashes
        }
        waits.append(len(missing))
        for key in missing:
            dependents.setdefault(key, []).append(position)
        if not missing:
            wave.append(position)
    ready = deque(wave)
    while ready:
        wave = sorted(ready)  # the list's order, as each wave was resolved before
        ready.clear()
        for job in resolve_jobs(
            model, providers, [pending[p] for p in wave], problems, seen, aggregate
        ):
            yield job
            for position in dependents.pop(job.key, ()):
                waits[position] -= 1
                if waits[position] == 0:
                    ready.append(position)


def _with_default_gates(model: ManifestModel, spec: Any) -> Any:
    """``spec`` with the defaults' ``needs`` and ``inputs`` where it names none of its own (an
    empty list of its own is its own: no needs). A default need or input job that is the job
    itself is left out for it: the job every other one waits for does not wait for itself."""
    defaults = model.defaults
    update: dict[str, Any] = {}
    if defaults.needs is not None and spec.needs is None:
        update["needs"] = _FromDefaults(
            (i, ref)
            for i, ref in enumerate(defaults.needs)
            if _own_key(model.batch, ref) != spec.key
        )
    if defaults.inputs is not None and spec.inputs is None:
        update["inputs"] = _FromDefaults(
            (i, item)
            for i, item in enumerate(defaults.inputs)
            if item.job is None or _own_key(model.batch, item.job) != spec.key
        )
    if not update:
        return spec
    if type(spec) is PlainSpec:  # a job list's plain line: the general path, with the gates
        return JobSpec.model_construct(
            key=spec.key, prompt=spec.prompt, output=spec.output, review=None, **update
        )
    return spec.model_copy(update=update)


def _own_key(batch: str, ref: str | None) -> str | None:
    """The key a need or input job names: ``KEY`` or ``BATCH/KEY`` of this batch; None for a
    job of another batch."""
    if ref is None:
        return None
    named, slash, key = ref.rpartition("/")
    if slash and named != batch:
        return None
    return key


class _FromDefaults(list):
    """A job's ``needs`` or ``inputs`` as ``_with_default_gates`` takes them from the
    defaults, given as ``(place, item)`` pairs: ``at`` keeps each item's place in the
    defaults' list, so a problem of one (an unknown key, a missing file) is the defaults' own,
    said once where it is written (``defaults.needs[0]``), as one of ``defaults.chain`` is.
    Each job taking them was named with it, at a field its line does not have (``jobs.csv
    line 1 (key 'shot-0'): field 'inputs[0].path'``), and the 25 problems shown of a list
    were all that one."""

    def __init__(self, pairs: Iterable[tuple[int, Any]]) -> None:
        pairs = list(pairs)
        super().__init__(item for _, item in pairs)
        self.at = [place for place, _ in pairs]


def _field(items: Any, i: int, name: str) -> str:
    """The field of ``items[i]`` (a job's ``needs`` or ``inputs``) as a problem names it."""
    if isinstance(items, _FromDefaults):
        return f"defaults.{name}[{items.at[i]}]"
    return f"{name}[{i}]"


def _references(spec: JobSpec) -> list[tuple[str, str]]:
    """The jobs a job waits for, each with the field naming it."""
    refs = [(_field(spec.needs, i, "needs"), ref) for i, ref in enumerate(spec.needs or ())]
    refs += [
        (_field(spec.inputs, i, "inputs") + ".job", item.job)
        for i, item in enumerate(spec.inputs or ())
        if item.job is not None
    ]
    return refs


def _file_url(name: str) -> str | None:
    """A ``file://`` URL's local path (as storage takes one for a folder), else None; a
    ValueError saying why for one naming another host or no file. Refused as 'a URL ...
    download it first' before, the advice wrong for a file already on this machine."""
    if not name[:7].lower() == "file://":
        return None
    from urllib.parse import unquote, urlsplit

    rest = unquote(name[7:])
    if rest.startswith((".", "~")):
        # read as a storage URL is (README: file://./renders, file://~/renders): a path
        # relative to the manifest's folder, or in a home folder. Read as RFC 8089's host
        # part, 'file://./refs/palette.png' beside 'storage: file://./renders' was refused
        # as "a file on another host", the file right there
        expanded = os.path.expanduser(rest)
        if expanded.startswith("~"):
            raise ValueError(f"{name!r}: {rest.split('/', 1)[0]!r} names no home folder here")
        return expanded
    parts = urlsplit(name)
    if parts.netloc not in ("", "localhost"):
        raise ValueError(
            f"{name!r} names a file on another host ({parts.netloc!r}); name a local file: a path "
            "(relative to the manifest's folder, or absolute) or a file:///absolute/path URL"
        )
    if not parts.path:
        raise ValueError(f"{name!r} names no file")
    return unquote(parts.path)


def _input_file(seen: Seen, name: str) -> tuple[str, str] | str:
    """An input file's absolute path and SHA-256, or why it cannot be used (read once)."""
    known = seen.files.get(name)
    if known is not None:
        return known
    try:
        local = _file_url(name)
    except ValueError as exc:
        return str(exc)
    if local is None and "://" in name:
        return f"{name!r} is a URL; an input path names a local file (download it first)"
    # a leading '~' is a home folder, as in a file:// URL (and storage's): read as a relative
    # path, '~/refs/palette.png' was "no such file", the file right there in the home folder
    name_path = Path(local) if local is not None else Path(os.path.expanduser(name))
    path = name_path if name_path.is_absolute() else seen.base / name_path
    found: tuple[str, str] | str
    try:
        if not path.is_file():
            from afc_cli.joblist import unnamable

            found = unnamable(path) or (
                f"no such file {str(path)!r}" if not path.exists() else "not a file"
            )
        elif path.stat().st_size > MAX_INPUT_BYTES:
            found = f"{str(path)!r} is larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB"
        else:
            from afc_cli.inputs import IMAGE_KINDS, image_type

            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                head = handle.read(1 << 20)
                # a reference image is sent to a paid provider as one: a text file or an
                # archive named by mistake is refused here, not posted and paid for
                if image_type(head) is None:
                    found = f"{str(path)!r} is not a {IMAGE_KINDS} image"
                    seen.files[name] = found
                    return found
                digest.update(head)
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            # the path as named, made absolute, not its links resolved: a worker reads it
            # where the manifest named it (a shared mount's link to this host's mount point,
            # resolved, named a place only this host has)
            found = (str(path.absolute()), digest.hexdigest())
    except OSError as exc:
        found = f"cannot read {str(path)!r}: {exc.strerror or exc}"
    seen.files[name] = found
    return found


def _resolve_inputs(
    batch: str, spec: JobSpec, seen: Seen, who: str, problems: list[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """A job's inputs as the request hash covers them (a file's SHA-256; a job's batch, key
    and request hash) and as a run reads them (a file's path; a job's id), or None after
    appending the problems."""
    hashed, rows, bad = [], [], False
    for i, item in enumerate(spec.inputs or ()):
        if item.path is not None:
            found = _input_file(seen, item.path)
            if isinstance(found, str):
                field = _field(spec.inputs, i, "inputs")
                if not field.startswith("defaults."):
                    problems.append(f"{who}: field '{field}.path': {found}")
                elif (problem := f"field '{field}.path': {found}") not in seen.said:
                    seen.said.add(problem)  # the defaults' own, said once
                    problems.append(problem)
                bad = True
                continue
            hashed.append({"sha256": found[1]})
            rows.append({"path": found[0], "name": item.path, "sha256": found[1]})
        else:
            key = _own_key(batch, item.job)
            assert key is not None  # deferred (and reported) otherwise
            need_hash = seen.hashes[key].hex()
            hashed.append({"job": {"batch": batch, "key": key, "request_hash": need_hash}})
            # the need's request hash, so a run sends only the output of that request
            rows.append({"job": key, "job_id": job_id_for(batch, key), "request_hash": need_hash})
    return None if bad else (hashed, rows)


def dependency_problems(batch: str, seen: Seen) -> list[str]:
    """A need or input job of another batch, an unknown key, or a cycle."""
    problems: list[str] = []
    said: set[str] = set()
    # each unknown key's "did you mean", looked for once: a typo in the defaults' needs, or
    # in every line a script wrote, was looked up for each job among every key (difflib),
    # and a 5,000-line list took 39 s to be refused, 10,000 lines four times that
    hints: dict[str, str] = {}
    graph: dict[str, list[str]] = {}
    for key, refs in seen.needs.items():
        who = f"{seen.keys.get(key, 'a job')} (key {key!r})"
        graph[key] = []
        for name, ref in refs:
            own = _own_key(batch, ref)
            if own is None:
                problem = (
                    f"field '{name}': {ref!r} is a job of another batch "
                    f"({ref.rpartition('/')[0]!r}); a job can only wait for jobs of its own "
                    f"batch ({batch!r})"
                )
            elif own not in seen.keys:
                hint = hints.get(own)
                if hint is None:
                    many = len(seen.keys) > 10_000
                    hint = hints[own] = "" if many else did_you_mean(own, list(seen.keys))
                problem = (
                    f"field '{name}': unknown key {own!r}{hint}; needs and inputs name jobs "
                    "of this manifest"
                )
            else:
                graph[key].append(own)
                continue
            if not name.startswith("defaults."):
                problems.append(f"{who}: {problem}")
            elif problem not in said:  # the defaults' own (_FromDefaults), said once
                said.add(problem)
                problems.append(problem)
    # every cycle, not only the first: each one found is broken (one of its edges removed)
    # and the graph sorted again, a bounded number of times
    for _ in range(MAX_CYCLES_LISTED):
        try:
            graphlib.TopologicalSorter(graph).prepare()
            break
        except graphlib.CycleError as exc:
            cycle = exc.args[1]  # each node an immediate predecessor (a need) of the next
            named = " -> ".join(f"{key!r} ({seen.keys.get(key, 'a job')})" for key in cycle)
            problems.append(
                f"field 'needs': jobs {named} wait for each other (a cycle): none of them "
                "could ever run"
            )
            graph[cycle[1]] = [need for need in graph[cycle[1]] if need != cycle[0]]
    return problems


MAX_CYCLES_LISTED = 20


def dependency_order(jobs: Iterable[ResolvedJob]) -> list[list[str]]:
    """The keys of the jobs with needs and of the jobs they need, in waves: each wave needs
    only jobs of earlier waves (``afc plan`` shows it)."""
    return dependency_waves({job.key: list(job.needs) for job in jobs if job.needs})


def dependency_waves(graph: dict[str, list[str]]) -> list[list[str]]:
    """``dependency_order`` of a graph: each key with needs -> its needs."""
    if not graph:
        return []
    sorter = graphlib.TopologicalSorter(graph)
    sorter.prepare()
    waves = []
    while sorter.is_active():
        ready = sorted(sorter.get_ready())
        waves.append(ready)
        sorter.done(*ready)
    return waves


class RatesConfig(_Strict):
    rates: list[Rate] = Field(default_factory=list)


# the token rates that price an answer's tokens together (``RateCards.price``)
TOKEN_PAIR = ("per_1k_input_tokens", "per_1k_output_tokens")


def rate_problems(rates: list[Rate], providers: Any) -> list[str]:
    """A ``rates`` list's problems, the manifest's and the config file's alike: an unknown
    provider, a card naming no price, a card naming only prices its provider's answers never
    report a unit for (``Provider.priced_by``: fal reports images alone, so a per_second card
    would leave every fal attempt unpriced, with nothing said until the costs report), a
    card whose token rates are not both ``per_1k_input_tokens`` and ``per_1k_output_tokens``
    and which has no other price its provider's answers use (tokens price an answer only where
    the card has a rate for each count it reports, ``RateCards.price``, and an OpenAI or
    Gemini image reports both: ``per_1k_output_tokens`` alone priced none of the images it
    was given for), a second card for one provider and model (which would silently replace
    the first)."""
    problems = []
    seen: set[tuple[str, str]] = set()
    for i, rate in enumerate(rates):
        where = f"field 'rates[{i}]'"
        if rate.provider not in providers:
            problems.append(f"{where}: unknown provider {rate.provider!r}")
        names = rate.prices().keys()
        if not names:
            problems.append(
                f"{where}: names no price (per_image, per_second, per_megapixel, per_1k_*_tokens)"
            )
        usable = getattr(providers.get(rate.provider), "priced_by", None)
        if names and usable is not None and not names & usable:
            problems.append(
                f"{where}: {rate.provider}'s answers report no unit that"
                f" {' or '.join(sorted(names))} prices, so every attempt would be unpriced: give "
                f"{' or '.join(sorted(usable))}"
            )
        tokens = {name for name in names if name.startswith("per_1k_")} & (usable or set())
        missing = [name for name in TOKEN_PAIR if name not in names]
        if tokens and missing and not (names - tokens) & usable:
            problems.append(
                f"{where}: {' and '.join(sorted(tokens))} without {' and '.join(missing)} "
                f"prices none of {rate.provider}'s images (its answers report input and output "
                "tokens, and tokens price an answer only with a rate for each), so every image "
                f"would be unpriced: give {' and '.join(missing)}, or per_image"
            )
        if (rate.provider, rate.model) in seen:
            problems.append(f"{where}: a second rate card for {rate.provider}/{rate.model}")
        seen.add((rate.provider, rate.model))
    return problems


CONFIG_FILE = "AFC_CONFIG rate file"  # how its errors name it: the variable, then the path


def load_config_rates(path: str | Path | None) -> list[Rate]:
    """Rate cards from the optional config file (``AFC_CONFIG``): ``rates:`` in the manifest's
    format, checked by the manifest's rules (``rate_problems``: a second card for one model is
    refused, not silently the winner). A manifest's own card for the same provider and model
    wins over it. Its errors name it as the AFC_CONFIG rate file, never as a manifest."""
    if not path:
        return []
    from afc_cli.providers import PROVIDERS

    path = Path(path)
    try:
        raw = _read_yaml(path, "rate file")
    except ManifestError as exc:
        raise ManifestError(exc.path, exc.problems, CONFIG_FILE) from None
    if raw is not None and not isinstance(raw, dict):
        # pydantic's words named its model: "field '': ... instance of RatesConfig"
        raise ManifestError(
            str(path), ["the rate file must be a mapping holding a rates: list"], CONFIG_FILE
        )
    try:
        config = RatesConfig.model_validate(raw if raw is not None else {})
    except ValidationError as exc:
        problems = _pydantic_problems(raw, exc, RatesConfig)
        raise ManifestError(str(path), problems[:MAX_PROBLEMS], CONFIG_FILE) from None
    problems = rate_problems(config.rates, PROVIDERS)
    if problems:
        raise ManifestError(str(path), problems[:MAX_PROBLEMS], CONFIG_FILE)
    return config.rates
