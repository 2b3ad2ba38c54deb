"""An approval of several jobs beside a re-submit that changes their webhook (PostgreSQL):
neither fails with a deadlock. The re-submit writes the jobs' new webhooks in its manifest's
order ('x', then 'y'); the approval locks the jobs it decides in id order ('y' first). A
rejection took the walk's lock first (``Ledger._hold_walk``, which a re-submit holds shared);
an approval did not: each held a row the other waited for, and PostgreSQL failed one after a
second ('deadlock detected ... check the database server')."""

from __future__ import annotations

import threading

from conftest import manifest, race_on_a_lock, resubmitting

from afc_cli.manifest import job_id_for


def test_an_approval_beside_a_re_submit_changing_webhooks_does_not_deadlock(
    afc, pg_url, monkeypatch, tmp_path
):
    from afc_cli import review
    from afc_cli.ledger import Ledger
    from afc_cli.ledger.postgres import PgDatabase

    assert job_id_for("b1", "y") < job_id_for("b1", "x")
    env = {"AFC_LEDGER": pg_url, "HOOK_SECRET": "whsec_" + "A" * 32}
    monkeypatch.setenv("HOOK_SECRET", env["HOOK_SECRET"])
    hook = {"url": "http://127.0.0.1:9/h", "secret_env": "HOOK_SECRET", "timeout_s": 2}
    shots = [{"key": key, "prompt": key, "review": True, "webhook": hook} for key in ("x", "y")]
    afc.write_manifest(manifest(shots))
    assert afc("submit", "manifest.yaml", "-q", env=env).returncode == 0
    assert afc.json("queue", "stats", env=env)["awaiting_review"] == 2
    for shot in shots:
        shot["webhook"] = {**hook, "url": "http://127.0.0.1:9/other"}
    path = afc.write_manifest(manifest(shots), "again.yaml")

    submitting = threading.current_thread()  # the re-submit, started below
    held, proceed = threading.Event(), threading.Event()
    executemany = PgDatabase.executemany

    def paused_after_the_first(self, sql, rows):
        rows = list(rows)
        if threading.current_thread() is not submitting or "webhook_json" not in sql:
            return executemany(self, sql, rows)
        executemany(self, sql, rows[:1])
        held.set()  # 'x' written, 'y' next
        proceed.wait(30)
        return executemany(self, sql, rows[1:])

    monkeypatch.setattr(PgDatabase, "executemany", paused_after_the_first)
    monkeypatch.chdir(afc.cwd)
    monkeypatch.setenv("AFC_SPOOL_DIR", str(tmp_path / "spool"))
    outcome: dict[str, str] = {}

    resubmit = resubmitting(path, pg_url, outcome)

    def approve() -> None:
        ledger = Ledger(pg_url, create=False)
        try:
            outcome["approve"] = ",".join(review.approve(ledger, ["x", "y"], by="tester"))
        except Exception as exc:
            outcome["approve"] = f"error: {exc}"
        finally:
            ledger.close()

    submitting = threading.Thread(target=resubmit)
    approving = threading.Thread(target=approve)
    race_on_a_lock(pg_url, submitting, approving, held, proceed)
    assert outcome == {"submit": "admitted", "approve": "x,y"}, outcome
