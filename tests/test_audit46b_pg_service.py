"""A PostgreSQL ledger named through a connection service (``?service=NAME``, libpq's service
file): one libpq cannot find or read is a usage error, exit 2, as a misspelt option is
(tests/test_audit31c_pg_url.py), not an outage for a cron to retry night after night; and a
password the service file holds is never shown."""

from __future__ import annotations

import pytest
from conftest import manifest

PASSWORD = "Sup3rSecretPw9"


@pytest.mark.parametrize(
    ("service", "said"),
    [
        ("afx", 'definition of service "afx" not found'),
        ("afc", "syntax error in service file"),
    ],
)
def test_a_service_libpq_cannot_find_or_read_is_a_usage_error(afc, tmp_path, service, said):
    services = tmp_path / "pg_service.conf"
    services.write_text(
        f"[afc]\nhost=127.0.0.1\nport=1\nuser=afc\npassword={PASSWORD}\ndbname=afc\n"
        + ("this line is no setting\n" if service == "afc" else "")
    )
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    env = {"PGSERVICEFILE": str(services)}
    for args in (("submit", "manifest.yaml"), ("status",)):
        result = afc(*args, "--ledger", f"postgresql://?service={service}", env=env)
        assert result.returncode == 2, result.stderr
        assert "cannot connect to the ledger" in result.stderr and said in result.stderr
        assert PASSWORD not in result.stderr and "Traceback" not in result.stderr
    assert not afc.outputs().exists()


def test_a_service_file_that_is_not_there_is_a_usage_error(afc, tmp_path):
    env = {"PGSERVICEFILE": str(tmp_path / "missing.conf")}
    result = afc("status", "--ledger", "postgresql://?service=afc", env=env)
    assert result.returncode == 2, result.stderr
    assert "missing.conf" in result.stderr and "not found" in result.stderr, result.stderr


def test_a_service_whose_server_does_not_answer_is_still_an_outage(afc, tmp_path):
    services = tmp_path / "pg_service.conf"
    services.write_text(f"[afc]\nhost=127.0.0.1\nport=1\nuser=afc\npassword={PASSWORD}\n")
    env = {"PGSERVICEFILE": str(services)}
    result = afc("status", "--ledger", "postgresql://?service=afc", env=env)
    assert result.returncode == 1, result.stderr
    assert "Connection refused" in result.stderr and PASSWORD not in result.stderr
