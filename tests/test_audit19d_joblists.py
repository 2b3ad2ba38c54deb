"""Outside audit 19d: ``jobs_from`` job lists through the real ``afc`` command (README "Big job
lists"): what a list that cannot be admitted says, and that it writes nothing."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time

import pytest
from conftest import manifest


def _listed(afc, name: str, data: bytes) -> None:
    top = manifest([], jobs_from=name)
    del top["jobs"]
    afc.write_manifest(top)
    (afc.cwd / name).write_bytes(data)


LATIN1_JSONL = b"".join(
    [b'{"key": "shot-%04d", "prompt": "plain"}\n' % i for i in range(1, 400)]
    + [b'{"key": "shot-0400", "prompt": "caf\xe9 au lait"}\n']
    + [b'{"key": "shot-%04d", "prompt": "plain"}\n' % i for i in range(401, 450)]
)
LATIN1_CSV = (
    b"key,prompt\r\n"
    + b"".join(b"shot-%04d,plain\r\n" % i for i in range(1, 300))
    # a quoted cell over two lines: the byte is on the record's second line, the file's 302nd
    + b'shot-0300,"two\r\nlines, na\xefve"\r\n'
    + b"".join(b"shot-%04d,plain\r\n" % i for i in range(301, 350))
)


@pytest.mark.parametrize(
    ("name", "data", "line"),
    [("jobs.jsonl", LATIN1_JSONL, 400), ("jobs.csv", LATIN1_CSV, 302)],
    ids=["jsonl", "csv"],
)
def test_a_list_saved_as_latin_1_names_the_line_of_its_first_byte_that_is_not_utf_8(
    afc, name, data, line
):
    """README: problems name the file and line. A list exported as Latin-1 or Windows-1252 (a
    spreadsheet's plain CSV) was refused as 'jobs.csv: not UTF-8 text (invalid continuation
    byte)', no line named: in a list of thousands of lines a person could not find the one
    accented word to fix. It now names the line (and the byte), and still writes nothing."""
    _listed(afc, name, data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 2, result.stderr
    assert f"{name} line {line}: not UTF-8 text" in result.stderr, result.stderr
    assert "byte 0x" in result.stderr and "Traceback" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()


@pytest.mark.skipif(
    sys.platform != "linux" or not shutil.which("unshare"), reason="needs unshare (Linux)"
)
def test_a_job_list_with_no_room_in_tmpdir_is_refused_as_nothing_admitted(afc):
    """A job list's resolved jobs wait in a temporary file (README "Big job lists"). With no
    room in TMPDIR, 'afc submit' exited 1 with '[Errno 28] No space left on device; every job
    stays resumable: fix it, then run 'afc resume'', though nothing had been admitted: the
    resume it named renders nothing of that list (exit 0 on a ledger with other batches), and
    a script took the list for submitted. It is now exit 2, nothing written, naming TMPDIR and
    saying to run the submit again."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("unprivileged mount namespaces are not available")
    rows = b"".join(b'{"key": "k%05d", "prompt": "%s"}\n' % (i, b"p" * 200) for i in range(3000))
    _listed(afc, "jobs.jsonl", rows)
    command = " ".join(shlex.quote(part) for part in afc.command("submit", "manifest.yaml"))
    script = (
        f"mkdir -p tmp && mount -t tmpfs -o size=64k tmpfs tmp || exit 9\nTMPDIR=$PWD/tmp {command}"
    )
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        cwd=afc.cwd,
        env=afc.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "TMPDIR" in result.stderr and "Nothing was admitted" in result.stderr, result.stderr
    assert "afc resume" not in result.stderr and "Traceback" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()


def test_two_first_submits_of_a_batch_naming_two_storages_at_once_refuse_the_second(afc, pg_url):
    """README ("Commands"): a run that names another storage for a batch than the one it was
    admitted with is refused (exit 2) with both named. On PostgreSQL, two first submits of a
    new batch at once (two cron lines, two hosts) each checked the batch's storage before the
    other's admission committed: the second waited on the first's batch row, then admitted
    its jobs as replays (exit 0, its --json 'storage' the one it named) while the batch kept
    the first's storage, where its run rendered them; a script looked for the outputs where
    it had been told they went, and found none. The storage is now checked once the batch's
    row is this transaction's (after its upsert). Here the first admission is a transaction
    the test holds open until the submit waits on it."""
    import psycopg

    env = {"AFC_LEDGER": pg_url}
    afc.write_manifest(manifest([{"key": "k", "prompt": "p"}]))
    first = (afc.cwd / "first").resolve().as_uri()
    holder = psycopg.connect(pg_url)
    try:
        holder.execute(
            "INSERT INTO batches (name, storage, rates_json, limits_json, manifest_path,"
            " created_at, updated_at) VALUES ('b1', %s, '[]', '{}', 'other.yaml', 0, 0)",
            (first,),
        )
        second = afc.popen(
            "submit", "manifest.yaml", "--no-run", "--storage", "file://./second", env=env
        )
        with psycopg.connect(pg_url, autocommit=True) as watch:
            deadline = time.time() + 30
            while time.time() < deadline and second.poll() is None:
                waiting = watch.execute(
                    "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND datname = current_database()"
                ).fetchone()[0]
                if waiting:
                    break
                time.sleep(0.02)
            assert second.poll() is None, second.stderr.read()
        holder.commit()
    finally:
        holder.close()
    assert second.wait(timeout=60) == 2, second.stderr.read()
    stderr = second.stderr.read()
    assert first in stderr and (afc.cwd / "second").resolve().as_uri() in stderr, stderr
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT COUNT(*) FROM jobs").fetchone() == (0,)
        assert conn.execute("SELECT storage FROM batches").fetchall() == [(first,)]


def test_two_batches_sharing_an_output_key_in_one_storage_pay_for_one_render(afc):
    """README (pipeline, probe): an output key another job holds is OUTPUT_KEY_CONFLICT,
    'never overwritten, no render paid'. Two films' batches whose output template leaves out
    {batch} ('{key}.{ext}', both with a shot-1: README "The manifest" lets two films have one) into
    one storage, admitted with --no-run and run by one 'afc resume' (cron's line, or a
    worker): both probes found the key free, both renders were paid, and the second to store
    failed OUTPUT_KEY_CONFLICT with its paid render thrown away. A run now takes such jobs one
    after the other: the second's probe finds the first's object and pays for nothing."""
    for batch in ("v1", "v2"):
        data = manifest(
            [{"key": "shot-1", "prompt": f"the {batch} lighthouse", "params": {"latency_s": 0.3}}],
            batch=batch,
        )
        data["defaults"]["output"] = "{key}.{ext}"
        afc.write_manifest(data, name=f"{batch}.yaml")
        assert afc("submit", f"{batch}.yaml", "--no-run", "-q").returncode == 0
    result = afc("resume")
    assert result.returncode == 1, result.stderr
    rows = afc.rows("SELECT j.batch, j.status, j.error_code, j.attempts FROM jobs j ORDER BY 2")
    assert sorted(status for _, status, _, _ in rows) == ["failed", "succeeded"], rows
    failed = next(row for row in rows if row[1] == "failed")
    assert failed[2] == "OUTPUT_KEY_CONFLICT" and failed[3] == 0, rows
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(1,)]


def test_a_list_saved_as_utf_16_is_named_so(afc):
    """A spreadsheet's 'Unicode text' export is UTF-16: its byte order mark is named for what
    it is, not taken for Latin-1."""
    _listed(afc, "jobs.csv", "key,prompt\na,x\n".encode("utf-16"))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 2, result.stderr
    assert "jobs.csv line 1: not UTF-8 text: byte 0xFF at column 1 (saved as UTF-16" in (
        result.stderr
    ), result.stderr
    assert not (afc.cwd / "afc.db").exists()


def test_a_csv_param_given_in_both_its_column_and_the_params_cell_is_refused(afc):
    """A key given twice is an error in a JSON Lines object and in the YAML. A CSV row whose
    'params' cell and 'params.size' column both named the size was admitted with the column's
    value, silently: a person who read the params cell saw a render paid at another size."""
    _listed(afc, "jobs.csv", b'key,prompt,params,params.size\na,x,"{""size"": ""64x64""}",96x64\n')
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 2, result.stderr
    assert "jobs.csv line 2 (key 'a'): param 'size' is given twice" in result.stderr, result.stderr
    assert not (afc.cwd / "afc.db").exists()
