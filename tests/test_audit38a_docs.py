"""docs/extending.md "Keys and base URLs": every registered provider's key variable is in
``secrets.SECRET_ENVS``, whatever its name ends in. A name ending in ``_KEY`` or ``_TOKEN``
has its whole value scrubbed without it, but only a listed name has a key quoted back cut
short removed (checked with a toy provider added as the page said before: its 401's
"Incorrect API key provided: <the key's first 16 characters>***" reached the ledger)."""

from __future__ import annotations

from afc_cli import secrets
from afc_cli.providers import PROVIDERS


def test_every_providers_key_variable_is_a_listed_secret():
    unlisted = {
        name: p.key_env
        for name, p in PROVIDERS.items()
        if p.key_env and p.key_env not in secrets.SECRET_ENVS
    }
    assert unlisted == {}, "add these to secrets.SECRET_ENVS (docs/extending.md)"


def test_a_listed_key_quoted_back_cut_short_is_scrubbed(monkeypatch):
    key = "Q7fT9xLmP2vR8sKd3WzYh6Jc"
    for name in secrets.SECRET_ENVS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GEMINI_API_KEY", key)
    secrets.reset()
    try:
        said = secrets.scrub(f"Incorrect API key provided: {key[:16]}***")
    finally:
        monkeypatch.undo()
        secrets.reset()
    assert key[:12] not in said, said
