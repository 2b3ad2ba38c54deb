"""Outside audit 24d (money windows): the rare paths where a retry might pay again for an
output already rendered, through the real ``afc`` command (S3 through moto's server over
HTTP, tests/s3fake.py; the local provider's calls counted in a log)."""

from __future__ import annotations

import hashlib

from conftest import manifest
from s3fake import Fault
from test_s3 import moto_server, s3  # noqa: F401 - the S3 fixtures


def _fresh_ledger(afc) -> None:
    for suffix in ("", "-wal", "-shm"):
        (afc.cwd / f"afc.db{suffix}").unlink(missing_ok=True)


def _calls(path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_spooled_render_outlives_its_ledger_and_is_stored_not_paid_again(afc, s3):  # noqa: F811
    """Found by outside audit 24d: a render paid for and spooled, its store refused (the S3
    credentials lack PutObject: the job waits at its store step, its render in the spool),
    then the ledger deleted (to start afresh) or made anew: the next submit of the same
    manifest paid for the render again (a job the ledger had no attempt of never looked in
    the spool) and overwrote the paid file with the new one. It now stores the spooled
    render, counted as a render avoided at its cost, and pays nothing; a render of another
    request (the prompt changed along with the new ledger) is never taken for it."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}, {"key": "b", "prompt": "q"}]))
    s3.plan.add(Fault("PUT", r"/films/b1/", "403", -1))
    calls = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(calls)}
    first = afc("submit", "manifest.yaml", "--storage", s3.url, env=env)
    assert first.returncode == 1, first.stderr
    assert "AccessDenied" in first.stderr and "never the render" in first.stderr, first.stderr
    assert afc.rows("SELECT key, status, step FROM jobs ORDER BY key") == [
        ("a", "waiting", "store"),
        ("b", "waiting", "store"),
    ]
    assert _calls(calls) == 2
    spooled = {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in (afc.cwd / "afc.db-spool").glob("*.spool")
    }
    assert len(spooled) == 2
    s3.plan.clear()
    _fresh_ledger(afc)
    # b's request changed with the new ledger: its spooled render is another request's
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}, {"key": "b", "prompt": "q2"}]))
    second = afc("submit", "manifest.yaml", "--storage", s3.url, env=env)
    assert second.returncode == 0, second.stderr
    assert _calls(calls) == 3, "the spooled render of an unchanged request was paid for again"
    stored = s3.client.get_object(Bucket=s3.bucket, Key="films/b1/a.png")
    body = stored["Body"].read()
    [a_file] = [name for name in spooled if name.startswith(afc.json("show", "a")["job"]["id"])]
    assert hashlib.sha256(body).hexdigest() == spooled[a_file]
    assert stored["Metadata"]["afc-provider"] == "local", stored["Metadata"]
    b_body = s3.client.get_object(Bucket=s3.bucket, Key="films/b1/b.png")["Body"].read()
    assert hashlib.sha256(b_body).hexdigest() not in spooled.values(), "another request's render"
    total = afc.json("costs", "report")["total"]
    assert total["avoided_renders"] == 1 and total["avoided_cost"] == "0.050000", total
    assert not list((afc.cwd / "afc.db-spool").iterdir()), "files left in the spool"
