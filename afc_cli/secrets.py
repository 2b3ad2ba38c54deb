"""Scrub secrets from any text that came from outside before afc keeps it or shows it.

A provider may quote the API key back in an error ("Incorrect API key provided: Bearer
sk-..."), an exception may carry a URL with credentials, a receiver may echo a header. afc
passes such text through ``scrub`` where it enters (``ProviderError``, every ``AfcError``:
storage, ledger and usage messages) and again where it leaves (the CLI's messages, log lines,
``--json``, tables, ``afc show``, webhook envelopes), so no secret reaches the ledger, a
terminal, a script or a webhook receiver.

What is removed:

- the values of the configured secrets: the providers' API keys, ``AWS_SECRET_ACCESS_KEY`` and
  ``AWS_SESSION_TOKEN``, the webhook secrets a manifest names (``register``), and any
  environment variable whose name ends in ``KEY``, ``TOKEN``, ``SECRET`` or ``PASSWORD``
  (values of 8 characters or more, so a short value does not blank ordinary words);
- token shapes, whoever's they are: ``Bearer …``, ``Key …`` (fal), ``sk-…`` (OpenAI),
  ``r8_…`` (Replicate), ``AIza…`` (Google), ``whsec_…``, credentials in a URL
  (``https://user:pass@host``) and key-like query parameters (``?key=…``, ``X-Amz-Signature``).

Each is replaced by ``<redacted>`` (no square brackets: rich would read them as markup).
"""

from __future__ import annotations

import os
import re
from typing import Any

REDACTED = "<redacted>"
MIN_SECRET_CHARS = 8
SECRET_ENVS = (
    "OPENAI_API_KEY",
    "REPLICATE_API_TOKEN",
    "FAL_KEY",
    "GEMINI_API_KEY",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AFC_SERVE_TOKEN",
)
_SECRET_NAME = re.compile(r"(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD)$", re.I)

_SHAPES = [
    # Authorization schemes: Bearer (OpenAI, Replicate), Key id:secret (fal), Token (old
    # Replicate); "Key" and "Token" only capitalised, as in a header, so prose is left alone
    (re.compile(r"\b(Bearer)(\s+)[A-Za-z0-9._~+/=\-]{8,}", re.I), r"\1\2" + REDACTED),
    (re.compile(r"\b(Key)(\s+)[A-Za-z0-9_\-]{6,}:[A-Za-z0-9_\-]{6,}"), r"\1\2" + REDACTED),
    (re.compile(r"\b(Token)(\s+)[A-Za-z0-9_\-]{16,}"), r"\1\2" + REDACTED),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"), "sk-" + REDACTED),
    (re.compile(r"\br8_[A-Za-z0-9]{6,}"), "r8_" + REDACTED),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{10,}"), REDACTED),
    (re.compile(r"\bwhsec_[A-Za-z0-9+/=]{4,}"), "whsec_" + REDACTED),
    # https://user:password@host
    (re.compile(r"(?<=://)[^/\s:@\"']+:[^/\s@\"']+@"), REDACTED + "@"),
    # ?key=..., &api_key=..., X-Amz-Signature=...
    (
        re.compile(
            r"([?&](?:key|api_key|apikey|token|access_token|secret|password|"
            r"x-amz-signature|x-amz-credential|x-amz-security-token|signature)=)[^&\s\"'#]+",
            re.I,
        ),
        r"\1" + REDACTED,
    ),
]

_extra_envs: set[str] = set()
_values: list[str] | None = None
_literal: re.Pattern[str] | None = None


def register(env_name: str) -> None:
    """Treat this environment variable's value as a secret too (a webhook's ``secret_env``)."""
    if env_name not in _extra_envs:
        _extra_envs.add(env_name)
        reset()


def reset() -> None:
    """Forget the secret values read so far (the environment changed)."""
    global _values, _literal
    _values = None
    _literal = None


def _secret_values() -> list[str]:
    global _values, _literal
    if _values is None:
        names = set(SECRET_ENVS) | _extra_envs
        names |= {name for name in os.environ if _SECRET_NAME.search(name)}
        values: set[str] = set()
        for name in names:
            value = os.environ.get(name) or ""
            for part in (value, *value.split(":")):  # fal keys are "id:secret"
                part = part.strip()
                if len(part) >= MIN_SECRET_CHARS:
                    values.add(part)
        # longest first, so a key is removed whole before any part of it
        _values = sorted(values, key=len, reverse=True)
        _literal = re.compile("|".join(re.escape(v) for v in _values)) if _values else None
    return _values


def scrub(text: Any) -> Any:
    """``text`` without secret values or token shapes; anything not a string is returned as
    it is."""
    if not isinstance(text, str) or not text:
        return text
    _secret_values()
    if _literal is not None:
        text = _literal.sub(REDACTED, text)
    for pattern, replacement in _SHAPES:
        text = pattern.sub(replacement, text)
    return text


def scrub_data(value: Any) -> Any:
    """``scrub`` applied to every string inside a JSON-like value (dicts, lists)."""
    return map_leaves(value, scrub)  # scrub leaves anything but a string as it is


def map_leaves(value: Any, leaf: Any) -> Any:
    """``leaf`` applied to every value inside a JSON-like value that is neither a dict nor a
    list, the dicts and lists kept (a tuple becomes a list, as in JSON)."""
    if isinstance(value, dict):
        return {key: map_leaves(item, leaf) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [map_leaves(item, leaf) for item in value]
    return leaf(value)
