"""An outside review of the audit-17 fixes (c1e00a9..integrate17): cases a fix now gets wrong
that it did not mean to, each through the real ``afc`` command where it can be."""

from __future__ import annotations

import pytest
from conftest import manifest


@pytest.mark.parametrize("region", ["us_east_1", "us-east-1\r"])
def test_a_region_botocore_refuses_is_not_blamed_on_an_unset_endpoint_variable(afc, region):
    """45d522f made botocore's ValueError at client creation a usage error naming
    AWS_ENDPOINT_URL: a region it refuses (an underscore, a carriage return from a Windows
    .env file) raises it too (InvalidRegionError), and the user was told to fix an endpoint
    variable that was not set at all."""
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_CONFIG_FILE"):
        afc.env.pop(name, None)
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    env = {
        "AWS_DEFAULT_REGION": region,
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY",
    }
    result = afc("submit", "manifest.yaml", "--storage", "s3://renders/films", env=env)
    assert result.returncode == 2, result.stderr
    assert "AWS_ENDPOINT_URL" not in result.stderr, result.stderr
    assert "AWS_DEFAULT_REGION" in result.stderr and "region" in result.stderr
    assert "unexpected error" not in result.stderr and "Traceback" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()
