"""Outside audit 38c: the environments afc runs in unattended (cron, systemd, containers):
what a run there says and writes when the machine, not the manifest, is in the way."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

import pytest
from conftest import manifest

needs_unshare = pytest.mark.skipif(
    sys.platform != "linux" or not shutil.which("unshare"), reason="needs unshare (Linux)"
)


@needs_unshare
def test_a_job_list_with_no_usable_temporary_folder_is_refused_as_nothing_admitted(afc):
    """README "Big job lists": a list's resolved jobs wait in a temporary file, and with no
    room for it the list is refused, exit 2, nothing admitted. In a container with a read-only
    root (no TMPDIR, /tmp and /var/tmp read-only, the working directory too, only a volume
    writable) there is no temporary folder at all: the message meant to name it asked Python
    for it again, which raised, and 'afc submit' exited 1 with '[Errno 2] No usable temporary
    directory found in [...]; every job stays resumable: fix it, then run 'afc resume'',
    though nothing had been admitted. It is now the list's refusal: exit 2, naming TMPDIR."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("unprivileged mount namespaces are not available")
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
    readonly = " && ".join(
        f"mount --bind {shlex.quote(d)} {shlex.quote(d)} && mount -o remount,bind,ro {shlex.quote(d)}"
        for d in folders
    )
    script = (
        f"{readonly} && mount -t tmpfs tmpfs vol || exit 9\n"
        f"{command}\necho rc=$? >&2\nls -A vol >&2\n"
    )
    env = {k: v for k, v in afc.env.items() if k not in ("TMPDIR", "TEMP", "TMP")}
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        cwd=afc.cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode == 9:
        pytest.skip(f"read-only bind mounts are not available: {result.stderr}")
    assert "rc=2\n" in result.stderr, result.stderr
    assert "TMPDIR" in result.stderr and "Nothing was admitted" in result.stderr, result.stderr
    assert "afc resume" not in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.rstrip().endswith("rc=2"), result.stderr  # nothing in the volume
