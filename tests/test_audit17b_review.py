"""An outside review of the audit-17 fixes (c1e00a9..integrate17): cases a fix now gets wrong
that it did not mean to, each through the real ``afc`` command where it can be."""

from __future__ import annotations

import json

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


def test_a_thinking_gemini_image_without_its_output_count_is_not_priced_by_its_thoughts(afc, fake):
    """0e156a6 priced an image whose answer leaves out its output tokens per image (or left
    it unpriced) rather than by its prompt alone; a thinking model's answer (gemini-3-pro-image)
    that leaves out candidatesTokenCount but reports thoughtsTokenCount was still priced by its
    tokens: ``billed_output`` took the thoughts alone as the output, 10 x 0.005/1k + 200 x
    0.04/1k = 0.008050 for a 0.039 image, with nothing said."""
    data = manifest(
        [{"key": "j0", "prompt": "thinking no-output-count a"}],
        rates=[
            {
                "provider": "gemini",
                "model": "gemini-3-pro-image-preview",
                "per_image": "0.039",
                "per_1k_input_tokens": "0.005",
                "per_1k_output_tokens": "0.04",
            }
        ],
    )
    data["defaults"]["chain"] = [
        {
            "provider": "gemini",
            "model": "gemini-3-pro-image-preview",
            "attempts": 1,
            "backoff": {"base": 0.01, "cap": 0.05},
        }
    ]
    afc.write_manifest(data)
    [job] = afc.json("submit", "manifest.yaml")["jobs"]
    assert job["cost"] == "0.039000"  # was 0.008050
    [(usage,)] = afc.rows("SELECT usage_json FROM attempts")
    assert json.loads(usage) == {"images": 1, "input_tokens": 10, "thoughts_tokens": 200}


def test_aws_region_names_the_region_as_readme_says(monkeypatch):
    """README's examples set AWS_REGION, which botocore does not read: the client was made
    for us-east-1 whatever it said. afc reads it first, then botocore's own."""
    import boto3

    from afc_cli.storage.s3 import S3Storage, region

    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/afc-test-config")
    assert region(boto3.session.Session()) == "us-east-1"
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    assert region(boto3.session.Session()) == "eu-central-1"
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert region(boto3.session.Session()) == "eu-west-1"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    assert S3Storage("s3://bucket/prefix").client.meta.region_name == "eu-west-1"
