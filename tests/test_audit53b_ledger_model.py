"""A stateful model of the ledger's money operations (outside audit 53b), on both engines.

Hypothesis drives the operations the pipeline makes (afc_cli/pipeline.py), in the order it
makes them, from two worker processes (owner ids ``model-a`` and ``model-b``, each on a host
of its own, so their leases are judged by ``lease_expires`` alone) and a person: admitting a
small batch (and again while it runs), a worker's claim of a job, the probe (which finds an
output stored before, as storage would tell), starting an attempt (its row committed before
the call with its reservation, under the workers' shared budget or not; at a job-style
provider its request id committed, and a request a stopped run left polled again by the next,
its cost moving to that run), the call's answer (succeeded with a cost and spooled, failed,
unknown), storing and verifying the output, a chain given up, a worker stalled past its leases
and another taking the job over, a stopped run's end (``release_all``), lease renewals,
releases, and a person's cancel and retry. Storage is the model's own: the jobs whose object
was put.

After every step the ledger's rows must hold what docs/ledger.md promises:

- ``run_spend`` is the sum of each run's attempts' known cost, else reservation (m019), and
  ``Ledger.run_spend`` reads it;
- a job has at most one attempt in flight (``started``);
- a job whose output was stored is never given a new paid attempt;
- every attempt has a status, and once ended its end time and its cost or the reason it has
  none (an error class);
- ``afc status``'s counts and each job's cost (``listing.status_view``) are the rows'.

Checked at each write: a write by a worker that no longer holds the job's lease (another took
it over, or a person ended or retried it) changes nothing of the job, its steps or another
process's attempts, and starts no attempt (its own call's answer is still recorded:
invariant 6); a takeover leaves no other process's call ``started``; an attempt under the
budget starts only if its reservation fits the cap, and a refused one writes nothing.

Small and quick (at most four jobs, 30-40 steps) and derandomized, so CI runs the same
examples each time; the settings below say how many."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import manifest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from afc_cli.costs import RateCards, job_cost
from afc_cli.ledger import BudgetExhausted, JobLost, Ledger
from afc_cli.listing import status_view
from afc_cli.manifest import load_manifest

# two workers on hosts of their own and the person who cancels and retries
OWNERS = {"A": "model-a:101:1", "B": "model-b:202:2"}
PERSON = "model-person:303:3"
STORAGE = "file:///tmp/afc-audit53b-model"
LEASE_S = 300.0
TERMINAL = ("succeeded", "failed", "cancelled", "dead", "rejected")
# the workers' shared budget (``afc worker --budget``: one run id, one cap)
SHARED, CAP = "budget:shared", 200_000
# the steps a worker's copy of a job may be at (``pipeline.STEPS``, spool inside ``answer``)
STEPS = ("probe", "render", "store", "verify")

# per engine, 15-25 s each on this 2-core machine: a PostgreSQL example makes a database
# (0.2 s) and each look of ``afc status`` opens the ledger anew (30 ms)
SETTINGS = {
    engine: settings(
        max_examples=examples,
        stateful_step_count=steps,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    for engine, examples, steps in (("sqlite", 100, 40), ("postgres", 30, 30))
}

who = st.sampled_from(sorted(OWNERS))


class LedgerModel(RuleBasedStateMachine):
    """One ledger per example (``new_url``, set per engine by the test below)."""

    new_url: Any = None

    def __init__(self) -> None:
        super().__init__()
        self.url = type(self).new_url()
        self.folder = Path(tempfile.mkdtemp(prefix="afc-audit53b-"))
        self.books: dict[str, Ledger] = {}
        for name, owner in (*OWNERS.items(), ("P", PERSON)):
            book = Ledger(self.url)
            book.owner = owner
            self.books[name] = book
        self.person = self.books["P"]
        self.jobs: list[str] = []  # job ids in admission order
        # each worker's copy of the jobs it claimed (what the pipeline passes around)
        self.views: dict[str, dict[str, dict[str, Any]]] = {w: {} for w in OWNERS}
        # each worker's calls in flight: job id -> (attempt number, its job dict, provider)
        self.calls: dict[str, dict[str, tuple[int, dict[str, Any], str]]] = {w: {} for w in OWNERS}
        # the model's storage: job id -> the job's latest attempt number when it was put
        self.stored: dict[str, int] = {}
        self.names = itertools.count()
        self.submits = 0
        self.shown: list[tuple] | None = None  # the rows ``afc status`` was last asked about

    def teardown(self) -> None:
        for book in self.books.values():
            book.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    # --- reading the rows -----------------------------------------------------------------

    def rows(self, sql: str, params: Any = ()) -> list[tuple]:
        return self.person.db.execute(sql, params).fetchall()

    def job_row(self, job_id: str) -> dict[str, Any]:
        return self.person.job(job_id)

    def snapshot(self, job_id: str, owner: str) -> tuple:
        """What a worker that lost a job must not change: the job's row, its steps, and the
        attempts of other processes (its own call's answer is recorded: invariant 6), whose
        unknown cost (``None``) its late answer may fill in (``Ledger.report_attempt``)."""
        job = dict(self.job_row(job_id))
        steps = self.rows(
            "SELECT step, completed_at FROM steps WHERE job_id = ? ORDER BY step", (job_id,)
        )
        attempts = [
            (number, status if who_ != owner else None, cost if who_ != owner else None)
            for number, who_, status, cost in self.rows(
                "SELECT number, owner, status, cost_micros FROM attempts WHERE job_id = ?"
                " ORDER BY number",
                (job_id,),
            )
        ]
        return job, steps, attempts

    def holds(self, worker: str, job_id: str) -> bool:
        row = self.job_row(job_id)
        return row["lease_owner"] == OWNERS[worker] and row["status"] not in TERMINAL

    def fenced(self, worker: str, job_id: str, write: Any) -> Any:
        """Run a worker's write; when the worker does not hold the job, it must change
        nothing (its result is returned, JobLost as None)."""
        held = self.holds(worker, job_id)
        before = None if held else self.snapshot(job_id, OWNERS[worker])
        try:
            result = write()
        except JobLost:
            result = None
        if not held:
            after = self.snapshot(job_id, OWNERS[worker])
            known = [
                a[:2] + (a[2] if a[2] is not None else b[2],)
                for a, b in zip(before[2], after[2], strict=False)
            ]
            assert (after[0], after[1], after[2]) == (before[0], before[1], known), (
                f"a write by {worker}, which does not hold the job, changed it"
            )
        return result

    def at(self, *steps: str) -> list[tuple[str, str]]:
        """The (worker, job id) of each worker's job copy at one of ``steps``, no call of
        it in flight: what its pipeline would do next."""
        return [
            (worker, job_id)
            for worker in sorted(OWNERS)
            for job_id, view in self.views[worker].items()
            if view["step"] in steps and job_id not in self.calls[worker]
        ]

    def choose(self, data: Any, *steps: str) -> tuple[str, str, dict[str, Any]]:
        worker, job_id = data.draw(st.sampled_from(self.at(*steps)))
        return worker, job_id, self.views[worker][job_id]

    def drop(self, worker: str, job_id: str) -> None:
        self.views[worker].pop(job_id, None)

    # --- rules: what the pipeline and a person do ------------------------------------------

    @initialize()
    def first_batches(self) -> None:
        self.admit("b1", 2)
        self.admit("b2", 1)

    @precondition(lambda self: self.submits < 4)
    @rule(batch=st.sampled_from(["b1", "b2"]), count=st.integers(min_value=1, max_value=2))
    def admit(self, batch: str, count: int) -> None:
        """``afc submit`` of a small batch: at first, then again while its jobs run (its
        jobs replays, a new key added)."""
        self.submits += 1
        keys = [{"key": f"shot-{i}", "prompt": f"prompt {i}"} for i in range(count)]
        path = self.folder / f"m{next(self.names)}.yaml"
        path.write_text(yaml.safe_dump(manifest(keys, batch=batch), sort_keys=False))
        m = load_manifest(path)
        result = self.person.admit(m, STORAGE, RateCards())
        assert not result.conflicts
        for job in m.jobs:
            if job.job_id not in self.jobs:
                self.jobs.append(job.job_id)

    @rule(data=st.data(), worker=who, steps=st.integers(min_value=1, max_value=6))
    def advance(self, data: Any, worker: str, steps: int) -> None:
        """A worker's pipeline takes the next steps of a job, one after the other: its claim
        (of a job it has no copy of), the answer of its call in flight, or the step its copy
        of the job is at (at render: an attempt, or the chain given up once it made one)."""
        # its own jobs first, as a run goes on with what it claimed (twice their weight)
        mine = sorted({*self.views[worker], *self.calls[worker]})
        job_id = data.draw(st.sampled_from(mine + mine + self.jobs))
        if job_id not in self.views[worker] and job_id not in self.calls[worker]:
            self.claim(worker, job_id)
            steps -= 1
        for _ in range(steps):
            if job_id in self.calls[worker]:
                outcome = data.draw(st.sampled_from(["succeeded", "failed", "unknown"]))
                cost = data.draw(st.sampled_from([0, 40_000, 50_000, 130_000]))
                self.answer(worker, job_id, outcome, cost)
                continue
            view = self.views[worker].get(job_id)
            if view is None or view["step"] not in STEPS:
                return
            if view["step"] == "render":
                if view["attempts"] and data.draw(st.booleans()):
                    self.give_up(worker, job_id, view)
                else:
                    reserve = data.draw(st.sampled_from([None, 50_000, 120_000]))
                    budget = data.draw(st.booleans())
                    if not self.reopen(worker, job_id, view, reserve, budget):
                        provider = data.draw(st.sampled_from(["local", "replicate"]))
                        self.start(worker, job_id, view, reserve, budget, provider)
            else:
                getattr(self, view["step"])(worker, job_id, view)

    def claim(self, worker: str, job_id: str) -> None:
        """A worker's claim of a job (``Ledger.claim``); never one it still runs a call of
        (``claim_runnable``'s ``skip``)."""
        if job_id in self.calls[worker]:
            return
        before = self.job_row(job_id)
        other = [w for w in OWNERS if w != worker][0]
        live_other = (
            before["lease_owner"] == OWNERS[other]
            and (before["lease_expires"] or 0) >= self.person.lease_clock()
        )
        got = self.books[worker].claim(job_id, LEASE_S)
        if got is None:
            self.drop(worker, job_id)
            return
        assert not live_other, "a claim took a job another live worker held"
        assert got["lease_owner"] == OWNERS[worker]
        # a takeover: the calls other processes left in flight are possibly paid, unknown
        assert not self.rows(
            "SELECT number FROM attempts WHERE job_id = ? AND status = 'started' AND owner <> ?",
            (job_id, OWNERS[worker]),
        )
        self.views[worker][job_id] = got

    def probe(self, worker: str, job_id: str, view: dict[str, Any]) -> None:
        """``pipeline.probe``: an output stored at the key is this job's (no render), else the
        job goes on to render with no write of its own."""
        book = self.books[worker]
        if job_id not in self.stored:
            view["step"] = "render"
            view.setdefault("unwritten_steps", []).append(("probe", {"found": None}, 0.0))
            return

        def found_own() -> bool:
            with book.tx():
                book.checkpoint(
                    view,
                    [("probe", {"found": "own output"})],
                    "verify",
                    outcome="stored",
                    output_sha256="0" * 64,
                    output_size=1,
                )
                if not view["attempts"]:
                    book.record_avoided(view, "stored", "local", "m1", 50_000, "rate_card")
            return True

        if self.fenced(worker, job_id, found_own) is None:
            self.drop(worker, job_id)

    def start(
        self,
        worker: str,
        job_id: str,
        view: dict[str, Any],
        reserve: int | None,
        budget: bool,
        provider: str,
    ) -> None:
        """``Ledger.start_attempt``: the attempt row, with its reservation, before the call;
        ``budget``: under the workers' shared budget (``afc worker --budget``), whose spend
        so far and this reservation must fit its cap, or nothing is written. ``replicate``:
        a job-style provider, whose request id is committed once it is submitted."""
        book = self.books[worker]
        run = SHARED if budget else f"run-{worker}"
        spent = self.person.run_spend(run)
        before = self.snapshot(job_id, "")

        def started() -> int | None:
            try:
                return book.start_attempt(
                    view,
                    0,
                    provider,
                    "m1",
                    None,
                    durable=True,
                    run_id=run,
                    reserve_micros=reserve,
                    cap_micros=CAP if budget else None,
                )
            except BudgetExhausted:
                assert budget and spent + (reserve or 0) > CAP
                assert self.snapshot(job_id, "") == before, "a refused attempt wrote"
                return None

        number = self.fenced(worker, job_id, started)
        if number is None:
            self.drop(worker, job_id)
            return
        assert self.person.run_spend(run) == spent + (reserve or 0)
        if budget:
            assert spent + (reserve or 0) <= CAP, "an attempt started past the budget's cap"
        if provider == "replicate":  # submitted: its id committed, the job waits on it
            request = f"req-{job_id[:8]}-{number}"
            self.fenced(
                worker, job_id, lambda: book.record_request_id(view, number, provider, request)
            )
        self.calls[worker][job_id] = (number, view, provider)

    def reopen(
        self, worker: str, job_id: str, view: dict[str, Any], reserve: int | None, budget: bool
    ) -> bool:
        """``pipeline.render``'s look first: a request an earlier run left submitted
        (``_resumable``: the last attempt since the retry, ``unknown`` with its id) is polled
        again (``Ledger.reopen_attempt``: its cost moves to this run), not paid for anew."""
        book = self.books[worker]
        rows = [r for r in book.attempts(job_id) if r["number"] > (view["attempt_base"] or 0)]
        last = rows[-1] if rows else None
        if not (
            last
            and last["status"] == "unknown"
            and last["provider"] == "replicate"
            and last["provider_request_id"]
        ):
            return False
        run = SHARED if budget else f"run-{worker}"
        if self.fenced(
            worker, job_id, lambda: book.reopen_attempt(view, last, run, reserve) or None
        ):
            self.calls[worker][job_id] = (last["number"], view, "replicate")
        else:
            self.drop(worker, job_id)
        return True

    def answer(self, worker: str, job_id: str, outcome: str, cost: int) -> None:
        """The provider answers a worker's call: a paid render (its cost held at once, then
        spooled: ``pipeline.spool``'s checkpoint with the attempt's end, or the attempt's end
        alone when the job was lost meanwhile), a failure, or an answer of unknown outcome."""
        number, view, provider = self.calls[worker].pop(job_id)
        book = self.books[worker]
        report = {"chain_index": 0, "provider": provider, "model": "m1"}
        if outcome == "succeeded":
            success = dict(
                report,
                status="succeeded",
                usage={"images": 1},
                cost_micros=cost,
                cost_source="derived",
            )

            def spooled() -> bool:
                book.hold_known_cost(view, number, provider, cost, "derived")
                try:
                    with book.tx():
                        book.checkpoint(
                            view,
                            [
                                (
                                    "render",
                                    {"provider": provider, "model": "m1", "attempt": number},
                                ),
                                ("spool", {"size": 1, "sha256": "0" * 64}),
                            ],
                            "store",
                            outcome="rendered",
                            output_sha256="0" * 64,
                            output_size=1,
                        )
                        book.report_attempt(view, number, **success)
                except JobLost:
                    book.end_attempt(view, number, **success)  # a late result: kept, recorded
                    raise
                return True

            if self.fenced(worker, job_id, spooled) is None:
                self.drop(worker, job_id)
            return
        if outcome == "failed":
            report.update(
                status="failed", error_class="server", http_status=500, error_message="boom"
            )
        else:
            report.update(status="unknown", error_class="timeout", error_message="no answer")
        self.fenced(worker, job_id, lambda: book.end_attempt(view, number, **report))

    def give_up(self, worker: str, job_id: str, view: dict[str, Any]) -> None:
        """``pipeline._chain_over``: the chain is over, the job fails (CHAIN_FAILED)."""
        book = self.books[worker]
        held = self.holds(worker, job_id)
        ended = self.fenced(
            worker,
            job_id,
            lambda: book.finish(
                view,
                "failed",
                step="render",
                outcome="failed",
                error_code="CHAIN_FAILED",
                error_class="server",
                error_message="the chain is over",
            ),
        )
        self.drop(worker, job_id)
        assert ended == held

    def store(self, worker: str, job_id: str, view: dict[str, Any]) -> None:
        """``pipeline.store``: the object is put (create-only: a second put finds its own),
        then the store checkpoint."""
        if job_id not in self.stored:
            self.stored[job_id] = self.job_row(job_id)["attempts"]
        book = self.books[worker]
        done = self.fenced(
            worker,
            job_id,
            lambda: book.checkpoint(view, [("store", {"url": "model"})], "verify") or True,
        )
        if done is None:
            self.drop(worker, job_id)

    def verify(self, worker: str, job_id: str, view: dict[str, Any]) -> None:
        """``pipeline._succeed``: read back, the job succeeds, if the worker still holds it
        (the run that took it over stores and verifies it in turn)."""
        held = self.holds(worker, job_id)
        won = self.fenced(
            worker,
            job_id,
            lambda: self.books[worker].finish(
                view,
                "succeeded",
                step="finish",
                detail={"output_key": view["output_key"]},
                steps=[("verify", {"size": 1, "sha256": "0" * 64})],
            ),
        )
        assert won == held
        self.drop(worker, job_id)

    @precondition(lambda self: self.at(*STEPS))
    @rule(data=st.data())
    def release(self, data: Any) -> None:
        """``Ledger.release``: a job the worker holds and did not finish, given back."""
        worker, job_id, view = self.choose(data, *STEPS)
        self.fenced(worker, job_id, lambda: self.books[worker].release(view))
        self.drop(worker, job_id)

    @rule(worker=who, event=st.sampled_from(["stall", "renew", "stop"]))
    def worker_event(self, worker: str, event: str) -> None:
        """What befalls a worker's run between its jobs' steps. ``stall``: it stalls past its
        leases (its calls go on), which run out by the ledger's clock, its host's spool holds
        too, and the live-call leases a cancel kept. ``renew``: ``Ledger.renew_leases``.
        ``stop``: an interrupted run's end (``Ledger.release_all``): its job-style requests
        left to be polled, its other calls abandoned."""
        owner = OWNERS[worker]
        book = self.books[worker]
        if event == "renew":
            book.renew_leases(LEASE_S)
        elif event == "stop":
            # a job-style request is left for the next run to poll (``interrupt_attempt``)
            for number, view, provider in self.calls[worker].values():
                if provider == "replicate":
                    book.interrupt_attempt(view, number)
            book.release_all()
            self.views[worker].clear()
            self.calls[worker].clear()
        else:
            with self.person.tx():
                self.person.db.execute(
                    "UPDATE jobs SET lease_expires = 1, lease_mono = NULL WHERE lease_owner = ?"
                    " OR lease_owner LIKE ? OR (lease_owner IS NULL AND lease_expires IS NOT"
                    " NULL AND EXISTS (SELECT 1 FROM attempts a WHERE a.job_id = jobs.id"
                    " AND a.status = 'started' AND a.owner = ?))",
                    (owner, owner.split(":")[0] + ":0:0%", owner),
                )

    @precondition(lambda self: self.jobs)
    @rule(data=st.data(), decision=st.sampled_from(["cancel", "retry", "rerun"]))
    def person_decides(self, data: Any, decision: str) -> None:
        """``afc cancel KEY``, ``afc retry KEY``, or both at once (a person running a job
        again, a worker's call of it perhaps still out)."""
        job_id = data.draw(st.sampled_from(self.jobs))
        if decision in ("cancel", "rerun"):
            row = self.job_row(job_id)
            was = row["status"]  # (``finish`` updates the dict it is given)
            assert self.person.cancel(row, "stop") == (was not in TERMINAL)
        if decision in ("retry", "rerun"):
            row = self.job_row(job_id)
            was = row["status"]
            put_back = self.person.retry(row, "model")
            assert bool(put_back) == (was in ("failed", "dead", "cancelled"))

    # --- invariants -------------------------------------------------------------------------

    @invariant()
    def spend_is_the_attempts_sum(self) -> None:
        kept = {run: int(s) for run, s in self.rows("SELECT run_id, spend_micros FROM run_spend")}
        summed = {
            run: int(s)
            for run, s in self.rows(
                "SELECT run_id, SUM(COALESCE(cost_micros, reserved_micros, 0)) FROM attempts"
                " WHERE run_id IS NOT NULL GROUP BY run_id"
            )
        }
        assert {r: s for r, s in kept.items() if s} == {r: s for r, s in summed.items() if s}
        for run in ("run-A", "run-B", SHARED):
            assert self.person.run_spend(run) == summed.get(run, 0)

    @invariant()
    def one_call_in_flight_a_job(self) -> None:
        assert not self.rows(
            "SELECT job_id FROM attempts WHERE status = 'started' GROUP BY job_id"
            " HAVING COUNT(*) > 1"
        )

    @invariant()
    def no_paid_attempt_after_its_output_was_stored(self) -> None:
        for job_id, at_store in self.stored.items():
            (latest,) = self.rows("SELECT MAX(number) FROM attempts WHERE job_id = ?", (job_id,))[0]
            assert (latest or 0) <= at_store, "a job whose output was stored was paid again"

    @invariant()
    def every_attempt_says_what_it_cost(self) -> None:
        for status, ended_at, cost, error_class in self.rows(
            "SELECT status, ended_at, cost_micros, error_class FROM attempts"
        ):
            assert status in ("started", "succeeded", "failed", "unknown")
            if status != "started":
                assert ended_at is not None
                assert cost is not None or error_class is not None

    @invariant()
    def status_shows_the_rows(self) -> None:
        """``afc status``'s counts and costs (``listing.status_view``) are the rows'; asked
        again only when a status or a cost changed (a look opens the ledger anew: 30 ms on
        PostgreSQL)."""
        rows = sorted(
            (batch, key, status, None if cost is None else int(cost), made)
            for batch, key, status, cost, made in self.rows(
                "SELECT j.batch, j.key, j.status, (SELECT SUM(a.cost_micros) FROM attempts a"
                " WHERE a.job_id = j.id), j.attempts FROM jobs j"
            )
        )
        if rows == self.shown:
            return
        self.shown = rows
        view = status_view(self.url, batch=None, everything=True)
        assert view["counts"] == dict(Counter(status for _, _, status, _, _ in rows))
        assert sorted(
            (job["batch"], job["key"], job["status"], job["cost"]) for job in view["jobs"]
        ) == [(batch, key, status, job_cost(cost, made)) for batch, key, status, cost, made in rows]


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_the_ledger_keeps_its_money_rules_under_any_sequence(engine, tmp_path, request):
    if engine == "sqlite":
        paths = (str(tmp_path / f"model-{i}.db") for i in itertools.count())
        LedgerModel.new_url = staticmethod(lambda: next(paths))
    else:
        server = request.getfixturevalue("pg_server")
        LedgerModel.new_url = staticmethod(server.database)
    run_state_machine_as_test(LedgerModel, settings=SETTINGS[engine])
