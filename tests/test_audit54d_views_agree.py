"""Outside audit 54d: one messy night, read through every door, agrees with the ledger.

A batch over OpenAI, Replicate and fal with a rate card, an unpriced model, retried 500s,
429s, refusals, a review gate and a job that needs it; two Replicate requests left rendering
by a SIGKILLed submit and taken over by a resume stopped part-way by ``--max-spend``; a
cancel, a retry, and a second batch in the same ledger sharing a key. Then each job's cost
and unpriced attempts in ``afc status --json``, ``afc outputs --json``, ``afc show --json``,
``afc review list --json``, the tables on a pipe and the webhook payloads; the money per
provider and model in ``afc costs report`` (JSON, CSV, the table) and ``afc report --html
--json``; the counts in ``afc queue stats``; and each run's summary, are compared with sums
over the ledger's attempts. The second batch's figures never enter the first's."""

from __future__ import annotations

import csv
import io
import signal
import sqlite3
import time
from decimal import Decimal

from conftest import ledger_count

BACKOFF = {"base": 0.01, "cap": 0.05}
OPENAI = {"provider": "openai", "model": "gpt-image-1", "attempts": 2, "backoff": BACKOFF}
REPLICATE = {"provider": "replicate", "model": "o/m", "attempts": 2, "backoff": BACKOFF}
FAL = {"provider": "fal", "model": "fal-ai/flux/dev", "attempts": 2, "backoff": BACKOFF}
UNPRICED = {"provider": "fal", "model": "fal-ai/flux/schnell", "attempts": 2, "backoff": BACKOFF}


def night() -> dict:
    jobs = [
        ("a-hold-1", "hold one", REPLICATE),
        ("a-hold-2", "hold two", REPLICATE),
        *[(f"oa-ok-{i}", f"openai fine {i}", OPENAI) for i in range(4)],
        ("oa-429", "rate-limit one", OPENAI),
        ("oa-500", "boom one", OPENAI),
        ("oa-mod", "moderation one", OPENAI),
        *[(f"rp-ok-{i}", f"replicate fine {i}", REPLICATE) for i in range(4)],
        ("rp-throttle", "throttle x", REPLICATE),
        ("rp-flagged", "flagged x", REPLICATE),
        *[(f"fd-ok-{i}", f"fal fine {i}", FAL) for i in range(3)],
        *[(f"fs-{i}", f"fal schnell {i}", UNPRICED) for i in range(2)],
        *[(f"z-late-{i}", f"late fine {i}", OPENAI) for i in range(4)],
    ]
    listed = [{"key": k, "prompt": p, "chain": [c]} for k, p, c in jobs]
    listed.insert(-4, {"key": "style", "prompt": "style frame", "chain": [FAL], "review": True})
    listed.insert(-4, {"key": "after", "prompt": "after style", "chain": [FAL], "needs": ["style"]})
    return {
        "version": 1,
        "batch": "night",
        "defaults": {"chain": [OPENAI]},
        "webhook": {"url": "http://127.0.0.1:9/hook", "secret_env": "AFC_WEBHOOK_SECRET"},
        "rates": [
            {"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"},
            {"provider": "replicate", "model": "o/m", "per_image": "0.003"},
            {"provider": "fal", "model": "fal-ai/flux/dev", "per_image": "0.025"},
        ],
        "jobs": listed,
    }


def day() -> dict:
    return {
        "version": 1,
        "batch": "day",
        "defaults": {"chain": [OPENAI]},
        "rates": [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.05"}],
        "jobs": [{"key": f"d-{i}", "prompt": f"day fine {i}"} for i in range(3)]
        + [{"key": "d-mod", "prompt": "moderation day"}, {"key": "oa-ok-0", "prompt": "same"}],
    }


def usd(micros: int | None) -> str | None:
    return None if micros is None else f"{Decimal(micros) / 1_000_000:.6f}"


class Ledger:
    """The ledger's rows read directly, on either engine (``?`` placeholders)."""

    def __init__(self, url: str):
        if url.startswith("postgresql://"):
            import psycopg

            self.conn, self.mark = psycopg.connect(url, autocommit=True), "%s"
        else:
            self.conn, self.mark = sqlite3.connect(url), "?"

    def execute(self, sql: str, params: tuple = ()):
        if not params:  # no placeholders: a LIKE's % is itself
            return self.conn.execute(sql)
        return self.conn.execute(sql.replace("?", self.mark), params)


def test_every_view_agrees_with_the_ledger(afc, fake, ledger_url):
    afc.env["AFC_WEBHOOK_SECRET"] = "whsec_" + "A" * 32
    afc.env["AFC_LEDGER"] = ledger = ledger_url
    afc.write_manifest(night(), "night.yaml")
    afc.write_manifest(day(), "day.yaml")

    # a submit killed while its two Replicate requests render
    proc = afc.popen("submit", "night.yaml", "--concurrency", "4", "--allow-unpriced")
    sql = "SELECT COUNT(*) FROM attempts WHERE provider = 'replicate' AND provider_request_id IS NOT NULL"
    deadline = time.time() + 60
    while ledger_count(afc, ledger, sql) < 2:
        assert time.time() < deadline and proc.poll() is None, "the requests never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    fake.released.set()

    summaries = []
    resumed = afc.json("resume", "--batch", "night", "--max-spend", "0.30", "--allow-unpriced",
                       "--concurrency", "4", expect=None)  # fmt: skip
    assert resumed["stopped_by_budget"] and resumed["exit_code"] == 4, resumed
    summaries.append(resumed)
    waiting = [
        j["key"] for j in afc.json("status", "--batch", "night", "--status", "waiting")["jobs"]
    ]
    assert waiting, "the budget stopped nothing"
    assert afc("cancel", "--batch", "night", waiting[-1]).returncode == 0
    failed = [
        j["key"] for j in afc.json("status", "--batch", "night", "--status", "failed")["jobs"]
    ]
    assert failed, "nothing failed"
    assert afc("retry", "--batch", "night", failed[0]).returncode == 0
    summaries.append(afc.json("submit", "day.yaml", expect=1))
    summaries.append(afc.json("resume", "--batch", "night", "--allow-unpriced", expect=1))

    db = Ledger(ledger)
    # the two requests the killed submit left were polled, not paid for again
    assert db.execute(
        "SELECT COUNT(*), SUM(CASE WHEN a.status = 'succeeded' THEN 1 ELSE 0 END) FROM attempts a JOIN jobs j ON j.id = a.job_id"
        " WHERE j.key LIKE 'a-hold-%'"
    ).fetchone() == (2, 2)
    # each run's summary: its attempts' known costs, those of unknown cost, their estimates
    runs = db.execute(
        "SELECT COALESCE(SUM(cost_micros), 0),"
        " SUM(CASE WHEN cost_micros IS NULL AND status <> 'started' THEN 1 ELSE 0 END),"
        " COALESCE(SUM(CASE WHEN cost_micros IS NULL THEN reserved_micros END), 0)"
        " FROM attempts GROUP BY run_id"
    ).fetchall()
    shown = {(s["spent"], s["unknown_cost_attempts"], s["reserved"]) for s in summaries}
    assert shown <= {(usd(p), u, usd(r)) for p, u, r in runs}, (shown, runs)

    for batch in ("night", "day"):
        truth = {}
        for job_id, key, status in db.execute(
            "SELECT id, key, status FROM jobs WHERE batch = ?", (batch,)
        ):
            costs = [
                c
                for (c,) in db.execute(
                    "SELECT cost_micros FROM attempts WHERE job_id = ?", (job_id,)
                )
            ]
            known = [c for c in costs if c is not None]
            cost = usd(sum(known)) if known else (None if costs else "0.000000")
            truth[key] = (status, cost, costs.count(None))
        listed = afc.json("status", "--batch", batch, "--all")
        assert {
            j["key"]: (j["status"], j["cost"], j["unpriced_attempts"]) for j in listed["jobs"]
        } == truth
        counts: dict[str, int] = {}
        for status, _, _ in truth.values():
            counts[status] = counts.get(status, 0) + 1
        assert listed["counts"] == counts
        table = afc("status", "--batch", batch, "--all").stdout
        for row in csv.DictReader(io.StringIO(table), delimiter="\t"):
            _, cost, unpriced = truth[row["key"]]
            assert row["cost"] == (
                "unpriced"
                if cost is None
                else cost + (f" + {unpriced} unpriced" if unpriced else "")
            )
        for out in afc.json("outputs", "--batch", batch)["outputs"]:
            assert truth[out["key"]] == ("succeeded", out["cost"], out["unpriced_attempts"])
        for key in truth:
            story = afc.json("show", key, "--batch", batch)["job"]
            assert (story["status"], story["cost"], story["unpriced_attempts"]) == truth[key]
        for waiting in afc.json("review", "list", "--batch", batch)["awaiting_review"]:
            assert truth[waiting["key"]] == (
                "awaiting_review",
                waiting["cost"],
                waiting["unpriced_attempts"],
            )

        for by, group in (("provider", "a.provider"), ("model", "a.provider || '/' || a.model")):
            rows = {
                g: {"priced": usd(p), "unpriced_attempts": u, "unknown_attempts": k}
                for g, p, u, k in db.execute(
                    f"SELECT {group}, SUM(COALESCE(a.cost_micros, 0)),"
                    " SUM(CASE WHEN a.cost_micros IS NULL THEN 1 ELSE 0 END),"
                    " SUM(CASE WHEN a.status = 'unknown' THEN 1 ELSE 0 END) FROM attempts a JOIN jobs j ON j.id = a.job_id"
                    " WHERE j.batch = ? GROUP BY 1",
                    (batch,),
                )
            }
            report = afc.json("costs", "report", "--batch", batch, "--by", by)
            assert {r[by]: {f: r[f] for f in rows[r[by]]} for r in report["rows"]} == rows
            as_csv = list(
                csv.DictReader(
                    io.StringIO(
                        afc("costs", "report", "--batch", batch, "--by", by, "--csv").stdout
                    )
                )
            )
            as_table = list(
                csv.DictReader(
                    io.StringIO(afc("costs", "report", "--batch", batch, "--by", by).stdout),
                    delimiter="\t",
                )
            )
            for lines in (as_csv, as_table):
                assert [
                    {k: line[k] for k in ("priced", "unpriced_attempts", "failed_spend")}
                    for line in lines
                ] == [
                    {k: str(r[k]) for k in ("priced", "unpriced_attempts", "failed_spend")}
                    for r in [*report["rows"], report["total"]]
                ]
        total = afc.json("costs", "report", "--batch", batch)["total"]
        assert afc.json("report", "--html", f"{batch}.html", "--batch", batch)["total"] == total

    # the webhook payloads: the cost each job had when its event was written, its last one now
    latest = {}
    for delivery in sorted(
        afc.json("webhooks", "list")["deliveries"], key=lambda d: d["envelope"]["timestamp"]
    ):
        data = delivery["envelope"]["data"]
        latest[data["key"]] = data
    night_jobs = {j["key"]: j for j in afc.json("status", "--batch", "night", "--all")["jobs"]}
    for key, data in latest.items():
        if night_jobs[key]["status"] not in ("blocked",):
            assert (data["status"], data["cost"], data["unpriced_attempts"]) == (
                night_jobs[key]["status"],
                night_jobs[key]["cost"],
                night_jobs[key]["unpriced_attempts"],
            ), key

    stats = afc.json("queue", "stats")
    (failed,) = db.execute("SELECT COUNT(*) FROM jobs WHERE status = 'failed'").fetchone()
    (blocked,) = db.execute("SELECT COUNT(*) FROM jobs WHERE status = 'blocked'").fetchone()
    assert (stats["failed"], stats["blocked"], stats["awaiting_review"], stats["process_gone"]) == (
        failed,
        blocked,
        1,
        0,
    )
    assert stats["stuck"] == failed
