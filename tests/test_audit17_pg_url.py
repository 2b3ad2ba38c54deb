"""A PostgreSQL ledger URL whose password libpq cannot read as its writer meant: libpq split
it elsewhere and quoted the pieces in its error ('failed to resolve host 'et@db'',
'unexpected spaces found in "cret word@db"'), which no mask knew as the password's; and
``?sslpassword=`` (the client key's passphrase) was shown as it is."""

from __future__ import annotations

import pytest

from afc_cli.errors import UsageError
from afc_cli.ledger.postgres import check_url


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://bob:se@cret word@127.0.0.1:1/db",
        "postgresql://bob:secr@et@127.0.0.1:1/db",
        "postgresql://bob:secret word@127.0.0.1:1/db",
        "postgresql://bob:se/cret@127.0.0.1:1/db",
        "postgresql://bob:100%secret@127.0.0.1:1/db",
    ],
)
def test_a_password_libpq_would_split_is_refused_without_a_piece_of_it(afc, url):
    result = afc("status", "--ledger", url)
    assert result.returncode == 2, result.stderr
    assert "must percent-encode" in result.stderr
    for piece in ("cret", "et@", "se/", "100%"):
        assert piece not in result.stderr + result.stdout, result.stderr


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://bob:s%40cr%2Fet%20x@db.example/afc",
        "postgresql://bob@db.example/afc?application_name=a@b",
        "postgresql:///afc?host=/var/run/postgresql",
        "postgresql://db.example/afc",
        "postgres://bob:pw@db.example:5433/afc",
    ],
)
def test_a_readable_url_passes(url):
    check_url(url)


def test_check_url_refuses_with_a_usage_error():
    with pytest.raises(UsageError):
        check_url("postgresql://bob:a@b@db.example/afc")


def test_an_sslpassword_is_masked_in_a_connection_error(afc):
    url = "postgresql://bob@127.0.0.1:1/db?sslpassword=topsecret99&password=pw2secret"
    result = afc("status", "--ledger", url)
    assert result.returncode != 0
    assert "cannot connect to the ledger" in result.stderr, result.stderr
    assert "topsecret99" not in result.stderr and "pw2secret" not in result.stderr
