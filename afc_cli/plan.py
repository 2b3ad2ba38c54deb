"""``afc plan`` / ``afc submit --dry-run``: know before you pay. Writes nothing.

For each job of the manifest it says what a run would do: render it (new, or admitted but not
finished), take it from storage (its own output is already there), nothing (a replay of a
finished job), or refuse it (a changed body under an admitted key, its changed fields named
as ``afc submit`` names them; a new job that needs such a key, as ``Ledger.admit`` decides it
(``afc_cli/gates.py``); or an output key holding another object). The estimate is one
paid attempt of each job's first model at its rate card's per-image price, or at what that
model's answers in this batch have cost per image where dearer (a card that charges tokens
keeps ``per_image`` as its estimate; a run under a budget reserves the dearer known cost,
``pipeline.estimate_for``): what the run costs when nothing fails. Every model of those jobs' chains with no such price (a fallback may run
too) is named as unpriced, never counted as zero.
The budget it compares the estimate with is the submit's own (``Budget.of_manifest``:
``--max-spend``, else the manifest's ``budget``), checked as the submit checks it
(``Budget.check_priced``): where the submit would refuse to run under it (an unpriced model,
without ``--allow-unpriced``), the plan says so in ``problems`` and the command exits 2, as the
submit would; ``fits_budget`` is then None (the estimate cannot say). An API key or a webhook
secret this environment lacks or cannot send (``run.require_keys``,
``webhooks.require_secrets``: variable names only, never a value), a run setting the submit
refuses (``AFC_MAX_INTERRUPTS``, ``AFC_LEASE_S``, ``AFC_GRACE_S``, ``AFC_MIN_FREE_MB``,
``AFC_POLL_S``; a
``--concurrency`` the open-file limit cannot hold, ``run.open_files``), a ``file://`` folder
the batch's outputs are not in (``run.refuse_gone``, ``run.hold_folder``: read, no mark written),
and a storage it could not
read (its jobs then counted as to render), are said in ``environment``, not refused: a plan is often made where the submit is not (CI checking manifests without
secrets), and the submit refuses on its own, writing nothing.

An admitted job whose render is paid for already is not rendered again: its bytes kept in this
host's spool (a run stopped before storing them) are stored, and a request the provider is
still rendering (Replicate, fal) is polled, and a synchronous provider's paid render a stopped
run left at the output URL its answer named is fetched, as the run does it (``resumed``; the
action says which). A polled request is priced all the same: the run that polls it counts its
cost in its spend and budget (``Ledger.reopen_attempt``); so is a fetched one, the most the
run can cost (a run killed during the download left its cost to the next run's budget, one
stopped by a signal kept it in its own).

The ledger, if there is one, is opened read-only (no migrations, no lock); a missing ledger
means every job is new. Storage and the spool are only read.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from afc_cli import storage as storage_mod
from afc_cli.attempts import Try, counted, next_try
from afc_cli.conflicts import (
    UNFINISHED,
    changed_files_line,
    changes_since,
    describe_changes,
    inputs_changed,
)
from afc_cli.costs import format_usd
from afc_cli.errors import StorageError, UsageError, first_named
from afc_cli.gates import (
    HELD,
    Change,
    Gates,
    Regate,
    changed_message,
    kept_message,
    refused_dependent,
)
from afc_cli.ledger import spool_holder_of, spool_root_of
from afc_cli.ledger.core import AT_URL, NEED_FAILED, RENDERING, TERMINAL, list_places
from afc_cli.manifest import job_id_for, same_request
from afc_cli.owner import held_by_no_process, lease_held, process_named
from afc_cli.pipeline import dearest_known, estimate_for, estimated_models, ownership
from afc_cli.run import (
    Budget,
    chains_except,
    folder_refusal,
    gone_refusal,
    grace_seconds,
    lease_seconds,
    manifest_rates,
    max_interrupts,
    min_free_bytes,
    open_files,
    poll_seconds,
    require_keys,
    resolve_storage,
    spool_problem,
)
from afc_cli.spool import Spool


def plan(
    manifest_path: str,
    *,
    ledger_path: str,
    storage: str | None,
    max_spend: str | None = None,
    allow_unpriced: bool = True,
    concurrency: int = 8,  # the submit's --concurrency (cli.DEFAULT_CONCURRENCY)
) -> dict[str, Any]:
    from afc_cli.manifest import dependency_waves, load_manifest

    manifest = load_manifest(manifest_path)
    rates = manifest_rates(manifest)
    # the budget the submit would run under: --max-spend over the manifest's budget
    budget = Budget.of_manifest(max_spend, manifest, allow_unpriced)
    named = resolve_storage(
        storage, manifest.storage, Path(manifest_path).resolve().parent, str(manifest_path)
    )
    from afc_cli.ledger import read_admitted

    bound, endpoint, admitted, stored_needs, moved, history, answers, marked = read_admitted(
        ledger_path, manifest.batch, estimated_models(rates)
    )
    # what the batch's answers have cost per image where dearer than their card's estimate:
    # the run reserves that for each call under a budget (pipeline.dearest_known), and the
    # plan estimates it, or it said a budget fitted that stopped the run halfway
    dearest = dearest_known(_Answers(answers), [manifest.batch], {manifest.batch: rates})
    # a new job given the output key of a job admitted to the batch before: the submit
    # refuses the manifest (exit 2, Ledger.admit), and so does its plan
    from afc_cli.ledger.core import refuse_shared_outputs

    outputs = {known[8]: key for key, known in admitted.items()}
    refuse_shared_outputs(manifest, manifest.jobs, admitted, outputs)
    # the batch's unfinished jobs that this manifest does not list: the submit runs them too
    manifest_keys = {job.key for job in manifest.jobs}
    unlisted = {
        key: json.loads(known[2])
        for key, known in sorted(admitted.items())
        if key not in manifest_keys and known[1] not in PAST_RENDERING
    }
    # what the submit would refuse before writing anything, said here too (exit 2)
    problems = []
    if moved is not None:  # as Ledger.refuse_moved refuses the submit
        problems.append(
            f"the ledger was moved to {moved} by 'afc ledger copy': run afc there (--ledger)"
        )
    # the chains of the jobs the submit may render, as it checks them (run._chains_to_run): a
    # replay of a finished job calls no provider, so its models need no price and no API key
    finished = {key for key, known in admitted.items() if known[1] in PAST_RENDERING}
    # nor does it run a job refused as a conflict, nor that key's admitted request
    restates: dict[str, str] = {}  # manifest.same_request's, for the whole manifest
    finished |= {
        job.key
        for job in manifest.jobs
        if job.key in admitted
        and not same_request(admitted[job.key][0], admitted[job.key][2], job, restates)
    }
    to_run = chains_except(manifest, finished)
    unlisted_chains = [body["chain"] for body in unlisted.values()]
    chains = [*to_run, *unlisted_chains]
    if budget is not None:
        try:
            budget.check_priced([(manifest.batch, chain) for chain in chains], lambda b: rates)
        except UsageError as exc:
            problems.append(exc.message)
    # What this environment lacks for the submit (an API key, a webhook secret: names only,
    # never a value). Said, not a refusal: a plan is often made where the submit is not (a
    # laptop, CI checking manifests without secrets), and the submit refuses on its own,
    # writing nothing. ``afc plan`` exits 0 for it.
    environment = []
    from afc_cli.webhooks import require_secrets

    for check in (
        lambda: require_keys({entry["provider"] for chain in chains for entry in chain}),
        lambda: require_secrets(
            manifest.secret_envs, f"{manifest.path}: field 'webhook.secret_env'"
        ),
        # the run's settings the submit checks before it writes anything (run.submit): a
        # value of AFC_MAX_INTERRUPTS, AFC_LEASE_S, AFC_GRACE_S, AFC_MIN_FREE_MB or AFC_POLL_S
        # it refuses, and a --concurrency this process's open-file limit cannot hold
        max_interrupts,
        lease_seconds,
        grace_seconds,
        min_free_bytes,
        poll_seconds,
        lambda: open_files(
            concurrency, {entry["provider"] for chain in manifest.chains for entry in chain}
        ),
    ):
        try:
            check()
        except UsageError as exc:
            environment.append(exc.message)
    spool = Spool(spool_root_of(ledger_path))
    if to_run or unlisted_chains:
        # the spool of another ledger here refuses a submit that renders (run.own_spool), as
        # surely as a missing key: said with the environment's problems, read only
        identity, ledger_name, known = spool_holder_of(ledger_path, spool.job_ids())
        problem = spool_problem(spool, identity, ledger_name, known)
        if problem is not None:
            environment.append(problem)
    if bound and named and bound != named:  # as the submit refuses it (Ledger.check_storage)
        from afc_cli.ledger.core import other_storage

        raise UsageError(other_storage(manifest.batch, bound, named))
    url = named or bound or storage_mod.normalize_url(storage_mod.DEFAULT_STORAGE)
    # the batch's bucket reached through another S3 endpoint than it was admitted through:
    # another store, which the submit refuses (Ledger.check_storage), and whose probe here
    # would report none of the batch's outputs stored
    if bound:
        from afc_cli.ledger.core import other_endpoint

        refused = other_endpoint(manifest.batch, bound, endpoint, storage_mod.endpoint_of(bound))
        if refused is not None:
            raise UsageError(refused)
    store = storage_mod.open(url)
    folder = folder_problem(manifest.batch, store, admitted, marked)
    if folder is not None:
        environment.append(folder)
    # the storage's first read that failed (no AWS credentials where the plan is made, an
    # output key's folder that is a file): said with the environment's problems, as the
    # submit's own storage check would refuse it there; the jobs after it are not looked
    # for, and counted as to render (the estimate then the most the run can cost)
    unread: list[str] = []

    counts = {
        "new": 0,
        "replayed": 0,
        "stored": 0,
        "conflicting": 0,
        "to_render": 0,
        "resumed": 0,
        # admitted jobs another live afc process runs now: neither rendered nor priced here
        "elsewhere": 0,
    }

    def resumed(job_id: str, known: tuple) -> str | None:
        """What a run does instead of a render for an admitted job whose render is paid for
        already (as ``pipeline.render`` finds it), or None: its bytes kept in this host's
        spool are stored (``FROM_SPOOL``); a request still rendering at the provider (the
        ledger's waiting reason, or its id kept beside the spool) is polled (``POLLED``).
        Neither is paid again."""
        if spool.path(job_id).exists():
            return FROM_SPOOL
        reason = known[7] or ""
        if reason.startswith(RENDERING) and reason.endswith(AT_URL):
            return FETCHED
        if reason.startswith(RENDERING) or spool.request_path(job_id).exists():
            return POLLED
        return None

    estimate = 0
    unpriced: set[str] = set()
    jobs: list[dict[str, Any] | None] = []
    conflicts = []

    def refused(job: Any, stored_hash: str | None, need: str) -> dict[str, Any]:
        counts["conflicting"] += 1
        conflicts.append(refused_dependent(job, stored_hash, need))
        entry = job.chain[0]
        model = f"{entry['provider']}/{entry['model']}"
        return {"key": job.key, "action": "conflict", "model": model, "refused_need": need}

    prices: dict[str, int] = {}  # the estimate of each job to render

    def next_model(key: str, chain: list[dict[str, Any]], left: bool = False) -> int | None:
        """The chain entry an admitted job's next attempt uses, as the run decides it from
        the job's attempts (``attempts.next_try``): a job a budget stopped as its chain fell
        back to a dearer model calls that model, not its first. ``left``: the entry of the
        request a stopped run left at the provider, which the run polls. None: the chain is
        over (the run fails the job, calling nothing)."""
        rows = history.get(key)
        if not rows:
            return 0
        if left:
            return rows[-1]["chain_index"]
        decision = next_try(chain, counted(rows))
        return decision.chain_index if isinstance(decision, Try) else None

    def priced(chain: list[dict[str, Any]], params: dict[str, Any], at: int | None = 0) -> int:
        """One attempt of the chain's model ``at`` (its first, or where the job's attempts
        have taken it: ``next_model``; None: none), added to the estimate: every image the
        request asks for is billed (n, num_outputs, num_images). A fallback may run too:
        every model of the chain without an estimate is named unpriced."""
        nonlocal estimate
        unpriced.update(
            f"{e['provider']}/{e['model']}"
            for e in chain
            if rates.estimate(e["provider"], e["model"]) is None
        )
        if at is None:
            return 0
        price = estimate_for(chain[at], rates, params, dearest) or 0
        estimate += price
        return price

    def held(known: tuple) -> bool:
        """Whether a live afc process holds this admitted job's lease, as a claim decides it
        (``owner.lease_held``): on this host by its monotonic expiry (``lease_mono``), so a
        wall-clock jump past the lease (an NTP step, a laptop that slept) leaves a live run's
        job its own, as the submit leaves it; judged by the wall-clock expiry alone, a plan
        beside such a run priced that job as to render."""
        return lease_held(known[5], known[6], now, known[10])

    def run_elsewhere(known: tuple | None) -> str | None:
        """The action of an admitted, unfinished job that another live afc process holds now
        (a cron'd resume, a worker, another submit: ``owner.lease_held``, as a claim decides
        it), or None. A submit leaves such a job alone, its calls paid by that process under
        that process's budget (``run.note_held_elsewhere``); estimated as to render, a plan
        beside a resume that had 5 of 9 jobs in flight said 9 to render, 0.45 USD, and that
        ``--max-spend 0.25`` did NOT fit, where the submit rendered 4 for 0.20."""
        if known is None or known[1] in PAST_RENDERING:
            return None
        holder = known[5]
        if holder is None or held_by_no_process(holder) or not held(known):
            return None
        return ELSEWHERE.format(process=process_named(holder))

    def to_run(job: Any, known: tuple | None) -> dict[str, Any]:
        nonlocal estimate
        elsewhere = run_elsewhere(known)
        if elsewhere is not None:
            counts["replayed"] += 1
            counts["elsewhere"] += 1
            entry = job.chain[0]
            model = f"{entry['provider']}/{entry['model']}"
            return {"key": job.key, "action": elsewhere, "model": model}
        ended = known is not None and known[1] in PAST_RENDERING
        kept = resumed(job.job_id, known) if known is not None and not ended else None
        at = (
            next_model(job.key, job.chain, left=kept in (POLLED, FETCHED))
            if known and not ended
            else 0
        )
        entry = job.chain[at or 0]
        model = f"{entry['provider']}/{entry['model']}"
        detail: dict[str, Any] = {}
        if ended:
            # ended, or stored and waiting for a person: a submit renders none of them
            action = f"replay ({known[1]})"
            counts["replayed"] += 1
        elif kept is not None:
            action = kept
            counts["replayed"] += 1
            counts["resumed"] += 1
            if kept in (POLLED, FETCHED):
                # not paid again, but the run that polls it (or fetches it, when a killed
                # run left it) counts its cost in its spend and budget (Ledger.reopen_attempt,
                # README "Budget")
                prices[job.key] = priced(job.chain, job.params, at)
        else:
            counts["replayed" if known else "new"] += 1
            # an admitted job's object carries the hash it was admitted with
            fake = {"id": job.job_id, "request_hash": known[0] if known else job.request_hash}
            info = None
            if not unread:
                try:
                    info = store.head(job.output_key)
                except (StorageError, UsageError) as exc:
                    unread.append(exc.message)
            foreign = ownership(fake, info) if info is not None else None
            if info is None:
                action = "render"
                counts["to_render"] += 1
                prices[job.key] = priced(job.chain, job.params, at)
            elif foreign:
                action = "conflict (output key taken)"
                counts["conflicting"] += 1
                detail["output_key"] = job.output_key
                detail["holds"] = foreign
            elif info.exists:
                action = "stored"
                counts["stored"] += 1
            else:
                action = "render"
                counts["to_render"] += 1
                prices[job.key] = priced(job.chain, job.params, at)
        return {"key": job.key, "action": action, "model": model, **detail}

    # Decided as Ledger.admit decides (afc_cli/gates.py): which new jobs a conflict refuses
    # with it, and which replayed jobs take the manifest's review and needs.
    gates = Gates(stored_needs)
    now = time.time()
    index_of: dict[str, int] = {}
    # per job, the review flag and needs the ledger will have after the submit (None: the
    # job is not admitted)
    effective: list[tuple[bool, tuple[str, ...]] | None] = []
    changed: list[dict[str, Any]] = []

    def apply(index: int, change: Change | None) -> None:
        gated = effective[index]
        if change is None or gated is None or (change.review is None and change.needs is None):
            return
        review, needs = gated
        detail: dict[str, Any] = {}
        if change.review is not None:
            review = detail["review"] = change.review
        if change.needs is not None:
            needs = change.needs
            detail["needs"] = list(needs)
        effective[index] = (review, needs)
        changed.append({"key": listed_keys[index], **detail})

    listed_keys: list[str] = []
    for job in manifest.jobs:
        known = admitted.get(job.key)
        index = len(jobs)
        index_of[job.key] = index
        listed_keys.append(job.key)
        if known is None:
            effective.append((bool(job.review), tuple(job.needs)))
            cause = gates.fresh(job.key, job.needs, job)
            if cause is HELD:  # a need later in the list: decided once every job is seen
                jobs.append(None)
            elif cause is not None:
                effective[index] = None
                jobs.append(refused(job, None, cause))
            else:
                jobs.append(to_run(job, None))
            continue
        stored = stored_needs.get(job.key, ())
        effective.append((bool(known[3]), stored))
        if not same_request(known[0], known[2], job, gates.restates):
            gates.refused_request(
                Regate(job, job.job_id, known[1], known[4], bool(known[3]), stored)
            )
            counts["conflicting"] += 1
            changes = changes_since(known[2], job.body)
            changed_files = inputs_changed(known[9], job.inputs)
            conflicts.append(
                {
                    "key": job.key,
                    "stored_hash": known[0],
                    "new_hash": job.request_hash,
                    "changes": changes,
                    "status": known[1],  # the admitted request's, as it stays
                    "inputs_changed": changed_files,
                }
            )
            entry = job.chain[0]
            model = f"{entry['provider']}/{entry['model']}"
            jobs.append(
                {
                    "key": job.key,
                    "action": "conflict",
                    "model": model,
                    "changes": changes,
                    "status": known[1],
                    "inputs_changed": changed_files,
                }
            )
            continue
        regate = Regate(
            job,
            job.job_id,
            known[1],
            known[4],
            bool(known[3]),
            stored,
            known[0],
            held=held(known),
        )
        outcome = gates.replay(regate)
        if outcome is HELD:
            jobs.append(None)
        else:
            apply(index, outcome)
            jobs.append(to_run(job, known))
    for item, outcome in gates.settle_all():
        index = index_of[item.key]
        if isinstance(item, Regate):  # admitted already: never refused here
            apply(index, outcome)
            jobs[index] = to_run(item.job, admitted[item.key])
        elif outcome is not None:
            effective[index] = None
            jobs[index] = refused(item, None, outcome)
        else:
            jobs[index] = to_run(item, None)
    listed = []
    reviewed = []
    graph = {}
    for key, gated, shown in zip(listed_keys, effective, jobs, strict=True):
        assert shown is not None
        listed.append(shown)
        if gated is None:
            continue  # not admitted: neither waits nor is waited for
        review, needs = gated
        known = admitted.get(key)
        if review and not (known and known[1] in TERMINAL):
            reviewed.append(key)  # not yet decided: approved and rejected ones are
        if needs:
            shown["needs"] = list(needs)
            graph[key] = list(needs)
        if review:
            shown["review"] = True
    # A job that needs one that ended badly (failed, rejected, cancelled, dead: a submit
    # retries none of them) fails with DEPENDENCY_FAILED when the run settles it, rendering
    # nothing (Ledger.settle_blocked), and so do the jobs that need it in turn.
    ended = {key: known[1] for key, known in admitted.items() if known[1] in NEED_FAILED}
    doomed: dict[str, str] = {}
    order = dependency_waves(graph)
    for wave in order:
        for key in wave:
            cause = next((n for n in graph.get(key, ()) if n in ended or n in doomed), None)
            if cause is not None:
                doomed[key] = cause
    for shown in listed:
        cause = doomed.get(shown["key"])
        if cause is not None and shown["action"] == "render":
            shown["action"] = "dependency failed"
            shown["failed_need"] = cause
            counts["to_render"] -= 1
            estimate -= prices.get(shown["key"], 0)
    for key, body in unlisted.items():
        elsewhere = run_elsewhere(admitted[key])
        if elsewhere is not None:
            counts["elsewhere"] += 1
            entry = body["chain"][0]
            listed.append(
                {
                    "key": key,
                    "action": f"{elsewhere} (not in this manifest)",
                    "model": f"{entry['provider']}/{entry['model']}",
                }
            )
            continue
        kept = resumed(job_id_for(manifest.batch, key), admitted[key])
        at = next_model(key, body["chain"], left=kept in (POLLED, FETCHED))
        entry = body["chain"][at or 0]
        if kept in (None, POLLED, FETCHED):  # a polled request's cost: as above
            priced(body["chain"], body.get("params") or {}, at)
        if kept is None:
            counts["to_render"] += 1
        else:
            counts["resumed"] += 1
        listed.append(
            {
                "key": key,
                "action": f"{kept or 'render'} (not in this manifest)",
                "model": f"{entry['provider']}/{entry['model']}",
            }
        )

    # a list's conflicting jobs are named by file and line, as a submit names them
    # (``conflict_message``); the list is read again only when there are any
    clashing = {shown["key"] for shown in listed if shown["action"].startswith("conflict")}
    for key, where in list_places(manifest, clashing).items():
        listed[index_of[key]]["where"] = where

    if unread:
        environment.append(
            f"{unread[0]} (the storage could not be read: its jobs were not looked for there, "
            "and are counted as to render)"
        )
    return {
        "batch": manifest.batch,
        "storage": storage_mod.shown_url(url),
        **counts,
        "estimated_spend": format_usd(estimate),
        "unpriced_models": sorted(unpriced),
        "budget": format_usd(budget.cap_micros) if budget else None,
        # None without a budget, or when the submit would refuse to run under it (problems)
        "fits_budget": None if budget is None or problems else estimate <= budget.cap_micros,
        "problems": problems,
        # what a submit in this environment would be refused for (exit 2), not the plan
        "environment": environment,
        "conflicts": conflicts,
        # the jobs with needs and the jobs they need, in waves (each needs only earlier ones),
        # and the jobs that pause for a person's review after verify
        "order": order,
        "review": reviewed,
        # replayed jobs not yet rendered whose review or needs the submit would change, and
        # the changes it cannot make (a job rendered, being rendered, or ended)
        "gates_changed": changed,
        "gates_kept": gates.kept,
        # unfinished jobs of the batch this manifest does not list, which the submit runs too
        "unlisted": list(unlisted),
        "jobs": listed,
    }


class _Answers:
    """The batch's priced answers ``read_admitted`` read, as ``pipeline.dearest_known`` asks
    a ledger for them (``Ledger.priced_answers``)."""

    def __init__(self, rows: list[tuple]):
        self.rows = rows

    def priced_answers(self, batch: str, models: Any) -> list[tuple]:
        return [row for row in self.rows if (row[0], row[1]) in models]


PAST_RENDERING = (*TERMINAL, "awaiting_review")
# the actions of admitted jobs whose render is paid for already (``resumed``)
FROM_SPOOL = "store (its paid render is in this host's spool)"
POLLED = "poll (the provider is still rendering its paid request)"
FETCHED = "fetch (its paid render, at the output URL the provider's answer named)"
# the action of an admitted job another live afc process holds (``run_elsewhere``)
ELSEWHERE = "left alone (being run by another afc process, {process})"


def folder_problem(
    batch: str, store: Any, admitted: dict, marked: tuple[str | None, str | None]
) -> str | None:
    """What the submit's ``run.refuse_gone`` and ``run.hold_folder`` would refuse on this host
    in the ``file://`` folder ``store``, read without writing (no folder made, no mark): a
    folder missing, or one of another mark than the batch's, where its outputs were stored or
    another host's runs store: a folder missing there too, which the submit makes with a
    mark of its own and refuses (outside audit 65g). The plan said such a submit would render
    and cost its estimate, exit 0, and the submit was refused, exit 2 (outside audit 65a)."""
    import os

    from afc_cli.ledger.core import RENDERED
    from afc_cli.owner import host_id
    from afc_cli.storage.file import NO_MARK

    root = getattr(store, "root", None)
    if not store.local or root is None:
        return None
    stored = sum(1 for known in admitted.values() if known[1] in RENDERED)
    held, by = marked
    here = host_id()
    if not os.path.lexists(root):
        if stored:
            return gone_refusal(batch, store, held, stored)
        # made anew by the submit (``check``), with a mark of its own: another host's runs
        # hold the batch to theirs, and it is refused as another folder (``hold_folder``)
        mark = NO_MARK
    else:
        mark = store.folder_mark(make=False)
    if held is None or mark is None:
        return None
    return folder_refusal(batch, store, mark, (held, by), here, stored if by == here else 0)


def _some(keys: list[str], shown: int = 10, more: str = " (--json lists them)") -> str:
    """The first keys of a list and how many more, as a submit names them: a batch of
    thousands (a job list) is not one line of every key; --json has them all."""
    return first_named(keys, shown, more)


def describe(result: dict[str, Any]) -> str:
    lines = [
        f"batch {result['batch']} -> {result['storage']}",
        # two counts of the same jobs: what admission finds (new, replayed, conflicting), and
        # what the run would do with the unfinished ones (render, or find already stored)
        f"  new {result['new']}, replayed {result['replayed']}, conflicting "
        f"{result['conflicting']}",
        f"  to render: {result['to_render']}, already stored: {result['stored']}, "
        + (
            f"paid renders resumed (stored or polled, not paid again): {result['resumed']}, "
            if result.get("resumed")
            else ""
        )
        + f"estimated spend {result['estimated_spend']} USD"
        + (" (if no attempt fails)" if result["to_render"] else ""),
    ]
    if result.get("elsewhere"):
        lines.append(
            f"  being run by another afc process, left to it (not rendered or priced here): "
            f"{result['elsewhere']}"
        )
    failing = {job["key"] for job in result["jobs"] if job["action"] == "dependency failed"}
    for job in result["jobs"]:
        where = f" ({job['where']})" if job.get("where") else ""  # a list's file and line
        if job.get("refused_need"):
            lines.append(
                f"  conflict {job['key']}{where}: needs {job['refused_need']}, whose change is "
                "refused"
            )
        elif job["action"] == "dependency failed":
            # the need ended badly, or fails the same way in this run (a need of a need)
            how = "fails too" if job["failed_need"] in failing else "ended badly"
            lines.append(
                f"  fails {job['key']}: needs {job['failed_need']}, which {how} "
                "(DEPENDENCY_FAILED; nothing rendered)"
            )
        elif job["action"] == "conflict":
            lines.append(
                f"  conflict {job['key']}{where}: changed {describe_changes(job['changes'])}"
            )
            if job.get("status") in UNFINISHED:  # the admitted request, which a run renders
                then = (
                    changed_files_line(job["inputs_changed"])
                    if job.get("inputs_changed")  # ... or fails: its file changed since
                    else "a run is rendering it now (its run gone, the next takes it over)"
                    if job["status"] == "running"
                    else "the next run renders it"
                )
                lines.append(
                    f"    its admitted request is {job['status']}, and {then} "
                    f"('afc cancel {job['key']}' drops it)"
                )
        elif job["action"].startswith("conflict"):
            lines.append(
                f"  conflict {job['key']}{where}: output key {job['output_key']} holds "
                f"{job['holds']}"
            )
    if result.get("unlisted"):
        lines.append(
            "  not in this manifest, unfinished, run with it: " + _some(result["unlisted"])
        )
    if result.get("order"):
        waves = [_some(wave, more="") for wave in result["order"]]
        lines.append("  order: " + " -> ".join(waves))
    if result.get("review"):
        lines.append("  waits for a review: " + _some(result["review"]))
    if result.get("gates_changed"):
        lines.append("  " + changed_message(result["gates_changed"], "to change"))
    for kept in result.get("gates_kept") or ():
        lines.append("  " + kept_message(kept))
    if result["unpriced_models"]:
        lines.append("  unpriced (not in the estimate): " + ", ".join(result["unpriced_models"]))
    if result["budget"] is not None and not result["problems"]:
        verdict = "fits" if result["fits_budget"] else "does NOT fit"
        lines.append(f"  budget {result['budget']} USD: the estimate {verdict}")
    for problem in result["problems"]:
        lines.append(f"  a submit would be refused (exit 2): {problem}")
    for problem in result.get("environment") or ():
        lines.append(f"  a submit in this environment would be refused (exit 2): {problem}")
    return "\n".join(lines)
