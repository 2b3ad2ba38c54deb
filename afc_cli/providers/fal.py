"""fal's queue API: job-style, resumable by request id.

``POST {FAL_QUEUE_URL}/{model_id}`` answers ``request_id``, ``status_url``, ``response_url``
and ``cancel_url`` (used when on the queue's own origin, as they carry the key; else afc's
own, below); afc commits the request id at once, polls the status URL (202 while
IN_QUEUE / IN_PROGRESS, 200 when COMPLETED), then fetches the result and its image right away
(results are kept minutes for large payloads), again in later rounds while they stay out of
reach (``keeps_outputs_s``); a result that is fal's own 5xx (``_ended_by_fal``: a request
that failed says COMPLETED, and its result is the error) is the request's end, unbilled, and
is not asked for again. A resumed job rebuilds those URLs from the id
(``{FAL_QUEUE_URL}/{owner}/{app}/requests/{id}/status``: fal drops the model's subpath, and
keeps a namespace, ``workflows/{owner}/{app}/requests/...``) and
polls instead of submitting again. The synchronous ``fal.run`` endpoint, billed even when the
connection drops, is never used. An image fal's safety checker flagged (``has_nsfw_concepts``)
comes blacked out: never kept; every image flagged is a refusal, paid. Cost: the images produced at the rate card's ``per_image``,
or their megapixels (each image's ``width`` x ``height``, rounded up to whole megapixels of
1024 x 1024 pixels: ``images_usage``) at its ``per_megapixel``, as fal bills its models priced
by resolution (derived; the rule is ``RateCards.price`` in afc_cli/costs.py); a request that
completed but whose result fal already deleted (404), the images its request asked for
(``num_images``), whose sizes went with it: their megapixels from the size the request asked
for (``image_size``: ``requested_usage``), where it names one.
"""

from __future__ import annotations

from typing import Any

from afc_cli.providers.base import (
    COMPLETED,
    AttemptRequest,
    AttemptResult,
    ProviderError,
    RequestGone,
)
from afc_cli.providers.http import (
    UNREADABLE_POLLS,
    HttpProvider,
    NotAnOutput,
    class_for_status,
    fetched,
    http_url,
    json_object,
    json_or_empty,
    objs,
    passing,
    refused_free,
    request_id_of,
    retry_after_for,
    same_origin,
    text,
    transport_error,
    unreachable,
)

# the namespaces a fal app id may begin with (``workflows/OWNER/NAME``), which its queue
# URLs keep
NAMESPACES = frozenset({"workflows", "comfy"})

# fal's error_type for a request its infrastructure failed, with the 5xx status it ends the
# request in (fal's reference of its request error types; the 503s and 504s fal retries
# itself first): fal bills no request that ends in a 5xx. (Its other request errors, 499 and
# 400, are not of these.)
INFRASTRUCTURE_ERRORS = {
    "request_timeout": 504,
    "startup_timeout": 504,
    "runner_scheduling_failure": 503,
    "runner_connection_timeout": 503,
    "runner_disconnected": 503,
    "runner_connection_refused": 503,
    "runner_connection_error": 503,
    "runner_incomplete_response": 502,
    "runner_server_error": 500,
    "internal_error": 500,
}


class _Ended(Exception):
    """A result answer that is the request's own end (``_ended_by_fal``): never asked again."""

    def __init__(self, response: Any) -> None:
        super().__init__("ended")
        self.response = response


def _ended_by_fal(response: Any) -> str | None:
    """The ``error_type`` a request's result answer ends it with (``INFRASTRUCTURE_ERRORS``:
    fal's own 5xx, unbilled), in its body or its ``X-Fal-Error-Type`` header, when the answer
    is a 5xx; else None (a gateway's page in front of the queue: out of reach for a moment)."""
    if response.status_code < 500:
        return None
    said = [text(json_or_empty(response).get("error_type"))]
    said.append(text(response.headers.get("x-fal-error-type", "").strip()))
    return next((kind for kind in said if kind in INFRASTRUCTURE_ERRORS), None)


def _policy_violation(data: dict[str, Any]) -> bool:
    detail = data.get("detail")
    items = detail if isinstance(detail, list) else [data]
    return (
        any(
            isinstance(item, dict) and item.get("type") == "content_policy_violation"
            for item in items
        )
        or data.get("error_type") == "content_policy_violation"
    )


def reference_fields(field: str | None, images: Any) -> dict[str, Any]:
    """A manifest's ``inputs`` as the model's own input field (``replicate.reference_inputs``
    with fal's names): one image as ``image_url``, several as ``image_urls``, unless the
    params name the model's field (``inputs_field: image_urls``: each model names its own,
    ``fal-ai/nano-banana/edit`` a list even of one image, others ``input_image_urls`` or
    ``reference_image_url``), a list where the name ends in ``s`` or several images are
    sent. Sent as ``image_url`` to such a model, a reference was refused at every attempt,
    or, where the model's own field is optional, dropped from a render paid for all the
    same."""
    from afc_cli.providers.replicate import reference_inputs

    return reference_inputs(field, images, "image_url", "image_urls", ("s",))


def result_files(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The files a completed request's result names, in order: an image model's ``images``
    (or ``image``); in a result with neither, the file objects (``{"url", "content_type",
    ...}``, alone or in a list) among its fields: a video model's ``video``
    (``fal-ai/kling-video``, ``fal-ai/veo3``), an audio model's ``audio``. Read as ``images`` alone, such a result
    was "completed without an image": a failed ``server`` attempt of unknown cost, and each
    attempt after it paid for the same clip again."""
    images = objs(result.get("images")) or objs([result.get("image")])
    if images or "images" in result or "image" in result:
        return images  # an image model's answer, read as ever (none made: none)
    found = []
    for value in result.values():
        for item in objs(value if isinstance(value, list) else [value]):
            url = text(item.get("url"))
            if url is not None and url[:5].lower() in ("https", "http:", "data:"):
                found.append(item)
    return found


# fal's megapixel, as it bills its models priced by resolution: 1024 x 1024 pixels (flux/dev's
# 0.025 a megapixel is its price of a 1024x1024 image), each image's rounded up to a whole one
MEGAPIXEL = 1024 * 1024


def images_usage(images: list[dict[str, Any]]) -> dict[str, Any]:
    """What the images of a result report for their price: how many (``images``: every one
    made was billed) and, when each gives its ``width`` and ``height`` in whole pixels, their
    ``megapixels``, each image's rounded up to a whole megapixel (``MEGAPIXEL``), which a
    card's ``per_megapixel`` prices (``RateCards.price``). Priced as images alone, a
    2048x2048 render of a model billed 0.025 a megapixel was recorded, and reserved, at a
    quarter of its bill. One image without its size and no megapixels are reported: the
    card's ``per_image`` prices the answer, or it is unpriced, never a part of it."""
    usage: dict[str, Any] = {"images": len(images)}
    sizes = [(image.get("width"), image.get("height")) for image in images]
    if sizes and all(
        isinstance(side, int) and not isinstance(side, bool) and side > 0
        for size in sizes
        for side in size
    ):
        usage["megapixels"] = sum(-(-(w * h) // MEGAPIXEL) for w, h in sizes)
    return usage


# fal's named ``image_size`` presets (its image models' input), each 1 megapixel or less
PRESET_SIZES = {
    "square_hd": (1024, 1024),
    "square": (512, 512),
    "portrait_4_3": (768, 1024),
    "portrait_16_9": (576, 1024),
    "landscape_4_3": (1024, 768),
    "landscape_16_9": (1024, 576),
}


def requested_size(params: dict[str, Any]) -> tuple[int, int] | None:
    """The width and height of each image a request's ``image_size`` asks for: its
    ``{width, height}`` in whole pixels, or a named preset's (``PRESET_SIZES``); None where it
    names none afc can read (the model's own default then, which afc does not know)."""
    size = params.get("image_size")
    if isinstance(size, str):
        return PRESET_SIZES.get(size)
    if not isinstance(size, dict):
        return None
    sides = (size.get("width"), size.get("height"))
    if all(isinstance(side, int) and not isinstance(side, bool) and side > 0 for side in sides):
        return sides[0], sides[1]
    return None


class FalProvider(HttpProvider):
    name = "fal"
    priced_by = frozenset({"per_image", "per_megapixel"})
    key_env = "FAL_KEY"
    resumable = True
    # the model's own input, passed through: the name fal's image models use for several
    # images (every image of the result is counted)
    images_param = "num_images"

    def requested_usage(self, params: dict[str, Any]) -> dict[str, Any]:
        """What a completed request whose result fal already deleted (404) made and was
        billed for, its list of images gone with the result: the images its request asked
        for (``num_images``) and, where its ``image_size`` says their size
        (``requested_size``), their megapixels, each image's rounded up as ``images_usage``
        rounds a result's. Priced as images alone, a 2048x2048 render of a model billed
        0.025 a megapixel was recorded at 0.025 (a quarter of its bill) under a card with
        ``per_image``, and left unpriced under a ``per_megapixel`` card alone."""
        images = self.images_requested(params)
        usage: dict[str, Any] = {"images": images}
        size = requested_size(params)
        if size is not None:
            usage["megapixels"] = images * -(-(size[0] * size[1]) // MEGAPIXEL)
        return usage

    def megapixels_requested(self, params: dict[str, Any]) -> int | None:
        """``Provider.megapixels_requested``: the megapixels of the images asked for
        (``requested_usage``: ``num_images`` times the ``image_size``'s, a preset or
        ``{width, height}`` in whole pixels, each image rounded up as fal bills it); None when
        the size is left out or unreadable (the model's default: the card's ``per_image`` alone
        estimates it). The estimate a budget reserves for a 2048x2048 render of a card
        billing 0.025 a megapixel is its 0.10, not ``per_image``'s 0.025: reserving that,
        five such renders under --max-spend 0.30 at --concurrency 8 all started, 0.50 spent."""
        return self.requested_usage(params).get("megapixels")

    def params_problems(self, params: dict[str, Any]) -> list[str]:
        from afc_cli.providers.replicate import inputs_field_problems

        return inputs_field_problems(params)

    base_env = "FAL_QUEUE_URL"
    default_base = "https://queue.fal.run"
    read_s = 90.0
    # a result of 10 KB or more is kept 6 minutes (unless payload storage is on), a smaller
    # one an hour: the shorter, less a margin
    keeps_outputs_s = 5 * 60.0
    download_pool = True

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Key {self.api_key()}"}

    def urls(self, model: str, request_id: str) -> dict[str, str]:
        # the app's owner and name, less the model's subpath; a namespaced app's (fal's
        # workflows and ComfyUI apps) with its namespace, as fal's own client builds them: its
        # first two segments alone named no request, so a resume took the 404 for a request
        # fal let go and paid for a new one, and a cancel never reached it
        parts = model.split("/")
        app = "/".join(parts[: 3 if parts[0] in NAMESPACES else 2])
        root = f"{self.base}/{app}/requests/{request_id}"
        return {
            "status_url": f"{root}/status",
            "response_url": root,
            "cancel_url": f"{root}/cancel",
        }

    def _error(self, response: Any, action: str) -> ProviderError:
        data = json_or_empty(response)
        status = response.status_code
        # A submit fal itself refused was not queued (fal bills no request that ends in 5xx,
        # nor one it refused): a 4xx, or a 5xx in fal's own words (its JSON detail, its
        # X-Fal-Error-Type). A bare 502/504 may come from a gateway in front of a request
        # already queued, and once a request is queued (a status or result error) it may run
        # on and be billed whatever that answer was: its cost is unknown. So is a 408's (a
        # gateway that stopped waiting may answer it after fal queued the request:
        # ``refused_free``).
        fals_own = bool(data.get("detail")) or "x-fal-error-type" in response.headers
        free = action == "submit" and (refused_free(status) or (status >= 500 and fals_own))
        if _policy_violation(data):
            return ProviderError(
                "refusal",
                f"fal: {action}: content policy violation",
                http_status=status,
                cost_micros=0 if free else None,
                cost_source="derived" if free else None,
            )
        cls = class_for_status(status)
        retryable = response.headers.get("x-fal-retryable", "").lower()
        if retryable == "false" and status < 500 and cls not in ("auth", "rate_limited"):
            # fal says sending this same request again will not pass: a 4xx is then the
            # input's fault, as any other 4xx. Not a 5xx or a 429: that says the same of fal's
            # own failure, not of the input, and made ``invalid`` it stopped the whole chain,
            # the fallback model never tried. It keeps its class (README "Error classes")
            cls = "invalid"
        elif retryable == "true" and cls == "invalid" and action == "submit":
            # fal says this refused submit may pass when sent again (an input URL it could not
            # fetch in time, say): a transient failure, retried with backoff like a 503, not
            # the end of the model; it cost nothing (below). Not on a status or result answer:
            # that request was queued and may have run, and sending again is a new payment.
            cls = "unavailable"
        detail = data.get("detail") or f"HTTP {status}"
        return ProviderError(
            cls,
            f"fal: {action}: {detail}",
            http_status=status,
            retry_after=retry_after_for(cls, response.headers),
            cost_micros=0 if free else None,
            cost_source="derived" if free else None,
        )

    async def render(self, request: AttemptRequest) -> AttemptResult:
        import httpx

        began = self.clock()
        if request.resume_id:
            request_id = request.resume_id
            urls = self.urls(request.model, request_id)
        else:
            try:
                body = {"prompt": request.prompt, **request.params}
                field = body.pop("inputs_field", None)  # afc's, not the model's: never sent
                if request.inputs:
                    body.update(reference_fields(field, request.inputs))
                request.last_look()
                response = await self.client.post(
                    self.url(f"/{request.model}"), json=body, headers=self._headers()
                )
            except httpx.TransportError as exc:
                raise transport_error(self.name, exc, paid_call=True) from None
            if response.status_code not in (200, 201, 202):
                raise self._error(response, "submit")
            queued = json_or_empty(response)
            request_id = request_id_of(queued.get("request_id"))
            if request_id is None:
                raise ProviderError("server", "fal: submit answered without a request_id")
            await request.on_submitted(request_id)
            # the answer's URLs where they are on the queue's own origin (they carry the key),
            # else afc's own for the request
            urls = {
                **self.urls(request.model, request_id),
                **{
                    k: queued[k]
                    for k in ("status_url", "response_url", "cancel_url")
                    if http_url(queued.get(k)) and same_origin(queued[k], self.base)
                },
            }
        polls, last, unreadable = 0, None, 0
        while True:
            last = await self.poll_wait(polls, last)  # one poll per interval, never more
            polls += 1
            answer = await self.poll(urls["status_url"], request_id, self._headers())
            if answer is None:
                continue  # polling is free: keep going
            response, state = answer
            status = state.get("status")
            queued = status in ("IN_QUEUE", "IN_PROGRESS")
            said = text(status) is not None
            if queued or (response.status_code == 202 and said and status != "COMPLETED"):
                # fal's 202 carries its JSON (IN_QUEUE); a 202 with no status in it (a proxy's
                # "accepted" page, or a gateway's JSON of its own: {"message": "Accepted"})
                # says nothing of the request: counted below as an unreadable answer, as a
                # 200's is, not taken for "still queued" (a status URL answering only that
                # was polled for ever when no window_s bounds the attempt). A gateway's 202
                # that says COMPLETED is read as fal's 200 is: polled on, a finished request
                # was polled until its window ended, or for ever
                unreadable = 0
                continue
            if response.status_code not in (200, 202):
                raise self._error(response, "status")
            if status != "COMPLETED":
                unreadable += 1
                if not self.unreadable_poll(unreadable, response.status_code):
                    continue
                # given up on the status: its result is asked for (free), which a request
                # still running does not have
            break
        if state.get("error"):
            if _policy_violation(state):
                raise ProviderError("refusal", f"fal: {state.get('error')}", cost_micros=None)
            if (error_type := text(state.get("error_type"))) in INFRASTRUCTURE_ERRORS:
                # the request ended in a 5xx of fal's own, after fal's own retries: fal
                # bills no request that ends in 5xx; classed by that status, as a submit's is
                raise ProviderError(
                    class_for_status(INFRASTRUCTURE_ERRORS[error_type]),
                    f"fal: {state.get('error')} ({error_type})",
                    cost_micros=0,
                    cost_source="derived",
                )
            raise ProviderError("server", f"fal: {state.get('error')}", cost_micros=None)
        if state.get("status") == "COMPLETED":
            request.on_ready()  # not after a status given up on: it may still be running

        async def get() -> Any:
            response = await self.client.get(
                urls["response_url"], headers=self._headers(), follow_redirects=True
            )
            if response.status_code == 200 and not json_object(response):
                # a proxy's or captive portal's page: the result is still at fal
                raise NotAnOutput("a body that is no JSON object")
            if _ended_by_fal(response) is not None:
                raise _Ended(response)  # the request's end: the same answer each time
            return response

        async def result() -> Any:  # free GETs, a round of them; the work was done
            try:
                response = await fetched(get, self.sleep, self.rand)
            except _Ended as ended:
                return ended.response
            except httpx.TransportError as exc:
                raise unreachable(
                    transport_error(self.name, exc, paid_call=False, fetching="its result")
                ) from None
            except httpx.TooManyRedirects:  # a proxy's loop: the result is still at fal
                raise unreachable(
                    ProviderError(
                        "unavailable",
                        f"{self.name}: the result URL redirects too many times",
                        cost_micros=None,
                    )
                ) from None
            except NotAnOutput as exc:
                raise unreachable(
                    ProviderError(
                        "unavailable",
                        f"{self.name}: the result answered HTTP 200 with {exc}, not the result",
                        cost_micros=None,
                    )
                ) from None
            if passing(response.status_code):
                raise unreachable(self._error(response, "result"))
            return response

        response = await self.outlast(request, began, result)
        if (error_type := _ended_by_fal(response)) is not None:
            # the request's own end, not its result out of reach for a moment: fal's status
            # says COMPLETED for a request that failed, and its result is the error, in fal's
            # request-error shape, at the 5xx it ended with, every time it is asked (fal's own
            # client asks again only for an ingress error, a gateway's page without fal's
            # request id). Fetched again in rounds for minutes, it ended the attempt at a cost
            # unknown; fal bills no request that ends in a 5xx, classed as in a status (above)
            detail = json_or_empty(response).get("detail") or f"HTTP {response.status_code}"
            raise ProviderError(
                class_for_status(INFRASTRUCTURE_ERRORS[error_type]),
                f"fal: result: {detail} ({error_type})",
                http_status=response.status_code,
                cost_micros=0,
                cost_source="derived",
                request_id=request_id,
            )
        if state.get("status") != "COMPLETED" and response.status_code not in (200, 404):
            # Given up on its status, and its result is not there: fal answers a request still
            # queued or running 400 ("still in progress"). Taken for the answer, that was
            # ``invalid``, ending the chain, and the request, never cancelled, rendered on and
            # was billed beside the next attempt. It is asked to stop, as Replicate's is: one
            # that completed meanwhile (ALREADY_COMPLETED: rendered, billed) has its result
            # fetched, not paid for again; else a failed attempt of unknown cost (one running
            # may render all the same), and the chain goes on
            said = await self.cancel_answer(request_id, request.model)
            if said != COMPLETED:
                raise ProviderError(
                    "server",
                    f"fal: {UNREADABLE_POLLS} status answers in a row held no status afc can "
                    f"read, and its result answered HTTP {response.status_code}; the request "
                    "was asked to stop" + (f" (the cancel: {said})" if said else ""),
                    http_status=response.status_code,
                    cost_micros=None,
                )
            state = {"status": "COMPLETED"}
            request.on_ready()
            response = await self.outlast(request, began, result)
        if response.status_code == 404:
            if state.get("status") == "COMPLETED":
                # It completed without an error, so it made (and fal billed) the images its
                # request asked for: their list went with the result, their price did not.
                # (Not a status given up on as unreadable: it may never have completed.)
                # Paid, its output lost, as a Replicate prediction's removed data: not an
                # answer never had (``unknown``, possibly paid, counted so by every report)
                made = self.requested_usage(request.params)
                cost = request.rates.price(self.name, request.model, made)
                lost = ProviderError(
                    "unavailable",
                    f"{self.name}: request {request_id} completed (billed), but its result "
                    "was already deleted: its output is lost",
                    http_status=404,
                    usage=made,
                    cost_micros=cost,
                    cost_source="derived" if cost is not None else None,
                )
                # polled by its id (a run that ended left it): ``interrupted`` (pipeline)
                lost.output_gone = request.resume_id is not None
                raise lost
            raise RequestGone(self.name, request_id, "its result was already deleted")
        if response.status_code != 200:
            error = self._error(response, "result")
            error.cost_micros, error.cost_source = None, None  # the work was done
            raise error
        result = json_or_empty(response)
        images = result_files(result)
        if not any(text(image.get("url")) for image in images):
            raise ProviderError("server", "fal: completed without an image", cost_micros=None)
        usage = images_usage(images)  # every image made was paid for (one is kept)
        cost = request.rates.price(self.name, request.model, usage)
        # fal's safety checker answers an image it flagged as a black one, saying so in
        # ``has_nsfw_concepts`` (one flag an image): the first image not flagged is kept; all
        # flagged is a refusal, made and billed
        flags = result.get("has_nsfw_concepts")
        flags = flags if isinstance(flags, list) else []
        kept = [img for i, img in enumerate(images) if not (i < len(flags) and flags[i] is True)]
        if not kept:
            raise ProviderError(
                "refusal",
                "fal: blocked by its safety checker (has_nsfw_concepts: the image was blacked out)",
                usage=usage,
                cost_micros=cost,
                cost_source="derived" if cost is not None else None,
                request_id=request_id,
            )
        # the first kept image at a URL: read as the first alone, one the result named
        # without a URL failed the attempt though fal billed every image, and the next
        # attempt paid for them again
        image = next((img for img in kept if text(img.get("url"))), kept[0])
        url = text(image.get("url"))
        if url is None:
            raise ProviderError(
                "server",
                "fal: completed without an image URL",
                usage=usage,
                cost_micros=cost,
                cost_source="derived" if cost is not None else None,
                request_id=request_id,
            )
        data = await self.fetch_output(request, began, url, usage, cost, request_id)
        content_type = text(image.get("content_type")) or "image/png"
        return AttemptResult(
            data=data,
            ext=content_type.split("/")[-1],
            usage=usage,
            cost_micros=cost,
            cost_source="derived" if cost is not None else None,
            provider_request_id=request_id,
        )

    async def completed_usage(
        self, request_id: str, model: str, params: dict[str, Any]
    ) -> dict[str, Any] | None:
        """``Provider.completed_usage``: the images a completed request's result names, as
        its poll prices them (``render``); once fal deleted the result (404), the images its
        request asked for (``num_images``) and their size's megapixels (``requested_usage``)
        when its status says it completed without an error
        (a second free GET), as ``render`` prices a completed request whose result is gone:
        read as none, it was left unpriced under a per_image card until a person retried the
        job. One that ended in an error (fal bills none of its own 5xx) is not priced so."""
        urls = self.urls(model, request_id)
        response = await self.client.get(
            urls["response_url"], headers=self._headers(), follow_redirects=True
        )
        if response.status_code == 404:
            status = await self.client.get(
                urls["status_url"], headers=self._headers(), follow_redirects=True
            )
            state = json_or_empty(status)
            if status.status_code == 200 and state.get("status") == "COMPLETED":
                if not state.get("error"):
                    return self.requested_usage(params)
            return None
        if response.status_code != 200:
            return None
        images = result_files(json_or_empty(response))
        return images_usage(images) if images else None

    async def stop_left(self, request_id: str, model: str) -> str | None:
        """``Provider.stop_left``: read by its id also when fal did not take the cancel (no
        answer, a 429 or a 5xx; not a 4xx, which names a request fal cannot cancel). fal has
        no window of its own: nothing stopped such a request, which renders on and is
        billed. Taken for stopped, its attempt was ``window_expired`` at a cost unknown, the
        next model paid again for the one output, and no run ever asked for the result fal
        kept (tests/test_audit65e_window_cancel_refused.py). Read within one more window, a
        result it made is stored; one still running then is asked to stop again and fails
        ``window_expired`` (the pipeline never reads it a third time). So is one whose
        cancel fal does not answer within ``STOP_ANSWER_S`` (the run's own bound on it,
        ``pipeline.CANCEL_WAIT_S``, took such a cancel for stopped)."""
        import asyncio

        try:
            said = await asyncio.wait_for(self.cancel_answer(request_id, model), STOP_ANSWER_S)
        except TimeoutError:
            said = f"no answer in {STOP_ANSWER_S:g}s"
        if said == COMPLETED:
            return "fal says it had completed"
        if said is not None and not_taken(said):
            return f"fal did not take the cancel ({said}): it may render on, billed"
        return None

    async def cancel_answer(self, request_id: str, model: str) -> str | None:
        """``Provider.cancel_answer``: COMPLETED when fal says ALREADY_COMPLETED, whatever
        status carries it (fal's documentation lists it among the statuses of the cancel's
        one answer; afc met it on a 400, a gateway in front may say 409): read only on a
        400, a 200 saying so was taken for a request stopped, and a window's cancel that
        found the request completed (rendered, billed, its result kept) went on to the next
        model, which paid again for the one output."""
        import httpx

        try:
            response = await self.send_cancel(
                lambda: self.client.put(
                    self.urls(model, request_id)["cancel_url"], headers=self._headers()
                )
            )
        except httpx.TransportError as exc:
            return f"no answer ({exc.__class__.__name__})"
        said = json_or_empty(response).get("status")
        if said == ALREADY_COMPLETED and response.status_code < 500:
            return COMPLETED
        return None if 200 <= response.status_code < 300 else f"HTTP {response.status_code}"


# fal's answer to a cancel of a request that completed (rendered and billed) before it came
ALREADY_COMPLETED = "ALREADY_COMPLETED"
# how long a window's cancel (``FalProvider.stop_left``) waits for fal's answer: less than the
# run's own bound on it (``pipeline.CANCEL_WAIT_S``, 10 s), so a cancel fal never answers is
# one it did not take, not one taken for stopped
STOP_ANSWER_S = 8.0


def not_taken(said: str) -> bool:
    """Whether ``cancel_answer``'s ``said`` (not None, not COMPLETED) is a cancel fal did not
    take: no answer, a 429 (throttled, after ``send_cancel``'s tries) or a 5xx. Pure."""
    if said.startswith("no answer"):
        return True
    status = said.removeprefix("HTTP ")
    return status.isdigit() and (status == "429" or int(status) >= 500)
