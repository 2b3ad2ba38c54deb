"""Outside audit 25d: what pyproject.toml lets pip install is a afc that keeps its word."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def _requirement(name: str) -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (found,) = [r for r in map(Requirement, project["dependencies"]) if r.name == name]
    return found


def test_no_typer_that_ignores_the_environment_variables_is_allowed():
    """typer 0.26.0, which 'typer>=0.26' allowed (pip keeps it where it is installed already,
    or a lock file resolved then), reads no option's environment variable: its
    TyperOption.value_from_envvar returned None. Every AFC_LEDGER, AFC_STORAGE and AFC_GRACE_S
    was then ignored without a word: with that typer and the newest click, 'afc status' read
    ./afc.db instead of the ledger AFC_LEDGER named, and a cron 'afc submit' whose AFC_STORAGE
    named the studio's bucket admitted its batch into a new ./afc.db storing into
    ./afc-outputs, where no probe found the outputs already paid for. 0.26.1 fixed it."""
    typer = _requirement("typer")
    assert not typer.specifier.contains("0.26.0"), typer
    assert typer.specifier.contains("0.26.1") and typer.specifier.contains("0.29.2"), typer


def test_this_environment_reads_the_ledger_from_afc_ledger(afc, tmp_path):
    """And the typer this suite runs on reads them (README: '--ledger PATH (or AFC_LEDGER)')."""
    missing = tmp_path / "elsewhere" / "ledger.db"
    done = afc("status", env={"AFC_LEDGER": str(missing)})
    assert done.returncode == 2, done
    assert f"no ledger at {missing}" in done.stderr, done.stderr


def test_no_boto3_without_the_checksum_settings_afc_sets_is_allowed():
    """afc_cli/storage/s3.py makes its client with botocore's request_checksum_calculation and
    response_checksum_validation, which botocore has from 1.36 (boto3 1.36). 'boto3>=1.34'
    allowed 1.34 and 1.35 (an environment with AWS tooling pinned there keeps them): every
    'afc submit --storage s3://...' then stopped 'afc: unexpected error: TypeError: Got
    unexpected keyword argument 'request_checksum_calculation' (a bug in afc ...)', exit 1,
    and the pictures of an S3 batch could not be read."""
    boto3 = _requirement("boto3")
    assert not boto3.specifier.contains("1.35.99"), boto3
    assert boto3.specifier.contains("1.36.0"), boto3
    from botocore.config import Config

    assert "request_checksum_calculation" in (ROOT / "afc_cli/storage/s3.py").read_text()
    # and this environment's botocore takes them, as the client afc makes passes them
    Config(
        request_checksum_calculation="when_required", response_checksum_validation="when_required"
    )
