"""The operating system around a run: signals other than SIGTERM and SIGKILL, a terminal or a
pipe that goes away mid-run, the spool's files changed behind afc's back.

Through the real ``afc`` command in a child process (its own session, so a signal can reach
its whole process group, the file helper included, as a terminal's hangup does).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import jobs, manifest, wait_for

STARTED = "SELECT COUNT(*) FROM attempts WHERE status = 'started'"


def hangups_as_in_a_terminal() -> None:
    """In the child: SIGHUP at its default, as a command typed in a terminal has it. The
    suite itself may run with SIGHUP ignored (under ``nohup``, or a CI runner started so),
    and a child inherits that: its afc kept ignoring the hangup (as it must under nohup, see
    ``test_a_run_started_under_nohup_outlives_its_terminal``) and the test waited for ever."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def session(afc, *args: str, env: dict[str, str] | None = None, **io) -> subprocess.Popen:
    """``afc`` in a session of its own: ``os.killpg`` reaches it and its file helper."""
    io = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, **io}
    return subprocess.Popen(
        afc.command(*args),
        cwd=afc.cwd,
        env={**afc.env, **(env or {})},
        start_new_session=True,
        text=True,
        preexec_fn=hangups_as_in_a_terminal,
        **io,
    )


def wait_line(proc: subprocess.Popen, text: str) -> str:
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"{text!r} never came (exit {proc.wait()}); stderr: {''.join(seen)}")


# --- SIGHUP: a terminal that hangs up drains the run as SIGTERM does ---------------------------


@pytest.mark.parametrize("command", ["submit", "worker"])
def test_a_hangup_drains_the_calls_in_flight_and_records_them(afc, command):
    """An ``afc submit`` started over ssh whose connection drops: the shell sends SIGHUP to
    the job's process group. Python's default for it is death on the spot (exit 129), which
    left every call in flight ``started`` (possibly paid, rendered and paid again by the next
    run); it is an interruption like SIGTERM: no new call, the calls in flight finish and are
    stored and recorded, exit 130 (a worker's too, with --until-idle: a script's worker
    stopped before it went idle; a service's worker, without it, exits 0)."""
    log, release = afc.cwd / "calls.log", afc.cwd / "release"
    afc.write_manifest(manifest(jobs(6)))
    env = {"AFC_LOCAL_CALL_LOG": str(log), "AFC_LOCAL_RELEASE": str(release)}
    if command == "submit":
        proc = session(afc, "submit", "manifest.yaml", "--concurrency", "3", env=env)
    else:
        assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
        args = ("worker", "--until-idle", "--concurrency", "3", "--poll", "0.05")
        proc = session(afc, *args, env=env)
    wait_for(afc, STARTED, 3)  # three calls held at the provider
    os.killpg(proc.pid, signal.SIGHUP)
    wait_line(proc, "stopping: no new provider calls")
    release.touch()  # the provider answers the calls in flight
    assert proc.wait(timeout=30) == 130, proc.stderr.read()
    assert afc.rows("SELECT status, cost_micros, COUNT(*) FROM attempts GROUP BY 1, 2") == [
        ("succeeded", 50_000, 3)
    ]
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY 1") == [
        ("queued", 3),
        ("succeeded", 3),
    ]
    assert afc.rows("SELECT COUNT(*) FROM jobs WHERE lease_owner IS NOT NULL") == [(0,)]
    resumed = afc("resume", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert len(log.read_text().splitlines()) == 6, "no job rendered twice"


# --- SIGPIPE and output that goes away mid-run -------------------------------------------------


def settled(afc) -> None:
    """What an interrupted run leaves: every call it made answered and recorded (or never
    sent), every job succeeded or queued, no lease held."""
    kinds = set(afc.rows("SELECT status, cost_source FROM attempts"))
    assert kinds <= {("succeeded", "local"), ("failed", "unsent")}, kinds
    assert ("succeeded", "local") in kinds
    assert {s for (s,) in afc.rows("SELECT status FROM jobs")} <= {"succeeded", "queued"}
    assert afc.rows("SELECT COUNT(*) FROM jobs WHERE lease_owner IS NOT NULL") == [(0,)]


def test_a_provider_hanging_up_mid_upload_is_a_failed_call_not_a_dead_run(afc, tmp_path):
    """A provider that answers a large upload by closing the connection (an early 413, a
    proxy's limit): afc's next write to that socket raised SIGPIPE, whose default (afc sets it
    for ``afc status | head``) killed the whole run, exit 141 and not a word, its attempt left
    ``started`` and every other call in flight with it. Each such attempt is one failed call."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def hang_up() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.recv(1024)  # the headers' start; the image parts stay unread
            conn.close()  # unread data: the kernel answers the rest with a reset

    threading.Thread(target=hang_up, daemon=True).start()
    try:
        (afc.cwd / "ref.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(8 << 20))
        data = manifest(
            [{"key": "edit", "prompt": "p", "inputs": [{"path": "ref.png"}]}],
            rates=[{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}],
        )
        data["defaults"]["chain"] = [
            {
                "provider": "openai",
                "model": "gpt-image-1",
                "attempts": 3,
                "backoff": {"base": 0.01, "cap": 0.02},
            }
        ]
        afc.write_manifest(data)
        env = {
            "OPENAI_API_KEY": "sk-test",
            "OPENAI_BASE_URL": f"http://127.0.0.1:{server.getsockname()[1]}/v1",
        }
        result = afc("submit", "manifest.yaml", env=env)
    finally:
        server.close()
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "failed at render: unavailable from openai/gpt-image-1" in result.stderr
    assert afc.rows("SELECT status, error_class, COUNT(*) FROM attempts GROUP BY 1, 2") == [
        ("failed", "unavailable", 3)
    ]


def test_the_reader_of_its_output_going_away_drains_the_run(afc):
    """``afc submit ... 2>&1 | head -3``: the reader exits, and afc's next progress line hit a
    closed pipe. That killed the run by SIGPIPE (exit 141) with calls in flight; with SIGPIPE
    ignored the write's BrokenPipeError would break a job's task. The reader gone is what
    SIGPIPE means, acted on as a first signal: the calls in flight finish and are recorded,
    exit 130, and resume renders the rest, none twice."""
    log, release = afc.cwd / "calls.log", afc.cwd / "release"
    afc.write_manifest(manifest(jobs(6)))
    env = {"AFC_LOCAL_CALL_LOG": str(log), "AFC_LOCAL_RELEASE": str(release)}
    proc = session(afc, "submit", "manifest.yaml", "--concurrency", "3", env=env)
    wait_for(afc, STARTED, 3)
    proc.stderr.close()  # the reader goes away
    release.touch()  # the calls end; the first "ended" line meets the closed pipe
    assert proc.wait(timeout=30) == 130
    settled(afc)
    resumed = afc("resume", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert len(log.read_text().splitlines()) == 6, "no job rendered twice"


def test_a_terminal_that_hangs_up_mid_run_drains_it(afc):
    """The run's terminal goes away (the ssh connection drops): SIGHUP comes, and every write
    to the terminal fails with EIO from then on, the drain's own lines included, which broke
    the run (exit 1) even once SIGHUP drained it. The calls in flight are recorded and
    stored, exit 130."""
    import fcntl
    import termios

    log, release = afc.cwd / "calls.log", afc.cwd / "release"
    afc.write_manifest(manifest(jobs(6)))
    env = {"AFC_LOCAL_CALL_LOG": str(log), "AFC_LOCAL_RELEASE": str(release)}
    master, slave = os.openpty()

    def take_terminal() -> None:  # the pty becomes the session's controlling terminal
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        hangups_as_in_a_terminal()

    proc = subprocess.Popen(
        afc.command("submit", "manifest.yaml", "--concurrency", "3"),
        cwd=afc.cwd,
        env={**afc.env, **env, "TERM": "xterm"},
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=take_terminal,
    )
    os.close(slave)

    def read() -> None:  # a terminal that shows what it is sent, until it is gone
        with contextlib.suppress(OSError):
            while os.read(master, 1 << 16):
                pass

    threading.Thread(target=read, daemon=True).start()
    wait_for(afc, STARTED, 3)
    os.close(master)  # hang up
    release.touch()
    assert proc.wait(timeout=30) == 130
    settled(afc)
    resumed = afc("resume", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert len(log.read_text().splitlines()) == 6, "no job rendered twice"


# --- the file helper killed alone ------------------------------------------------------------


def test_the_file_helper_killed_alone_loses_no_paid_render(afc):
    """The file helper (afc_cli/offload.py) is killed by itself mid-run (an OOM killer, a
    person's ``kill``) while three calls are out. Their outputs, handed to it to spool, were
    lost ("cannot keep the output ... fix the disk", exit 1; a sound disk) and the next run
    paid for each again: 9 calls for 6 jobs. The file work goes on in the run's process."""
    log, release = afc.cwd / "calls.log", afc.cwd / "release"
    afc.write_manifest(manifest(jobs(6)))
    env = {"AFC_LOCAL_CALL_LOG": str(log), "AFC_LOCAL_RELEASE": str(release)}
    proc = session(afc, "submit", "manifest.yaml", "--concurrency", "3", env=env)
    wait_for(afc, STARTED, 3)
    children = (Path(f"/proc/{proc.pid}/task/{proc.pid}/children")).read_text().split()
    helpers = [
        int(pid)
        for pid in children
        if b"afc_cli.offload" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    assert len(helpers) == 1, children
    os.kill(helpers[0], signal.SIGKILL)
    release.touch()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "the file helper process" in err and "nothing is lost" in err
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY 1") == [("succeeded", 6)]
    assert afc.rows("SELECT status, COUNT(*) FROM attempts GROUP BY 1") == [("succeeded", 6)]
    assert len(log.read_text().splitlines()) == 6, "no render paid for twice"


# --- open files: --concurrency in the hundreds under a low ulimit -n ----------------------------


def openai_jobs(afc, n: int) -> None:
    data = manifest(
        [{"key": f"s{i:03d}", "prompt": f"slow-0.5s shot {i}"} for i in range(n)],
        rates=[{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}],
    )
    data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1"}]
    afc.write_manifest(data)


def limited(afc, soft: int, hard: int, *args: str) -> subprocess.CompletedProcess:
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return subprocess.run(
        afc.command(*args),
        cwd=afc.cwd,
        env=afc.env,
        preexec_fn=limit,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_low_soft_open_file_limit_is_raised_for_a_wide_run(afc, fake):
    """``ulimit -n 64`` (the hard limit higher) and 100 calls in flight: sockets past the
    limit failed as transient errors, then the ledger's WAL could not be opened (EMFILE), and
    the run stopped with its calls in flight left ``started`` (possibly paid, paid again by the
    next run), exit 1 and "fix the disk". The soft limit is raised for the run."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 2 * 100 + 256:
        pytest.skip(f"the hard limit ({hard}) is too low for this test")
    openai_jobs(afc, 100)
    result = limited(afc, 64, hard, "submit", "manifest.yaml", "--concurrency", "100")
    assert result.returncode == 0, result.stderr[-2000:]
    assert afc.rows("SELECT status, COUNT(*) FROM attempts GROUP BY 1") == [("succeeded", 100)]
    assert fake.counts["openai"] == fake.counts["openai_billed"] == 100


@pytest.mark.parametrize("command", ["submit", "resume"])
def test_a_concurrency_the_hard_limit_cannot_hold_is_refused_before_anything_runs(
    afc, fake, command
):
    openai_jobs(afc, 100)
    if command == "resume":
        assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    before = afc.rows("SELECT COUNT(*) FROM jobs") if command == "resume" else None
    args = ("submit", "manifest.yaml") if command == "submit" else ("resume",)
    result = limited(afc, 64, 64, *args, "--concurrency", "100")
    assert result.returncode == 2, result.stderr[-2000:]
    assert "--concurrency 100 needs at least 148 open files" in result.stderr
    assert "give --concurrency 16 or less" in result.stderr
    assert "Traceback" not in result.stderr
    assert fake.counts["openai"] == 0
    if command == "submit":
        assert not (afc.cwd / "afc.db").exists(), "nothing written"
    else:
        assert afc.rows("SELECT COUNT(*) FROM jobs") == before
        assert afc.rows("SELECT COUNT(*) FROM attempts") == [(0,)]


# --- a spool file damaged between its checkpoint and the upload --------------------------------


def waiting_at_store(afc) -> tuple[dict[str, str], Path]:
    """One job rendered and spooled, its store failed (a file where its folder goes, since
    removed): it waits at its store step. Its spool file's path."""
    release = afc.cwd / "release"
    afc.write_manifest(manifest(jobs(1)))
    env = {"AFC_LOCAL_RELEASE": str(release)}
    proc = session(afc, "submit", "manifest.yaml", env=env)
    wait_for(afc, STARTED, 1)
    afc.outputs().mkdir(exist_ok=True)
    (afc.outputs() / "b1").write_text("in the way")  # the store fails: a file, not a folder
    release.touch()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert afc.rows("SELECT status, step FROM jobs") == [("waiting", "store")]
    (afc.outputs() / "b1").unlink()
    (spooled,) = (afc.cwd / "afc.db-spool").glob("*.spool")
    return env, spooled


def test_a_spool_file_damaged_before_its_upload_is_never_stored_as_the_output(afc):
    """A job waits at its store step (the storage failed), its spool file checkpointed with
    its size and SHA-256; then the file is damaged (a disk error, another process writing
    in place: the same size, other bytes). The next run stored those bytes under the output
    key, tagged with the checkpoint's SHA-256, and failed the job VERIFY_FAILED; from then on
    every retry found "its own" object at the key and failed the same way, for good (a
    multipart S3 upload even passed verify, its checksum taken from the damaged file). The
    file is checked against its checkpoint before the upload: nothing is stored, the job is
    dead-lettered SPOOL_DAMAGED with the file moved aside, and 'afc retry' renders it anew."""
    env, spooled = waiting_at_store(afc)
    data = bytearray(spooled.read_bytes())
    data[-20] ^= 0xFF  # one byte flipped, the size unchanged
    spooled.write_bytes(bytes(data))
    result = afc("resume", env=env)
    assert result.returncode == 1, result.stderr
    assert not (afc.outputs() / "b1" / "shot-001.png").exists(), "damaged bytes stored"
    assert not list(afc.outputs().glob("b1/*.afc.json"))
    story = afc.json("show", "shot-001")
    assert story["job"]["status"] == "dead", story["job"]
    assert story["job"]["error"]["code"] == "SPOOL_DAMAGED", story["job"]["error"]
    aside = spooled.with_suffix(".damaged")
    assert aside.exists() and not spooled.exists()
    assert str(aside) in story["job"]["error"]["message"]
    retried = afc("retry", "shot-001")
    assert retried.returncode == 0, retried.stderr
    again = afc("resume", env=env)
    assert again.returncode == 0, again.stderr
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert afc.rows("SELECT COUNT(*) FROM attempts WHERE status = 'succeeded'") == [(2,)]


def test_file_work_that_never_returns_does_not_hold_a_stopped_run_forever(afc):
    """The helper's file work hangs (a hung network mount; here a FIFO put where the spool
    file was: opening it waits for a writer that never comes). SIGTERM stops the run, the
    job's task ends, but the run then waited for the helper's calls without end, past its
    grace, never exiting: under cron's 'timeout' its lock stayed held and every later run was
    skipped. The helper is killed a few seconds after the run's end; exit 130."""
    env, spooled = waiting_at_store(afc)
    spooled.unlink()
    os.mkfifo(spooled)
    proc = session(afc, "resume", env=env)
    try:
        helper = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and helper is None:  # the helper opens the FIFO
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            for pid in children:
                with contextlib.suppress(OSError):
                    for task in Path(f"/proc/{pid}/task").iterdir():
                        if (task / "wchan").read_text() == "wait_for_partner":
                            helper = pid
            time.sleep(0.05)
        if helper is None:
            pytest.skip("this kernel does not show a FIFO open's wait in /proc/*/wchan")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "had file work left 5s after the run ended" in err, err
    assert "Traceback" not in err
    assert afc.rows("SELECT status, step FROM jobs") == [("waiting", "store")]


def test_a_run_started_under_nohup_outlives_its_terminal(afc):
    """``nohup afc submit ...``: SIGHUP comes ignored, and the run is meant to outlive its
    terminal. afc's own SIGHUP handler (the drain above) must not undo that: it stopped a
    nohup run at the hangup."""
    log, release = afc.cwd / "calls.log", afc.cwd / "release"
    afc.write_manifest(manifest(jobs(6)))
    env = {"AFC_LOCAL_CALL_LOG": str(log), "AFC_LOCAL_RELEASE": str(release)}
    proc = subprocess.Popen(
        afc.command("submit", "manifest.yaml", "--concurrency", "3"),
        cwd=afc.cwd,
        env={**afc.env, **env},
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),  # what nohup does
    )
    wait_for(afc, STARTED, 3)
    os.killpg(proc.pid, signal.SIGHUP)
    release.touch()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "stopping" not in err
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY 1") == [("succeeded", 6)]
    assert len(log.read_text().splitlines()) == 6


def test_a_spool_file_that_cannot_be_read_leaves_its_job_waiting_at_store(afc):
    """Something not a file where the spool file was (a folder; or a disk's read error): the
    check against the checkpoint (above) raised its OSError out of the job's task, which broke
    the whole run. It is a storage error, as the upload's own read of the file was before:
    the job waits at its store step, the run goes on and exits 1."""
    env, spooled = waiting_at_store(afc)
    spooled.unlink()
    spooled.mkdir()
    result = afc("resume", env=env)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "[Errno" not in result.stderr.split("\n")[0]
    assert afc.rows("SELECT status, step FROM jobs") == [("waiting", "store")]
    (reason,) = afc.rows("SELECT waiting_reason FROM jobs")[0]
    assert f"cannot read the spool file {spooled}" in reason, reason
