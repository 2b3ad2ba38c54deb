"""Chaos reconciliation: afc killed at random moments, then checked from outside.

Run it (after ``make bytecode``)::

    .venv/bin/python bench/chaos.py [--rounds 4] [--jobs 240] [--seed 1] [--keep DIR]
    .venv/bin/python bench/chaos.py --postgres [--jobs 400] [--lease 4] [--pg-seconds 60]

Each round admits a few hundred jobs spread over the four fake providers of
``tests/fakeproviders.py`` (OpenAI, Replicate, fal, Gemini), with their failure prompts
(throttling, 5xx, refusals, flaky downloads, CDN and poll outages, cut bodies, slow renders,
OpenAI-compatible answers naming their image's URL, some behind a CDN that refuses a while),
chains with fallbacks, ``needs``, ``inputs`` and review gates (``review: true``, decided
between runs, or beside the workers, by ``afc review approve`` / ``reject``, a quarter
rejected), every ending announced to a webhook receiver that answers some POSTs 503 or 500;
some rounds under ``--max-spend``, some on S3
(moto's server, with SlowDown faults at the wire) and the others on ``file://``. It runs
``afc submit`` then ``afc resume`` (or ``afc worker --until-idle``) again and again, killing
the process at random moments with SIGKILL, SIGTERM, SIGINT or two signals, until every job
is terminal. Then it reconciles, from the fake servers' own request log and the storage:

- every billed provider request has an attempt row (matched by provider and time);
- no job was billed more than once, except for calls in flight at a kill (``unknown``) and
  paid failures recorded as such; nothing is billed for a job after its output was spooled,
  nor after its answer's output URL was committed (``attempts.answer_url``: the next run
  fetches it) unless a person cancelled or retried the job;
- every job is terminal; each succeeded job has exactly one object whose metadata (job id,
  request hash, sha256, attempt) matches the ledger, and nothing else is stored;
- ``afc costs report --json`` totals equal the sums of the attempt rows; ``afc status --json``
  costs equal each job's known attempt costs;
- no run of a budget round spent (known cost, else reservation) past its ``--max-spend``;
- exit codes are the documented ones (SIGKILL aside); no attempt is left ``started`` and no
  spool file is left behind;
- a reviewed job succeeded only by a person's approval and was rejected only by a rejection,
  each with its one decision event; a fresh ledger asks for the review again (and the jobs
  needing it wait) rather than rendering anything;
- the webhook outbox (after one ``afc webhooks deliver``): every ending, and each review's
  start, has its delivery row; a row marked delivered was answered 2xx; every POST the
  receiver got verifies (Standard Webhooks, at its arrival), is its row's envelope byte for
  byte and names the job's real state.

``--postgres`` (``make chaos-postgres``, about 5 minutes) runs the rounds on a PostgreSQL
ledger (a server started as the tests do, tests/pg_server.py) as several machines would: the
jobs are admitted with ``submit --no-run``, then three ``afc worker`` processes run at once as
three hosts (own ``AFC_HOST_ID`` and ``AFC_SPOOL_DIR``, ``AFC_LEASE_S`` of ``--lease`` s),
S3 in half the rounds and a shared ``--budget NAME --max-spend`` in two, disturbed at random
for up to ``--pg-seconds``: SIGKILL of one and a replacement on its host, SIGSTOP of one past
its lease then SIGCONT (a stalled host; one near the end, when few jobs are free, so its jobs
are taken over), SIGTERM (a drain) and a replacement, ``afc cancel`` / ``afc retry`` of a
few jobs and a re-submit of the manifest (left to run, then SIGTERM) from a fourth host.
Then every worker is stopped and one clean ``afc worker --until-idle`` or ``afc resume``
ends the rest. The reconciliation above, and also: each job ended exactly once per retry (its
events: a terminal one, then ``retried``, ...); an ``unknown`` attempt belongs to a process
that was killed, stalled, abandoned calls (exit 130) or drained by a signal (its job-style
calls left to the next run), or was gone at the provider, or is a fetch of a paid output a
person's cancel stopped (left for ``afc retry`` to fetch); a stalled
host that drained has its late answers' costs recorded (where the request was billed and afc
prices that answer: a refusal or a bare gateway 502, say, is of unknown cost on any host); a second succeeded attempt of a job
is a stalled host's; a stored object no succeeded job has is a cancelled job's late result
whose own metadata matches; the shared budget's spend (known cost, else reservation) is within
its cap; a spool file left is of a job that did not succeed (its paid output) or swept later.

It prints the figures of each round and every violation, and exits 1 if there was any.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import hashlib
import json
import logging
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from decimal import Decimal
from functools import partial
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fakeproviders import FakeProviders  # noqa: E402
from receiver import Receiver  # noqa: E402

from afc_cli.owner import parse_owner  # noqa: E402

TERMINAL = {"succeeded", "failed", "cancelled", "dead", "rejected"}
DOCUMENTED = {0, 1, 3, 4, 130}
MODELS = {
    "openai": "gpt-image-1",
    "replicate": "black-forest-labs/flux-1.1-pro",
    "fal": "fal-ai/flux/dev",
    "gemini": "gemini-2.5-flash-image",
}
RATES = {"openai": "0.04", "replicate": "0.04", "fal": "0.025", "gemini": "0.039"}
BEHAVIOURS = {
    "openai": ["", "", "", "rate-limit", "boom", "moderation", "slow-1.5s", "slow-0.6s"]
    + ["cut-body", "garbled", "dalle-url", "dalle-url cdn-outage"],
    "replicate": ["", "", "", "throttle", "flagged", "flaky-download", "poll-outage"]
    + ["data-removed", "garbled-poll", "cdn-outage"],
    "fal": ["", "", "", "retryable-422", "gateway-502", "runner-503", "nsfw", "result-outage"]
    + ["flaky-download", "poll-outage"],
    "gemini": ["", "", "", "quota", "blocked", "image-safety"],
}
PROVIDERS = list(MODELS)
# the webhook receiver's answers, drawn for each POST in the order they arrive: mostly 200,
# sometimes a 503 with Retry-After or a bare 500 (tried again later, the same webhook-id)
HOOK_ANSWERS = [(200, 0.0, {})] * 17 + [(503, 0.0, {"Retry-After": "1"}), (500, 0.0, {})]
HOOK_SECRET_ENV = "AFC_CHAOS_HOOK_SECRET"


def entry(provider: str, last: bool, attempts: int) -> dict:
    e = {
        "provider": provider,
        "model": MODELS[provider],
        "attempts": attempts,
        "backoff": {"base": 0.01, "cap": 0.05},
    }
    if not last:
        e["fallback_on"] = ["exhausted", "refusal", "unavailable"]
    return e


def make_manifest(rng: random.Random, batch: str, n: int, webhook: str | None) -> dict:
    jobs = []
    for i in range(n):
        key = f"k{i:04d}"
        first = PROVIDERS[i % 4]
        behaviour = rng.choice(BEHAVIOURS[first])
        chain = [first]
        if rng.random() < 0.6:
            chain.append(rng.choice([p for p in PROVIDERS if p != first]))
        job = {
            "key": key,
            "prompt": f"{key} {batch} {behaviour}".strip(),
            "chain": [
                entry(p, j == len(chain) - 1, rng.choice([1, 2, 3])) for j, p in enumerate(chain)
            ],
        }
        if i >= 4 and i % 10 == 0:
            job["needs"] = [f"k{i - rng.randint(1, 4):04d}"]
        if i >= 4 and i % 15 == 7:
            job["inputs"] = [{"job": f"k{i - rng.randint(1, 4):04d}"}]
        if i % 9 == 4 and webhook:
            # a person approves or rejects it (Round.decide_reviews); jobs that need it or
            # use it as a reference image wait for the approval, a rejection fails them
            job["review"] = True
        if i % 9 == 5 and webhook and f"k{i - 1:04d}" not in job.get("needs", []):
            job["needs"] = [*job.get("needs", []), f"k{i - 1:04d}"]  # the job just reviewed
        jobs.append(job)
    manifest = {
        "version": 1,
        "batch": batch,
        "defaults": {"output": "{batch}/{key}.{ext}"},
        "rates": [{"provider": p, "model": MODELS[p], "per_image": RATES[p]} for p in PROVIDERS],
        "jobs": jobs,
    }
    if webhook:
        manifest["webhook"] = {"url": webhook, "secret_env": HOOK_SECRET_ENV, "timeout_s": 2}
    return manifest


def budget_spend(db) -> dict[str, tuple[int, int, int]]:
    """Per run id, what its budget counts (known cost, else the reservation) of the attempts
    its runs started, of those it adopted, and how many attempts. A request another run
    started and left polling, adopted by this run, counts in its budget from then on (README
    "Budget"; its attempt_resumed event names the run it came from, ``from_run``): the cap
    bounds what the run started, not what it adopted."""
    adopted = set()
    for event in db.execute(
        "SELECT job_id, detail_json FROM events WHERE kind = 'attempt_resumed'"
    ):
        detail = json.loads(event["detail_json"])
        if "from_run" in detail:
            adopted.add((event["job_id"], detail["number"]))
    spend: dict[str, list[int]] = {}
    for a in db.execute(
        "SELECT run_id, job_id, number, cost_micros, reserved_micros FROM attempts"
    ):
        counted = a["cost_micros"] if a["cost_micros"] is not None else a["reserved_micros"] or 0
        entry = spend.setdefault(a["run_id"] or "", [0, 0, 0])
        entry[1 if (a["job_id"], a["number"]) in adopted else 0] += counted
        entry[2] += 1
    return {run_id: tuple(entry) for run_id, entry in spend.items()}


def _worker_had_failures(log: Path) -> bool:
    """Whether a worker's closing line counts jobs it ran that ended failed, dead or
    cancelled ('230 finished (30 failed)'): 'afc worker --until-idle' then exits 1, as 'afc
    resume' would (README, "Running on several machines")."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return re.search(r"\d+ finished \(\d+ failed\)", text) is not None


def process_of(owner: str | None) -> str:
    """The ``host:pid:`` an owner id begins with (``host:pid:start:@fingerprint``, or
    ``host:pid:start`` from an older build: afc_cli/owner.py), the key this bench keeps
    for each process it started."""
    parsed = parse_owner(owner)
    return f"{parsed[0]}:{parsed[1]}:" if parsed is not None else ""


class S3:
    def __init__(self):
        import boto3
        from botocore.config import Config
        from moto.server import ThreadedMotoServer
        from s3fake import Fault, FaultPlan, make_proxy

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.plan = FaultPlan()
        self.plan.add(Fault("PUT", r".", "slowdown", 25), Fault("HEAD", r".", "500", 10))
        self.proxy = make_proxy((host, port), self.plan)
        self.proxy.handle_error = lambda *a: None
        phost, pport = self.proxy.server_address[:2]
        self.env = {
            "AWS_ENDPOINT_URL_S3": f"http://{phost}:{pport}",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
        }
        self.client = boto3.client(
            "s3",
            endpoint_url=f"http://{host}:{port}",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}),
        )

    def bucket(self, name: str) -> str:
        self.client.create_bucket(Bucket=name)
        return name

    def stop(self):
        self.proxy.shutdown()
        self.server.stop()


def spawn(argv: list[str], cwd: Path, env: dict[str, str], errlog) -> subprocess.Popen:
    """``afc argv`` started in ``cwd``, its stderr to ``errlog`` (bench/soak.py's runs too)."""
    return subprocess.Popen(
        [sys.executable, "-m", "afc_cli", *argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=errlog,
    )


class Round:
    # review gates and a webhook receiver (bench/soak.py's batch keeps neither: its figures
    # stay comparable with earlier sessions')
    GATES = True

    def __init__(self, args, index: int, storage: str, budget: str | None, worker: bool, s3):
        self.args, self.index, self.budget, self.worker = args, index, budget, worker
        self.rng = random.Random(args.seed * 1000 + index)
        self.batch = f"chaos{index}"
        self.dir = Path(tempfile.mkdtemp(prefix=f"afc-chaos-{index}-", dir=args.keep))
        self.fake = FakeProviders().start()
        self.fake.server.handle_error = lambda *a: None  # a killed client's broken pipes
        self.s3 = s3 if storage == "s3" else None
        self.bucket = self.s3.bucket(f"chaos-{index}-{int(time.time())}") if self.s3 else None
        self.storage = f"s3://{self.bucket}/films" if self.s3 else f"file://{self.dir}/out"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("AFC_", "AWS_"))}
        self.env.update(self.fake.env(), PYTHONUNBUFFERED="1", AFC_GRACE_S="3")
        self.env["AFC_POLL_S"] = args.poll
        if self.s3:
            self.env.update(self.s3.env)
        self.runs: list[dict] = []
        self.problems: list[str] = []
        self.billed_ids: set[int] = set()  # attempts a billed request was matched to
        # drawn apart from the round's own randomness: a seed's manifest and kills stay what
        # they were before the receiver came (bench/soak.py's figures too)
        hooks_rng = random.Random(f"hooks-{args.seed}-{index}")
        self.receiver = Receiver(
            script=[hooks_rng.choice(HOOK_ANSWERS) for _ in range(args.jobs * 8)]
        ).start()
        self.receiver.server.handle_error = lambda *a: None  # a killed sender's broken pipes
        secret = base64.b64encode(hooks_rng.randbytes(32)).decode()
        self.env[HOOK_SECRET_ENV] = self.hook_secret = f"whsec_{secret}"
        self.decided: dict[str, str] = {}  # key -> 'approved' / 'rejected' (a person's review)
        self.review_refused = 0
        hook = self.receiver.url if self.GATES else None
        self.manifest = make_manifest(self.rng, self.batch, args.jobs, hook)
        (self.dir / "manifest.yaml").write_text(yaml.safe_dump(self.manifest, sort_keys=False))

    # --- running -------------------------------------------------------------------------

    def afc(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "afc_cli", *argv],
            cwd=self.dir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def connect(self):
        """The round's ledger, rows read by column name."""
        db = sqlite3.connect(self.dir / "afc.db")
        db.row_factory = sqlite3.Row
        return db

    def statuses(self) -> Counter:
        try:
            db = self.connect()
            try:
                rows = db.execute("SELECT status, COUNT(*) AS n FROM jobs GROUP BY status")
                return Counter({r["status"]: r["n"] for r in rows})
            finally:
                db.close()
        except Exception:  # not created yet
            return Counter()

    def one_run(self, first: bool) -> dict:
        cap = None
        if first:
            argv = ["submit", "manifest.yaml", "--storage", self.storage]
        elif self.worker and self.rng.random() < 0.4:
            argv = ["worker", "--until-idle", "--poll", "0.2"]
        else:
            argv = ["resume"]
        if self.budget and argv[0] != "worker":
            cap = self.budget
            argv += ["--max-spend", cap]
        argv += ["--concurrency", str(self.rng.choice([4, 16, 32]))]
        actions = ["kill", "kill", "kill", "term", "int", "double", "term-kill"]
        if len(self.runs) >= self.args.min_kills:
            actions.append("none")
        action = self.rng.choice(actions)
        delay = self.rng.uniform(0.3, self.args.max_delay)
        errlog = open(self.dir / f"run{len(self.runs):03d}.err", "w")
        started = time.time()
        proc = spawn(argv, self.dir, self.env, errlog)
        sent = []
        try:
            proc.wait(timeout=delay if action != "none" else 180)
        except subprocess.TimeoutExpired:
            if action == "none":
                proc.kill()
                sent.append("HUNG-kill")
            elif action == "kill":
                proc.send_signal(signal.SIGKILL)
                sent.append("KILL")
            elif action in ("term", "int"):
                proc.send_signal(signal.SIGTERM if action == "term" else signal.SIGINT)
                sent.append(action.upper())
            elif action == "double":
                proc.send_signal(signal.SIGINT)
                time.sleep(self.rng.uniform(0.05, 0.5))
                proc.send_signal(signal.SIGTERM)
                sent += ["INT", "TERM"]
            elif action == "term-kill":
                proc.send_signal(signal.SIGTERM)
                time.sleep(self.rng.uniform(0.1, 1.5))
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    sent += ["TERM", "KILL"]
                else:
                    sent.append("TERM")
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                sent.append("HUNG-kill")
        errlog.close()
        run = {
            "argv": argv,
            "cap": cap,
            "signals": sent,
            "rc": proc.returncode,
            "seconds": round(time.time() - started, 2),
            "said": bool(Path(errlog.name).read_text().strip()),
            "log": errlog.name,
        }
        self.check_rc(run)
        return run

    def check_rc(self, run: dict) -> None:
        rc, sent = run["rc"], run["signals"]
        where = f"run {len(self.runs)} {run['argv'][0]} signals={sent}"
        if "HUNG-kill" in sent:
            self.problems.append(f"{where}: hung, killed after 60 s")
        elif "KILL" in sent:
            if rc not in (-9, *DOCUMENTED):
                self.problems.append(f"{where}: exit {rc}")
        elif sent:
            # a signal may land before afc has installed its handlers (-15 / -2 then: it had
            # said nothing yet, its run loop not begun) or after the run ended on its own
            early = rc in (-15, -2) and not run.get("said")
            if rc not in DOCUMENTED and not early:
                self.problems.append(f"{where}: exit {rc} after {sent} (not a documented code)")
        elif rc not in DOCUMENTED - {130}:
            self.problems.append(f"{where}: exit {rc} with no signal")
        if run["argv"][0] == "worker" and not sent and rc not in (0, 4):
            if not (rc == 1 and _worker_had_failures(self.dir / run["log"])):
                self.problems.append(f"{where}: worker exit {rc}")

    def drive(self) -> None:
        first = True
        while len(self.runs) < self.args.max_runs:
            if not first:
                # a third of what waits, so runs start while a job's need still waits
                self.decide_reviews(self.afc, share=0.35)
            run = self.one_run(first)
            self.runs.append(run)
            counts = self.statuses()
            if first and not counts:
                continue  # killed before the admission committed: submit again
            first = False
            # the last run is a clean resume (a worker's exit says nothing of failed jobs)
            if (
                counts
                and set(counts) <= TERMINAL
                and not run["signals"]
                and run["argv"][0] != "worker"
            ):
                if run["rc"] not in (0, 1):
                    self.problems.append(f"final run exit {run['rc']} with every job terminal")
                if run["rc"] == 0 and set(counts) - {"succeeded", "rejected"}:
                    self.problems.append(f"final run exit 0 with {dict(counts)}")
                return
        self.problems.append(f"not terminal after {len(self.runs)} runs: {dict(self.statuses())}")

    def decide_reviews(self, afc: Callable[..., subprocess.CompletedProcess], share: float) -> None:
        """A person's review: of the jobs awaiting it, ``share`` decided, a quarter of those
        rejected, with ``afc review approve`` / ``reject`` (several keys at once: all decided
        or none). A refusal (exit 2: a key no longer awaiting review, cancelled meanwhile) or
        a ledger that could not take it (exit 1) decides nothing; anything else is a problem."""
        db = self.connect()
        try:
            waiting = [
                r["key"]
                for r in db.execute(
                    "SELECT key FROM jobs WHERE status = 'awaiting_review' ORDER BY key"
                )
            ]
        except Exception:  # no ledger yet
            return
        finally:
            db.close()
        chosen = [k for k in waiting if self.rng.random() < share]
        rejected = [k for k in chosen if self.rng.random() < 0.25]
        approved = [k for k in chosen if k not in rejected]
        for decision, keys in (("approved", approved), ("rejected", rejected)):
            if not keys:
                continue
            if decision == "approved":
                done = afc("review", "approve", *keys, "--note", "chaos: looks right")
            else:
                done = afc("review", "reject", *keys, "--reason", "chaos: wrong light")
            if done.returncode == 0:
                self.decided.update(dict.fromkeys(keys, decision))
            elif done.returncode in (1, 2):
                self.review_refused += 1
            else:
                self.problems.append(
                    f"review {decision} {keys}: exit {done.returncode} {done.stderr[-300:]}"
                )

    # --- reconciling -------------------------------------------------------------------------

    def reconcile(self) -> dict:
        db = self.connect()
        jobs = {r["key"]: dict(r) for r in db.execute("SELECT * FROM jobs")}
        by_id = {j["id"]: j for j in jobs.values()}
        attempts = defaultdict(list)
        for r in db.execute("SELECT * FROM attempts ORDER BY id"):
            attempts[by_id[r["job_id"]]["key"]].append(dict(r))
        spooled = {
            by_id[r["job_id"]]["key"]: r["completed_at"]
            for r in db.execute("SELECT job_id, completed_at FROM steps WHERE step = 'spool'")
        }
        with open(self.dir / "fake-log.jsonl", "w") as out:
            for line in self.fake.log:
                out.write(json.dumps(line) + "\n")
        log = defaultdict(list)
        for t, provider, prompt, billed in self.fake.log:
            log[prompt.split(" ")[0]].append((t, provider, billed))
        p = self.problems
        figures = Counter()
        figures["jobs"] = len(jobs)
        for key, job in sorted(jobs.items()):
            rows = attempts[key]
            figures["attempts"] += len(rows)
            figures["unknown"] += sum(a["status"] == "unknown" for a in rows)
            figures["answer_urls"] += sum(bool(a.get("answer_url")) for a in rows)
            if job["status"] not in TERMINAL:
                p.append(f"{key}: not terminal ({job['status']})")
            for a in rows:
                if a["status"] == "started" and not self.may_leave_started(job, a):
                    p.append(f"{key}: attempt {a['number']} left started")
            sent = [a for a in rows if a["cost_source"] != "unsent"]
            for provider in PROVIDERS:
                requests = sum(1 for _, pr, b in log[key] if pr == provider and not b)
                rows_p = sum(1 for a in sent if a["provider"] == provider)
                if requests > rows_p:
                    p.append(f"{key}: {requests} {provider} requests, {rows_p} attempt rows")
                unsent_hit = [
                    a for a in rows if a["provider"] == provider and a["cost_source"] == "unsent"
                ]
                # the request of a sent attempt in flight at its time is that attempt's (the
                # next one may start a millisecond after a refusal arrived: within the slack)
                sent_then = [
                    (b["started_at"], b["ended_at"] or 1e12)
                    for b in sent
                    if b["provider"] == provider
                ]
                for a in unsent_hit:  # an 'unsent' attempt whose request did reach the fake
                    if any(
                        pr == provider
                        and a["started_at"] - 0.01 <= t <= (a["ended_at"] or 1e12)
                        and not any(start <= t <= end for start, end in sent_then)
                        for t, pr, _ in log[key]
                    ):
                        p.append(f"{key}: attempt {a['number']} recorded unsent but was sent")
            billed = [(t, pr) for t, pr, b in log[key] if b]
            figures["requests"] += sum(1 for _, _, b in log[key] if not b)
            figures["billed"] += len(billed)
            # match each billed request to the attempt in flight for it
            used = set()
            for t, provider in billed:
                # the attempt of that provider in flight when it arrived: one whose row was
                # written before it and which ended after it, else (clock slack) the latest
                # started within 10 ms before it and ended at most 50 ms before it
                match = None
                for slack in ((0.0, 0.0), (0.01, 0.05)):
                    for a in rows:
                        if a["id"] in used or a["provider"] != provider:
                            continue
                        end = self.sent_until(a)
                        if a["started_at"] - slack[0] <= t <= (end or 1e12) + slack[1]:
                            if match is None or a["started_at"] > match["started_at"]:
                                match = a
                    if match is not None:
                        break
                if match is None:
                    p.append(f"{key}: billed {provider} request at {t:.3f} has no attempt row")
                    continue
                used.add(match["id"])
                self.billed_ids.add(match["id"])
                if match["status"] == "failed" and match["cost_micros"] == 0:
                    p.append(f"{key}: billed attempt {match['number']} recorded as costing 0")
                if match["cost_source"] == "unsent":
                    p.append(f"{key}: billed attempt {match['number']} recorded unsent")
            if key in spooled:
                stalled = {  # a frozen process's request, sent when it woke (in flight)
                    t
                    for t, provider in billed
                    for a in rows
                    if a["provider"] == provider
                    and self.sent_until(a) is None
                    and t >= a["started_at"]
                }
                late = [t for t, _ in billed if t > spooled[key] + 0.05 and t not in stalled]
                if late and not self.may_bill_after_spool(job):
                    p.append(f"{key}: billed {len(late)} time(s) after its output was spooled")
            extra = len(billed) - 1
            if extra > 0:
                figures["jobs_billed_more_than_once"] += 1
                figures["extra_billed"] += extra
                causes = Counter(
                    f"{a['provider']} {a['status']}/{a['error_class'] or '-'}"
                    for a in rows
                    if a["id"] in used and a["status"] != "succeeded"
                )
                for cause, n in causes.items():
                    figures[f"extra billed: {cause}"] += n
            for a in rows:
                # a paid render whose output URL was committed (attempts.answer_url) is
                # fetched by the next run, never paid for again: the fake keeps every URL
                # (its CDN refuses a few downloads at most), so no later billed request of
                # that provider may follow one, unless the job was cancelled or retried since
                again = [
                    b["number"]
                    for b in rows
                    if a.get("answer_url")
                    and b["id"] in used
                    and b["provider"] == a["provider"]
                    and b["number"] > a["number"]
                ]
                if again and not self.may_pay_again(job, a):
                    p.append(
                        f"{key}: attempt {a['number']}'s output URL was committed, "
                        f"then attempt {again[0]} paid again"
                    )
            ok = [a for a in rows if a["status"] == "succeeded"]
            if len(ok) > 1 and not self.may_render_twice(ok):
                p.append(f"{key}: {len(ok)} succeeded attempts (rendered twice)")
            if job["status"] == "succeeded" and job["outcome"] == "rendered" and not ok:
                p.append(f"{key}: succeeded rendered with no succeeded attempt")
        self.check_needs(db, jobs, log, figures)
        self.check_outputs(jobs, attempts, figures)
        self.check_reports(jobs, attempts, figures)
        self.check_budget(db, figures)
        self.check_run_spend(db)
        figures["statuses"] = dict(Counter(j["status"] for j in jobs.values()))
        if self.GATES:
            self.check_reviews(db, jobs, figures)
            self.check_webhooks(db, jobs, figures)
        self.check_replays(jobs, figures)
        self.extra_checks(db, jobs, attempts, log, figures)
        spool = [f for d in self.spool_dirs() for f in (self.dir / d).glob("*")]
        spool = [f for f in spool if f.is_file() and f.suffix in (".spool", ".part")]
        if spool:
            self.problems.append(f"spool files left: {[f.name for f in spool][:5]}")
        db.close()
        return figures

    def may_render_twice(self, ok: list[dict]) -> bool:
        return False

    def check_needs(self, db, jobs, log, figures) -> None:
        """A job that needs others (``needs``, or a job's output as a reference image) pays
        for nothing before every one of them has succeeded (a reviewed one: approved), as the
        ledger's events date it; one whose need never succeeded was never billed."""
        done_at: dict[str, float] = {}
        for r in db.execute(
            "SELECT job_id, at FROM events WHERE kind IN ('succeeded', 'approved') ORDER BY id"
        ):
            done_at.setdefault(r["job_id"], float(r["at"]))
        by_id = {j["id"]: k for k, j in jobs.items()}
        needs = defaultdict(list)
        for r in db.execute("SELECT job_id, need_id FROM job_needs"):
            needs[by_id[r["job_id"]]].append(r["need_id"])
        for key, need_ids in needs.items():
            figures["jobs with needs"] += 1
            for t, provider, billed in log[key]:
                if not billed:
                    continue
                for need in need_ids:
                    at = done_at.get(need)
                    if at is None or t < at - 0.05:
                        when = "before it succeeded" if at is not None else "and it never did"
                        self.problems.append(
                            f"{key}: billed {provider} at {t:.3f}, needing {by_id.get(need)} "
                            + when
                        )

    def check_reviews(self, db, jobs, figures) -> None:
        """A job with ``review: true`` succeeds only by a person's approval and is rejected
        only by a person's rejection, each exactly as decided (the commands' exit 0), with
        its decision's event; a job without it never waits for a review."""
        gated = {job["key"] for job in self.manifest["jobs"] if job.get("review")}
        decisions = defaultdict(list)
        for r in db.execute(
            "SELECT job_id, kind FROM events WHERE kind IN ('approved', 'rejected') ORDER BY id"
        ):
            decisions[r["job_id"]].append(r["kind"])
        figures["reviews_decided"] = len(self.decided)
        figures["review_commands_refused"] = self.review_refused
        for key, job in jobs.items():
            decided = self.decided.get(key)
            if key not in gated:
                if decided or decisions[job["id"]]:
                    self.problems.append(f"{key}: reviewed, but its manifest asks for no review")
                continue
            want = {"approved": "succeeded", "rejected": "rejected"}.get(decided or "")
            if job["status"] in ("succeeded", "rejected") and job["status"] != want:
                self.problems.append(f"{key}: {job['status']} though the person {decided}")
            elif want and job["status"] != want:
                self.problems.append(f"{key}: {decided} by a person, now {job['status']}")
            if decided and decisions[job["id"]] != [decided]:
                self.problems.append(f"{key}: {decided}, decision events {decisions[job['id']]}")

    def check_webhooks(self, db, jobs, figures) -> None:
        """The outbox from outside, after one ``afc webhooks deliver``: every job's ending
        (and each review's start) has its delivery row; each row marked delivered was
        answered 2xx by the receiver; every POST the receiver got verifies with the secret
        (Standard Webhooks), carries its row's envelope byte for byte and names that job's
        real state. Rows still waiting out a receiver's Retry-After stay pending."""
        from standardwebhooks import Webhook

        drained = self.afc("webhooks", "deliver", "-q")
        if drained.returncode not in (0, 1):
            self.problems.append(f"webhooks deliver exit {drained.returncode}")
        with self.receiver.lock:
            received = list(self.receiver.received)
        rows = {r["id"]: dict(r) for r in db.execute("SELECT * FROM deliveries")}
        figures["webhook_rows"] = len(rows)
        figures["webhook_posts"] = len(received)
        for row in rows.values():
            figures[f"webhook rows {row['status']}"] += 1
        events = defaultdict(set)
        for row in rows.values():
            events[row["job_id"]].add(row["event"])
        for key, job in jobs.items():
            if job["status"] not in TERMINAL:
                continue
            event = "job.failed" if job["status"] == "dead" else f"job.{job['status']}"
            want = f"{job['id']}:{event}" + (f":retry{job['retries']}" if job["retries"] else "")
            if want not in rows:
                self.problems.append(f"{key}: {job['status']} with no delivery row {want}")
            if key in self.decided and "job.awaiting_review" not in events[job["id"]]:
                self.problems.append(f"{key}: reviewed, no job.awaiting_review delivery row")
        answered = defaultdict(set)
        hook = Webhook(self.hook_secret)
        for post in received:
            hook_id = post.headers.get("webhook-id", "")
            if len(post.body) < int(post.headers.get("content-length") or 0):
                # its sender killed mid-POST: the rest of the body never came (nor the
                # answer's reaching it: the row stays pending, posted again whole)
                figures["webhook POSTs cut short by a kill"] += 1
                continue
            answered[hook_id].add(post.status)
            # verified as the receiver would have, when it arrived (``verify`` itself
            # refuses a timestamp five minutes older than now, this check's now)
            stamp = int(post.headers.get("webhook-timestamp") or 0)
            signed = hook.sign(hook_id, dt.datetime.fromtimestamp(stamp, dt.UTC), post.body)
            if signed not in post.headers.get("webhook-signature", "").split(" "):
                self.problems.append(f"webhook {hook_id}: signature does not verify")
            # within Standard Webhooks' tolerance (5 minutes) of its arrival: a try is signed
            # afresh (a host stalled between signing and sending delivers it seconds late)
            if abs(post.at - stamp) > 300:
                self.problems.append(f"webhook {hook_id}: timestamp {post.at - stamp:.0f} s off")
            figures["webhook POST latest after its signing (s)"] = max(
                figures["webhook POST latest after its signing (s)"], round(post.at - stamp)
            )
            row = rows.get(hook_id)
            if row is None:
                self.problems.append(f"webhook {hook_id}: posted, no such delivery row")
                continue
            if post.body != row["envelope"].encode():
                self.problems.append(f"webhook {hook_id}: body is not its row's envelope")
            data = json.loads(post.body)["data"]
            job = jobs.get(data["key"])
            if (
                job is None
                or data["job_id"] != job["id"]
                or data["status"]
                not in (
                    job["status"],
                    "awaiting_review",
                    "failed",  # ended failed, then retried by a person
                    "dead",
                    "cancelled",
                )
            ):
                self.problems.append(f"webhook {hook_id}: says {data['status']} of {data['key']}")
            elif data["status"] == "succeeded" and data["output_key"] != job["output_key"]:
                self.problems.append(f"webhook {hook_id}: output {data['output_key']}")
        for hook_id, row in rows.items():
            if row["status"] == "delivered" and not answered[hook_id] & {200}:
                self.problems.append(f"webhook {hook_id}: delivered, never answered 2xx")
        figures["webhook ids posted more than once"] = sum(
            1 for post_statuses in answered.values() if len(post_statuses) > 1
        )

    def may_pay_again(self, job: dict, attempt: dict) -> bool:
        """Whether a job may pay again after ``attempt`` committed its output URL: where a
        person cancelled or retried it (the PostgreSQL rounds do)."""
        return False

    def may_leave_started(self, job: dict, attempt: dict) -> bool:
        """Whether an attempt may end the round ``started``: one of a job cancelled while a
        live process polled it, that process then cut from the ledger or killed before it
        could record the end (the PostgreSQL rounds do both). No run takes an ended job over
        to mark it; ``afc costs report`` counts it as of unknown outcome and unpriced
        (``LEFT_STARTED_SQL`` in afc_cli/ledger/core.py), as ``check_reports`` does."""
        return False

    def may_bill_after_spool(self, job: dict) -> bool:
        """Whether a job may be billed after its output was spooled: where a person retried
        it once it was dead-lettered SPOOL_MISSING (its spool file on a host that stopped, the
        job taken over by another), without copying the file over, as its message says a
        retry then renders and pays again (the PostgreSQL rounds' retries are at random)."""
        return False

    def sent_until(self, attempt: dict) -> float | None:
        """Until when an attempt's request may reach the provider (None: any time later)."""
        return attempt["ended_at"]

    def extra_checks(self, db, jobs, attempts, log, figures) -> None:
        pass

    def spool_dirs(self) -> list[str]:
        return ["afc.db-spool", "afc-spool"]

    def check_replays(self, jobs, figures) -> None:
        """Replaying the finished batch renders nothing and counts each avoided render once;
        a brand-new ledger on the same storage renders nothing that is stored."""
        done = {k for k, j in jobs.items() if j["status"] == "succeeded"}
        before = len(self.fake.log)
        reports = []
        for _ in range(2):
            replay = self.afc("submit", "manifest.yaml", "--json")
            if replay.returncode not in (0, 1):
                self.problems.append(f"replay exit {replay.returncode}: {replay.stderr[-300:]}")
            report = json.loads(self.afc("costs", "report", "--json").stdout)["total"]
            reports.append((report["avoided_renders"], report["avoided_cost"]))
        if len(self.fake.log) != before:
            self.problems.append(f"replays sent {len(self.fake.log) - before} provider requests")
        if reports[0] != reports[1]:
            self.problems.append(f"a second replay changed the avoided renders: {reports}")
        if reports[0][0] != len(done):
            self.problems.append(f"avoided renders {reports[0][0]} for {len(done)} stored jobs")
        figures["avoided_renders"] = reports[0][0]
        fresh = self.afc(
            "submit", "manifest.yaml", "--ledger", "fresh.db", "--storage", self.storage
        )
        figures["fresh_ledger_exit"] = fresh.returncode
        again = {line[2].split(" ")[0] for line in self.fake.log[before:] if line[3]}
        if again & done:
            self.problems.append(f"a fresh ledger paid again for stored {sorted(again & done)[:5]}")
        db = sqlite3.connect(self.dir / "fresh.db")
        stored = dict(db.execute("SELECT key, outcome FROM jobs"))
        status = dict(db.execute("SELECT key, status FROM jobs"))
        needs = defaultdict(list)  # a job's needs, and the jobs its inputs use
        for key, need in db.execute(
            "SELECT j.key, n.need_key FROM job_needs n JOIN jobs j ON j.id = n.job_id"
        ):
            needs[key].append(need)
        db.close()

        def behind_review(key: str, seen: frozenset = frozenset()) -> bool:
            """A person's approval lives in the ledger: a fresh one finds a reviewed job's
            output stored and asks for the review again, and the jobs that need it wait."""
            return any(
                status.get(n) == "awaiting_review"
                or (status.get(n) == "blocked" and n not in seen and behind_review(n, seen | {n}))
                for n in needs[key]
            )

        waiting = {k for k in done if status.get(k) == "blocked" and behind_review(k)}
        if waiting:
            figures["fresh ledger: stored jobs waiting again behind a review"] = len(waiting)
        wrong = [k for k in done if stored.get(k) != "stored" and k not in waiting]
        if wrong:
            self.problems.append(f"a fresh ledger did not find stored outputs of {wrong[:5]}")

    def objects(self) -> dict[str, tuple[bytes, dict]]:
        found = {}
        if self.s3:
            pages = self.s3.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket)
            for page in pages:
                for obj in page.get("Contents", []):
                    got = self.s3.client.get_object(Bucket=self.bucket, Key=obj["Key"])
                    key = obj["Key"].removeprefix("films/")
                    meta = {k.removeprefix("afc-"): v for k, v in got["Metadata"].items()}
                    found[key] = (got["Body"].read(), meta)
            return found
        root = self.dir / "out"
        for path in root.rglob("*"):
            if path == root / ".afc-folder":
                # the folder's mark (FileStorage.folder_mark): 32 hex digits, no output
                if not re.fullmatch(r"[0-9a-f]{32}\n?", path.read_text()):
                    self.problems.append(f"folder mark not a mark: {path.read_text()[:80]!r}")
            elif path.is_file() and path.name.startswith(".") and path.name.endswith(".tmp"):
                # a file being written under a hidden temporary name (FileStorage._create)
                # when a SIGKILL came: never an output nor a key's metadata (README, file://)
                self.temp_left += 1
            elif path.is_file() and not path.name.endswith(".afc.json"):
                rel = str(path.relative_to(root))
                side = path.with_name(path.name + ".afc.json")
                meta = json.loads(side.read_text()) if side.exists() else {}
                found[rel] = (path.read_bytes(), meta)
            elif path.is_file():
                if not Path(str(path).removesuffix(".afc.json")).exists():
                    self.problems.append(f"metadata without object: {path.name}")
        return found

    def check_outputs(self, jobs, attempts, figures) -> None:
        self.temp_left = 0
        objects = self.objects()
        figures["objects"] = len(objects)
        if self.temp_left:
            figures["temporary files a kill left in file storage"] = self.temp_left
        wanted = {j["output_key"] for j in jobs.values() if j["status"] == "succeeded"}
        late = {  # a cancelled job's late result, stored under its key (README), or the upload
            # of a host that woke after another dead-lettered the job (SPOOL_MISSING)
            j["output_key"]: j
            for j in jobs.values()
            if j["status"] != "succeeded"
        }
        for stray in sorted(set(objects) - wanted):
            data, meta = objects[stray]
            job = late.get(stray)
            got = {
                k: meta.get(k, meta.get(k.replace("_", "-"))) for k in ("job_id", "request_hash")
            }
            own = job is not None and got == {
                "job_id": job["id"],
                "request_hash": job["request_hash"],
            }
            if own and meta.get("sha256") == hashlib.sha256(data).hexdigest():
                figures[f"own outputs of {job['status']} jobs stored"] += 1
            else:
                self.problems.append(f"object {stray} stored for no succeeded job")
        for key, job in jobs.items():
            if job["status"] != "succeeded":
                continue
            if job["output_key"] not in objects:
                self.problems.append(f"{key}: succeeded, no object at {job['output_key']}")
                continue
            data, meta = objects[job["output_key"]]
            digest = hashlib.sha256(data).hexdigest()
            want = {
                "job_id": job["id"],
                "request_hash": job["request_hash"],
                "sha256": job["output_sha256"],
            }
            got = {k: meta.get(k, meta.get(k.replace("_", "-"))) for k in want}
            if got != want or digest != job["output_sha256"]:
                self.problems.append(f"{key}: object metadata {got} vs ledger {want} ({digest})")
            number = meta.get("attempt")
            ok = {a["number"] for a in attempts[key] if a["status"] == "succeeded"}
            # a stalled host's render of the same request, stored as a late result before
            # this job's own render reached its store step (pipeline._found_own): the job
            # succeeded on its own attempt, the object names the stalled one (unknown)
            landed = {a["number"] for a in attempts[key] if a["status"] == "unknown"}
            if number is not None and ok and int(number) not in ok:
                if int(number) in landed:
                    figures["objects of a stalled attempt that landed first"] += 1
                else:
                    self.problems.append(f"{key}: object says attempt {number}, ledger {ok}")

    def check_reports(self, jobs, attempts, figures) -> None:
        rows = [a for rs in attempts.values() for a in rs]
        priced = sum(a["cost_micros"] or 0 for a in rows)
        figures["priced_micros"] = priced
        report = self.afc("costs", "report", "--json")
        if report.returncode != 0:
            self.problems.append(f"costs report exit {report.returncode}: {report.stderr[-300:]}")
            return
        total = json.loads(report.stdout)["total"]
        if Decimal(total["priced"]) * 1_000_000 != priced:
            self.problems.append(f"costs report priced {total['priced']} vs attempts {priced}")
        # an attempt left started by an ended job counts as of unknown outcome and unpriced
        left = {
            id(a)
            for key, rs in attempts.items()
            for a in rs
            if a["status"] == "started" and jobs[key]["status"] in TERMINAL
        }
        unknown = sum(a["status"] == "unknown" or id(a) in left for a in rows)
        if total["unknown_attempts"] != unknown:
            self.problems.append(f"report unknown {total['unknown_attempts']} vs {unknown}")
        unpriced = sum(
            a["cost_micros"] is None and (a["status"] != "started" or id(a) in left) for a in rows
        )
        if total["unpriced_attempts"] != unpriced:
            self.problems.append(f"report unpriced {total['unpriced_attempts']} vs {unpriced}")
        failed = sum(a["cost_micros"] or 0 for a in rows if a["status"] in ("failed", "unknown"))
        if Decimal(total["failed_spend"]) * 1_000_000 != failed:
            self.problems.append(f"report failed_spend {total['failed_spend']} vs {failed}")
        status = self.afc("status", "--json", "--all")
        if status.returncode not in (0, 1):
            self.problems.append(f"status exit {status.returncode}: {status.stderr[-300:]}")
            return
        for row in json.loads(status.stdout)["jobs"]:
            rs = attempts[row["key"]]
            known = [a["cost_micros"] for a in rs if a["cost_micros"] is not None]
            want = None if rs and not known else sum(known)
            got = None if row["cost"] is None else int(Decimal(row["cost"]) * 1_000_000)
            if got != want and not (not rs and got == 0):
                self.problems.append(f"{row['key']}: status cost {row['cost']} vs attempts {want}")

    def check_run_spend(self, db) -> None:
        """The sums the ledger's triggers keep (m019's ``run_spend``, what every budget check
        reads) are the attempts' sums, after every kill, takeover, reopening and cancel."""
        summed = {}
        for run_id, (started, adopted, _n) in budget_spend(db).items():
            if run_id and started + adopted:
                summed[run_id] = started + adopted
        kept = {
            r["run_id"]: int(r["spend_micros"])
            for r in db.execute("SELECT run_id, spend_micros FROM run_spend")
            if r["spend_micros"]
        }
        if kept != summed:
            wrong = sorted(k for k in kept.keys() | summed.keys() if kept.get(k) != summed.get(k))
            self.problems.append(
                f"run_spend differs from the attempts' sums for {len(wrong)} runs: "
                + ", ".join(f"{k} {kept.get(k)} vs {summed.get(k)}" for k in wrong[:3])
            )

    def check_budget(self, db, figures) -> None:
        caps = {}
        for r in self.runs:
            if r["cap"]:
                caps.setdefault("cap", Decimal(r["cap"]))
        if not caps:
            return
        cap = int(caps["cap"] * 1_000_000)
        for run_id, (started, _adopted, n) in budget_spend(db).items():
            figures["budget_runs"] += 1
            figures["budget_max_run_micros"] = max(figures["budget_max_run_micros"], started)
            if started > cap:
                self.problems.append(f"run {run_id}: {n} attempts, {started} started > cap {cap}")

    def close(self):
        self.fake.stop()
        self.receiver.stop()


HOSTS = ("host-a", "host-b", "host-c")
OTHER = "host-d"
GONE = "the provider no longer has request"  # afc_cli/providers/base.py GONE_PREFIX  # the fourth process: cancels, retries, re-submits
LEDGER = ("jobs", "attempts", "events", "steps")  # kept as ledger.json when a round is flagged
PG_ACTIONS = ["kill", "kill", "stop", "stop", "term", "cancel", "retry", "resubmit", "sever"]
PG_ACTIONS += ["review", "review"]


class PgRound(Round):
    """``--postgres``: the jobs admitted into a PostgreSQL ledger, then three ``afc worker``
    processes as three hosts (own ``AFC_HOST_ID`` and ``AFC_SPOOL_DIR``, a short lease),
    disturbed at random: SIGKILL and a replacement, SIGSTOP past the lease then SIGCONT,
    SIGTERM (a drain) and a replacement, cancels, retries and re-submits from a fourth, and
    every worker's ledger connection ended at once (``sever``: what a server restart does):
    each stops with exit 1 and the ledger's message, its calls in flight kept and stored
    (README, "Running on several machines"), and is replaced. A severed worker counts as
    disturbed: the ends of its calls in flight (a failed answer, say) cannot be recorded, so
    their attempts are left ``unknown``."""

    def __init__(self, args, index, storage, budget, worker, s3, server):
        super().__init__(args, index, storage, budget, worker, s3)
        self.url = server.database()
        self.env.update(AFC_LEDGER=self.url, AFC_LEASE_S=str(args.lease))
        self.procs: dict[str, dict] = {}  # host -> the process running there now
        self.disturbed: dict[str, str] = {}  # owner prefix "host:pid:" -> what was done
        self.stalled_clean: set[str] = set()  # stalled, then drained with exit 0
        # of those, the ones a signal then drained ("stopping:"): their job-style requests
        # still polling were left to the next run, as any drain leaves them (seed 108)
        self.stalled_drained: set[str] = set()
        self.actions: Counter = Counter()
        self.spawned = 0
        self.late_stall = False

    def connect(self):
        import psycopg
        from psycopg.rows import dict_row

        return psycopg.connect(self.url, autocommit=True, row_factory=dict_row)

    def host_env(self, host: str) -> dict[str, str]:
        spool = self.dir / f"spool-{host}"
        spool.mkdir(exist_ok=True)
        return {**self.env, "AFC_HOST_ID": host, "AFC_SPOOL_DIR": str(spool)}

    def afc_from(self, host: str, *argv: str, timeout: float = 120):
        return subprocess.run(
            [sys.executable, "-m", "afc_cli", *argv],
            cwd=self.dir,
            env=self.host_env(host),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def spawn(self, host: str, argv: list[str], **extra) -> None:
        self.spawned += 1
        errlog = open(self.dir / f"run{self.spawned:03d}-{host}.err", "w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "afc_cli", *argv],
            cwd=self.dir,
            env=self.host_env(host),
            stdout=subprocess.DEVNULL,
            stderr=errlog,
        )
        self.procs[host] = {
            "proc": proc,
            "argv": argv,
            "errlog": errlog,
            "owner": f"{host}:{proc.pid}:",
            "log": errlog.name,
            "signals": [],
            "started": time.time(),
            **extra,
        }

    def start_worker(self, host: str) -> None:
        argv = ["worker", "--poll", "0.2", "--concurrency", str(self.rng.choice([4, 8, 16]))]
        if self.budget:
            argv += ["--budget", "nightly", "--max-spend", self.budget]
        self.spawn(host, argv)

    def signal(self, host: str, sig: signal.Signals) -> None:
        p = self.procs[host]
        if p["proc"].poll() is None:
            p["proc"].send_signal(sig)
            p["signals"].append(sig.name.removeprefix("SIG"))

    def reap(self, restart: bool) -> None:
        for host, p in list(self.procs.items()):
            rc = p["proc"].poll()
            if rc is None:
                if p.get("term_at") and time.time() >= p["term_at"]:
                    p.pop("term_at")
                    self.signal(host, signal.SIGTERM)
                continue
            del self.procs[host]
            p["errlog"].close()
            run = {
                "argv": p["argv"],
                "host": host,
                "owner": p["owner"],
                "log": Path(p["log"]).name,
                "signals": p["signals"],
                "rc": rc,
                "seconds": round(time.time() - p["started"], 2),
                **({"severed": True} if p.get("severed") else {}),
            }
            self.runs.append(run)
            self.check_pg_rc(run)
            if rc not in (0, 4):
                # killed, or it abandoned calls (130), or its ledger went away (severed: the
                # ends of its calls in flight cannot be recorded): those may be unknown
                what = "severed" if run.get("severed") and rc == 1 else f"exit {rc}"
                self.disturbed.setdefault(p["owner"], what)
            elif self.disturbed.get(p["owner"]) == "stalled":
                self.stalled_clean.add(p["owner"])
                if p["signals"] and "stopping:" in Path(p["log"]).read_text(errors="replace"):
                    self.stalled_drained.add(p["owner"])
            elif p["signals"] and "stopping:" in Path(p["log"]).read_text(errors="replace"):
                # drained by its signal (exit 0, or 4 when its budget was reached too: seed 67)
                # it left its job-style calls to be polled by the next run: one whose job was
                # then finished another way (a stalled host's late result) stays unknown
                self.disturbed.setdefault(p["owner"], f"drained, exit {rc}")
            if restart and host in HOSTS and rc != 4:
                self.start_worker(host)

    def check_pg_rc(self, run: dict) -> None:
        rc, sent = run["rc"], run["signals"]
        where = f"{run['host']} {run['argv'][0]} signals={sent}"
        if run.get("severed") and rc == 1:
            stderr = (self.dir / run["log"]).read_text()
            # (severed while it started: it met the lost connection connecting, paying nothing)
            said = (
                "cannot write to the ledger" in stderr or "cannot connect to the ledger" in stderr
            )
            if not said or "Traceback" in stderr:
                self.problems.append(f"{where}: severed, exit 1 without the ledger's message")
            return
        if "KILL" in sent:
            # (a worker that had ended on its own as the signal was sent: its closing line
            # said, its exit code its own; seed 59: exit 4, stopped by its budget)
            log = (self.dir / run["log"]).read_text()
            ended = rc in (0, 1, 4) and "worker claimed " in log
            if rc != -9 and not ended:
                self.problems.append(f"{where}: exit {rc}")
        elif "TERM" in sent:
            # -15: the signal landed before afc installed its handlers, in its start-up (a
            # few seconds, or longer when a SIGSTOP froze it there): it had said nothing yet
            # (as the SQLite rounds' ``early``; seed 44 froze one 7 s before its first line)
            log = (self.dir / run["log"]).read_text()
            early = not log.strip()
            # 1: the signal came once the run's result was decided (cli._settled: it changes
            # nothing then), a batch with failed jobs: its tally printed, no drain begun
            # (seed 52: a submit signalled 5.6 s in, as it printed its summary)
            settled = rc == 1 and " run here; " in log and "stopping:" not in log
            if rc not in (0, 4, 130) and not (rc == -15 and (run["seconds"] < 3 or early)):
                if not settled:
                    self.problems.append(f"{where}: exit {rc} after SIGTERM")
        elif run["argv"][0] == "worker" and not (rc == 4 and self.budget):
            log = (self.dir / run["log"]).read_text()
            # frozen (SIGSTOP) past its lease with its group transaction open, the server
            # ended its session (idle_in_transaction_session_timeout = AFC_LEASE_S, so the
            # rows it held go to other hosts): woken, it stops, exit 1, saying so (seed 173)
            frozen = (
                rc == 1
                and "STOP" in sent
                and "this process was stopped or starved that long" in log
                and "Traceback" not in log
            )
            if not (frozen or (rc == 1 and _worker_had_failures(self.dir / run["log"]))):
                self.problems.append(f"{where}: worker exit {rc} with no signal")
        elif run["argv"][0] == "submit" and rc not in (0, 1, 4):
            self.problems.append(f"{where}: submit exit {rc}")

    def alive(self, stalled: dict) -> list[str]:
        return [h for h in HOSTS if h in self.procs and not self.procs[h]["signals"]]

    def keys(self, statuses: set[str]) -> list[str]:
        db = self.connect()
        try:
            return [
                r["key"]
                for r in db.execute("SELECT key, status FROM jobs ORDER BY key")
                if r["status"] in statuses
            ]
        finally:
            db.close()

    def free_jobs(self) -> int:
        db = self.connect()
        try:
            return db.execute(
                "SELECT COUNT(*) AS n FROM jobs WHERE lease_owner IS NULL"
                " AND status IN ('queued', 'waiting', 'running')"
            ).fetchone()["n"]
        finally:
            db.close()

    def disturb(self, stalled: dict, action: str | None = None) -> None:
        action = action or (self.rng.choice(PG_ACTIONS) if self.actions else "stop")
        alive = self.alive(stalled)
        if action in ("kill", "stop", "term") and not alive:
            return
        if action == "kill":
            host = self.rng.choice(alive)
            self.signal(host, signal.SIGKILL)
            self.disturbed[self.procs[host]["owner"]] = "killed"
            self.procs[host]["proc"].wait(timeout=30)
            self.reap(restart=True)
        elif action == "stop":
            host = self.rng.choice(alive)
            self.signal(host, signal.SIGSTOP)
            self.disturbed[self.procs[host]["owner"]] = "stalled"
            stalled[host] = time.time() + self.args.lease + self.rng.uniform(1.5, 4)
        elif action == "term":
            self.signal(self.rng.choice(alive), signal.SIGTERM)
        elif action == "cancel":
            keys = self.rng.sample(
                self.keys({"queued", "running", "waiting", "blocked"}) or [""], 1
            )
            keys = [k for k in keys if k]
            if self.rng.random() < 0.5:
                keys += self.rng.sample(sorted(self.manifest_keys()), 2)
            if not keys:
                return  # nothing left to cancel (``afc cancel`` with no key is refused, exit 2)
            done = self.afc_from(OTHER, "cancel", *keys, "--yes")
            if done.returncode not in (0, 1):
                self.problems.append(f"cancel {keys}: exit {done.returncode} {done.stderr[-300:]}")
        elif action == "retry":
            keys = self.keys({"failed", "dead", "cancelled"})
            if not keys:
                return
            keys = self.rng.sample(keys, min(3, len(keys)))
            done = self.afc_from(OTHER, "retry", *keys, "--yes")
            if done.returncode not in (0, 1):
                self.problems.append(f"retry {keys}: exit {done.returncode} {done.stderr[-300:]}")
        elif action == "review":
            self.decide_reviews(partial(self.afc_from, OTHER), share=0.5)
        elif action == "sever":
            if OTHER in self.procs or not self.procs:
                return  # (a re-submit's own connection would end too)
            for p in self.procs.values():
                p["severed"] = True
            db = self.connect()
            try:
                db.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            finally:
                db.close()
        elif action == "resubmit":
            if OTHER in self.procs:
                return
            if self.rng.random() < 0.5:
                self.spawn(OTHER, ["submit", "manifest.yaml", "--no-run"])
            else:
                argv = ["submit", "manifest.yaml", "--concurrency", "8"]
                self.spawn(OTHER, argv, term_at=time.time() + self.rng.uniform(1, 5))
        self.actions[action] += 1

    def manifest_keys(self) -> set[str]:
        return {job["key"] for job in self.manifest["jobs"]}

    def drive(self) -> None:
        for _ in range(3):
            admitted = self.afc_from(
                OTHER, "submit", "manifest.yaml", "--storage", self.storage, "--no-run"
            )
            if admitted.returncode == 0:
                break
        else:
            self.problems.append(f"admission exit {admitted.returncode}: {admitted.stderr[-300:]}")
            return
        for host in HOSTS:
            self.start_worker(host)
        deadline = time.time() + self.args.pg_seconds
        next_action = time.time() + self.rng.uniform(1, 3)
        stalled: dict[str, float] = {}
        while time.time() < deadline:
            time.sleep(0.2)
            now = time.time()
            for host, until in list(stalled.items()):
                if now >= until:
                    self.signal(host, signal.SIGCONT)
                    del stalled[host]
            self.reap(restart=True)
            if not stalled and (set(self.statuses()) <= TERMINAL or not self.procs):
                break
            if not self.late_stall and now >= next_action and self.free_jobs() < 60:
                # with free jobs left no worker takes another's (claim_runnable): a stall
                # near the end is what makes takeovers
                self.late_stall = True
                self.disturb(stalled, "stop")
                next_action = now + self.rng.uniform(0.7, 2.5)
            if now >= next_action:
                self.disturb(stalled)
                next_action = now + self.rng.uniform(0.7, 2.5)
        for host in stalled:
            self.signal(host, signal.SIGCONT)
        for host in list(self.procs):
            self.signal(host, signal.SIGTERM)
        stop_by = time.time() + 60
        while self.procs and time.time() < stop_by:
            time.sleep(0.2)
            self.reap(restart=False)
        for host in list(self.procs):
            self.signal(host, signal.SIGKILL)
            self.problems.append(f"{host}: hung after SIGTERM, killed")
            self.procs[host]["proc"].wait()
        self.reap(restart=False)
        # the end: one clean run (no budget) until every job is terminal, a person deciding
        # every review left before each (an approval frees the jobs that need it)
        for _ in range(6):
            self.decide_reviews(partial(self.afc_from, OTHER), share=1.0)
            if set(self.statuses()) <= TERMINAL:
                return
            if self.rng.random() < 0.5:
                argv = ["worker", "--until-idle", "--poll", "0.2", "--concurrency", "16"]
            else:
                argv = ["resume", "--concurrency", "16"]
            done = self.afc_from("host-a", *argv, timeout=300)
            self.runs.append({"argv": argv, "host": "host-a", "signals": [], "rc": done.returncode})
            if done.returncode not in (0, 1):
                self.problems.append(
                    f"final {argv[0]} exit {done.returncode}: {done.stderr[-300:]}"
                )
        self.problems.append(f"not terminal at the end: {dict(self.statuses())}")

    def spool_dirs(self) -> list[str]:
        return []  # extra_checks: per host

    def may_leave_started(self, job: dict, attempt: dict) -> bool:
        return job["status"] in TERMINAL and self.owner_of(attempt) is not None

    def may_bill_after_spool(self, job: dict) -> bool:
        db = self.connect()
        try:
            rows = db.execute(
                "SELECT detail_json FROM events WHERE job_id = %s AND kind = 'retried'",
                (job["id"],),
            ).fetchall()
        finally:
            db.close()
        return any(
            json.loads(r["detail_json"] or "{}").get("previous_error") == "SPOOL_MISSING"
            for r in rows
        )

    def may_pay_again(self, job: dict, attempt: dict) -> bool:
        db = self.connect()
        try:
            row = db.execute(
                "SELECT COUNT(*) AS n FROM events WHERE job_id = %s"
                " AND kind IN ('retried', 'cancelled')",
                (job["id"],),
            ).fetchone()
        finally:
            db.close()
        return row["n"] > 0

    def may_render_twice(self, ok: list[dict]) -> bool:
        # a stalled host's late result and the render of the host that took the job over
        return sum(self.owner_of(a) is None for a in ok) <= 1

    def sent_until(self, attempt: dict) -> float | None:
        # A process frozen (or killed) after its attempt row was committed and before its
        # request left sends it when it wakes, after the takeover marked the attempt unknown
        # (ended_at): a call in flight on a disturbed host, which README allows to be paid
        # twice. Its request may reach the provider any time after that, and its answer may
        # still end the attempt well (a late result stored, then adopted by the job's next
        # run: "found stored" or "adopted from the spool after the process ended").
        if self.owner_of(attempt) is not None and (
            attempt["status"] == "unknown"
            or "after the process ended" in (attempt["error_message"] or "")
        ):
            return None
        return attempt["ended_at"]

    def owner_of(self, attempt: dict) -> str | None:
        """What was done to the process that made an attempt (None: nothing)."""
        return self.disturbed.get(process_of(attempt["owner"]))

    def extra_checks(self, db, jobs, attempts, log, figures) -> None:
        p = self.problems
        by_id = {j["id"]: k for k, j in jobs.items()}
        ends = defaultdict(list)
        for r in db.execute("SELECT job_id, kind FROM events WHERE job_id IS NOT NULL ORDER BY id"):
            if r["kind"] in TERMINAL or r["kind"] in ("retried", "approved"):
                # an approval is the ending of a job that waited for a review: succeeded
                kind = "succeeded" if r["kind"] == "approved" else r["kind"]
                ends[by_id.get(r["job_id"], r["job_id"])].append(kind)
            figures["takeover_events"] += r["kind"] == "takeover"
            figures["late_result_events"] += r["kind"].startswith("late_result")
        for key, job in jobs.items():
            seq = ends[key]
            expect = ["retried" if i % 2 else "end" for i in range(len(seq))]
            got = ["retried" if k == "retried" else "end" for k in seq]
            if got != expect or not seq or seq[-1] != job["status"]:
                p.append(f"{key}: ended {seq} (status {job['status']}): not once per retry")
        figures["retried"] = sum(k == "retried" for seq in ends.values() for k in seq)

        def answer(key: str, a: dict) -> str:  # the provider and the prompt's behaviour
            prompt = json.loads(jobs[key]["request_json"])["prompt"]
            return " ".join([a["provider"], *prompt.split(" ")[2:]])

        # answers afc records at an unknown cost by design (a refusal of Replicate or Gemini,
        # a bare gateway 502 on fal's submit, an OpenAI 500 or cut body): failed, unpriced
        unpriced = {
            answer(key, a)
            for key, rows in attempts.items()
            for a in rows
            if a["status"] == "failed" and a["cost_micros"] is None
        }
        for key, rows in attempts.items():
            for a in rows:
                what = self.owner_of(a)
                if what is not None:
                    figures[f"attempts of {what} processes"] += 1
                gone = (a["error_message"] or "").startswith(GONE)  # ran, output deleted
                # a person's cancel stopped a fetch of its paid output (a CDN out of reach):
                # left unknown at its cost for 'afc retry' to fetch (README, Cancel; seed 83)
                cut = (
                    a["error_class"] == "interrupted"
                    and jobs[key]["status"] == "cancelled"
                    and "not fetched further: the job is cancelled" in (a["error_message"] or "")
                )
                if a["status"] == "unknown" and what is None and cut:
                    figures["fetches stopped by a cancel"] += 1
                elif a["status"] == "unknown" and what is None and not gone:
                    p.append(
                        f"{key}: attempt {a['number']} unknown, its process {a['owner']} "
                        "was never killed nor stalled"
                    )
                if process_of(a["owner"]) in self.stalled_clean:
                    # a stalled host's late answer: recorded on its attempt (kept unknown, as
                    # the takeover marked it) with what it cost
                    figures[f"stalled-host attempts {a['status']}"] += 1
                    # its cost is wanted where its request was billed and afc prices that
                    # answer (its message is the takeover's: the answer is the prompt's)
                    # (not a request it woke into a stop to find cancelled: left polling,
                    # unanswered, asked to stop at the provider, and of a job no run polls)
                    left = a["error_class"] == "interrupted" and jobs[key]["status"] == "cancelled"
                    # a job-style request the process still polled when a signal drained it:
                    # left to the next run, which had already taken the job over
                    drained = process_of(a["owner"]) in self.stalled_drained and a["provider"] in (
                        "replicate",
                        "fal",
                    )
                    if left and a["status"] == "unknown" and a["cost_micros"] is None:
                        figures["stalled-host requests of cancelled jobs left unanswered"] += 1
                    elif drained and a["status"] == "unknown" and a["cost_micros"] is None:
                        figures["stalled-host requests left polling by its drain"] += 1
                    elif (
                        a["status"] == "unknown"
                        and a["cost_micros"] is None
                        and not gone
                        and a["id"] in self.billed_ids
                        and answer(key, a) not in unpriced
                    ):
                        p.append(
                            f"{key}: attempt {a['number']} of stalled {a['owner']} has no cost"
                            " though that process drained cleanly"
                        )
        for d in (*HOSTS, OTHER):
            for f in (self.dir / f"spool-{d}").glob("*.spool"):
                job = jobs.get(by_id.get(f.stem, ""))
                if job is not None and job["status"] == "succeeded":
                    # swept by that host's next run loop (run.sweep_spool)
                    figures["spool files of succeeded jobs left"] += 1
                elif job is not None and job["error_code"] == "SPOOL_MISSING":
                    # another host found the job at its store step and not the spool file,
                    # which is here: dead-lettered, nothing paid again, its message naming
                    # this host (README: "Where a dead host's bytes are")
                    figures["dead SPOOL_MISSING, spool on another host"] += 1
                    if f"spooled on host {d}" not in (job["error_message"] or ""):
                        p.append(f"{job['key']}: SPOOL_MISSING does not name host {d}")
                elif job is not None and job["status"] in TERMINAL:
                    # paid output of a job that did not succeed: kept (run.sweep_spool)
                    figures[f"spool files of {job['status']} jobs kept"] += 1
                else:
                    p.append(f"spool file {d}/{f.name} left for {job and job['status']}")

        figures["disturbed_processes"] = len(self.disturbed)
        record = {"runs": self.runs, "disturbed": self.disturbed, "url": self.url}
        (self.dir / "runs.json").write_text(json.dumps(record, indent=1))
        if self.problems:
            # the ledger's server goes when the run ends: keep what a flag is examined with
            tables = {t: db.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in LEDGER}
            (self.dir / "ledger.json").write_text(json.dumps(tables, indent=1, default=str))

    def check_budget(self, db, figures) -> None:
        if not self.budget:
            return
        cap = int(Decimal(self.budget) * 1_000_000)
        for run_id, (started, adopted, n) in budget_spend(db).items():
            if not run_id.startswith("budget:"):
                continue
            figures["budget_runs"] += 1
            figures["budget_spent_micros"] = started + adopted
            figures["budget_adopted_micros"] = adopted
            if started > cap:
                self.problems.append(f"{run_id}: {n} attempts, {started} started > {cap}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=240)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-runs", type=int, default=60)
    ap.add_argument("--min-kills", type=int, default=8, help="signalled runs before a clean one")
    ap.add_argument("--max-delay", type=float, default=6.0, help="latest kill, in seconds")
    ap.add_argument("--poll", default="0.2", help="AFC_POLL_S (Replicate and fal polls)")
    ap.add_argument("--keep", help="folder for the rounds' work (kept); default a temp dir")
    ap.add_argument("--postgres", action="store_true", help="three worker hosts, one PostgreSQL")
    ap.add_argument("--lease", type=float, default=4.0, help="AFC_LEASE_S (--postgres)")
    ap.add_argument("--pg-seconds", type=float, default=60, help="disturbed time (--postgres)")
    args = ap.parse_args()
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
    s3 = S3()
    server = None
    plans = [
        ("file", None, False),
        ("s3", "2.00", False),
        ("file", "1.50", False),
        ("s3", None, True),
    ]
    if args.postgres:
        from pg_server import Server

        server = Server()
        plans = [
            ("s3", None, True),
            ("file", "6.00", True),
            ("s3", "5.00", True),
            ("file", None, True),
        ]
    failed = False
    totals = Counter()
    try:
        for index in range(args.rounds):
            storage, budget, worker = plans[index % len(plans)]
            if server is not None:
                rnd = PgRound(args, index, storage, budget, worker, s3, server)
            else:
                rnd = Round(args, index, storage, budget, worker, s3)
            started = time.time()
            try:
                rnd.drive()
                figures = rnd.reconcile()
            finally:
                rnd.close()
            signals = Counter(s for r in rnd.runs for s in r["signals"])
            rcs = Counter(r["rc"] for r in rnd.runs)
            print(
                f"round {index} ({storage}, budget {budget}, worker {worker}) in "
                f"{time.time() - started:.0f}s: {len(rnd.runs)} runs, signals {dict(signals)}, "
                f"exit codes {dict(rcs)}"
                + (f", actions {dict(rnd.actions)}" if server is not None else "")
            )
            print("  " + json.dumps(figures, sort_keys=True, default=str))
            for problem in rnd.problems:
                print("  PROBLEM " + problem)
            failed |= bool(rnd.problems)
            for k, v in figures.items():
                if isinstance(v, int):
                    totals[k] += v
            totals["runs"] += len(rnd.runs)
            totals["kills"] += sum(bool(r["signals"]) for r in rnd.runs)
            if not args.keep and not rnd.problems:
                shutil.rmtree(rnd.dir, ignore_errors=True)
            else:
                if server is not None and server.root is not None:
                    # the server's log so far (a deadlock's two statements, a terminated
                    # session): what a PROBLEM on a PostgreSQL round needs to be understood
                    with contextlib.suppress(OSError):
                        shutil.copy(server.root / "server.log", rnd.dir / "server.log")
                print(f"  work kept in {rnd.dir}")
    finally:
        s3.stop()
        if server is not None:
            server.stop()
    print("totals " + json.dumps(totals, sort_keys=True))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
