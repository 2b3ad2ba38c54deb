"""What a long run keeps: an ``afc worker`` feeds one run loop for as long as claims find work
(``run.run_jobs(more=...)``), for weeks, so nothing the loop keeps may grow with the jobs it
has finished. Counted in-process, after a few hundred jobs."""

from __future__ import annotations

import gc

from conftest import jobs, manifest

from afc_cli import run as run_mod
from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest


def _fed_run(afc, monkeypatch, job_list, concurrency=4, chunk=10):
    """Run ``job_list`` through one loop fed ``chunk`` ids at a time (a worker's rounds); at
    each feed, what the loop keeps: (tasks it holds, blocked ids, finished run_job tasks
    still alive)."""
    path = afc.write_manifest(manifest(job_list))
    m = load_manifest(path)
    ledger = Ledger(afc.cwd / "afc.db")
    ledger.admit(m, f"file://{afc.cwd}/out", RateCards())
    ids = [job.job_id for job in m.jobs]
    contexts = []
    real = run_mod.run_job

    def recorded(ctx, job_id):
        if not contexts:
            contexts.append(ctx)
        return real(ctx, job_id)

    monkeypatch.setattr(run_mod, "run_job", recorded)
    left = ids[chunk:]
    kept = []

    def more(running):
        gc.collect()
        ctx = contexts[0]
        done = sum(
            1
            for obj in gc.get_objects()
            if type(obj).__name__ == "Task" and obj.done() and "run_job" in repr(obj.get_coro())
        )
        kept.append((len(ctx.tasks), len(ctx.blocked), done))
        new = left[:chunk]
        del left[:chunk]
        return new

    try:
        stats = run_mod.run_jobs(ledger, ids[:chunk], concurrency=concurrency, more=more)
        statuses = {ledger.job(job_id)["status"] for job_id in ids}
    finally:
        ledger.close()
    return stats, statuses, kept, contexts[0]


def test_a_fed_run_loop_keeps_only_its_unfinished_jobs_tasks(afc, monkeypatch):
    """Before, the loop kept every job's task (and its id) until it ended: about 0.8 KB a job
    done, for as long as a worker's claims found work (50,000 jobs: 40 MB)."""
    n, concurrency = 400, 4
    stats, statuses, kept, ctx = _fed_run(afc, monkeypatch, jobs(n), concurrency)
    assert statuses == {"succeeded"}
    assert (stats.ran, stats.finished) == (n, n)
    late = kept[len(kept) // 2 :]  # hundreds of jobs finished by then
    # held when ``more`` is asked: the unfinished (no more than ``concurrency``: asked only
    # then) and those that ended in the last wait whose ``_start.ended`` callback has not run
    # yet (ended in the loop turn that woke the feeding: at most one wait's, as below; a clean
    # clone's suite saw 9 once on a busy machine): never the hundreds ended before
    assert max(tasks for tasks, _, _ in late) <= concurrency + (concurrency + 10), kept
    # the ended tasks still alive are at most one wait's (``run._fed``'s ``done``: of the
    # ``concurrency`` running and a fed round of 10, on a busy machine all ended at once,
    # 9 seen once in a clean clone's suite), however many jobs ended before: never hundreds
    assert max(done for _, _, done in late) <= concurrency + 10, kept
    assert ctx.tasks == {}


def test_a_fed_run_loop_forgets_blocked_jobs_once_they_ran(afc, monkeypatch):
    """A job admitted blocked on its needs is remembered as such while it waits, not after."""
    job_list = jobs(200)
    for i, job in enumerate(job_list):
        if i % 2:
            job["needs"] = [job_list[i - 1]["key"]]
    stats, statuses, kept, ctx = _fed_run(afc, monkeypatch, job_list, chunk=20)
    assert statuses == {"succeeded"}
    assert stats.finished == 200
    assert max(blocked for _, blocked, _ in kept[len(kept) // 2 :]) <= 20, kept
    assert ctx.blocked == set()


def test_file_storage_remembers_a_bounded_number_of_folders(tmp_path, monkeypatch):
    """``FileStorage`` skips the mkdir of a folder it made before; with a folder per job
    (``{batch}/{key}/frame.png``) that memory grew by one path a job in the file helper."""
    from afc_cli.spool import Spool
    from afc_cli.storage import file as file_mod

    monkeypatch.setattr(file_mod, "MADE_DIRS", 8, raising=False)
    monkeypatch.setattr(file_mod, "_MADE", set())
    storage = file_mod.FileStorage(tmp_path / "out")
    spooled = Spool(tmp_path / "spool").write("job", b"png bytes", sync_dir=False)
    for i in range(40):
        meta = {"job_id": f"j{i}", "request_hash": "h", "sha256": spooled.sha256}
        storage.put_if_absent(f"b/shot-{i}/frame.png", spooled.path, meta, sync=False)
        assert len(file_mod._MADE) <= 8
    assert (tmp_path / "out/b/shot-39/frame.png").read_bytes() == b"png bytes"
    # a folder forgotten is found again: the next store in it works
    storage.put_if_absent("b/shot-0/other.png", spooled.path, {"job_id": "x", "request_hash": "h"})
    assert (tmp_path / "out/b/shot-0/other.png").exists()


def test_afc_serve_keeps_a_bounded_number_of_thumbnails(tmp_path, monkeypatch):
    """``afc serve`` cached every thumbnail it made (about 3 KB each) for as long as it ran:
    a server left open over a 100,000-job ledger kept every picture anyone scrolled past.
    It keeps the ``THUMBS`` most recently shown."""
    from afc_cli.web import server, thumbs

    monkeypatch.setattr(server, "THUMBS", 16, raising=False)
    pages = server.Pages(str(tmp_path / "afc.db"), None, "token")
    made = []

    def card(job_id):
        return {
            "output": True,
            "sha256": f"sha-{job_id}",
            "storage": "file:///x",
            "output_key": "k",
        }

    def make(storage, key, sha256=None):
        made.append(key)
        return thumbs.Thumb(b"webp", None)

    monkeypatch.setattr(pages, "_card", card)
    monkeypatch.setattr(thumbs, "make", make)
    for i in range(100):
        assert pages._thumb(str(i)) == b"webp"
        assert len(pages.thumbs) <= 16
    assert len(made) == 100
    assert pages._thumb("99") == b"webp" and len(made) == 100  # a recent one is still kept


def test_the_live_panel_remembers_a_bounded_number_of_messages(monkeypatch):
    """The live panel collapses a message's repeats; a message that names its job (here its
    output path) is new each time, and every one was remembered for as long as the run (a
    worker's, for weeks) went on. Repeats still collapse and are still counted."""
    from afc_cli import progress as progress_mod

    monkeypatch.setattr(progress_mod, "SEEN_MESSAGES", 32, raising=False)
    progress = progress_mod.RunProgress(5000)
    for i in range(5000):
        key = f"shot-{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}{chr(97 + i // 676)}"
        row = {"batch": "b", "key": key, "waiting_reason": f"storage: cannot write /out/{key}.png"}
        progress.event(row, "ended", "waiting")
        progress.event({**row, "key": "again"}, "ended", "waiting")  # a repeat of the same
        progress.take()
        assert len(progress._seen) <= 32
    assert progress.repeats == 5000
    assert progress.lines()[0].startswith("ok 0  failed 0  waiting 10000")
