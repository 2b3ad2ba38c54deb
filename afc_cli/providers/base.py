"""What every provider adapter speaks: one request in, one attempt result or one error out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from afc_cli.costs import RateCards


@dataclass(frozen=True)
class AttemptRequest:
    job_id: str
    key: str
    prompt: str
    params: dict[str, Any]
    provider: str
    model: str
    attempt: int  # the job's attempt number, counted across runs (1-based)
    rates: RateCards


@dataclass
class AttemptResult:
    data: bytes
    ext: str
    usage: dict[str, Any] = field(default_factory=dict)
    cost_micros: int | None = None
    cost_source: str | None = None
    provider_request_id: str | None = None


class ProviderError(Exception):
    """A failed attempt, classified into one of SPEC section 5's error classes."""

    def __init__(
        self,
        error_class: str,
        message: str,
        *,
        http_status: int | None = None,
        retry_after: float | None = None,
        usage: dict[str, Any] | None = None,
        cost_micros: int | None = None,
        cost_source: str | None = None,
    ):
        super().__init__(message)
        self.error_class = error_class
        self.message = message
        self.http_status = http_status
        self.retry_after = retry_after
        self.usage = usage or {}
        self.cost_micros = cost_micros
        self.cost_source = cost_source


class Provider:
    name: str = ""

    def params_problems(self, params: dict[str, Any]) -> list[str]:
        """Problems with a job's params, each 'field: message'. Checked with the manifest."""
        return []

    async def render(self, request: AttemptRequest) -> AttemptResult:
        raise NotImplementedError
