"""Outside audit 32c: a mistyped PostgreSQL ledger URL is refused without being echoed."""

from __future__ import annotations

import pytest
from conftest import manifest

PASSWORD = "Hunter2SecretPw"


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql:/afc:{PASSWORD}@db.internal/afc",  # a '/' lost
        f"postgres:afc:{PASSWORD}@db.internal/afc",  # both
        f"postgresql//afc:{PASSWORD}@db.internal/afc",  # the ':' lost
    ],
)
def test_a_postgresql_url_missing_its_slashes_is_refused_without_its_password(afc, url):
    """README (The ledger file): a PostgreSQL connection string afc does not read is refused,
    exit 2, not taken for a file name, and a ledger URL's password is never shown. A
    postgresql URL with a '/' or the ':' lost ('postgresql:/afc:PASSWORD@db/afc') did not
    read as a URL and was taken for a SQLite path: 'afc submit' said 'cannot create the
    ledger postgresql:/afc:PASSWORD@db.internal/afc: the folder ... does not exist' and
    'afc status' 'no ledger at postgresql:/afc:PASSWORD@...', the password whole on stderr
    (a cron log). It is refused as a mistyped PostgreSQL URL, the value not shown."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    submitted = afc("submit", "manifest.yaml", "--no-run", "--ledger", url)
    status = afc("status", env={"AFC_LEDGER": url})
    for said in (submitted, status):
        assert said.returncode == 2, said.stderr
        assert "postgresql://USER@HOST" in said.stderr, said.stderr
        assert PASSWORD not in said.stdout + said.stderr, said.stderr
        assert "Traceback" not in said.stderr
    assert sorted(p.name for p in afc.cwd.iterdir()) == ["manifest.yaml"]
