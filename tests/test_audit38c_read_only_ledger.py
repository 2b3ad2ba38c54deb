"""A ledger this user may read but not write (outside audit 38c): a monitoring user's cron of
'afc queue stats --fail-if', a producer's 'afc status' on a render user's ledger, a copy kept
on a read-only mount. Every command refused it as it refuses a run ('the ledger afc.db is
read-only ...: make it writable', exit 2), though these only read. The reading commands now
open it read-only (nothing migrated, nothing written), 'afc webhooks list' and 'afc review
list' too; a command that writes still refuses it, exit 2, nothing written. Checked under a read-only bind mount of the ledger's folder (in
a mount namespace of its own), as root's permission checks pass any file mode."""

from __future__ import annotations

import hashlib
import json
import shlex

from conftest import in_mount_namespace, jobs, manifest, read_only_binds

READING = [
    ["status"],
    ["status", "--json"],
    ["outputs", "--json"],
    ["show", "shot-001", "--json"],
    ["queue", "stats", "--json"],
    ["costs", "report", "--json"],
    ["report", "--html", "{out}/report.html"],
    ["webhooks", "list"],
    ["review", "list"],
]


def _read_only(afc, commands: list[list[str]], out) -> list[tuple[int, str, str]]:
    """Each command run with the test's folder mounted read-only: (exit code, stdout, stderr)."""
    lines = [f"{read_only_binds([afc.cwd])} || exit 9", f"cd {shlex.quote(str(afc.cwd))}"]
    for n, args in enumerate(commands):
        line = " ".join(shlex.quote(a.format(out=out)) for a in afc.command(*args))
        lines.append(f"{line} >{out}/{n}.out 2>{out}/{n}.err; echo $? >{out}/{n}.rc")
    in_mount_namespace(afc, "\n".join(lines), timeout=300)
    return [
        (
            int((out / f"{n}.rc").read_text()),
            (out / f"{n}.out").read_text(),
            (out / f"{n}.err").read_text(),
        )
        for n in range(len(commands))
    ]


def _folder(afc) -> dict[str, str]:
    return {
        str(p.relative_to(afc.cwd)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(afc.cwd.rglob("*"))
        if p.is_file()
    }


def test_the_reading_commands_read_a_ledger_this_user_may_not_write(afc, tmp_path_factory):
    afc.write_manifest(manifest(jobs(3)))
    assert afc("submit", "manifest.yaml").returncode == 0
    before = _folder(afc)
    out = tmp_path_factory.mktemp("out")
    results = _read_only(afc, READING + [["retry", "shot-001"], ["resume"]], out)
    for args, (code, _, stderr) in zip(READING, results, strict=False):
        assert code == 0, (args, stderr)
        assert "read-only" not in stderr and "Traceback" not in stderr, (args, stderr)
    by = dict(zip((" ".join(a) for a in READING), results, strict=False))
    assert json.loads(by["status --json"][1])["counts"] == {"succeeded": 3}
    assert len(json.loads(by["outputs --json"][1])["outputs"]) == 3
    assert json.loads(by["show shot-001 --json"][1])["job"]["status"] == "succeeded"
    assert json.loads(by["queue stats --json"][1])["stuck"] == 0
    assert "3 jobs" in by["report --html {out}/report.html"][2]
    # a command that writes refuses it, as before
    for code, _, stderr in results[len(READING) :]:
        assert code == 2, stderr
        assert "the ledger afc.db is read-only" in stderr, stderr
    assert _folder(afc) == before  # nothing written: no -wal, -shm, spool or output


def test_a_ledger_an_older_afc_wrote_is_refused_read_only_saying_why(afc, tmp_path_factory):
    """This afc brings an older ledger's schema up to date before it reads it, which a ledger
    it may not write cannot have: refused, exit 2, nothing written, saying so."""
    import sqlite3

    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    conn = sqlite3.connect(afc.cwd / "afc.db")
    with conn:  # as an afc before the last migration left it
        conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'm018_leased_and_blocked'")
    conn.close()
    before = _folder(afc)
    out = tmp_path_factory.mktemp("out")
    [(code, _, stderr)] = _read_only(afc, [["status"]], out)
    assert code == 2, stderr
    assert "is read-only here, and an older afc wrote it" in stderr, stderr
    assert "Traceback" not in stderr
    assert _folder(afc) == before
