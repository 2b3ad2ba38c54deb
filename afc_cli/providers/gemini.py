"""Gemini image output: ``POST {GEMINI_BASE_URL}/models/{model}:generateContent``, synchronous.

A safety block arrives as HTTP 200 with no image (``promptFeedback.blockReason``, or a
candidate whose ``finishReason`` is in the SAFETY / IMAGE_SAFETY family): a refusal. 429
RESOURCE_EXHAUSTED carries ``google.rpc.RetryInfo.retryDelay`` ("19s"): honoured as the wait
(else the answer's ``Retry-After``, as a gateway in front of the API may say it). An error
answer costs nothing when it is a 4xx, or a 5xx in Google's own error body (``googles_own``):
Google does not charge a request that fails so; a gateway's 5xx stays of unknown cost.
``usageMetadata`` token counts (output: the candidates' and a thinking model's thoughts',
``billed_output``) and the images in the answer give the derived cost (the rule is
``RateCards.price`` in afc_cli/costs.py). A blocked answer reports its tokens but no image
count: whether a per-image price applies to a refusal is not known, so it is not claimed.
A thinking image model (gemini-3-pro-image) may answer its interim drafts too, each part
marked ``"thought": true``: never the output, nor counted as an image made (Google bills
the final image; the thinking is in the tokens).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from afc_cli.costs import usage_amount
from afc_cli.providers.base import AttemptRequest, AttemptResult, ProviderError
from afc_cli.providers.http import (
    HttpProvider,
    class_for_status,
    decode_b64,
    json_or_empty,
    obj,
    objs,
    refused_free,
    retry_after_for,
    succeeded,
    text,
    transport_error,
)

SAFETY = {
    "SAFETY",
    "OTHER",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT",
    "IMAGE_OTHER",
    "IMAGE_RECITATION",  # an image withheld as reciting protected work, as RECITATION is text
    "NO_IMAGE",
    "SPII",
    "RECITATION",
}
EXT = {"image/png": "png", "image/jpeg": "jpeg", "image/webp": "webp"}


def retry_delay(error: dict[str, Any]) -> float | None:
    for detail in objs(error.get("details")):
        if str(detail.get("@type", "")).endswith("google.rpc.RetryInfo"):
            match = re.fullmatch(r"(\d+(?:\.\d+)?)s", str(detail.get("retryDelay", "")))
            if match:
                return float(match.group(1))
    return None


def googles_own(error: dict[str, Any], status: int) -> bool:
    """Whether an error answer is the Gemini API's own: its ``error`` object, ``code`` the
    HTTP status and ``status`` its canonical name (UNAVAILABLE, INTERNAL), not a page or a
    body from a proxy or load balancer in front of it."""
    code = error.get("code")
    return isinstance(code, int) and code == status and text(error.get("status")) is not None


def billed_output(candidates: Any, thoughts: Any) -> Any:
    """The output tokens Gemini bills: ``candidatesTokenCount`` plus a thinking model's
    ``thoughtsTokenCount``, which Gemini counts apart from the candidates (not inside them)
    and bills as output tokens ("output price, including thinking tokens"). Both are priced
    at the card's one ``per_1k_output_tokens``: where Google's rate for thinking (text)
    tokens is below its image-output rate, the figure is then above the bill, never below
    it. An unreadable count stays unreadable (``usage_amount`` in afc_cli/costs.py: then the
    tokens price nothing, never a part of them)."""
    if thoughts is None:
        return candidates
    parts = [usage_amount(0 if candidates is None else candidates), usage_amount(thoughts)]
    if None in parts:
        return thoughts if parts[1] is None else candidates
    total = sum(parts, Decimal(0))
    return int(total) if total == total.to_integral_value() else str(total)


class GeminiProvider(HttpProvider):
    name = "gemini"
    priced_by = frozenset({"per_image", "per_1k_input_tokens", "per_1k_output_tokens"})
    key_env = "GEMINI_API_KEY"
    params = frozenset({"aspect_ratio"})

    base_env = "GEMINI_BASE_URL"
    default_base = "https://generativelanguage.googleapis.com/v1beta"

    async def render(self, request: AttemptRequest) -> AttemptResult:
        import httpx

        config: dict[str, Any] = {"responseModalities": ["IMAGE"]}
        if request.params.get("aspect_ratio"):
            config["imageConfig"] = {"aspectRatio": request.params["aspect_ratio"]}
        parts: list[dict[str, Any]] = [{"text": request.prompt}]
        # reference images (a manifest's ``inputs``) as inline data parts after the prompt
        parts += [
            {"inline_data": {"mime_type": image.mime, "data": image.data_uri().split(",", 1)[1]}}
            for image in request.inputs
        ]
        body = {"contents": [{"parts": parts}], "generationConfig": config}
        try:
            request.last_look()
            response = await self.client.post(
                self.url(f"/models/{request.model}:generateContent"),
                json=body,
                headers={"x-goog-api-key": self.api_key()},
                timeout=self.call_timeout(request),
            )
        except httpx.TransportError as exc:
            raise transport_error(self.name, exc, paid_call=True) from None
        data = json_or_empty(response)
        if not succeeded(response.status_code):
            error = obj(data.get("error"))
            status = response.status_code
            reasons = {text(d.get("reason")) for d in objs(error.get("details"))}
            cls = "auth" if "API_KEY_INVALID" in reasons else class_for_status(status)
            # a 4xx made nothing; nor did a 5xx that is Google's own answer: "If your request
            # fails with a 400 or 500 error, you won't be charged" (the Gemini API's billing
            # FAQ, ai.google.dev/gemini-api/docs/billing). A gateway's 5xx in front of the API
            # (no Google error object) may come after the image was made: unknown
            free = refused_free(status) or (status >= 500 and googles_own(error, status))
            # a 429's RetryInfo, else the answer's Retry-After (a gateway in front says so)
            told = retry_delay(error) if cls == "rate_limited" else None
            raise ProviderError(
                cls,
                f"gemini: {error.get('status', '')} {error.get('message', f'HTTP {status}')}",
                http_status=status,
                retry_after=told if told is not None else retry_after_for(cls, response.headers),
                cost_micros=0 if free else None,
                cost_source="derived" if free else None,
            )
        meta = obj(data.get("usageMetadata"))
        usage = {
            "input_tokens": meta.get("promptTokenCount"),
            "output_tokens": billed_output(
                meta.get("candidatesTokenCount"), meta.get("thoughtsTokenCount")
            ),
            "thoughts_tokens": meta.get("thoughtsTokenCount"),
        }
        cost = request.rates.price(self.name, request.model, usage) if meta else None
        feedback = text(obj(data.get("promptFeedback")).get("blockReason"))
        image, finish, images, said = None, None, 0, ""
        for candidate in objs(data.get("candidates")):
            finish = text(candidate.get("finishReason")) or finish
            for part in objs(obj(candidate.get("content")).get("parts")):
                if part.get("thought") is True:
                    # a thinking model's interim draft (or its thought summary), answered
                    # beside the final image: not the output, and not billed as an image
                    continue
                inline = obj(part.get("inlineData") or part.get("inline_data"))
                if text(inline.get("data")):
                    images += 1
                    image = image or inline
                said = said or (text(part.get("text")) or "").strip()
        if image is None:
            blocked = bool(feedback or finish in SAFETY)
            message = (
                f"gemini: blocked ({feedback or finish})"
                if blocked
                else f"gemini: no image in the answer (finishReason {finish or 'none'})"
            )
            if said:
                # the model's own words (a text-only answer is most often a polite decline):
                # what the user needs to change the prompt, cut to one line's length
                said = " ".join(said.split())
                message += f"; it answered: {said[:200]}{'…' if len(said) > 200 else ''}"
            raise ProviderError(
                "refusal" if blocked else "server",
                message,
                http_status=response.status_code,
                usage={k: v for k, v in usage.items() if v is not None},
                cost_micros=cost,
                cost_source="derived" if cost is not None else None,
                request_id=text(data.get("responseId")),  # a billed refusal's id, to reconcile
            )
        usage = {**{k: v for k, v in usage.items() if v is not None}, "images": images}
        if meta.get("candidatesTokenCount") is None:
            # an image's output tokens are not known: a thinking model's thoughts alone
            # (``billed_output``) would price it by its prompt and thoughts, a fraction of it
            usage.pop("output_tokens", None)
        cost = request.rates.price(self.name, request.model, usage)
        return AttemptResult(
            data=decode_b64(
                self.name, image["data"], usage, cost, text(data.get("responseId")), image=True
            ),
            ext=EXT.get(text(image.get("mimeType")) or "", "png"),
            usage=usage,
            cost_micros=cost,
            cost_source="derived" if cost is not None else None,
            provider_request_id=text(data.get("responseId")),
        )
