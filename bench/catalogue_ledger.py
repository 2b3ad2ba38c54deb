"""A catalogue studio's ledger after a year, and what afc's commands take on it, on either engine.

Writes the rows in bulk through the ledger's own schema (``Ledger(url)`` makes it): ``--batches``
batches of ``--jobs`` jobs (100 x 10,000 by default: 1,000,000 jobs, about 3,000,000 attempts,
2,200,000 events, 3,800,000 steps, 500,000 webhook deliveries of the even batches, 317,000
avoided renders of every third batch's succeeded jobs), mostly succeeded, some failed,
cancelled, dead, awaiting review or rejected, attempts failed and of unknown outcome before
the last; the latest batch half done, 20 jobs running with a call in flight. SQLite through
``executemany``, PostgreSQL through ``COPY`` (about 8 and 12 minutes on a 2-core VM). Then
each command's wall time, its output sent to /dev/null; ``--run`` also admits a 10,000-job
batch on the instant ``local`` provider (a per_minute limit, a budget, a webhook to a closed
port) and runs it with ``afc resume --batch``.

    python bench/catalogue_ledger.py --ledger /tmp/cat.db
    python bench/catalogue_ledger.py --ledger postgresql://u@host/db --run   # an empty database
    python bench/catalogue_ledger.py --ledger /tmp/cat.db --keep             # reuse it, built
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from afc_cli.ledger import Ledger  # noqa: E402
from afc_cli.migrations import RUN_SPEND_SUMMED  # noqa: E402

NS = uuid.UUID("6ba7b811-9dad-11d1-80b4-00c04fd430c8")
NOW = time.time()
DAY = 86400.0
OTHER = "render-{h}:{pid}:1234:@fede9881f4c32dee.a7378cecea58e65e.4026531836"
HOOK = json.dumps(
    {"secret_env": "HOOK_SECRET", "timeout_s": 10.0, "url": "https://hooks.example/afc"},
    sort_keys=True,
    separators=(",", ":"),
)
PROVIDERS = [("openai", "gpt-image-1"), ("replicate", "flux-schnell"), ("fal", "flux/dev")]


def rows_for(b: int, batches: int, per: int):
    name = f"cat-{b:04d}"
    t0 = NOW - (batches - b) * 3.5 * DAY
    last = b == batches - 1
    webhook = b % 2 == 0
    run_id = str(uuid.uuid5(NS, f"run {b}"))
    owner = OTHER.format(h=b % 4, pid=1000 + b)
    provider, model = PROVIDERS[b % 3]
    batch_row = (
        name,
        "s3://catalogue-renders/" + name,
        json.dumps([{"model": model, "prices": {"per_image": "0.04"}, "provider": provider}]),
        "/srv/manifests/" + name + ".yaml",
        t0,
        t0 + 3600,
        "{}",
        "",
    )
    jobs, attempts, events, steps, deliveries, avoided = [], [], [], [], [], []
    for i in range(per):
        key = f"sku-{b:04d}-{i:06d}"
        jid = str(uuid.uuid5(NS, name + "\0" + key))
        created = t0 + i * 0.01
        r = (i * 7919 + b * 31) % 1000
        n = 1 + (i * 7 + b) % 5  # 1..5 attempts, 3 on average
        lease_owner = lease_expires = None
        if last and i >= per // 2:
            # the latest batch half done: queued, a few running with calls in flight
            status, step, n = (
                ("running", "render", 1) if i < per // 2 + 20 else ("queued", "probe", 0)
            )
            if status == "running":
                lease_owner, lease_expires = owner, NOW + 300
        elif r < 930:
            status, step = "succeeded", "done"
        elif r < 970:
            status, step = "failed", "render"
        elif r < 985:
            status, step = "cancelled", "render"
        elif r < 990:
            status, step = "dead", "store"
        elif r < 995:
            status, step = "awaiting_review", "review"
        else:
            status, step = "rejected", "done"
        finished = (
            created + 30
            if status in ("succeeded", "failed", "cancelled", "dead", "rejected")
            else None
        )
        request = json.dumps(
            {
                "chain": [
                    {
                        "attempts": 5,
                        "backoff": {"base": 2.0, "cap": 60.0},
                        "fallback_on": ["exhausted"],
                        "model": model,
                        "provider": provider,
                        "window_s": None,
                    }
                ],
                "output": "{batch}/{key}.{ext}",
                "params": {"size": "1024x1024"},
                "prompt": f"product shot of catalogue item {key}, white background, soft light",
            },
            sort_keys=True,
            separators=(",", ":"),
        )
        out_sha = (
            uuid.uuid5(NS, jid).hex * 2
            if status in ("succeeded", "awaiting_review", "rejected", "dead")
            else None
        )
        outcome = {
            "succeeded": "rendered",
            "awaiting_review": "rendered",
            "rejected": "rejected",
            "failed": "failed",
            "dead": "rendered",
        }.get(status)
        err = {
            "failed": "CHAIN_FAILED",
            "cancelled": "CANCELLED",
            "dead": "STORE_FAILED",
            "rejected": "REJECTED",
        }.get(status)
        jobs.append(
            (
                jid,
                name,
                key,
                i,
                uuid.uuid5(NS, "h" + jid).hex * 2,
                request,
                f"{name}/{key}.png",
                status,
                step,
                n,
                lease_owner,
                lease_expires,
                0,
                0,
                out_sha,
                480000 if out_sha else None,
                outcome,
                err,
                "server" if err == "CHAIN_FAILED" else None,
                provider if err == "CHAIN_FAILED" else None,
                500 if err == "CHAIN_FAILED" else None,
                "HTTP 500: upstream error" if err == "CHAIN_FAILED" else None,
                None,
                created,
                (finished or created) + 1,
                finished,
                HOOK if webhook else None,
                0,
                0,
                1 if status in ("awaiting_review", "rejected") else 0,
                finished if status == "awaiting_review" else None,
                None,
                None,
            )
        )
        events.append((jid, name, created, "admitted", json.dumps({"hash": jobs[-1][4]})))
        for k in range(1, n + 1):
            final = k == n
            if status == "running":
                a_status, cost, src, ended = "started", None, None, None
            elif not final:
                a_status = "unknown" if (i + k) % 11 == 0 else "failed"
                cost, src, ended = (
                    (None, None, created + k)
                    if a_status == "unknown"
                    else (0, "derived", created + k)
                )
            elif status in ("succeeded", "awaiting_review", "rejected", "dead"):
                a_status, cost, src, ended = "succeeded", 40000, "derived", created + k
            else:
                a_status, cost, src, ended = "failed", 0, "derived", created + k
            attempts.append(
                (
                    jid,
                    k,
                    0,
                    provider,
                    model,
                    a_status,
                    None
                    if a_status in ("succeeded", "started")
                    else ("interrupted" if a_status == "unknown" else "server"),
                    500 if a_status == "failed" else None,
                    "HTTP 500: upstream error" if a_status == "failed" else None,
                    f"req-{jid[:8]}-{k}",
                    owner,
                    2.0 if k > 1 else None,
                    created + k - 1,
                    ended,
                    1.0 if ended else None,
                    '{"images":1}' if a_status == "succeeded" else None,
                    cost,
                    src,
                    run_id,
                    40000,
                    None,
                    None,
                    None,
                )
            )
            if a_status == "unknown":
                events.append(
                    (jid, name, created + k, "attempt_unknown", json.dumps({"number": k}))
                )
        if finished:
            events.append((jid, name, finished, status, json.dumps({"outcome": outcome})))
            steps.append((jid, "probe", created + 0.5, '{"found":null}'))
            if status in ("succeeded", "rejected", "awaiting_review", "dead"):
                steps.append(
                    (
                        jid,
                        "render",
                        created + n,
                        json.dumps({"attempt": n, "model": model, "provider": provider}),
                    )
                )
                steps.append(
                    (jid, "spool", created + n, json.dumps({"sha256": out_sha, "size": 480000}))
                )
            if status == "succeeded":
                steps.append(
                    (jid, "finish", finished, json.dumps({"output_key": f"{name}/{key}.png"}))
                )
        done_at = finished or created + 30
        if webhook and status in (
            "succeeded",
            "failed",
            "cancelled",
            "dead",
            "rejected",
            "awaiting_review",
        ):
            event = "job.failed" if status == "dead" else "job." + status
            envelope = json.dumps(
                {
                    "type": event,
                    "timestamp": "2026-01-01T00:00:00Z",
                    "data": {
                        "job_id": jid,
                        "key": key,
                        "batch": name,
                        "status": status,
                        "output_key": f"{name}/{key}.png",
                        "cost": "0.040000",
                        "unpriced_attempts": 0,
                        "error": err,
                    },
                }
            )
            dstatus = "dead" if i % 997 == 0 else ("pending" if last else "delivered")
            deliveries.append(
                (
                    f"{jid}:{event}",
                    jid,
                    name,
                    event,
                    "https://hooks.example/afc",
                    "HOOK_SECRET",
                    10.0,
                    envelope,
                    dstatus,
                    1 if dstatus == "delivered" else (8 if dstatus == "dead" else 0),
                    done_at,
                    200 if dstatus == "delivered" else None,
                    None,
                    None,
                    None,
                    done_at,
                    done_at + 1 if dstatus == "delivered" else None,
                )
            )
        if r % 97 == 0 and status == "succeeded":
            avoided.append((jid, name, created, "replay", provider, model, 40000, "derived"))
    return batch_row, jobs, attempts, events, steps, deliveries, avoided


JOB_COLS = (
    "id, batch, key, seq, request_hash, request_json, output_key, status, step, attempts,"
    " lease_owner, lease_expires, takeovers, store_failures, output_sha256, output_size, outcome,"
    " error_code, error_class, error_provider, error_http_status, error_message, waiting_reason,"
    " created_at, updated_at, finished_at, webhook_json, attempt_base, retries, review, review_at,"
    " inputs_json, lease_mono"
)
ATT_COLS = (
    "job_id, number, chain_index, provider, model, status, error_class, http_status, error_message,"
    " provider_request_id, owner, wait_s, started_at, ended_at, duration_s, usage_json, cost_micros,"
    " cost_source, run_id, reserved_micros, retry_after_s, inputs_json, answer_url"
)
TABLES = [
    (
        "batches",
        "name, storage, rates_json, manifest_path, created_at, updated_at, limits_json, storage_endpoint",
    ),
    ("jobs", JOB_COLS),
    ("attempts", ATT_COLS),
    ("events", "job_id, batch, at, kind, detail_json"),
    ("steps", "job_id, step, completed_at, detail_json"),
    (
        "deliveries",
        "id, job_id, batch, event, url, secret_env, timeout_s, envelope, status, attempts, next_attempt_at, last_status, last_error, lease_owner, lease_expires, created_at, delivered_at",
    ),
    ("avoided", "job_id, batch, at, reason, provider, model, cost_micros, cost_source"),
]


AVOIDED = (
    "INSERT INTO avoided (job_id, batch, at, reason, provider, model, cost_micros, cost_source)"
    " SELECT id, batch, finished_at + 86400, 'replay', 'openai', 'gpt-image-1', 40000, 'derived'"
    " FROM jobs WHERE status = 'succeeded' AND CAST(substr(batch, 5) AS INTEGER) % 3 = 1"
)


def commands(batches: int) -> list[list[str]]:
    """The read commands, of the middle batch where they take one."""
    mid = f"cat-{batches // 2:04d}"
    return [
        ["status"],
        ["status", "--batch", mid],
        ["show", f"sku-{batches // 2:04d}-000123"],
        ["queue", "stats"],
        ["costs", "report"],
        ["costs", "report", "--batch", mid],
        ["costs", "report", "--by", "day"],
        ["review", "list"],
        ["outputs", "--batch", mid],
        ["report", "--html", "report.html", "--batch", mid],
        ["webhooks", "list", "--dead"],
    ]


SECRET = "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ="


def build(url: str, batches: int, per: int) -> None:
    Ledger(url).close()  # afc's schema, every migration applied
    started = time.time()
    if url.startswith(("postgresql://", "postgres://")):
        import psycopg

        with psycopg.connect(url) as conn:
            conn.execute("SET afc.copying = 'on'")  # run_spend summed once below (m021)
            for b in range(batches):
                sets = rows_for(b, batches, per)
                for (table, cols), rows in zip(TABLES, [[sets[0]], *sets[1:]], strict=True):
                    with conn.cursor().copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
                        for row in rows:
                            copy.write_row(row)
                conn.commit()
            conn.execute("DELETE FROM run_spend")
            conn.execute(RUN_SPEND_SUMMED)
            conn.execute(AVOIDED)
            conn.commit()
            conn.autocommit = True
            conn.execute("VACUUM ANALYZE")
    else:
        import sqlite3

        conn = sqlite3.connect(url)
        conn.execute("PRAGMA synchronous = OFF")
        for b in range(batches):
            sets = rows_for(b, batches, per)
            with conn:
                for (table, cols), rows in zip(TABLES, [[sets[0]], *sets[1:]], strict=True):
                    marks = ", ".join("?" * len(cols.split(",")))
                    conn.executemany(f"INSERT INTO {table} ({cols}) VALUES ({marks})", rows)
        with conn:
            conn.execute(AVOIDED)
        conn.execute("ANALYZE")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
    print(f"built {batches * per:,} jobs in {time.time() - started:.0f} s", flush=True)


def afc(work: Path, url: str, args: list[str]) -> tuple[float, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AFC_")}
    env.update(PYTHONPATH=str(ROOT), AFC_LEDGER=url, HOOK_SECRET=SECRET)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "afc_cli", *args],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return time.perf_counter() - start, proc.returncode


def new_batch(work: Path) -> None:
    jobs = [{"key": f"new-{i:05d}", "prompt": f"catalogue item {i}"} for i in range(10000)]
    data = {
        "version": 1,
        "batch": "new-batch",
        "storage": (work / "out").as_uri(),
        "defaults": {"chain": [{"provider": "local", "model": "instant", "attempts": 2}]},
        "webhook": {"url": "http://127.0.0.1:9/hook", "secret_env": "HOOK_SECRET", "timeout_s": 2},
        "limits": {"local": {"concurrency": 8, "per_minute": 1000000}},
        "rates": [{"provider": "local", "model": "instant", "per_image": "0.01"}],
        "jobs": jobs,
    }
    (work / "new.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledger", required=True, help="a SQLite path or a postgresql:// URL")
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=10000, help="jobs a batch")
    parser.add_argument("--keep", action="store_true", help="the ledger is built already")
    parser.add_argument("--run", action="store_true", help="admit and run a 10,000-job batch")
    args = parser.parse_args()
    if not args.keep:
        build(args.ledger, args.batches, args.jobs)
    work = Path(tempfile.mkdtemp(prefix="catalogue-"))
    todo = commands(args.batches)
    if args.run:
        new_batch(work)
        todo += [
            ["submit", "new.yaml", "--no-run", "-q"],
            ["resume", "--batch", "new-batch", "--max-spend", "500", "-q"],
        ]
    try:
        for command in todo:
            wall, code = afc(work, args.ledger, command)
            print(f"afc {' '.join(command):<44} {wall:8.2f} s  exit {code}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
