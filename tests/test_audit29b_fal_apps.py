"""Outside audit 29b: fal apps under a namespace (``workflows/OWNER/NAME``, ``comfy/OWNER/NAME``:
fal's workflows and ComfyUI apps). fal's queue keeps the namespace in a request's URLs
(``{queue}/workflows/OWNER/NAME/requests/ID``, as fal's own client builds them) and drops only
a model's subpath. Through the real ``afc`` command against the fake fal queue
(tests/fakeproviders.py), extended here to serve such an app."""

from __future__ import annotations

import re
import signal

import pytest
from conftest import manifest, wait_for
from test_providers import FAST

from afc_cli.providers.fal import FalProvider


class AppReplies:
    """A fake request handler passed to ``fal_submit``: its answer's URLs name ``app``'s
    requests, as fal's queue names them, where the fake names flux's."""

    def __init__(self, h, app: str):
        self.h, self.app = h, app
        self.headers = h.headers

    def body(self):
        return self.h.body()

    def reply(self, status, body=None, **kwargs):
        if isinstance(body, dict):
            body = {
                k: v.replace("/fal-ai/flux/requests/", f"/{self.app}/requests/")
                if isinstance(v, str)
                else v
                for k, v in body.items()
            }
        return self.h.reply(status, body, **kwargs)


def serve_app(fake, app: str) -> None:
    """Make ``fake`` serve fal's queue for ``app`` (its requests as flux's are served); any
    other path, such as the app's URLs without its namespace, answers 404 as fal does."""
    route = fake.route

    def routed(h, method):
        path = h.path.split("?")[0]
        if method == "POST" and path == f"/{app}":
            return fake.fal_submit(AppReplies(h, app), app)
        if m := re.fullmatch(rf"/{re.escape(app)}/requests/([^/]+)(/status|/cancel)?", path):
            return fake.fal_request(h, method, m.group(1), m.group(2) or "")
        return route(h, method)

    fake.route = routed


@pytest.mark.parametrize("app", ["workflows/acme/portrait", "comfy/acme/portrait"])
def test_a_request_a_killed_run_left_is_polled_again_not_paid_again(afc, fake, app):
    """A run killed while its fal workflow request rendered: the resume rebuilt the request's
    URLs from the app id's first two segments (``workflows/acme``), polled a URL fal does not
    have, took the 404 for a request fal let go, and submitted a new one: paid twice, the
    first render (completed and billed) never fetched. The resume polls the request it left."""
    serve_app(fake, app)
    data = manifest(
        [{"key": "shot", "prompt": "hold a portrait"}],
        rates=[{"provider": "fal", "model": app, "per_image": "0.05"}],
    )
    data["defaults"]["chain"] = [{"provider": "fal", "model": app, "backoff": FAST}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml")
    wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL", 1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert fake.counts["fal_submit"] == 1
    fake.released.set()
    resumed = afc.json("resume")
    assert resumed["exit_code"] == 0, resumed
    assert fake.counts["fal_submit"] == 1, "the request left behind is fetched, not paid again"
    attempts = afc.json("show", "shot")["attempts"]
    assert [(a["status"], a["cost"]) for a in attempts] == [("succeeded", "0.050000")], attempts


@pytest.mark.parametrize(
    "model, root",
    [
        ("fal-ai/flux/dev", "/fal-ai/flux/requests/r1"),
        ("workflows/acme/portrait", "/workflows/acme/portrait/requests/r1"),
        ("comfy/acme/portrait/v2", "/comfy/acme/portrait/requests/r1"),
    ],
)
def test_a_requests_urls_keep_its_apps_namespace(monkeypatch, model, root):
    """The URLs afc rebuilds for a request (its resume's polls, its cancel) are fal's."""
    monkeypatch.setenv("FAL_QUEUE_URL", "https://queue.fal.run")
    urls = FalProvider().urls(model, "r1")
    base = "https://queue.fal.run" + root
    assert urls == {
        "status_url": f"{base}/status",
        "response_url": base,
        "cancel_url": f"{base}/cancel",
    }
