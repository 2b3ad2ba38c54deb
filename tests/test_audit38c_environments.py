"""Outside audit 38c: the environments afc runs in unattended (cron, systemd, containers):
what a run there says and writes when the machine, not the manifest, is in the way."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import in_mount_namespace, jobs, manifest, need_mount_namespace, read_only_binds
from test_audit29d_listing_memory import _grow


def test_a_job_list_with_no_usable_temporary_folder_is_refused_as_nothing_admitted(afc):
    """README "Big job lists": a list's resolved jobs wait in a temporary file, and with no
    room for it the list is refused, exit 2, nothing admitted. In a container with a read-only
    root (no TMPDIR, /tmp and /var/tmp read-only, the working directory too, only a volume
    writable) there is no temporary folder at all: the message meant to name it asked Python
    for it again, which raised, and 'afc submit' exited 1 with '[Errno 2] No usable temporary
    directory found in [...]; every job stays resumable: fix it, then run 'afc resume'',
    though nothing had been admitted. It is now the list's refusal: exit 2, naming TMPDIR."""
    need_mount_namespace()
    top = manifest([], jobs_from="jobs.jsonl", storage="file://./vol/out")
    del top["jobs"]
    afc.write_manifest(top)
    (afc.cwd / "jobs.jsonl").write_bytes(b'{"key": "a", "prompt": "p"}\n')
    (afc.cwd / "vol").mkdir()
    command = " ".join(
        shlex.quote(part)
        for part in afc.command("submit", "manifest.yaml", "--ledger", "vol/afc.db")
    )
    folders = [d for d in ("/tmp", "/var/tmp") if os.path.isdir(d)] + [str(afc.cwd)]
    script = (
        # into the folder again: the shell's working directory is still the one under the mounts
        f"{read_only_binds(folders)} && cd {shlex.quote(str(afc.cwd))}"
        f" && mount -t tmpfs tmpfs vol || exit 9\n{command}\necho rc=$? >&2\nls -A vol >&2\n"
    )
    env = {k: v for k, v in afc.env.items() if k not in ("TMPDIR", "TEMP", "TMP")}
    result = in_mount_namespace(afc, script, env)
    assert "rc=2\n" in result.stderr, result.stderr
    assert "TMPDIR" in result.stderr and "Nothing was admitted" in result.stderr, result.stderr
    assert "afc resume" not in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.rstrip().endswith("rc=2"), result.stderr  # nothing in the volume


def _big_ledger(afc) -> None:
    """afc.db: 50,100 jobs of one model, each with one attempt (0.01 USD)."""
    chain = [{"provider": "local", "model": "instant", "attempts": 1}]
    rates = [{"provider": "local", "model": "instant", "per_image": "0.01"}]
    afc.write_manifest(manifest(jobs(100), defaults={"chain": chain}, rates=rates))
    result = afc("submit", "manifest.yaml", "-q")
    assert result.returncode == 0, result.stderr
    _grow(afc.cwd / "afc.db", 500)


def test_a_big_ledger_is_read_where_sqlite_has_no_temporary_folder(afc):
    """A container with a read-only root (no TMPDIR, /tmp, /var/tmp and the working directory
    read-only), the ledger on its one writable volume: SQLite spills a big sort (a GROUP BY
    over a ledger's 50,000 attempts) to a temporary file in the first writable of TMPDIR,
    /var/tmp, /usr/tmp, /tmp and '.', and with none 'afc costs report --by model' (and 'afc
    report --html', which runs it) exited 1 with 'cannot read the ledger: disk I/O error: fix
    the disk or file system; ... run it again', a disk that was fine and a run again that
    failed the same way. With no such folder afc has SQLite keep that data in memory."""
    need_mount_namespace()
    _big_ledger(afc)
    (afc.cwd / "vol").mkdir()
    folders = [d for d in ("/tmp", "/var/tmp") if os.path.isdir(d)] + [str(afc.cwd)]
    command = " ".join(
        shlex.quote(part)
        for part in afc.command("costs", "report", "--by", "model", "--ledger", "vol/afc.db")
    )
    script = (
        # into the folder again: the shell's working directory is still the one under the mounts
        f"{read_only_binds(folders)} && cd {shlex.quote(str(afc.cwd))}"
        f" && mount -t tmpfs tmpfs vol && cp afc.db vol/ || exit 9\n{command}"
    )
    env = {k: v for k, v in afc.env.items() if k not in ("TMPDIR", "SQLITE_TMPDIR")}
    result = in_mount_namespace(afc, script, env)
    assert result.returncode == 0, result.stderr
    assert "local/instant\t501.000000" in result.stdout, result.stdout


def test_a_full_temporary_folder_is_named_not_the_ledgers_disk_alone(afc):
    """A /tmp that is full (a container's small tmpfs, a server's /tmp filled by something
    else) failed a big report's sort with 'cannot read the ledger: database or disk is full:
    free space on its disk': the ledger's disk had room, a person freed space there, and the
    run again failed the same way. The fix now names SQLite's temporary folder too."""
    need_mount_namespace()
    _big_ledger(afc)
    (afc.cwd / "tmp").mkdir()
    command = " ".join(
        shlex.quote(part) for part in afc.command("costs", "report", "--by", "model")
    )
    script = f"mount -t tmpfs -o size=64k tmpfs tmp || exit 9\nTMPDIR=$PWD/tmp {command}"
    env = {k: v for k, v in afc.env.items() if k != "SQLITE_TMPDIR"}
    result = in_mount_namespace(afc, script, env)
    assert result.returncode == 1, result.stderr
    assert "disk is full" in result.stderr, result.stderr
    assert f"or in {afc.cwd / 'tmp'}, where SQLite keeps" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_postgresql_ledgers_spool_that_cannot_be_written_names_afc_spool_dir(afc, pg_url):
    """A PostgreSQL ledger's runs spool to AFC_SPOOL_DIR, else to afc-spool in the working
    folder. Run from a folder where that cannot be made (a container's read-only root, a cron
    line's folder of another user, a file of that name in the way), 'afc submit', 'afc
    resume' and 'afc worker' refused with 'the spool /afc-spool cannot be written: ... fix
    the disk or move what is in the way': no word of the variable that puts the spool
    elsewhere, and a disk that was fine. The refusal now names it; still nothing is paid."""
    afc.write_manifest(manifest(jobs(2)))
    (afc.cwd / "afc-spool").write_text("in the way")
    env = {"AFC_LEDGER": pg_url}
    result = afc("submit", "manifest.yaml", "--no-run", env=env)  # admits: renders nothing
    assert result.returncode == 0, result.stderr
    for command in (["submit", "manifest.yaml"], ["resume"], ["worker", "--until-idle"]):
        result = afc(*command, env=env)
        assert result.returncode == 1, result.stderr
        assert "afc-spool cannot be written" in result.stderr, result.stderr
        assert "set AFC_SPOOL_DIR to a folder this user can write" in result.stderr
        assert "No render was started" in result.stderr and "Traceback" not in result.stderr
    result = afc("submit", "manifest.yaml", env={**env, "AFC_SPOOL_DIR": str(afc.cwd / "sp")})
    assert result.returncode == 0, result.stderr
    assert "this run spent 0.100000 USD" in result.stderr, result.stderr


def test_a_file_storage_under_a_home_folder_that_cannot_be_found_is_refused(afc):
    """'file://~/renders' is expanded to the home folder; where there is none to expand it to
    (HOME unset for a uid the password database does not know: a bare container, an 'env -i'
    script; or '~name' of no such user) the path stayed '~/renders', read as relative: the
    run rendered and stored its outputs in a folder named '~' under the manifest's folder,
    exit 0, while the person looked in their home folder (and a folder named '~' invites an
    'rm -rf ~'). It is now refused, exit 2, nothing written, naming the home it cannot find."""
    afc.write_manifest(manifest(jobs(1), storage="file://~no-such-user-afc38/renders"))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 2, result.stderr
    assert "'~no-such-user-afc38' names no home folder here" in result.stderr, result.stderr
    assert "no user 'no-such-user-afc38'" in result.stderr and "Traceback" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()
    assert not (afc.cwd / "~no-such-user-afc38").exists()


def test_a_spool_mark_this_user_cannot_read_is_not_called_another_ledgers(tmp_path, monkeypatch):
    """A PostgreSQL ledger's shared spool (AFC_SPOOL_DIR) marked by a run of another user with
    umask 077 (a cron line as root, the worker as 'afc'): its .afc-ledger was 0600, and the
    worker refused with 'the spool ... is the spool of another ledger, unreadable (...)': the
    same ledger's, told to set AFC_SPOOL_DIR to a folder of this ledger's own, or to move
    the spool's paid renders and the mark away. Reproduced with runuser -u nobody; here the
    read is refused as the kernel refuses it to another user (tests run as root read it)."""
    import pathlib

    from afc_cli import run
    from afc_cli.spool import OWNER_FILE, Spool

    spool = Spool(tmp_path / "spool")
    spool.mark("ledger-1", "postgresql://afc@db/afc")
    mark = spool.root / OWNER_FILE
    real = pathlib.Path.read_bytes

    def refused(self):
        if self == mark:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(pathlib.Path, "read_bytes", refused)
    verdict, detail = run._spool_verdict(spool, "ledger-1", "postgresql://afc@db/afc", bool)
    assert verdict == "other"  # still refused: whose spool it is cannot be told
    assert "cannot be read by this user (Permission denied)" in detail, detail
    assert "another ledger" not in detail and "AFC_SPOOL_DIR" in detail


def _ascii_file_names(afc) -> dict[str, str]:
    """The environment of a locale whose file names are ASCII (LC_ALL=C without Python's UTF-8
    mode), as a Latin-1 or ASCII server's; skips where this Python still names files in UTF-8."""
    env = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": "utf-8"}
    probe = subprocess.run(
        [sys.executable, "-c", "import sys; print(sys.getfilesystemencoding())"],
        env={**afc.env, **env},
        capture_output=True,
        text=True,
    )
    if probe.stdout.strip() in ("utf-8", "utf8"):
        pytest.skip("this Python's C locale still names files in UTF-8")
    return env


def test_a_storage_folder_this_locales_file_names_cannot_hold_is_refused(afc):
    """A server whose locale is not UTF-8 (LANG=en_US as ISO-8859-1 on an older system; here
    the C locale with Python's UTF-8 mode off, whose file names are ASCII) and a manifest's
    storage folder named in another script ('file://./rendus-été', '出力'): the storage check's
    first call raised UnicodeEncodeError, and 'afc submit' ended 'unexpected error: ... (a bug
    in afc)', exit 1. It is now the manifest's problem, exit 2, naming the encoding and the
    fix, nothing written (a folder whose name is not UTF-8 was refused so before)."""
    afc.write_manifest(manifest(jobs(1), storage="file://./rendus-été"))
    env = _ascii_file_names(afc)
    result = afc("submit", "manifest.yaml", env=env)
    assert result.returncode == 2, result.stderr
    assert "field 'storage'" in result.stderr and "cannot write that folder's name" in result.stderr
    assert "LANG=C.UTF-8" in result.stderr and "Traceback" not in result.stderr
    assert "bug in afc" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()


def test_an_output_key_this_locales_file_names_cannot_hold_is_refused_before_admission(afc):
    """The same locale and an output template naming a folder in another script
    ('出力/{key}.{ext}', 'rendus-été/...' under ASCII file names): the storage's check of the
    output keys' folders looked past them (every look at such a path raised, and
    os.path.isdir took it for no folder), the jobs were admitted, and the probe of the first
    ended the run 'unexpected error: UnicodeEncodeError ... (a bug in afc)', exit 1, every
    run after it too. The keys are now refused before admission, exit 2, as a key in a file's
    way is; a job admitted before is refused so by 'afc resume' and 'afc worker'."""
    env = _ascii_file_names(afc)
    data = manifest(jobs(2), storage="file://out")
    data["defaults"]["output"] = "rendus-été/{key}.{ext}"
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", env=env)
    assert result.returncode == 2, result.stderr
    assert "cannot store 'rendus-" in result.stderr and "LANG=C.UTF-8" in result.stderr
    assert "bug in afc" not in result.stderr and "Traceback" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()
    result = afc("submit", "manifest.yaml", "--no-run")  # admitted where the locale is UTF-8
    assert result.returncode == 0, result.stderr
    for command in (["resume"], ["worker", "--until-idle"]):
        result = afc(*command, env=env)
        assert result.returncode == 2, result.stderr
        assert "cannot write that name" in result.stderr and "bug in afc" not in result.stderr
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(0,)]


def test_plan_and_report_of_output_keys_this_locales_file_names_cannot_hold(afc):
    """The same keys read, not written: 'afc plan' (which looks for each job's output in the
    storage) and 'afc report --html' (which reads each output for its thumbnail) ended
    'unexpected error: UnicodeEncodeError ... (a bug in afc)', exit 1. The plan now says a
    submit here would be refused, and the report writes the card saying why it has no
    picture."""
    env = _ascii_file_names(afc)
    data = manifest(jobs(1), storage="file://out")
    data["defaults"]["output"] = "rendus-été/{key}.{ext}"
    afc.write_manifest(data)
    result = afc("plan", "manifest.yaml", env=env)
    assert result.returncode == 0, result.stderr
    said = result.stdout + result.stderr
    assert "a submit in this environment would be refused" in said, said
    assert "LANG=C.UTF-8" in said and "bug in afc" not in said
    result = afc("submit", "manifest.yaml")  # rendered and stored where the locale is UTF-8
    assert result.returncode == 0, result.stderr
    result = afc("report", "--html", "report.html", env=env)
    assert result.returncode == 0, result.stderr
    assert "bug in afc" not in result.stderr and "Traceback" not in result.stderr
    assert "have no picture in the report" in result.stderr, result.stderr
    assert "LANG=C.UTF-8" in (afc.cwd / "report.html").read_text()


def test_a_job_list_or_input_this_locales_file_names_cannot_name_is_not_called_missing(afc):
    """A manifest naming its job list or a reference image in another script ('liste-été.jsonl',
    'référence.png', there beside it) under a locale whose file names cannot hold the name:
    the refusal said 'no file ... next to the manifest' and 'no such file ...' of files that
    were there, and a person looked for a typo. Still exit 2, nothing written; it now says
    the name cannot be written here, and the fix."""
    env = _ascii_file_names(afc)
    root = Path(__file__).resolve().parent.parent
    shutil.copy(root / "examples" / "refs" / "palette.png", afc.cwd / "référence.png")
    (afc.cwd / "liste-été.jsonl").write_text('{"key": "b", "prompt": "p"}\n')
    data = manifest([{"key": "a", "prompt": "p", "inputs": [{"path": "référence.png"}]}])
    data["jobs_from"] = "liste-été.jsonl"
    data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1"}]
    data["rates"] = []
    afc.write_manifest(data)
    result = afc("plan", "manifest.yaml", env={**env, "OPENAI_API_KEY": "sk-" + "x" * 40})
    assert result.returncode == 2, result.stderr
    assert "field 'jobs_from'" in result.stderr and "field 'inputs[0].path'" in result.stderr
    assert result.stderr.count("cannot be named here") == 2, result.stderr
    assert "no such file" not in result.stderr and "no file" not in result.stderr
    assert "Traceback" not in result.stderr and not (afc.cwd / "afc.db").exists()


def test_a_postgresql_ledgers_spool_under_the_home_folder_is_expanded(afc, pg_url):
    """AFC_SPOOL_DIR='~/spool' in a systemd unit's Environment= or a crontab line, neither of
    which expands '~': the runs spooled to a folder named '~' in the working folder, where no
    one looked for the paid renders a stopped run left there. It is the home folder's, as a
    file:// storage's '~' is; a '~name' of no user is refused, exit 2, nothing written."""
    afc.write_manifest(manifest(jobs(2)))
    home = afc.cwd / "home"
    home.mkdir()
    env = {"AFC_LEDGER": pg_url, "HOME": str(home), "AFC_SPOOL_DIR": "~/spool"}
    result = afc("submit", "manifest.yaml", env=env)
    assert result.returncode == 0, result.stderr
    assert (home / "spool").is_dir() and not (afc.cwd / "~").exists()
    result = afc("resume", env={**env, "AFC_SPOOL_DIR": "~no-such-user-afc38/spool"})
    assert result.returncode == 2, result.stderr
    assert "'~no-such-user-afc38' names no home folder here" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (afc.cwd / "~no-such-user-afc38").exists()
