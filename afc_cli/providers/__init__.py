"""Provider adapters by name. Only adapters that really work are registered."""

from __future__ import annotations

from typing import Any

from afc_cli.providers.base import AttemptRequest, AttemptResult, Provider, ProviderError
from afc_cli.providers.fal import FalProvider
from afc_cli.providers.gemini import GeminiProvider
from afc_cli.providers.local import LocalProvider
from afc_cli.providers.openai import OpenAIProvider
from afc_cli.providers.replicate import ReplicateProvider

PROVIDERS: dict[str, Provider] = {
    "local": LocalProvider(),
    "openai": OpenAIProvider(),
    "replicate": ReplicateProvider(),
    "fal": FalProvider(),
    "gemini": GeminiProvider(),
}


def images_requested(provider: str, params: dict[str, Any]) -> int:
    """How many images one request to ``provider`` with ``params`` asks for (1 unless the
    adapter's ``images_param`` asks for more): what a plan and a budget estimate."""
    adapter = PROVIDERS.get(provider)
    return adapter.images_requested(params) if adapter is not None else 1


def megapixels_requested(provider: str, params: dict[str, Any]) -> int | None:
    """The megapixels one request to ``provider`` with ``params`` asks for, or None where
    its size is not known before the call (``Provider.megapixels_requested``)."""
    adapter = PROVIDERS.get(provider)
    return adapter.megapixels_requested(params) if adapter is not None else None


def key_envs(providers: set[str]) -> list[str]:
    """The API key variables the named providers need, sorted."""
    return sorted({PROVIDERS[name].key_env or "" for name in providers if name in PROVIDERS} - {""})


def missing_keys(providers: set[str]) -> list[str]:
    """The API key variables that the named providers need and the environment lacks."""
    import os

    return [env for env in key_envs(providers) if not os.environ.get(env)]


def key_problem(value: str) -> str | None:
    """Why an API key cannot be sent in an HTTP header, or None: a header carries printable
    ASCII only. A carriage return (a .env file written on Windows), a line break, a space or a
    typographic dash pasted from a document would otherwise fail inside the HTTP client, after
    the attempt row was written, as if the call might have been paid."""
    for char in value:
        if char in "\r\n":
            return "holds a line break or carriage return (a .env file written on Windows?)"
        if char.isspace():
            return "holds a space or tab"
        if not char.isascii() or not char.isprintable():
            return f"holds the character U+{ord(char):04X}, which an HTTP header cannot carry"
    return None


def malformed_keys(providers: set[str]) -> list[str]:
    """``"NAME: why"`` for each set API key of the named providers that is not header-safe."""
    import os

    found = []
    for env in key_envs(providers):
        problem = key_problem(os.environ.get(env) or "")
        if problem:
            found.append(f"{env} {problem}")
    return found


def malformed_bases(providers: set[str]) -> list[str]:
    """``"NAME why"`` for each base URL variable of the named providers (``OPENAI_BASE_URL``...)
    that is set to what no request can be sent to: no http(s) scheme (``127.0.0.1:8080/v1``),
    a carriage return, a port past 65535. Such a value failed inside the HTTP client after the
    attempt row was written: each job's attempt recorded as possibly paid (its cost unknown),
    some runs stopped as if the provider's answer could not be read."""
    import os

    from afc_cli.webhooks import webhook_url_problem

    found = []
    for name in sorted(providers):
        env = getattr(PROVIDERS.get(name), "base_env", "")
        value = os.environ.get(env) if env else None
        problem = webhook_url_problem(value) if value else None
        if problem:
            found.append(f"{env} {problem}")
        elif value and _credentials(value):
            # httpx makes them the Authorization header in the API key's place (and aiohttp
            # refused the two at once: each paid call an unread answer, the run stopped)
            found.append(
                f"{env} holds a user name or password (user:password@ before the host): the "
                "API key goes in the Authorization header, which a URL's credentials would "
                "take the place of; remove them from the URL (not shown here)"
            )
        elif env:
            found += _unusable_proxy(value or PROVIDERS[name].default_base, env)
    return found


def _credentials(url: str) -> bool:
    """Whether ``url`` holds a user name or a password (``https://user:pw@host``)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.username is not None or parts.password is not None


def _unusable_proxy(base: str, env: str) -> list[str]:
    """A proxy the environment names for ``base`` that the provider calls cannot go through
    (``transport.ProxyUnsupported``: a SOCKS one), said before anything is written: each call
    would fail never sent, one attempt after another, in every job of the run."""
    import os

    if not any(name.lower() in ("http_proxy", "https_proxy") for name in os.environ):
        return []  # (no proxy named: aiohttp is not imported for nothing)
    import yarl

    from afc_cli.providers.transport import ProxyUnsupported, env_proxy

    try:
        env_proxy(yarl.URL(base))
    except ProxyUnsupported as exc:
        return [f"{env} ({base}): {exc}"]
    return []


__all__ = [
    "PROVIDERS",
    "images_requested",
    "key_problem",
    "malformed_bases",
    "malformed_keys",
    "missing_keys",
    "AttemptRequest",
    "AttemptResult",
    "Provider",
    "ProviderError",
]
