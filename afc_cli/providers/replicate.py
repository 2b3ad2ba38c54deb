"""Replicate predictions: job-style, resumable by id.

``POST {REPLICATE_BASE_URL}/models/{owner}/{name}/predictions`` (or ``/predictions`` with a
``version`` when the model is ``owner/name:version``), then ``GET /predictions/{id}`` until
succeeded / failed / canceled / aborted. The prediction id is committed to the attempt row as
soon as the submit returns; a run that died after that polls the same prediction instead of
paying for a new one. The attempt window is sent as ``Cancel-After`` so Replicate itself stops
the prediction. Outputs are URLs that Replicate deletes after an hour: downloaded at once, and
fetched again in later rounds while they stay out of reach (``keeps_outputs_s``).
Cost: a succeeded prediction reports its outputs as ``images`` and ``metrics.predict_time`` as
``seconds``; the card prices them by the one rule (``RateCards.price`` in afc_cli/costs.py:
per_image when the card has it, else per_second). A failed one reports seconds only (one
Replicate stopped at its own 30-minute limit, "Prediction timed out", is ``window_expired``:
never sent to that model again, each retry another full run paid for); a
succeeded one whose data Replicate already removed (its output list gone) reports the images
its request asked for (``num_outputs``), which a succeeded prediction made.
"""

from __future__ import annotations

import re
from typing import Any

from afc_cli.providers.base import (
    COMPLETED,
    ENDED,
    AttemptRequest,
    AttemptResult,
    ProviderError,
)
from afc_cli.providers.http import (
    UNREADABLE_POLLS,
    HttpProvider,
    class_for_status,
    json_or_empty,
    obj,
    output_ext,
    refused_free,
    request_id_of,
    retry_after_for,
    transport_error,
)


def reference_inputs(
    field: str | None,
    images: Any,
    one: str = "image",
    several: str = "image_input",
    list_ends: tuple[str, ...] = ("s", "_input"),
) -> dict[str, Any]:
    """A manifest's ``inputs`` as the model's own input fields, as data URIs (Replicate and
    fal take a URL or a data URI for a file input): one image in ``one`` (Replicate's
    ``image``), several as a list in ``several`` (``image_input``), unless the params name
    the field (``inputs_field: input_image``; a field ending as ``list_ends`` says, or
    several images, then take a list). ``inputs_field`` itself is afc's and never sent to
    the model."""
    uris = [image.data_uri() for image in images]
    if field is None:
        return {one: uris[0]} if len(uris) == 1 else {several: uris}
    listed = field.endswith(list_ends) or len(uris) > 1
    return {field: uris if listed else uris[0]}


def inputs_field_problems(params: dict[str, Any]) -> list[str]:
    """``inputs_field``, afc's own param (Replicate's ``reference_inputs``, fal's render),
    must name a field: given as a list or a number it passed the manifest, and each run
    stopped at the job's first attempt as at a bug in afc, recording a request never sent as
    possibly paid."""
    field = params.get("inputs_field")
    if field is not None and not (isinstance(field, str) and field):
        return [
            "inputs_field: must be the name of the model's input field that takes the "
            f"reference images (text), got {field!r}"
        ]
    return []


def refused(error: str) -> bool:
    """Whether a failed prediction's ``error`` says it was refused: Replicate's moderation
    (E005, "flagged as sensitive"), or the model's own safety checker that filtered its images
    out (Replicate's flux and SDXL models: "All generated images contained NSFW content. Try
    running it again with a different prompt.", "Generated image contained NSFW content...")."""
    lowered = error.lower()
    return "E005" in error or "flagged as sensitive" in lowered or "nsfw content" in lowered


def timed_out(error: str) -> bool:
    """Whether a failed prediction's ``error`` says Replicate stopped it at its own limit on a
    prediction's run ("Prediction timed out": 30 minutes, Replicate's prediction lifecycle),
    not a model's own error that mentions a timeout (an input it could not fetch in time)."""
    return "prediction timed out" in error.lower()


# a 429's wait in its words (``ReplicateProvider._error``)
THROTTLED_FOR = re.compile(r"resets in ~?(\d+(?:\.\d+)?)s|available in (\d+(?:\.\d+)?) seconds?\b")

# the statuses a prediction ends in (Replicate's prediction lifecycle)
FINAL = ("succeeded", "failed", "canceled", "aborted")


class ReplicateProvider(HttpProvider):
    name = "replicate"
    priced_by = frozenset({"per_image", "per_second"})
    key_env = "REPLICATE_API_TOKEN"
    resumable = True
    # the model's own input, passed through: the name Replicate's image models use for
    # several outputs (every output is counted as an image)
    images_param = "num_outputs"

    base_env = "REPLICATE_BASE_URL"
    default_base = "https://api.replicate.com/v1"
    read_s = 90.0
    # API predictions' outputs are deleted an hour after they finish
    keeps_outputs_s = 55 * 60.0
    download_pool = True

    def params_problems(self, params: dict[str, Any]) -> list[str]:
        return inputs_field_problems(params)

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key()}"}

    def _error(self, response: Any, action: str) -> ProviderError:
        data = json_or_empty(response)
        status = response.status_code
        detail = data.get("detail") or data.get("title") or f"HTTP {status}"
        cls = "auth" if status == 402 else class_for_status(status)  # 402: out of credit
        retry_after = retry_after_for(cls, response.headers)
        if cls == "rate_limited" and retry_after is None:
            # the wait the throttled answer names: "Your rate limit resets in ~30s.", or, in
            # Replicate's documentation, "Expected available in 1 second."
            match = THROTTLED_FOR.search(str(detail))
            if match:
                retry_after = float(match.group(1) or match.group(2))
        # a refused submit made nothing; once a prediction exists (a poll's error), it may
        # run on and be billed whatever the poll was told: its cost is unknown. A 408 (a
        # gateway in front of Replicate that stopped waiting) may come after the prediction
        # was created, its id lost with the answer: unknown too (``refused_free``)
        free = action == "submit" and refused_free(status)
        return ProviderError(
            cls,
            f"replicate: {action}: {detail}",
            http_status=status,
            retry_after=retry_after,
            cost_micros=0 if free else None,
            cost_source="derived" if free else None,
        )

    def poll_throttled_for(self, response: Any) -> float | None:
        """``HttpProvider.poll_throttled_for``: its Retry-After, else the wait its detail names
        ("Request was throttled. Expected available in 1 second."), as a create's 429's."""
        said = retry_after_for("rate_limited", response.headers)
        if said is None:
            match = THROTTLED_FOR.search(str(json_or_empty(response).get("detail") or ""))
            if match:
                said = float(match.group(1) or match.group(2))
        return said

    async def _submit(self, request: AttemptRequest) -> str:
        import httpx

        inputs = {"prompt": request.prompt, **request.params}
        field = inputs.pop("inputs_field", None)  # afc's, not the model's: never sent
        if request.inputs:
            inputs.update(reference_inputs(field, request.inputs))
        headers = self._headers()
        if request.window_s:
            headers["Cancel-After"] = f"{max(1, int(request.window_s))}s"
        if ":" in request.model:
            url, body = (
                f"{self.base}/predictions",
                {
                    "version": request.model.split(":", 1)[1],
                    "input": inputs,
                },
            )
        else:
            url, body = self.url(f"/models/{request.model}/predictions"), {"input": inputs}
        try:
            request.last_look()
            response = await self.client.post(url, json=body, headers=headers)
        except httpx.TransportError as exc:
            raise transport_error(self.name, exc, paid_call=True) from None
        if response.status_code not in (200, 201, 202):
            raise self._error(response, "submit")
        prediction_id = request_id_of(json_or_empty(response).get("id"))
        if prediction_id is None:
            raise ProviderError("server", "replicate: submit answered without a prediction id")
        return prediction_id

    async def render(self, request: AttemptRequest) -> AttemptResult:
        began = self.clock()
        prediction_id = request.resume_id
        if prediction_id is None:
            prediction_id = await self._submit(request)
            await request.on_submitted(prediction_id)
        polls, last, unreadable = 0, None, 0
        while True:
            last = await self.poll_wait(polls, last)  # one poll per interval, never more
            polls += 1
            answer = await self.poll(
                f"{self.base}/predictions/{prediction_id}", prediction_id, self._headers()
            )
            if answer is None:
                continue  # polling is free: keep going
            response, prediction = answer
            if response.status_code != 200:
                raise self._error(response, "poll")
            status = prediction.get("status")
            if status in ("starting", "processing"):
                unreadable = 0
                continue
            if status not in FINAL:
                unreadable += 1
                if not self.unreadable_poll(unreadable):
                    continue
                # given up on: asked to stop, so it is not billed beside the next attempt.
                # Replicate answers with the prediction: one that had ended meanwhile cannot
                # be stopped, and its answer says how, as a poll's would: a success's output
                # and metrics (kept, not paid for again by the next attempt), a failure's
                # error (a refusal) and seconds. One canceled may be this cancel's doing
                said, answered = await self._cancel(prediction_id)
                if said == COMPLETED or answered.get("status") in ("failed", "aborted"):
                    return await self._finished(request, began, prediction_id, answered)
                raise ProviderError(
                    "server",
                    f"replicate: {UNREADABLE_POLLS} poll answers in a row held no prediction "
                    "status; the prediction was asked to stop",
                    http_status=200,
                    cost_micros=None,
                )
            return await self._finished(request, began, prediction_id, prediction)

    async def _finished(
        self, request: AttemptRequest, began: float, prediction_id: str, prediction: dict[str, Any]
    ) -> AttemptResult:
        status = prediction.get("status")
        seconds = obj(prediction.get("metrics")).get("predict_time")
        usage = {"seconds": seconds} if seconds is not None else {}
        cost = request.rates.price(self.name, request.model, usage) if usage else None
        priced = {
            "usage": usage,
            "cost_micros": cost,
            "cost_source": "derived" if cost is not None else None,
        }
        if status == "succeeded":
            if prediction.get("data_removed"):
                # It ran and was billed, and, succeeded, made the images its request asked for
                # (their list went with its data): priced by the card's one rule, per image
                # where the card has it, as the outputs would have been, else by its seconds
                made = {**usage, "images": self.images_requested(request.params)}
                cost = request.rates.price(self.name, request.model, made)
                # its end is this answer: paid, its output lost (a new attempt renders the
                # job), not an answer never had (``unknown``, possibly paid, counted so by
                # every report). Polled since its submit: 'unavailable', as an output URL
                # that no longer serves it; polled by its id (a run that ended left it, or its
                # window's cancel found it ended): an output lost as such a URL is
                # (``output_gone``: ``interrupted``, pipeline.render)
                lost = ProviderError(
                    "unavailable",
                    f"replicate: prediction {prediction_id} succeeded (billed), but "
                    "Replicate had already removed its data: its output is lost",
                    http_status=200,
                    usage=made,
                    cost_micros=cost,
                    cost_source="derived" if cost is not None else None,
                )
                lost.output_gone = request.resume_id is not None
                raise lost
            output = prediction.get("output")
            urls = output_urls(output)
            if not urls:
                raise ProviderError(
                    "server", "replicate: succeeded without an output URL", **priced
                )
            url = urls[0]
            ext = output_ext(url)
            # every output the prediction made was paid for (the first is kept)
            usage = {**usage, "images": len(output) if isinstance(output, list) else len(urls)}
            cost = request.rates.price(self.name, request.model, usage)
            request.on_ready()
            data = await self.fetch_output(request, began, url, usage, cost, prediction_id)
            return AttemptResult(
                data=data,
                ext=ext,
                usage=usage,
                cost_micros=cost,
                cost_source="derived" if cost is not None else None,
                provider_request_id=prediction_id,
            )
        error = str(prediction.get("error") or status)
        if status == "failed" and refused(error):
            raise ProviderError("refusal", f"replicate: {error}", **priced)
        if status == "failed" and timed_out(error):
            # Replicate's own limit on a prediction's run (30 minutes): billed for all of it,
            # as a Cancel-After deadline's ``canceled`` is, and the same input on the same
            # model runs out the same clock. Taken for a passing ``server`` failure, each of
            # the model's attempts paid for another full run
            raise ProviderError(
                "window_expired",
                f"replicate: {error} (Replicate's own limit on a prediction's run; "
                "not sent to this model again)",
                **priced,
            )
        if status == "aborted":  # Cancel-After passed before it started: not charged
            raise ProviderError(
                "window_expired",
                "replicate: aborted before it started",
                usage=usage,
                cost_micros=0,
                cost_source="derived",
            )
        if status == "canceled":
            cls = "window_expired" if request.window_s else "cancelled"
            raise ProviderError(cls, f"replicate: prediction {status}", **priced)
        raise ProviderError("server", f"replicate: {error}", **priced)

    async def cancel_answer(self, request_id: str, model: str) -> str | None:
        """``Provider.cancel_answer``: Replicate answers a cancel with the prediction; one
        that had succeeded already (it cannot be cancelled) comes back ``succeeded``:
        COMPLETED, rendered and billed, its output there to fetch by its id."""
        said, answered = await self._cancel(request_id)
        # one that had failed meanwhile was billed its seconds, as a poll of it prices them
        # (``_finished``): ENDED, priced by ``completed_usage``, not taken for stopped and
        # left unpriced for good
        return ENDED if said is None and answered.get("status") == "failed" else said

    async def completed_usage(
        self, request_id: str, model: str, params: dict[str, Any]
    ) -> dict[str, Any] | None:
        """``Provider.completed_usage``: a succeeded prediction's ``predict_time`` and the
        outputs it made, a failed one's ``predict_time`` alone, as a poll's answer prices
        them (``_finished``): one whose data
        Replicate already removed (its output list gone), the images its request asked for
        (``num_outputs``). Read as the outputs listed, none, such a prediction was left
        unpriced under a per_image card until a person retried the job."""
        response = await self.client.get(
            f"{self.base}/predictions/{request_id}", headers=self._headers()
        )
        prediction = json_or_empty(response)
        status = prediction.get("status")
        if response.status_code != 200 or status not in ("succeeded", "failed"):
            return None
        seconds = obj(prediction.get("metrics")).get("predict_time")
        usage: dict[str, Any] = {"seconds": seconds} if seconds is not None else {}
        if status == "failed":  # its seconds alone, as ``_finished`` prices a failure
            return usage or None
        output = prediction.get("output")
        urls = output_urls(output)
        if prediction.get("data_removed"):
            usage["images"] = self.images_requested(params)
        elif urls:
            usage["images"] = len(output) if isinstance(output, list) else len(urls)
        return usage or None

    async def stop_left(self, request_id: str, model: str) -> str | None:
        """``Provider.stop_left``: read by its id also when the cancel's answer says the
        prediction had ended by itself, failed or aborted: its end, as Replicate recorded it,
        is read by its id (a refusal at its seconds, an abort that cost nothing), not taken
        for the window's doing at a cost unknown."""
        said, answered = await self._cancel(request_id)
        if said == COMPLETED or answered.get("status") in ("failed", "aborted"):
            return "the provider says it had ended"
        return None

    async def _cancel(self, request_id: str) -> tuple[str | None, dict[str, Any]]:
        """``cancel_answer``'s answer, and the prediction Replicate answered with (empty
        when it gave none)."""
        import httpx

        try:
            response = await self.send_cancel(
                lambda: self.client.post(
                    f"{self.base}/predictions/{request_id}/cancel", headers=self._headers()
                )
            )
        except httpx.TransportError as exc:
            return f"no answer ({exc.__class__.__name__})", {}
        if not 200 <= response.status_code < 300:
            return f"HTTP {response.status_code}", {}
        prediction = json_or_empty(response)
        return (COMPLETED if prediction.get("status") == "succeeded" else None), prediction


def output_urls(output: Any) -> list[str]:
    """The output URLs of a succeeded prediction, in order: its ``output`` is a URL, a list of
    them (most image models), or, for a model whose output schema is an object
    (``{"image": URL, "seed": 42}``), that object's URL values (a list's too). An object
    output was "succeeded without an output URL": a failed ``server`` attempt at its cost,
    and each attempt after it paid again for the same answer."""
    if isinstance(output, str):
        return [output]
    if isinstance(output, list):
        return [output[0]] if output and isinstance(output[0], str) else []  # the first kept
    if isinstance(output, dict):
        found = []
        for value in output.values():
            for url in value if isinstance(value, list) else [value]:
                if isinstance(url, str) and url.lower().startswith(
                    ("https://", "http://", "data:")
                ):
                    found.append(url)
        return found
    return []
