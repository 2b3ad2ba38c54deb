"""Outside audit 26f: a kill-point sweep of the pipeline. A real ``afc`` child is SIGKILLed at
each boundary of a job's pipeline, synchronised at the wire: the fake provider, the S3 proxy
or the webhook receiver holds the request the test names and the test kills the child while
it waits there (nothing inside afc is armed). Then ``afc submit`` runs again and the test
checks what the promise says: the provider charged no more than the kill made unavoidable,
every charged request has its attempt row (priced, or counted unknown), one object per job,
no job failed that the rerun could finish, and the costs report's money is the attempts'.

The named crash points (AFC_CRASH_POINT, tests/test_crash.py and others) and the timed kills
already cover the windows a hook inside afc pins; this file covers the ones at the wire."""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from decimal import Decimal

import pytest
from conftest import manifest, wait_for
from fakeproviders import FakeProviders
from s3fake import FaultPlan, ProxiedBucket

from afc_cli.pipeline import LEASE_RECHECK_S

MODELS = {
    "openai": "gpt-image-1",
    "replicate": "black-forest-labs/flux-1.1-pro",
    "fal": "fal-ai/flux/dev",
}
RATES = [
    {"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"},
    {"provider": "replicate", "model": MODELS["replicate"], "per_second": "0.0012"},
    {"provider": "fal", "model": "fal-ai/flux/dev", "per_image": "0.025"},
]
FAST = {"base": 0.01, "cap": 0.05}
HOLD_S = 60  # a held request is let go after this at the latest (the test's child is dead)


class Hold:
    """One request to hold: ``method`` and a regular expression on its path; ``when``
    'before' (the server has not acted on it, and never will: the connection is dropped),
    'after' (it acted, the charge is made, its answer is held) or 'sent' (its answer went
    out; the test kills the child as it reads it). ``skip``: matching requests let through
    first."""

    def __init__(self, method: str, path: str, when: str, skip: int = 0) -> None:
        self.method, self.path, self.when, self.skip = method, path, when, skip
        self.arrived = threading.Event()
        self.release = threading.Event()
        self.used = False


class Holds:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[Hold] = []

    def add(self, method: str, path: str, when: str, skip: int = 0) -> Hold:
        hold = Hold(method, path, when, skip)
        with self.lock:
            self.items.append(hold)
        return hold

    def take(self, method: str, path: str, when: str) -> Hold | None:
        with self.lock:
            for hold in self.items:
                if hold.used or hold.when != when or hold.method != method:
                    continue
                if not re.search(hold.path, path):
                    continue
                if hold.skip:
                    hold.skip -= 1
                    continue
                hold.used = True
                return hold
        return None

    def release_all(self) -> None:
        with self.lock:
            for hold in self.items:
                hold.release.set()


def _wait(hold: Hold) -> None:
    hold.arrived.set()
    hold.release.wait(HOLD_S)


class HoldingFakes(FakeProviders):
    """The provider fakes, holding the requests ``holds`` names."""

    def __init__(self) -> None:
        super().__init__()
        self.holds = Holds()

    def route(self, h, method: str) -> None:
        path = h.path.split("?")[0]
        hold = self.holds.take(method, path, "before")
        if hold is not None:
            _wait(hold)
            h.close_connection = True
            return None
        for when in ("after", "sent"):
            hold = self.holds.take(method, path, when)
            if hold is not None:
                reply = h.reply

                def held(*args, _reply=reply, _hold=hold, **kwargs):
                    if _hold.when == "after":
                        _wait(_hold)
                    try:
                        _reply(*args, **kwargs)
                        h.wfile.flush()
                    finally:
                        if _hold.when == "sent":
                            _wait(_hold)

                h.reply = held
                break
        return super().route(h, method)

    def charged(self, provider: str | None = None) -> int:
        """Generation requests the provider did (and bills), whatever afc heard."""
        with self.lock:
            return sum(1 for _, p, _, billed in self.log if billed and provider in (None, p))

    def stop(self) -> None:
        self.holds.release_all()
        super().stop()


class HoldingPlan(FaultPlan):
    """The S3 proxy's plan, holding the requests ``holds`` names ('before': never forwarded;
    'after': forwarded, the store's answer held)."""

    def __init__(self) -> None:
        super().__init__()
        self.holds = Holds()

    def take(self, method: str, path: str):
        hold = self.holds.take(method, path.split("?")[0], "before")
        if hold is not None:
            _wait(hold)
            return _Reset()
        return super().take(method, path)

    def answered(self, method: str, path: str) -> None:
        hold = self.holds.take(method, path.split("?")[0], "after")
        if hold is not None:
            _wait(hold)


class _Reset:
    kind = "reset"


@pytest.fixture
def fakes(afc):
    server = HoldingFakes().start()
    afc.env.update(server.env())
    yield server
    server.stop()


@pytest.fixture
def s3(moto_server, afc):  # noqa: F811
    plan = HoldingPlan()
    ctx = ProxiedBucket(moto_server, afc, plan, "kills")
    yield ctx
    plan.holds.release_all()
    ctx.proxy.shutdown()


def kill_at(afc, hold: Hold, *args: str, env: dict[str, str] | None = None) -> None:
    """Run ``afc ARGS`` until it waits at ``hold``, then SIGKILL it."""
    proc = afc.popen(*args, env=env)
    try:
        deadline = 60
        while not hold.arrived.wait(0.05):
            deadline -= 0.05
            assert proc.poll() is None, f"afc ended before the hold: {proc.stderr.read()}"
            assert deadline > 0, "the held request never came"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        hold.release.set()


def _chain(provider: str, attempts: int = 3) -> list[dict]:
    return [
        {"provider": provider, "model": MODELS[provider], "attempts": attempts, "backoff": FAST}
    ]


def _write(afc, chain: list[dict], prompt: str = "a lighthouse", job=None, **top) -> None:
    data = manifest([{"key": "j", "prompt": prompt, **(job or {})}], rates=RATES, **top)
    data["defaults"]["chain"] = chain
    afc.write_manifest(data)


def _rerun(afc, ledger: str, *extra: str) -> dict:
    result = afc("submit", "manifest.yaml", "--ledger", ledger, "--json", *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def _attempts(afc, ledger: str) -> list[tuple]:
    sql = (
        "SELECT a.provider, a.status, a.cost_micros, a.provider_request_id FROM attempts a"
        " ORDER BY a.started_at, a.number"
    )
    if ledger.startswith("postgresql"):
        import psycopg

        with psycopg.connect(ledger) as conn:
            return conn.execute(sql).fetchall()
    return afc.rows(sql)


def _check_money(afc, ledger: str, charged: int) -> None:
    """Every charged request is an attempt row: priced, or counted unknown (possibly paid);
    none left 'started'; the costs report's money is the attempts'."""
    attempts = _attempts(afc, ledger)
    assert not [a for a in attempts if a[1] == "started"], attempts
    # a charge is an attempt priced above 0, or unpriced (possibly paid); none known free
    paid = [a for a in attempts if a[2] is None or a[2] > 0]
    assert len(paid) >= charged, (attempts, charged)
    report = afc.json("costs", "report", "--ledger", ledger)["total"]
    known = sum(Decimal(a[2]) / 1_000_000 for a in attempts if a[2] is not None)
    assert Decimal(report["priced"]) == known, (report, attempts)
    unpriced = [a for a in attempts if a[2] is None]
    assert report["unpriced_attempts"] == len(unpriced), (report, attempts)
    unknown = [a for a in attempts if a[1] == "unknown"]
    assert report["unknown_attempts"] == len(unknown), (report, attempts)
    status = afc.json("status", "--ledger", ledger)
    assert [j["status"] for j in status["jobs"]] == ["succeeded"], status
    # the job's own figures: the same money, the same attempts left unpriced
    [job] = status["jobs"]
    assert Decimal(job["cost"]) == known, (job, attempts)
    assert job["unpriced_attempts"] == len(unpriced), (job, attempts)


# --- the provider's side: its request, its answer, its polls, its output --------------------

# (provider, method, path, when, skip, charges after the rerun)
PROVIDER_POINTS = [
    # OpenAI made the image and bills it; its answer never reaches afc: paid twice, the first
    # counted unknown (the documented paid window of a synchronous provider). (A request that
    # never arrived: the crash point after_attempt_row, tests/test_crash.py.)
    ("openai", "POST", r"^/v1/images/generations$", "after", 0, 2),
    # the prediction made, its id never heard: a new one is made (no lookup by anything else)
    ("replicate", "POST", r"/predictions$", "after", 0, 2),
    # the output being downloaded: its request id committed, polled again, fetched again
    ("replicate", "GET", r"^/files/", "before", 0, 1),
    # fal's result fetched (its answer lost), then its output downloaded (its bytes lost)
    ("fal", "GET", r"^/fal-ai/flux/requests/[^/]+$", "after", 0, 1),
    ("fal", "GET", r"^/files/", "after", 0, 1),
    # the prediction's id came back and the run is killed as it reads it: whether the id was
    # committed first decides between one charge and two; either way each is on the books
    ("replicate", "POST", r"/predictions$", "sent", 0, None),
]


@pytest.mark.parametrize(
    "provider,method,path,when,skip,charges",
    PROVIDER_POINTS,
    ids=[f"{p[0]}-{p[1]}-{p[2][-12:]}-{p[3]}-{p[4]}" for p in PROVIDER_POINTS],
)
def test_a_kill_at_the_providers_wire_never_pays_again_for_what_it_can_fetch(
    afc, fakes, tmp_path, provider, method, path, when, skip, charges
):
    _killed_at_the_provider(
        afc, fakes, str(tmp_path / "afc.db"), provider, method, path, when, skip, charges
    )


# the points where the backends differ: the request id's synced commit, the spool's checkpoint
PG_POINTS = [
    ("replicate", "GET", r"^/v1/predictions/[^/]+$", "before", 0, 1),
    ("fal", "GET", r"^/files/", "after", 0, 1),
    ("openai", "POST", r"^/v1/images/generations$", "after", 0, 2),
]


@pytest.mark.parametrize(
    "provider,method,path,when,skip,charges",
    PG_POINTS,
    ids=[f"{p[0]}-{p[1]}-{p[2][-12:]}-{p[3]}-{p[4]}" for p in PG_POINTS],
)
def test_the_same_on_postgresql(afc, fakes, pg_url, provider, method, path, when, skip, charges):
    _killed_at_the_provider(afc, fakes, pg_url, provider, method, path, when, skip, charges)


def _killed_at_the_provider(afc, fakes, ledger, provider, method, path, when, skip, charges):
    _write(afc, _chain(provider))
    hold = fakes.holds.add(method, path, when, skip)
    kill_at(afc, hold, "submit", "manifest.yaml", "--ledger", ledger)
    _rerun(afc, ledger)
    assert fakes.charged() in ((1, 2) if charges is None else (charges,)), fakes.log
    _check_money(afc, ledger, fakes.charged())
    assert sorted(p.name for p in (afc.outputs() / "b1").iterdir()) == ["j.png", "j.png.afc.json"]


# --- the store's side: S3's upload, its read-back ------------------------------------------

# (method, path, when, skip): the output's key, films/b1/j.png
KEY = r"^/kills-\d+/films/b1/j\.png$"
STORE_POINTS = [
    # (an upload that never reached the store: the crash point after_spool, tests/test_crash.py)
    ("PUT", KEY, "after", 0),  # the object landed; afc never heard so
    ("HEAD", KEY, "before", 1),  # after the upload: its read-back (the probe's HEAD let by)
    ("HEAD", KEY, "after", 1),
]


@pytest.mark.parametrize(
    "method,path,when,skip", STORE_POINTS, ids=[f"{p[0]}-{p[2]}-{p[3]}" for p in STORE_POINTS]
)
def test_a_kill_at_the_stores_wire_costs_an_upload_never_a_render(
    afc, fakes, s3, tmp_path, method, path, when, skip
):
    ledger = str(tmp_path / "afc.db")
    _write(afc, _chain("openai"))
    hold = s3.plan.holds.add(method, path, when, skip)
    kill_at(afc, hold, "submit", "manifest.yaml", "--storage", s3.url)
    _rerun(afc, ledger, "--storage", s3.url)
    assert fakes.charged() == 1, fakes.log
    _check_money(afc, ledger, 1)
    listed = s3.client.list_objects_v2(Bucket=s3.bucket).get("Contents", [])
    assert [o["Key"] for o in listed] == ["films/b1/j.png"], listed
    assert list((tmp_path / "afc.db-spool").glob("*.spool")) == []


# --- a chain's next model ----------------------------------------------------------------------


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_kill_at_a_chains_next_model_keeps_the_first_models_record_and_finishes(
    afc, fakes, tmp_path, when
):
    """The first model failed (a 500, its one attempt spent), the chain went on to the next,
    whose only attempt the kill cut off: the rerun neither calls the first model again nor
    counts the cut-off attempt as the next model's last."""
    ledger = str(tmp_path / "afc.db")
    chain = _chain("openai", attempts=1) + _chain("replicate", attempts=1)
    _write(afc, chain, prompt="boom")
    hold = fakes.holds.add("POST", r"/predictions$", when)
    kill_at(afc, hold, "submit", "manifest.yaml")
    _rerun(afc, ledger)
    assert fakes.counts["openai"] == 1
    charges = 2 if when == "after" else 1
    assert fakes.charged("replicate") == charges, fakes.log
    _check_money(afc, ledger, charges)


# --- afc cancel and afc retry -----------------------------------------------------------------


@pytest.mark.parametrize(
    "provider,window", [("replicate", None), ("replicate", 600), ("fal", None)]
)
def test_a_cancel_killed_at_the_providers_cancel_then_retried_finishes_the_job(
    afc, fakes, tmp_path, provider, window
):
    """Found by outside audit 26f: a run killed while it polled; 'afc cancel j' killed
    (SIGKILL) once the provider had stopped the request, before afc heard so; then 'afc
    retry j' and a run. The ledger saw no cancel reach the provider, so the retry polled the
    request (as it must: a cancel cut off before its request leaves the render going, paid,
    tests/test_audit25a_cancel.py), found it cancelled, and failed the job CHAIN_FAILED
    ('cancelled stops the chain'): the job the person had just retried. Now that attempt
    ends interrupted and a new request renders the job. (The one cut off before the provider
    heard: tests/test_audit25a_cancel.py, with SIGINT.)"""
    ledger = str(tmp_path / "afc.db")
    chain = _chain(provider)
    if window:  # Replicate's Cancel-After: a prediction canceled is a window's end to afc
        chain[0]["window_s"] = window
    _write(afc, chain, prompt="hold")
    polled = fakes.holds.add("GET", r"^/v1/predictions/[^/]+$|/status$", "before")
    kill_at(afc, polled, "submit", "manifest.yaml")
    cancel = r"/cancel$"
    hold = fakes.holds.add("POST" if provider == "replicate" else "PUT", cancel, "after")
    kill_at(afc, hold, "cancel", "j")
    assert afc.rows("SELECT status FROM jobs") == [("cancelled",)]
    retried = afc("retry", "j")
    assert retried.returncode == 0, retried.stderr
    fakes.released.set()
    resumed = afc("resume", "--json")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    # (the fake fal renders a request on to its end whatever its cancel says)
    charges = 2 if provider == "replicate" else 1
    assert fakes.charged() == charges, fakes.log
    _check_money(afc, ledger, charges)


# --- a review gate and its webhook events -----------------------------------------------------


def test_a_kill_while_a_review_gates_event_is_posted_loses_neither_event_nor_money(
    afc, fakes, tmp_path
):
    """A reviewed job's run killed while its job.awaiting_review event is posted (the
    receiver holds the POST): the rerun pays nothing, the job still awaits its review, and
    the event is posted again with the same webhook-id once the dead run's lease on it has
    run out; the approval's job.succeeded follows."""
    from receiver import Receiver

    receiver = Receiver().start()
    receiver.gate = threading.Event()
    try:
        afc.env.update(
            {"AFC_HOOK_SECRET": "whsec_" + "MDEyMzQ1Njc4OWFiY2RlZg==", "AFC_LEASE_S": "3"}
        )
        _write(
            afc,
            _chain("openai"),
            job={"review": True},
            webhook={"url": receiver.url, "secret_env": "AFC_HOOK_SECRET", "timeout_s": 1},
        )
        proc = afc.popen("submit", "manifest.yaml")
        try:
            deadline = time.time() + 60
            while not receiver.received:
                assert proc.poll() is None, proc.stderr.read()
                assert time.time() < deadline, "no webhook came"
                time.sleep(0.02)
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(timeout=30) == -signal.SIGKILL
        finally:
            if proc.poll() is None:
                proc.kill()
        receiver.gate.set()
        held = receiver.received[0].headers["webhook-id"]
        assert held.endswith(":job.awaiting_review")
        again = afc("submit", "manifest.yaml")
        assert again.returncode == 0, again.stderr
        assert afc.rows("SELECT status FROM jobs") == [("awaiting_review",)]
        assert fakes.charged() == 1
        assert afc("review", "approve", "j", "--by", "ana").returncode == 0
        deadline = time.time() + 30
        while afc.rows("SELECT COUNT(*) FROM deliveries WHERE status = 'delivered'") != [(2,)]:
            assert time.time() < deadline, afc.rows("SELECT * FROM deliveries")
            afc("webhooks", "deliver")
            time.sleep(0.5)
        ids = [r.headers["webhook-id"] for r in receiver.received]
        assert ids.count(held) == 2 and len(set(ids)) == 2, ids
        _check_money(afc, str(tmp_path / "afc.db"), 1)
    finally:
        receiver.stop()


@pytest.mark.parametrize("slow", [False, True], ids=["quick", "slow"])
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_kill_while_a_cancelled_jobs_late_result_is_stored_loses_no_render(
    afc, fakes, s3, tmp_path, when, slow
):
    """'afc cancel j' while the run polled fal (whose request renders on); the run gets the
    paid result, records it and stores it as the job's own (a late result), and is killed
    while that upload is held at the store. 'afc retry j' and a run store the render from
    the spool or find it stored: no second request, one object.

    ``slow``: the result comes more than ``pipeline.LEASE_RECHECK_S`` after the attempt's
    start, so the run, no longer holding the cancelled job, spools it under a name of its own
    (``<job id>.late``, ``Spool.late_path``). No run read that file: the retry's run paid for
    the render again (found by a fresh clone's suite on a loaded machine, where the render
    took that long)."""
    ledger = str(tmp_path / "afc.db")
    _write(afc, _chain("fal"), prompt="hold")
    proc = afc.popen("submit", "manifest.yaml", "--storage", s3.url)
    try:
        deadline = time.time() + 60
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL", 1)
        submitted = time.monotonic()
        cancelled = afc("cancel", "j")
        assert cancelled.returncode == 0, cancelled.stderr
        while slow and time.monotonic() - submitted < 2 * LEASE_RECHECK_S:
            time.sleep(0.05)  # the product's own threshold, measured on its clocks
        hold = s3.plan.holds.add("PUT", KEY, when)
        fakes.released.set()
        while not hold.arrived.wait(0.05):
            assert proc.poll() is None and time.time() < deadline, proc.stderr.read()
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
    assert afc("retry", "j").returncode == 0
    resumed = afc("resume", "--json")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert fakes.charged() == 1, fakes.log
    _check_money(afc, ledger, 1)
    listed = s3.client.list_objects_v2(Bucket=s3.bucket).get("Contents", [])
    assert [o["Key"] for o in listed] == ["films/b1/j.png"], listed
    if slow:
        assert not list((tmp_path / "afc.db-spool").glob("*.late")), "the late file stayed"


# --- a worker killed between its lease renewals --------------------------------------------------


def test_a_worker_killed_while_it_renews_its_lease_over_a_poll_is_taken_over_by_id(
    afc, fakes, pg_url
):
    """A PostgreSQL worker polling Replicate, its lease renewed every second (AFC_LEASE_S
    3), killed at a poll well after its first renewals; a worker of another host takes the
    job over once the lease ran out and polls the same prediction: one charge, recorded."""
    _write(afc, _chain("replicate"), prompt="hold")
    assert afc("submit", "manifest.yaml", "--no-run", "--ledger", pg_url).returncode == 0
    worker = ["worker", "--ledger", pg_url, "--until-idle", "--poll", "0.2"]
    hold = fakes.holds.add("GET", r"^/v1/predictions/[^/]+$", "before", skip=40)
    kill_at(afc, hold, *worker, env={"AFC_HOST_ID": "host-a", "AFC_LEASE_S": "3"})
    fakes.released.set()
    other = afc(*worker, env={"AFC_HOST_ID": "host-b", "AFC_LEASE_S": "3"}, timeout=60)
    assert other.returncode == 0, other.stderr
    assert fakes.charged() == 1, fakes.log
    _check_money(afc, pg_url, 1)
