"""webhooks._what_it_met: a failed connection's words with the socket error's reason."""

from __future__ import annotations

import errno

import httpx

from afc_cli.webhooks import _what_it_met


def _connect_error(message: str) -> httpx.ConnectError:
    try:
        try:
            raise ConnectionRefusedError(errno.ECONNREFUSED, "refused")
        except OSError as cause:
            raise httpx.ConnectError(message) from cause
    except httpx.ConnectError as exc:
        return exc


def test_the_reason_is_added_to_the_message():
    said = _what_it_met(_connect_error("All connection attempts failed"))
    assert said == "All connection attempts failed: Connection refused"


def test_an_empty_message_is_the_reason_alone():
    """'connection failed: ConnectError (: Connection refused)' read as a stray colon."""
    assert _what_it_met(_connect_error("")) == "Connection refused"
