"""OpenAI Images: ``POST {OPENAI_BASE_URL}/images/generations``, synchronous; with reference
images (a manifest's ``inputs``), ``POST {OPENAI_BASE_URL}/images/edits`` as multipart form
data: the same fields as form fields and each image as an ``image[]`` file part (dall-e-2's
one image as the ``image`` file, the form it takes).

The call itself is the paid window: there is no lookup by id and no idempotency key, so a
process that dies during it leaves an ``unknown`` attempt (possibly paid) behind.
gpt-image models answer ``data[].b64_json`` and ``usage`` tokens (cost derived from the rate
card's token rates, or per image: see ``RateCards.price`` in afc_cli/costs.py). DALL-E answers
a ``url`` by default (valid about an hour): afc asks DALL-E models for ``response_format:
b64_json`` instead (``B64_MODELS``), so the image comes in the paid answer itself, as a
gpt-image model's does. An output URL is a second paid window: a process killed while
fetching it (later rounds go on for up to an hour while the CDN is out of reach) left a
render that no later run could find (a synchronous call has no id to look it up by), and
the next run paid for it again; the URL is now committed on the attempt with the render's
cost before its download (``HttpProvider.fetch_output``, ``on_answer_url``), and a later
run fetches it from there (``fetch_left``) while it is valid. gpt-image models refuse the
field (400 ``unknown_parameter``), so it is sent to DALL-E only. A ``url`` still answered (an OpenAI-compatible gateway that
ignores the field) is downloaded at once and fetched again in later rounds while it stays
out of reach (``keeps_outputs_s``). Usage always reports the images produced.
"""

from __future__ import annotations

import re
from typing import Any

from afc_cli.providers.base import AttemptRequest, AttemptResult, ProviderError
from afc_cli.providers.http import (
    HttpProvider,
    class_for_status,
    decode_b64,
    json_or_empty,
    obj,
    parse_reset,
    refused_free,
    retry_after_for,
    succeeded,
    text,
    transport_error,
)

# the Images API's parameters, sent as given: ``input_fidelity`` is the edits' (a job with
# ``inputs``; left out of a generation's body), ``output_compression`` both endpoints' (jpeg and
# webp); OpenAI refuses, unbilled, one its endpoint or model does not take
PASSED = (
    "size",
    "quality",
    "output_format",
    "output_compression",
    "background",
    "moderation",
    "input_fidelity",
    "n",
    "style",
)
# the account's money, refused free: out of quota (429), billing not set up (429), the
# spending limit reached (400)
# (a tuple: a gateway's ``code`` may be any JSON value, a dict not hashable)
MONEY = ("insufficient_quota", "billing_not_active", "billing_hard_limit_reached")
# models that answer a URL unless asked for the image itself (``response_format``), which
# the others refuse
B64_MODELS = ("dall-e-",)
# the wait a 429 names in its words: "Please try again in 7.188s." (also "20ms", "5m48.096s"),
# "please slow down and try again after 51.84 seconds."
TRY_AGAIN = re.compile(
    r"try again (?:in|after) (?:((?:\d+(?:\.\d+)?(?:ms|h|m|s))+)\b|"
    r"(\d+(?:\.\d+)?) ?(milliseconds?|seconds?|minutes?)\b)",
    re.IGNORECASE,
)
UNIT_S = {"millisecond": 0.001, "second": 1.0, "minute": 60.0}


def wait_in_words(message: str) -> float | None:
    """The seconds an OpenAI 429's message says to wait (``TRY_AGAIN``), or None."""
    match = TRY_AGAIN.search(message)
    if match is None:
        return None
    if match.group(1):
        return parse_reset(match.group(1))
    return float(match.group(2)) * UNIT_S[match.group(3).lower().rstrip("s")]


class OpenAIProvider(HttpProvider):
    name = "openai"
    priced_by = frozenset(
        {"per_image", "per_1k_input_tokens", "per_1k_input_image_tokens", "per_1k_output_tokens"}
    )
    key_env = "OPENAI_API_KEY"
    params = frozenset(PASSED)
    images_param = "n"  # sent as given (default 1); every image of the answer is billed

    base_env = "OPENAI_BASE_URL"
    default_base = "https://api.openai.com/v1"
    keeps_outputs_s = 55 * 60.0  # DALL-E's image URLs are valid about an hour

    def param_defaults(self, params: dict[str, Any]) -> dict[str, Any]:
        # ``render`` sends ``n: 1`` itself when a job leaves ``n`` out: writing it out is the
        # same request (README, Defaults and the hash)
        return {"n": 1}

    async def render(self, request: AttemptRequest) -> AttemptResult:
        import httpx

        began = self.clock()
        body = {"model": request.model, "prompt": request.prompt, "n": 1}
        body.update({k: v for k, v in request.params.items() if k in PASSED})
        if not request.inputs:
            # an edit's parameter (how closely to keep the references), which generations
            # refuse: one set in a batch's defaults reaches its jobs without references too,
            # which it would fail ``invalid``; it stays part of their request (the hash)
            body.pop("input_fidelity", None)
        if request.model.startswith(B64_MODELS):
            body["response_format"] = "b64_json"  # the image in the paid answer, not a URL
        headers = {"Authorization": f"Bearer {self.api_key()}"}
        try:
            if request.inputs:
                sent = self.client.build_request(
                    "POST",
                    f"{self.base}/images/edits",
                    data={name: str(value) for name, value in body.items()},
                    files=[
                        (
                            # dall-e-2 takes one ``image`` file, and refuses ``image[]`` (an
                            # array); gpt-image models an ``image[]`` part each
                            "image" if request.model.startswith(B64_MODELS) else "image[]",
                            (f"input-{i}.{image.mime.split('/')[-1]}", image.data, image.mime),
                        )
                        for i, image in enumerate(request.inputs)
                    ],
                    headers=headers,
                    timeout=self.call_timeout(request),
                )
            else:
                sent = self.client.build_request(
                    "POST",
                    self.url("/images/generations"),
                    json=body,
                    headers=headers,
                    timeout=self.call_timeout(request),
                )
            request.last_look()
            response = await self.client.send(sent, stream=True)
        except httpx.TransportError as exc:
            raise transport_error(self.name, exc, paid_call=True) from None
        request_id = response.headers.get("x-request-id")
        try:
            await response.aread()
        except httpx.TransportError as exc:
            # The status line and headers came, the body did not: a 200 means the image was
            # made (and paid for) and lost on the way; its id is kept for reconciling the bill
            from afc_cli.providers.transport import AnswerTooLarge, AnswerUndecodable

            cut = transport_error(self.name, exc, paid_call=True)
            what = (
                str(exc)  # the body came, and was refused: no connection dropped
                if isinstance(exc, AnswerTooLarge | AnswerUndecodable)
                else f"the connection dropped before its body ended ({type(exc).__name__})"
            )
            raise ProviderError(
                "server" if succeeded(response.status_code) else cut.error_class,
                f"openai: answered HTTP {response.status_code}, then {what}",
                http_status=response.status_code,
                request_id=request_id,
            ) from None
        finally:
            await response.aclose()
        data = json_or_empty(response)
        if not succeeded(response.status_code):
            error = self._error(response, data)
            error.request_id = request_id
            raise error
        tokens: dict[str, Any] = {}
        usage_in = obj(data.get("usage"))
        for unit in ("input_tokens", "output_tokens"):
            if usage_in.get(unit) is not None:
                tokens[unit] = usage_in[unit]
        # of the input, the reference images' tokens: charged above the text's
        image_tokens = obj(usage_in.get("input_tokens_details")).get("image_tokens")
        if image_tokens not in (None, 0) and "input_tokens" in tokens:
            tokens["input_image_tokens"] = image_tokens
        items = data.get("data")
        item = obj(items[0]) if isinstance(items, list) and items else {}
        b64, url = text(item.get("b64_json")), text(item.get("url"))
        if not (b64 or url):
            # A 200 with no usable image was still a call made and billed: the tokens it
            # reported, their cost by the card (a token card; no image count is claimed, so a
            # per-image card leaves it unpriced, never a guessed 0) and its id stay with the
            # failed attempt, as Gemini's answer without an image keeps them
            cost = request.rates.price(self.name, request.model, tokens) if tokens else None
            raise ProviderError(
                "server",
                "openai: image has neither b64_json nor url"
                if isinstance(items, list) and items
                else f"openai: answered {response.status_code} with no image",
                usage=tokens,
                cost_micros=cost,
                cost_source="derived" if cost is not None else None,
                request_id=request_id,
            )
        # every image in the answer was paid for (``n`` > 1 makes several; the first is kept)
        usage: dict[str, Any] = {"images": len(items), **tokens}
        cost = request.rates.price(self.name, request.model, usage)
        if b64:
            # a paid answer that said what it billed: its cost stays known if the image is bad
            image = decode_b64(self.name, b64, usage, cost, request_id, image=True)
        else:
            image = await self.fetch_output(request, began, url, usage, cost, request_id)
        return AttemptResult(
            data=image,
            ext=request.params.get("output_format", "png"),
            usage=usage,
            cost_micros=cost,
            cost_source="derived" if cost is not None else None,
            provider_request_id=request_id,
        )

    def _error(self, response: Any, data: dict[str, Any]) -> ProviderError:
        status = response.status_code
        # a gateway in front may pass OpenAI's error on unwrapped: ``{"message": ...}``
        error = obj(data.get("error")) or data
        code = error.get("code") or ""
        kind = error.get("type") or ""
        message = f"openai: {error.get('message') or f'HTTP {status}'}"
        said = text(error.get("message")) or ""
        if 400 <= status < 500 and (code in MONEY or kind in MONEY):
            # out of money, not a rate nor the input: waiting (or another model on the same
            # account) will not help
            return ProviderError(
                "auth", message, http_status=status, cost_micros=0, cost_source="derived"
            )
        # ``image_generation_user_error`` is the type of gpt-image's moderation blocks (code
        # ``moderation_blocked``) and of its input errors too (``invalid_image_file``: a
        # reference image it cannot read), which are ``invalid`` like any other 400
        # (DALL-E's safety rejection has also come with no code, only its words: "Your request
        # was rejected as a result of our safety system.")
        if status == 400 and (
            code in ("content_policy_violation", "moderation_blocked")
            or (kind == "image_generation_user_error" and not code)
            or (not code and "rejected as a result of our safety system" in said)
        ):
            # a moderation block may come after the image was made: its cost is not known
            return ProviderError("refusal", message, http_status=status)
        cls = class_for_status(status)
        free = refused_free(status)
        # a 429 of the tokens-per-minute limit waits for the tokens' reset
        retry_after = retry_after_for(
            cls, response.headers, "tokens" if kind == "tokens" else "requests"
        )
        if cls == "rate_limited":
            # and for the wait its words name ("Please try again in 7.188s"): an images-per-
            # minute 429 says it there alone, its headers' reset the requests' (a moment
            # away), so the next attempt came within the backoff's jitter, and hit it again
            named = wait_in_words(said)
            if named is not None and (retry_after is None or named > retry_after):
                retry_after = named
        return ProviderError(
            cls,
            message,
            http_status=status,
            retry_after=retry_after,
            cost_micros=0 if free else None,
            cost_source="derived" if free else None,
        )
