"""Provider adapters by name. Only adapters that really work are registered."""

from __future__ import annotations

from afc_cli.providers.base import AttemptRequest, AttemptResult, Provider, ProviderError
from afc_cli.providers.local import LocalProvider

PROVIDERS: dict[str, Provider] = {"local": LocalProvider()}

__all__ = ["PROVIDERS", "AttemptRequest", "AttemptResult", "Provider", "ProviderError"]
