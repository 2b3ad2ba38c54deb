"""Provider adapters by name. Only adapters that really work are registered."""

from __future__ import annotations

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


def missing_keys(providers: set[str]) -> list[str]:
    """The API key variables that the named providers need and the environment lacks."""
    import os

    needed = {PROVIDERS[name].key_env for name in providers if name in PROVIDERS}
    return sorted(env for env in needed if env and not os.environ.get(env))


__all__ = [
    "PROVIDERS",
    "missing_keys",
    "AttemptRequest",
    "AttemptResult",
    "Provider",
    "ProviderError",
]
