"""Outside audit 31c: a PostgreSQL ledger URL whose port or option libpq refuses before it
connects is a usage error (exit 2), not an outage (exit 1) for a cron to retry for ever."""

from __future__ import annotations

import pytest
from conftest import manifest

PASSWORD = "Sup3rSecretPw9"


@pytest.mark.parametrize(
    ("tail", "said"),
    [
        (":5432x/afc", 'invalid integer value "5432x" for connection option "port"'),
        (":99999/afc", 'invalid port number: "99999"'),
        (":1/afc?sslmode=requires", 'invalid sslmode value: "requires"'),
    ],
)
def test_a_url_libpq_refuses_before_connecting_is_a_usage_error(afc, tail, said):
    """README's exit 1 is for a server down, a network outage, a login refused: run it again
    once it answers. A port typed '5432x' or an sslmode misspelt never answers: a cron line
    exited 1 night after night, read as an outage."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    url = f"postgresql://afc:{PASSWORD}@127.0.0.1{tail}"
    for args in (("submit", "manifest.yaml"), ("status",)):
        result = afc(*args, "--ledger", url)
        assert result.returncode == 2, result.stderr
        assert "cannot connect to the ledger" in result.stderr and said in result.stderr
        assert PASSWORD not in result.stderr and "Traceback" not in result.stderr
    assert not afc.outputs().exists()


def test_a_server_that_does_not_answer_is_still_an_outage(afc):
    result = afc("status", "--ledger", f"postgresql://afc:{PASSWORD}@127.0.0.1:1/afc")
    assert result.returncode == 1, result.stderr
    assert "Connection refused" in result.stderr and PASSWORD not in result.stderr
