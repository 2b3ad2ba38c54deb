"""Outside audit 34b: a webhook URL whose secret is in its path (a Slack incoming webhook,
``https://hooks.slack.com/services/T…/B…/<secret>``; a Discord one,
``https://discord.com/api/webhooks/<id>/<token>``) was shown whole in 'afc webhooks list',
its --json, 'afc show' and its --json, though Slack and Discord issue that URL as the
credential itself (anyone holding it posts to the channel; GitHub's secret scanning revokes
one found in a public paste). The scrubber masks the secret part of those shapes, as it masks
``?token=``; the URL kept in the ledger, which the delivery needs, is unchanged."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

import pytest
from conftest import Loopback, manifest

from afc_cli.secrets import scrub

SLACK_SECRET = "XyZsEcReTsLaCkToKeN12345"
DISCORD_TOKEN = "DiScOrDtOkEn_abcdefghijklmnopqrstuvwxyz-0123456789ABCDEFGHIJKLMNOPQR"
SLACK = f"/services/T0AAAAAAA/B0BBBBBBB/{SLACK_SECRET}"
DISCORD = f"/api/webhooks/123456789012345678/{DISCORD_TOKEN}"
ENV = {"H": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            f"https://hooks.slack.com{SLACK}",
            "https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/<redacted>",
        ),
        (
            f"https://discord.com{DISCORD}",
            "https://discord.com/api/webhooks/123456789012345678/<redacted>",
        ),
        (
            f"https://discordapp.com/api/v10/webhooks/123456789012345678/{DISCORD_TOKEN}?wait=true",
            "https://discordapp.com/api/v10/webhooks/123456789012345678/<redacted>?wait=true",
        ),
        (
            f"https://hooks.slack.com/workflows/T0AAAAAAA/A0CCCCCCC/123456789012345678/{SLACK_SECRET}",
            "https://hooks.slack.com/workflows/T0AAAAAAA/A0CCCCCCC/123456789012345678/<redacted>",
        ),
        (
            f"https://hooks.slack.com/triggers/T0AAAAAAA/123456789012345678/{SLACK_SECRET}",
            "https://hooks.slack.com/triggers/T0AAAAAAA/123456789012345678/<redacted>",
        ),
    ],
)
def test_a_webhook_url_s_secret_path_is_masked(text, shown):
    assert scrub(text) == shown
    assert SLACK_SECRET not in scrub(text) and DISCORD_TOKEN not in scrub(text)
    assert scrub(scrub(text)) == shown  # a text scrubbed twice keeps its mask as it was


def test_ordinary_paths_are_kept():
    for text in (
        "https://example.com/services/api/v2/render",
        "https://example.com/api/webhooks/afc",
        "see /services/T0AAAAAAA for the team",
    ):
        assert scrub(text) == text


class _Paths(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[str] = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


def test_a_slack_or_discord_webhook_url_s_secret_is_shown_nowhere(afc):
    server = Loopback(_Paths)
    base = server.base
    try:
        data = manifest(
            [
                {
                    "key": "slack",
                    "prompt": "p",
                    "webhook": {"url": base + SLACK, "secret_env": "H"},
                },
                {
                    "key": "discord",
                    "prompt": "p",
                    "webhook": {"url": base + DISCORD, "secret_env": "H"},
                },
            ]
        )
        afc.write_manifest(data)
        result = afc("submit", "manifest.yaml", "--json", env=ENV)
        assert result.returncode == 0, result.stderr
        # delivered to the URL as the manifest wrote it, secret and all
        assert sorted(_Paths.seen) == sorted([DISCORD, SLACK])
        outputs = [result.stdout + result.stderr]
        for args in (
            ("webhooks", "list"),
            ("webhooks", "list", "--json"),
            ("show", "slack"),
            ("show", "slack", "--json"),
            ("show", "discord"),
            ("show", "discord", "--json"),
        ):
            shown = afc(*args, env=ENV)
            assert shown.returncode == 0, shown.stderr
            outputs.append(shown.stdout + shown.stderr)
        listed = json.loads(outputs[2])["deliveries"]
        assert sorted(d["url"] for d in listed) == [
            base + "/api/webhooks/123456789012345678/<redacted>",
            base + "/services/T0AAAAAAA/B0BBBBBBB/<redacted>",
        ]
        for text in outputs:
            assert SLACK_SECRET not in text and DISCORD_TOKEN not in text, text
        # a message naming the URL: a manifest refusing it
        data["jobs"][0]["webhook"]["url"] = "http://127.0.0.1:99999" + SLACK
        afc.write_manifest(data)
        refused = afc("submit", "manifest.yaml", env=ENV)
        assert refused.returncode == 2, refused.stderr
        assert "B0BBBBBBB/<redacted>" in refused.stderr, refused.stderr
        assert SLACK_SECRET not in refused.stdout + refused.stderr
    finally:
        server.stop()
