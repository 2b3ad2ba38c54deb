"""Whatever a provider answers, its adapter ends an attempt with a result or a classified
ProviderError, never another exception.

Why it matters: an exception that is not a ProviderError stops the whole run, and a stopping
run used to cancel every other call in flight into an ``unknown``, possibly paid attempt that
the next run pays for again. So one garbled answer (a proxy's HTML page with status 200, an
array where an object belongs, base64 that is not) could cost a batch's whole width twice.

Each example is served over real HTTP on 127.0.0.1 by a server that answers the adapter's
requests from a script: the answers hypothesis drew, in order, near each API's format (its
documented fields with any JSON in them) and far from it (any JSON, bytes that are not JSON).
Output URLs on the server answer a PNG. Polling waits through the adapter's injectable sleep.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
import typing
from decimal import Decimal
from http.server import BaseHTTPRequestHandler

import pytest
from fakeproviders import KEYS, BackloggedServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afc_cli.costs import RateCards
from afc_cli.manifest import ErrorClassName
from afc_cli.providers.base import AttemptRequest, AttemptResult, ProviderError
from afc_cli.providers.fal import FalProvider
from afc_cli.providers.gemini import GeminiProvider
from afc_cli.providers.openai import OpenAIProvider
from afc_cli.providers.replicate import ReplicateProvider

ATTEMPT_CLASSES = set(typing.get_args(ErrorClassName)) - {"exhausted"}

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
PRICES = {
    "per_image": Decimal("0.04"),
    "per_second": Decimal("0.001"),
    "per_1k_input_tokens": Decimal("0.005"),
    "per_1k_output_tokens": Decimal("0.04"),
}
MODELS = {
    "openai": "gpt-image-1",
    "replicate": "owner/model",
    "fal": "fal-ai/flux/dev",
    "gemini": "gemini-2.5-flash-image",
}


class ScriptedServer:
    """Answers each request with the next (status, body) of ``script``; once the script is
    spent, with ``after`` (an answer that ends a polling adapter's loop). Any GET under
    ``/files/`` answers a PNG."""

    def __init__(self) -> None:
        self.script: list[tuple[int, bytes]] = []
        self.after: tuple[int, bytes] = (500, b"{}")
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                if self.path.startswith("/files/"):
                    status, body, kind = 200, PNG, "image/png"
                else:
                    with outer.lock:
                        status, body = outer.script.pop(0) if outer.script else outer.after
                    kind = "application/json"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = _answer

        self.server = BackloggedServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        host, port = self.server.server_address[:2]
        self.base = f"http://{host}:{port}"


@pytest.fixture(scope="module")
def server():
    scripted = ScriptedServer()
    yield scripted
    scripted.server.shutdown()


@pytest.fixture(autouse=True)
def endpoints(server, monkeypatch):
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.base}/v1")
    monkeypatch.setenv("REPLICATE_BASE_URL", f"{server.base}/v1")
    monkeypatch.setenv("FAL_QUEUE_URL", server.base)
    monkeypatch.setenv("GEMINI_BASE_URL", f"{server.base}/v1beta")


# --- answers ------------------------------------------------------------------------------

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
anything = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
b64_texts = st.sampled_from(
    [base64.b64encode(PNG).decode(), "not base64!", "QUJD", "QUJ", "é", "", "===="]
)


def url_texts(server):
    return st.sampled_from(
        [f"{server.base}/files/out.png", "not a url", "http://[::1", "ftp://x/y", ""]
    )


def field(values):
    return values | anything


def body(values) -> st.SearchStrategy[bytes]:
    """An answer's bytes: JSON near the format (``values``), any JSON, or not JSON at all."""
    return st.one_of(
        values.map(lambda v: json.dumps(v).encode()),
        anything.map(lambda v: json.dumps(v).encode()),
        st.sampled_from([b"", b"<html>502 Bad Gateway</html>", b"[" * 5000 + b"]" * 5000]),
    )


def answers(server, provider: str) -> st.SearchStrategy[list[tuple[int, bytes]]]:
    statuses = st.sampled_from([200, 200, 200, 201, 202, 400, 404, 429, 500])
    urls = url_texts(server)
    if provider == "openai":
        item = st.fixed_dictionaries(
            {}, optional={"b64_json": field(b64_texts), "url": field(urls)}
        )
        values = st.fixed_dictionaries(
            {"data": field(st.lists(field(item), max_size=2))},
            optional={
                "usage": field(
                    st.fixed_dictionaries(
                        {}, optional={"input_tokens": anything, "output_tokens": anything}
                    )
                ),
                "error": field(
                    st.fixed_dictionaries(
                        {}, optional={"code": anything, "type": anything, "message": anything}
                    )
                ),
            },
        )
        return st.lists(st.tuples(statuses, body(values)), min_size=1, max_size=2)
    if provider == "replicate":
        submit = st.fixed_dictionaries({"id": field(st.just("p1"))})
        poll = st.fixed_dictionaries(
            {
                "status": field(
                    st.sampled_from(["succeeded", "failed", "canceled", "aborted", "processing"])
                )
            },
            optional={
                "output": field(urls | st.lists(field(urls), max_size=2)),
                "metrics": field(st.fixed_dictionaries({"predict_time": anything})),
                "error": anything,
                "data_removed": anything,
            },
        )
        return st.tuples(
            st.tuples(statuses, body(submit)), st.lists(st.tuples(statuses, body(poll)), max_size=2)
        ).map(lambda t: [t[0], *t[1]])
    if provider == "fal":
        submit = st.fixed_dictionaries(
            {"request_id": field(st.just("r1"))},
            optional={"status_url": field(urls), "response_url": field(urls)},
        )
        status = st.fixed_dictionaries(
            {"status": field(st.sampled_from(["COMPLETED", "IN_QUEUE", "IN_PROGRESS"]))},
            optional={"error": anything, "detail": anything, "error_type": anything},
        )
        image = st.fixed_dictionaries(
            {"url": field(urls)}, optional={"content_type": field(st.just("image/png"))}
        )
        result = st.fixed_dictionaries(
            {},
            optional={"images": field(st.lists(field(image), max_size=2)), "image": field(image)},
        )
        return st.tuples(
            st.tuples(statuses, body(submit)),
            st.tuples(statuses, body(status)),
            st.tuples(statuses, body(result)),
        ).map(list)
    part = st.fixed_dictionaries(
        {},
        optional={
            "inlineData": field(
                st.fixed_dictionaries(
                    {"data": field(b64_texts)},
                    optional={"mimeType": field(st.just("image/png"))},
                )
            ),
            "text": anything,
        },
    )
    candidate = st.fixed_dictionaries(
        {},
        optional={
            "content": field(
                st.fixed_dictionaries({"parts": field(st.lists(field(part), max_size=2))})
            ),
            "finishReason": field(st.sampled_from(["STOP", "SAFETY", "IMAGE_SAFETY"])),
        },
    )
    values = st.fixed_dictionaries(
        {"candidates": field(st.lists(field(candidate), max_size=2))},
        optional={
            "usageMetadata": field(
                st.fixed_dictionaries(
                    {}, optional={"promptTokenCount": anything, "candidatesTokenCount": anything}
                )
            ),
            "promptFeedback": field(st.fixed_dictionaries({"blockReason": anything})),
            "responseId": anything,
            "error": field(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "details": field(
                            st.lists(
                                field(
                                    st.fixed_dictionaries({"reason": anything, "@type": anything})
                                ),
                                max_size=2,
                            )
                        ),
                        "status": anything,
                        "message": anything,
                    },
                )
            ),
        },
    )
    return st.lists(st.tuples(statuses, body(values)), min_size=1, max_size=1)


PROVIDERS = {
    "openai": OpenAIProvider,
    "replicate": ReplicateProvider,
    "fal": FalProvider,
    "gemini": GeminiProvider,
}
TERMINAL = {
    "openai": (500, b"{}"),
    "replicate": (200, b'{"status": "failed", "error": "done"}'),
    # fal polls on through 5xx and 429 (polling is free): the end is a finished status
    "fal": (200, b'{"status": "COMPLETED", "error": "done"}'),
    "gemini": (500, b"{}"),
}


async def render(provider_name: str) -> AttemptResult | ProviderError:
    provider = PROVIDERS[provider_name]()
    waits: list[float] = []
    # the adapter's time runs on its sleeps: a result fetched again in later rounds (fal's
    # response_url answering a PNG, no JSON: ``NotAnOutput``) ends when the provider's
    # retention ends, by this clock, not after minutes of real time past the 10 s below
    now = [time.monotonic()]

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds
        await asyncio.sleep(0)

    provider.sleep = sleep
    provider.clock = lambda: now[0]
    submitted: list[str] = []

    async def on_submitted(request_id: str) -> None:
        submitted.append(request_id)

    model = MODELS[provider_name]
    request = AttemptRequest(
        job_id="j1",
        key="k1",
        prompt="a lighthouse",
        params={},
        provider=provider_name,
        model=model,
        attempt=1,
        rates=RateCards({(provider_name, model): PRICES}),
        on_submitted=on_submitted,
    )
    try:
        return await asyncio.wait_for(provider.render(request), 10)
    except ProviderError as exc:
        return exc
    finally:
        await provider.close()
        # a request id reaches the ledger as text (a column sqlite binds), never another type
        assert all(isinstance(i, str) and i for i in submitted), submitted


def check(outcome: AttemptResult | ProviderError) -> None:
    if isinstance(outcome, AttemptResult):
        assert isinstance(outcome.data, bytes)
        assert outcome.provider_request_id is None or isinstance(outcome.provider_request_id, str)
        json.dumps(outcome.usage)  # recorded in the ledger as JSON
        assert outcome.cost_micros is None or isinstance(outcome.cost_micros, int)
    else:
        # one attempt's classes: "exhausted" is a chain's, never a provider's answer
        assert outcome.error_class in ATTEMPT_CLASSES, outcome.error_class
        json.dumps(outcome.usage)


@pytest.mark.parametrize("provider_name", sorted(PROVIDERS))
def test_any_answer_ends_the_attempt_with_a_result_or_a_classified_error(server, provider_name):
    @settings(
        max_examples=120,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(script=answers(server, provider_name))
    def run(script):
        server.script = list(script)
        server.after = TERMINAL[provider_name]
        check(asyncio.run(render(provider_name)))

    run()


@pytest.mark.parametrize(
    ("provider_name", "script", "message"),
    [
        ("openai", [(200, b'{"data": "not a list"}')], "no image"),
        ("openai", [(200, b'{"data": [{"b64_json": "QUJ"}]}')], "base64"),
        ("openai", [(200, b'{"data": [7], "usage": []}')], "neither b64_json nor url"),
        ("openai", [(200, b'{"data": [{"url": "http://[::1"}]}')], "output URL"),
        ("openai", [(400, b'{"error": "a string"}')], "HTTP 400"),
        ("replicate", [(201, b'{"id": {"nested": 1}}')], "without a prediction id"),
        (
            "replicate",
            [(201, b'{"id": "p1"}'), (200, b'{"status": "succeeded", "metrics": [1]}')],
            "without an output URL",
        ),
        ("fal", [(200, b'{"request_id": 5}')], "without a request_id"),
        ("fal", [(200, b'{"request_id": "\\u001f"}')], "without a request_id"),
        (
            "fal",  # an unusable status URL is not polled (in vain, for ever): fal's own is
            [
                (200, b'{"request_id": "r1", "status_url": "not a url"}'),
                (200, b'{"status": "COMPLETED", "error": "boom"}'),
            ],
            "fal: boom",
        ),
        (
            "fal",
            [
                (200, b'{"request_id": "r1"}'),
                (200, b'{"status": "COMPLETED"}'),
                (200, b'{"images": ["a"], "image": 3}'),
            ],
            "without an image",
        ),
        ("gemini", [(429, b'{"error": {"details": [{"reason": ["x"]}]}}')], "HTTP 429"),
        ("gemini", [(200, b'{"candidates": [{"finishReason": ["SAFETY"]}]}')], "no image"),
        (
            "gemini",  # a text-only answer: the model's words are the user's only clue
            [
                (
                    200,
                    b'{"candidates": [{"content": {"parts": [{"text": "I cannot\\n draw'
                    b' that."}]}, "finishReason": "STOP"}]}',
                )
            ],
            "no image in the answer (finishReason STOP); it answered: I cannot draw that.",
        ),
        (
            "gemini",
            [
                (
                    200,
                    b'{"candidates": [{"content": {"parts": [{"inlineData": '
                    b'{"data": "\\u00e9", "mimeType": {}}}]}}]}',
                )
            ],
            "base64",
        ),
    ],
)
def test_a_garbled_answer_is_a_server_side_failure_of_unknown_cost(
    server, provider_name, script, message
):
    """Examples of what the hypothesis test found before the adapters read answers through
    ``obj``/``objs``/``text``/``decode_b64`` (afc_cli/providers/http.py): each raised an
    AttributeError, TypeError or binascii.Error that stopped the run. A garbled 200 is the
    provider's fault (``server``: retried as a 5xx is) and, the render having maybe happened,
    its cost is unknown, never a guessed 0, unless the answer holds the image it made (a URL
    out of reach, base64 that is broken): then it is priced as made."""
    server.script = list(script)
    server.after = TERMINAL[provider_name]
    outcome = asyncio.run(render(provider_name))
    assert isinstance(outcome, ProviderError), outcome
    assert message in outcome.message
    if script[-1][0] == 200 and message in ("output URL", "base64"):
        # one image made and paid for, its URL out of reach or its base64 broken: priced as
        # made (per_image)
        assert outcome.error_class == "server" and outcome.cost_micros is not None
    elif script[-1][0] == 200:
        assert outcome.error_class == "server" and outcome.cost_micros is None


def test_a_garbled_answer_in_a_run_fails_its_attempts_and_the_batch_goes_on(afc):
    """Through the ``afc`` command against the fake OpenAI server: one job's answers carry an
    image that is not base64. Its two attempts are recorded failed (``server``), the job
    fails with that cause, and the other jobs, in flight beside it, are rendered and stored:
    the run is not stopped by it. Each of those answers was a paid 200 that said what it
    billed (its ``usage``, one image): the attempts keep that usage and its cost (0.04 by the
    per-image card), as an output that could not be downloaded does, where they were once
    recorded unpriced although the figure was in the answer."""
    from conftest import manifest
    from fakeproviders import FakeProviders

    fake = FakeProviders().start()
    try:
        afc.env.update(fake.env())
        data = manifest(
            [{"key": f"j{i}", "prompt": p} for i, p in enumerate(["a", "garbled b", "c", "d"])],
            rates=[{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}],
        )
        data["defaults"]["chain"] = [
            {
                "provider": "openai",
                "model": "gpt-image-1",
                "attempts": 2,
                "backoff": {"base": 0.01, "cap": 0.05},
            }
        ]
        afc.write_manifest(data)
        result = afc("submit", "manifest.yaml", "--json", "--concurrency", "4")
    finally:
        fake.stop()
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    run = json.loads(result.stdout)
    assert {j["key"]: j["status"] for j in run["jobs"]} == {
        "j0": "succeeded",
        "j1": "failed",
        "j2": "succeeded",
        "j3": "succeeded",
    }
    rows = afc.rows(
        "SELECT a.status, a.error_class, a.cost_micros, a.error_message FROM attempts a"
        " JOIN jobs j ON j.id = a.job_id WHERE j.key = 'j1'"
    )
    assert [row[:3] for row in rows] == [("failed", "server", 40000)] * 2
    assert all("base64" in row[3] for row in rows)
    assert fake.counts["openai"] == 5, "two calls for j1, one for each other job"
    shown = afc.json("show", "j1")
    assert shown["job"]["error"]["class"] == "server"
    assert [a["cost"] for a in shown["attempts"]] == ["0.040000"] * 2
    assert shown["attempts"][0]["usage"]["images"] == 1
    assert shown["attempts"][0]["provider_request_id"].startswith("req_")


def test_an_answer_afc_cannot_read_stops_the_run_and_lets_the_calls_in_flight_finish(
    afc, monkeypatch
):
    """The net under the adapters, for what they cannot foresee (a bug in afc, an API that
    changed): a provider call that raises something other than a ProviderError. Simulated in
    process by an adapter that raises KeyError for one job's answer, while another job's
    call is in flight. The attempt is recorded failed (``server``, cost unknown, the error
    named); the run stops as at a first signal, so k1's call is not cancelled into an
    unknown, possibly paid attempt but finishes and is recorded with its cost; no new call
    is paid for (k2 took k0's slot: stopped before its call, at a known 0, or its instant
    call done; k3 never starts). Every job stays resumable, and a resume finishes them."""
    import sqlite3

    from conftest import manifest

    from afc_cli import run
    from afc_cli.errors import AnswerNotRead
    from afc_cli.providers.local import LocalProvider

    spec = [
        {"key": "k0", "prompt": "unreadable", "params": {"latency_s": 0.3}},
        {"key": "k1", "prompt": "p1", "params": {"latency_s": 1.5}},
        {"key": "k2", "prompt": "p2"},
        {"key": "k3", "prompt": "p3"},
    ]
    path = afc.write_manifest(manifest(spec))
    real = LocalProvider.render

    async def render(self, request):
        result = await real(self, request)
        if request.prompt == "unreadable":
            raise KeyError("data")  # as a mistyped field name would
        return result

    monkeypatch.setattr(LocalProvider, "render", render)
    ledger = str(afc.cwd / "afc.db")
    with pytest.raises(AnswerNotRead) as stopped:
        run.submit(
            str(path), ledger_path=ledger, storage=f"file://{afc.cwd / 'out'}", concurrency=2
        )
    assert "local's answer to b1/k0 (attempt 1) could not be read (KeyError: 'data')" in str(
        stopped.value
    )
    db = sqlite3.connect(ledger)
    attempts = dict(
        db.execute(
            "SELECT j.key, a.status || ' ' || COALESCE(a.error_class, '-') || ' '"
            " || COALESCE(a.cost_micros, 'unknown') FROM attempts a JOIN jobs j ON j.id = a.job_id"
        )
    )
    assert attempts["k0"] == "failed server unknown", attempts
    assert attempts["k1"] == "succeeded - 50000", attempts
    assert attempts.get("k2") in (None, "succeeded - 50000", "failed interrupted 0"), attempts
    assert attempts.get("k3") in (None, "failed interrupted 0"), attempts
    message = db.execute(
        "SELECT a.error_message FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.key = 'k0'"
    ).fetchone()[0]
    assert "afc could not read the answer (KeyError: 'data')" in message
    statuses = dict(db.execute("SELECT key, status FROM jobs"))
    assert statuses["k0"] == "queued" and statuses["k1"] == "succeeded", statuses
    db.close()
    monkeypatch.setattr(LocalProvider, "render", real)
    resumed = run.resume(ledger_path=ledger, batch=None, storage=None, concurrency=2)
    assert {row["status"] for row in resumed.jobs} == {"succeeded"}
