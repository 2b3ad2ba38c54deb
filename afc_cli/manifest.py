"""The manifest: YAML in, validated and resolved jobs out, before anything is written.

Validation is strict: unknown fields, a missing or duplicated key, duplicate YAML mapping keys,
bad types, an empty chain, an output template that could escape the storage prefix, and two jobs
sharing one output key are all errors. Every problem names the file, the job (index and key) and
the field; ``load_manifest`` raises one ``ManifestError`` listing them all, and the caller has
written nothing yet.

Each job is resolved (defaults applied) into a canonical request body. Its SHA-256 over RFC 8785
JSON is the job's request hash: everything that determines the output (the whole chain, prompt,
params, output template) and nothing else, so an explicit default and an omitted one hash alike.
"""

from __future__ import annotations

import hashlib
import re
import string
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal, get_args

import rfc8785
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from afc_cli.errors import ManifestError

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

TEMPLATE_FIELDS = {"batch", "key", "ext", "job_id"}
DEFAULT_OUTPUT = "{batch}/{key}.{ext}"
KEY_ALPHABET = set(string.ascii_letters + string.digits + "._-:")
MAX_PROBLEMS = 25
_CONTROL = re.compile(r"[\x00-\x1f]")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)


def _usd(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        amount = Decimal(value)
    except (InvalidOperation, TypeError):
        raise ValueError(f'must be a decimal string such as "0.04", got {value!r}') from None
    if not amount.is_finite() or amount < 0:
        raise ValueError(f"must be a non-negative decimal, got {value!r}")
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


class Rate(_Strict):
    provider: str
    model: str = Field(min_length=1)
    per_image: str | None = None
    per_second: str | None = None
    per_1k_input_tokens: str | None = None
    per_1k_output_tokens: str | None = None

    @field_validator("per_image", "per_second", "per_1k_input_tokens", "per_1k_output_tokens")
    @classmethod
    def _decimal(cls, value: str | None) -> str | None:
        return _usd(value)

    def prices(self) -> dict[str, Decimal]:
        return {
            name: Decimal(getattr(self, name))
            for name in ("per_image", "per_second", "per_1k_input_tokens", "per_1k_output_tokens")
            if getattr(self, name) is not None
        }


class Webhook(_Strict):
    """Where terminal job events go. The secret never appears here: only the name of the
    environment variable that holds it (``whsec_...`` form)."""

    url: str
    secret_env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    timeout_s: float = Field(default=10.0, gt=0, le=120)

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        from urllib.parse import urlsplit

        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"must be an http:// or https:// URL, got {value!r}")
        return value


class ProviderLimits(_Strict):
    concurrency: int | None = Field(default=None, ge=1)
    per_minute: int | None = Field(default=None, ge=1)


class Defaults(_Strict):
    output: str = DEFAULT_OUTPUT
    chain: list[ChainEntry] | None = None
    params: dict[str, Any] = Field(default_factory=dict)


class JobSpec(_Strict):
    key: str = Field(min_length=1, max_length=200)
    prompt: str
    params: dict[str, Any] = Field(default_factory=dict)
    chain: list[ChainEntry] | None = None
    output: str | None = None
    webhook: Webhook | None = None


class ManifestModel(_Strict):
    version: Literal[1]
    batch: str = Field(min_length=1, max_length=200)
    storage: str | None = None
    budget: str | None = None

    @field_validator("budget")
    @classmethod
    def _budget(cls, value: str | None) -> str | None:
        return _usd(value)

    defaults: Defaults = Field(default_factory=Defaults)
    rates: list[Rate] = Field(default_factory=list)
    limits: dict[str, ProviderLimits] = Field(default_factory=dict)
    webhook: Webhook | None = None
    jobs: list[JobSpec] | None = None
    jobs_from: str | None = Field(default=None, min_length=1)  # a JSON Lines or CSV job list


@dataclass(frozen=True)
class ResolvedJob:
    """One job as the ledger admits it."""

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


def job_id_for(batch: str, key: str) -> str:
    """Deterministic job id: racing admissions and a rebuilt ledger agree on it.

    ``uuid.uuid5(JOB_ID_NAMESPACE, batch NUL key)``, computed without building UUID objects
    (a third of the time; tests/test_issue15_joblist.py checks it against ``uuid.uuid5``)."""
    digest = bytearray(hashlib.sha1(_NAMESPACE_BYTES + f"{batch}\x00{key}".encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def canonical_json(value: Any) -> bytes:
    return rfc8785.dumps(value)


def request_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(body)).hexdigest()


def _canonical_body(chain_json: bytes, output: str, params_json: bytes, prompt: str) -> bytes:
    """``canonical_json`` of a request body from its parts, the chain and params already
    canonical (shared by the jobs that use the defaults: a 100,000-job list canonicalises them
    once, not per job). RFC 8785 orders the members chain, output, params, prompt."""
    return b"".join(
        (
            b'{"chain":',
            chain_json,
            b',"output":',
            canonical_json(output),
            b',"params":',
            params_json,
            b',"prompt":',
            canonical_json(prompt),
            b"}",
        )
    )


def _chain_problems(
    chain: list[Any], params: dict[str, Any], providers: dict[str, Any]
) -> list[str]:
    problems = []
    for c, entry in enumerate(chain):
        provider = providers.get(entry.provider)
        if provider is None:
            problems.append(
                f"field 'chain[{c}].provider': unknown provider {entry.provider!r} "
                f"(available: {', '.join(sorted(providers))})"
            )
            continue
        for problem in provider.params_problems(params):
            problems.append(f"field 'params.{problem}'")
    return problems


# --- YAML -----------------------------------------------------------------------------------

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int):
        self.key = key
        self.line = line


class _StrictLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    """Safe loader (the C one when PyYAML has it) that refuses duplicate mapping keys."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False):
    loader.flatten_mapping(node)
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in mapping:
            raise _DuplicateKey(key, key_node.start_mark.line + 1)
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(str(path), ["file not found"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(str(path), [f"cannot read: {exc}"]) from None
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a safe loader subclass
    except _DuplicateKey as dup:
        raise ManifestError(str(path), [f"line {dup.line}: duplicate key {dup.key!r}"]) from None
    except yaml.YAMLError as exc:
        raise ManifestError(str(path), [f"not valid YAML: {exc}"]) from None


# --- validation -------------------------------------------------------------------------------


def _where(raw: Any, loc: tuple[Any, ...]) -> str:
    """Name the job (index and key) and the field for an error location."""
    if len(loc) >= 2 and loc[0] == "jobs" and isinstance(loc[1], int):
        index = loc[1]
        key = None
        jobs = raw.get("jobs") if isinstance(raw, dict) else None
        if isinstance(jobs, list) and index < len(jobs) and isinstance(jobs[index], dict):
            key = jobs[index].get("key")
        field = _dotted(loc[2:])
        who = f"job {index}" + (f" (key {key!r})" if key is not None else "")
        return f"{who}: field '{field}'" if field else who
    return f"field '{_dotted(loc)}'"


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _pydantic_problems(raw: Any, exc: ValidationError) -> list[str]:
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden":
            message = "unknown field"
        elif err["type"] == "missing":
            message = "required field is missing"
        else:
            message = err["msg"]
        problems.append(f"{_where(raw, loc)}: {message}")
    return problems


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


def output_key_problem(key: str) -> str | None:
    """Why an output key could escape the storage prefix, or None if it is safe."""
    if not key:
        return "renders to an empty key"
    if key.startswith("/") or "\\" in key or (len(key) > 1 and key[1] == ":"):
        return f"renders to {key!r}, an absolute path outside the storage prefix"
    parts = key.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return f"renders to {key!r}: '..', '.' and empty path segments are not allowed"
    if _CONTROL.search(key):
        return f"renders to {key!r}, which has control characters"
    if key.endswith(".afc.json"):
        return f"renders to {key!r}; names ending in .afc.json are reserved for metadata"
    return None


def _key_problem(key: str) -> str | None:
    if key in (".", "..") or not set(key) <= KEY_ALPHABET:
        return "must use letters, digits and . _ - : only (it names files and objects)"
    return None


def load_manifest(path: str | Path, providers: dict[str, Any] | None = None) -> Manifest:
    """Read, validate and resolve a manifest. Raises ManifestError listing every problem."""
    from afc_cli.providers import PROVIDERS

    providers = PROVIDERS if providers is None else providers
    path = Path(path)
    raw = _read_yaml(path)
    name = str(path)
    if not isinstance(raw, dict):
        raise ManifestError(name, ["the manifest must be a mapping with version, batch and jobs"])
    try:
        model = ManifestModel.model_validate(raw)
    except ValidationError as exc:
        raise ManifestError(name, _pydantic_problems(raw, exc)[:MAX_PROBLEMS]) from None

    problems: list[str] = []
    seen_rates: set[tuple[str, str]] = set()
    for i, rate in enumerate(model.rates):
        where = f"field 'rates[{i}]'"
        if rate.provider not in providers:
            problems.append(f"{where}: unknown provider {rate.provider!r}")
        if not rate.prices():
            problems.append(f"{where}: names no price (per_image, per_second, per_1k_*_tokens)")
        if (rate.provider, rate.model) in seen_rates:
            problems.append(f"{where}: a second rate card for {rate.provider}/{rate.model}")
        seen_rates.add((rate.provider, rate.model))

    for name in model.limits:
        if name not in providers:
            problems.append(f"field 'limits.{name}': unknown provider {name!r}")

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
    elif not model.jobs:
        problems.append("field 'jobs': required field is missing (or name a job list: jobs_from)")

    seen, aggregate = Seen(), Aggregate()
    specs = ((index, f"job {index}", spec) for index, spec in enumerate(model.jobs or []))
    jobs: list[ResolvedJob] | JobList = list(
        resolve_jobs(model, providers, specs, problems, seen, aggregate)
    )
    if jobs_file is not None and len(problems) < MAX_PROBLEMS:
        # every line checked and resolved; the results wait in a temporary file, not memory
        lines = jobs_file.specs(len(jobs), problems)
        jobs = JobList(jobs, resolve_jobs(model, providers, lines, problems, seen, aggregate))

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
        self.file = tempfile.TemporaryFile()  # deleted when closed, or when afc exits
        self.count = len(inline)
        chunk: list[tuple] = []
        for job in resolved:
            self.count += 1
            chunk.append(
                (job.index, job.key, job.job_id, job.output_key, job.request_hash, job.body)
                + ((job.webhook,) if job.webhook else ())
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

    def __iter__(self) -> Iterator[ResolvedJob]:
        import marshal

        yield from self.inline
        self.file.seek(0)
        while True:
            size = self.file.read(8)
            if not size:
                return
            for row in marshal.loads(self.file.read(int.from_bytes(size, "little"))):
                index, key, job_id, output_key, digest, body = row[:6]
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
                    webhook=row[6] if len(row) > 6 else None,
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
    for index, where, spec in specs:
        who = f"{where} (key {spec.key!r})"
        bad_key = _key_problem(spec.key)
        if bad_key:
            problems.append(f"{who}: field 'key': {bad_key}")
        if spec.key in seen.keys:
            problems.append(
                f"{who}: field 'key': duplicate key, already used by {seen.keys[spec.key]}"
            )
            continue
        seen.keys[spec.key] = where

        chain = spec.chain if spec.chain is not None else model.defaults.chain
        if not chain:
            problems.append(
                f"{who}: field 'chain': the chain is empty (set it here or in defaults)"
            )
            continue
        params = {**model.defaults.params, **spec.params}
        # a job with the default chain and params has the default's problems (found once)
        as_default = spec.chain is None and not spec.params
        chain_problems = cache.get("chain_problems") if as_default else None
        if chain_problems is None:
            chain_problems = _chain_problems(chain, params, providers)
            if as_default:
                cache["chain_problems"] = chain_problems
        problems.extend(f"{who}: {problem}" for problem in chain_problems)

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

        if spec.chain is None:  # the default chain, dumped and canonicalised once
            if "chain" not in cache:
                dumped = [entry.model_dump(mode="json") for entry in chain]
                cache["chain"] = (dumped, canonical_json(dumped))
            chain_dicts, chain_json = cache["chain"]
        else:
            chain_dicts = [entry.model_dump(mode="json") for entry in chain]
            chain_json = None
        body = {"chain": chain_dicts, "prompt": spec.prompt, "params": params, "output": template}
        try:
            if spec.params or "params" not in cache:
                params_json = canonical_json(params)
                if not spec.params:
                    cache["params"] = params_json
            else:
                params_json = cache["params"]
            digest = hashlib.sha256(
                _canonical_body(
                    chain_json or canonical_json(chain_dicts), template, params_json, spec.prompt
                )
            ).hexdigest()
        except Exception as exc:  # rfc8785 refuses NaN, huge ints and the like
            problems.append(f"{who}: field 'params': cannot be canonicalised ({exc})")
            continue
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
        )
        if aggregate is not None:
            aggregate.add(job)
        yield job
        if len(problems) >= MAX_PROBLEMS:
            break


class RatesConfig(_Strict):
    rates: list[Rate] = Field(default_factory=list)


def load_config_rates(path: str | Path | None) -> list[Rate]:
    """Rate cards from the optional config file (``AFC_CONFIG``): ``rates:`` in the manifest's
    format. A manifest's own card for the same provider and model wins over it."""
    if not path:
        return []
    from afc_cli.providers import PROVIDERS

    path = Path(path)
    raw = _read_yaml(path)
    try:
        config = RatesConfig.model_validate(raw if raw is not None else {})
    except ValidationError as exc:
        raise ManifestError(str(path), _pydantic_problems(raw, exc)[:MAX_PROBLEMS]) from None
    problems = [
        f"field 'rates[{i}]': unknown provider {r.provider!r}"
        for i, r in enumerate(config.rates)
        if r.provider not in PROVIDERS
    ]
    if problems:
        raise ManifestError(str(path), problems)
    return config.rates
