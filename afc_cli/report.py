"""``afc show``: one job's whole story from the ledger."""

from __future__ import annotations

import json
import time
from typing import Any

from afc_cli.costs import format_usd, job_cost, plural, unknown_cost_part
from afc_cli.errors import SHOWN_BATCHES, UsageError, batch_key_hint, several_batches
from afc_cli.ledger import TERMINAL, Ledger
from afc_cli.listing import waiting_now
from afc_cli.owner import lease_held
from afc_cli.storage import object_url


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _loads(text: str | None) -> Any:
    return json.loads(text) if text else None


def left_started(status: str, cost_micros: int | None) -> str:
    """What ``afc show`` says of an attempt still ``started`` on a job that has ended
    (``CALLS_OWNER_SQL``: cancelled while its call was in flight, the run that made it cut
    off or gone before it recorded the answer); its cost is the one its answer carried, if
    that was held (``Ledger.hold_known_cost``)."""
    unpriced = " and unpriced (the provider may have charged for it)" if cost_micros is None else ""
    return (
        f"left started: its job ended ({status}) before afc recorded this call's end; of "
        f"unknown outcome{unpriced}, as afc costs report counts it"
    )


def job_story(ledger_path: str, key: str, batch: str | None) -> dict[str, Any]:
    ledger = Ledger(ledger_path, create=False, reading=True)
    try:
        ledger.require_batch(batch)
        matches = ledger.jobs_by_key(key, batch)
        if not matches:
            from afc_cli.ledger.postgres import display_url

            where = f" in batch {batch!r}" if batch else ""
            # the ledger as every message names it: a PostgreSQL URL's password masked
            raise UsageError(
                f"no job with key {key!r}{where} in {display_url(ledger_path)}"
                + batch_key_hint(key)
            )
        if len(matches) > 1:
            names = [m["batch"] for m in matches]
            listed = ", ".join(sorted(names)) if len(names) <= SHOWN_BATCHES else None
            raise UsageError(
                f"key {key!r} is in several batches ({listed or several_batches(names)}); "
                "name one with --batch"
            )
        job = matches[0]
        batch_row = ledger.batch(job["batch"])
        rows = ledger.attempts(job["id"])
        ended = job["status"] in TERMINAL
        now = ledger.lease_clock() if ended else 0.0

        def left(a: dict[str, Any]) -> bool:
            # one left started by a job that has ended (CALLS_OWNER_SQL) is of unknown
            # outcome, as afc costs report counts it: not a call in flight. But a job
            # cancelled while a live run's call was in flight keeps that run's lease expiry
            # (Ledger.cancel): the call goes on and its run records its answer and cost;
            # it is 'started' until that run is gone (the rule a takeover follows)
            return (
                ended
                and a["status"] == "started"
                and not lease_held(a["owner"], job["lease_expires"], now, job.get("lease_mono"))
            )

        attempts = [
            {
                "number": a["number"],
                "provider": a["provider"],
                "model": a["model"],
                "status": "unknown" if left(a) else a["status"],
                "error_class": a["error_class"],
                "http_status": a["http_status"],
                "error": left_started(job["status"], a["cost_micros"])
                if left(a)
                else a["error_message"],
                "provider_request_id": a["provider_request_id"],
                "waited_s": a["wait_s"],
                "started_at": _iso(a["started_at"]),
                "duration_s": None if a["duration_s"] is None else round(a["duration_s"], 3),
                "usage": _loads(a["usage_json"]),
                "cost": format_usd(a["cost_micros"]),
                "cost_source": a["cost_source"],
                "inputs": _loads(a.get("inputs_json")),  # reference images sent, with SHA-256
            }
            for a in rows
        ]
        priced = [a["cost_micros"] for a in rows if a["cost_micros"] is not None]
        # as afc status counts them (ledger JOB_COST_SQL, gone_calls): a call in flight has no
        # cost yet; one left started by a run that is gone is possibly paid, unpriced (of a
        # job that ended, the attempt's own run: CALLS_OWNER_SQL, as ``left`` says it)
        unknown = [a for a in rows if a["cost_micros"] is None]
        started = [a for a in unknown if a["status"] == "started"]
        [counted] = ledger.gone_calls(
            [
                {
                    **job,
                    "unpriced_attempts": len(unknown) - len(started),
                    "calls_started": len(started),
                    "calls_owner": max(a["owner"] or "" for a in started) or None
                    if ended and started
                    else job["lease_owner"],
                }
            ]
        )
        return {
            "job": {
                "id": job["id"],
                "batch": job["batch"],
                "key": job["key"],
                "status": job["status"],
                "step": job["step"],
                "outcome": job["outcome"],
                "request_hash": job["request_hash"],
                "output_key": job["output_key"],
                "output_url": object_url(batch_row["storage"], job["output_key"]),
                "output_sha256": job["output_sha256"],
                "output_size": job["output_size"],
                # as afc status says it: with the word that its process is gone
                "waiting": waiting_now(job, job["waiting_reason"], ledger.lease_clock()),
                "error": None
                if not job["error_message"]
                else {
                    "code": job["error_code"],
                    "class": job["error_class"],
                    "provider": job["error_provider"],
                    "http_status": job["error_http_status"],
                    "message": job["error_message"],
                },
                "cost": job_cost(sum(priced) if priced else None, len(attempts)),
                "unpriced_attempts": counted["unpriced_attempts"],
                "created_at": _iso(job["created_at"]),
                "finished_at": _iso(job["finished_at"]),
            },
            "request": _loads(job["request_json"]),
            "review": bool(job.get("review")),
            "needs": [
                {"key": n["need_key"], "status": n["status"]} for n in ledger.needs_of(job["id"])
            ],
            "inputs": _loads(job.get("inputs_json")),
            "decisions": [
                {
                    "decision": r["decision"],
                    "by": r["decided_by"],
                    "note": r["note"],
                    "at": _iso(r["decided_at"]),
                }
                for r in ledger.reviews(job["id"])
            ],
            "steps": [
                {
                    "step": s["step"],
                    "at": _iso(s["completed_at"]),
                    "detail": _loads(s["detail_json"]),
                }
                for s in ledger.steps(job["id"])
            ],
            "attempts": attempts,
            "events": [
                {"at": _iso(e["at"]), "kind": e["kind"], "detail": _loads(e["detail_json"])}
                for e in ledger.events(job["id"])
            ],
            "webhooks": [
                {
                    "id": d["id"],
                    "url": d["url"],
                    "status": d["status"],
                    "attempts": d["attempts"],
                    "last_status": d["last_status"],
                    "last_error": d["last_error"],
                    "delivered_at": _iso(d["delivered_at"]),
                }
                for d in ledger.job_deliveries(job["id"])
            ],
        }
    finally:
        ledger.close()


def _text(value: Any) -> str:
    """A detail as JSON for a person: their words in their own script (a reviewer's reason,
    a provider's message), not as ``\\u`` escapes; what the output's encoding cannot write
    becomes a backslash escape there, as everywhere (``main``), and control characters stay
    JSON-escaped."""
    return json.dumps(value, ensure_ascii=False)


def print_story(story: dict[str, Any]) -> None:
    """The story as text: plain lines (a terminal wraps them; a pipe gets them whole), and its
    attempts and steps as tables (afc_cli/tables.py: whole figures at any width, tab-separated
    rows on a pipe)."""
    import sys

    from afc_cli.secrets import scrub_data, visible
    from afc_cli.tables import Col, emit

    def say(text: str = "") -> None:
        # a person's words (a rejection's reason, a decision's note, typed into 'afc serve'
        # from another machine) and a path are shown as the tables show them: the control
        # characters a terminal acts on as \xNN, not an escape sequence run on this terminal;
        # each is one line of the story, so a line break in a value is written as \n (a
        # reason's 'too dark\ndecision      approved by ...' forged a decision line)
        sys.stdout.write(visible(text).replace("\n", "\\n") + "\n")

    story = scrub_data(story)  # the last line of defence: no secret reaches the terminal
    job = story["job"]
    say(f"{job['batch']}/{job['key']}  {job['status']} (step {job['step']})")
    say(f"job id        {job['id']}")
    say(f"request hash  {job['request_hash']}")
    if job["output_sha256"] and job["step"] in ("probe", "render", "spool", "store"):
        # rendered and spooled, its store not done (storage failing, a stopped run): the URL
        # alone read as a stored output, with nothing at it
        say(f"output        {job['output_url']}: not stored yet (its store step is not done)")
        say(f"sha256        {job['output_sha256']} ({job['output_size']} bytes)")
    elif job["output_sha256"]:
        say(f"output        {job['output_url']}")
        say(f"sha256        {job['output_sha256']} ({job['output_size']} bytes)")
    else:  # a failed, cancelled or unfinished job: its key holds nothing of it...
        late = [e for e in story["events"] if e["kind"] == "late_result_stored"]
        if late and job["status"] == "cancelled":
            # ...but a cancelled job's call that answered after the cancel: its paid render
            # stored under the key as the job's own (README "Cancel"), which "none stored"
            # denied a few lines above the event saying so
            url = (late[-1]["detail"] or {}).get("url") or job["output_url"]
            say(
                f"output        {url}: a late result, stored after the cancel "
                "('afc retry' uses it, paying nothing)"
            )
        else:
            say(f"output        none stored (key {job['output_key']})")
    unpriced = job["unpriced_attempts"]
    if job["cost"] is None and not unpriced:
        # its only attempts are calls still in flight: no cost yet, known or unknown
        say("cost          unpriced (no cost known yet: its call is in flight)")
    elif job["cost"] is None:
        say(f"cost          unpriced ({plural(unpriced, 'attempt')} of unknown cost)")
    else:
        say(f"cost          {job['cost']} USD{unknown_cost_part(unpriced)}")
    if job["waiting"]:
        say(f"waiting       {job['waiting']}")
    if job["error"]:
        say(f"error         {job['error']['code']}: {job['error']['message']}")
    request = story["request"]
    say(f"prompt        {request['prompt']!r}")
    chain = " -> ".join(f"{c['provider']}/{c['model']} x{c['attempts']}" for c in request["chain"])
    say(f"chain         {chain}")
    if story["needs"]:
        needs = ", ".join(
            f"{n['key']} ({n['status'] or 'not in the ledger'})" for n in story["needs"]
        )
        say(f"needs         {needs}")
    for item in story["inputs"] or []:
        where = (
            f"job {item['job']}" if "job" in item else f"{item['path']} (sha256 {item['sha256']})"
        )
        say(f"input         {where}")
    if story["review"]:
        say("review        a person approves its output (afc review)")
    for d in story["decisions"]:
        note = f": {d['note']}" if d["note"] else ""
        say(f"decision      {d['decision']} by {d['by']} at {d['at']}{note}")

    attempts = [
        {
            "number": a["number"],
            "model": f"{a['provider']}/{a['model']}",
            "status": a["status"],
            # on a pipe the header is these names: the --json field names, as every table's
            # (README "Reading the output"); a terminal shows the shorter headers below
            "error_class": a["error_class"],
            "http_status": a["http_status"],
            "waited": f"{a['waited_s']:.2f}s" if a["waited_s"] else None,
            "duration": f"{a['duration_s']:.3f}s" if a["duration_s"] is not None else None,
            "usage": _text(a["usage"]) if a["usage"] else None,
            "cost": a["cost"] if a["cost"] is not None else "unpriced",
            "cost_source": a["cost_source"],
            "error": a["error"],
        }
        for a in story["attempts"]
    ]
    say()
    say("attempts")
    sys.stdout.flush()
    emit(
        attempts,
        [
            Col("number", header="#", right=True),
            Col("model", header="provider/model"),
            Col("status"),
            Col("error_class", header="class", drop=6),
            Col("http_status", header="HTTP", right=True, drop=5),
            Col("waited", right=True, drop=3),
            Col("duration", right=True, drop=4),
            Col("usage", kind="text", drop=1),
            Col("cost", right=True),
            Col("cost_source", header="source", drop=2),
            # why an attempt failed (a refusal's wording, a key the provider rejected): without
            # it a fallback's first model left only its class. The first to give up its room,
            # as it loses nothing: it is then printed under the table, "2: message"
            Col("error", kind="text", drop=0, below=True),
        ],
    )
    steps = [
        {
            "step": s["step"],
            "at": s["at"],
            "detail": _text(s["detail"]) if s["detail"] else None,
        }
        for s in story["steps"]
    ]
    say()
    say("steps")
    sys.stdout.flush()
    emit(steps, [Col("step"), Col("at"), Col("detail", kind="text")])
    sent = [(a["number"], i) for a in story["attempts"] for i in a.get("inputs") or []]
    if sent:
        say()
        say("inputs sent")
        for number, item in sent:
            say(
                f"  attempt {number}: {item['source']} sha256 {item['sha256']} ({item['size']} bytes)"
            )
    say()
    for hook in story["webhooks"]:
        say(
            f"webhook       {hook['id']} -> {hook['url']}: {hook['status']} after "
            + ("1 try" if hook["attempts"] == 1 else f"{hook['attempts']} tries")
            + (f" ({hook['last_error']})" if hook["last_error"] else "")
        )
    say("events")
    for e in story["events"]:
        detail = _text(e["detail"]) if e["detail"] else ""
        say(f"  {e['at']}  {e['kind']}  {detail}")
