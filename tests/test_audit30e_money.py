"""Outside audit 30e (money: rate cards, pricing and budgets), through the real ``afc``
command: what afc says a run will cost, and what it records, against what the run then
does."""

from __future__ import annotations

import contextlib

from conftest import manifest


def _fallback_job() -> dict:
    """One job whose first model's one attempt fails (an injected server error, free) and
    whose chain then falls back to a model four times dearer."""
    data = manifest([{"key": "a", "prompt": "p", "params": {"fail": ["server"]}}])
    data["defaults"]["chain"] = [
        {"provider": "local", "model": "cheap", "attempts": 1, "fallback_on": ["exhausted"]},
        {"provider": "local", "model": "dear", "attempts": 2},
    ]
    data["rates"] = [
        {"provider": "local", "model": "cheap", "per_image": "0.01"},
        {"provider": "local", "model": "dear", "per_image": "0.04"},
    ]
    return data


def test_a_plan_prices_a_job_stopped_at_its_fallback_by_the_model_it_will_call(afc):
    """A budget stopped a job as its chain fell back to a dearer model (its next attempt
    estimated at 0.04 against a cap of 0.03). ``afc plan`` of the same manifest then priced
    the job by its chain's first model: "estimated spend 0.010000 USD ... the estimate
    fits" the cap of 0.03, and the submit it planned stopped again at once (exit 4), calling
    nothing. The plan now prices, and names, the model the run's next attempt uses, as the
    run decides it (``attempts.next_try`` over the job's attempts)."""
    afc.write_manifest(_fallback_job())
    first = afc("submit", "manifest.yaml", "--max-spend", "0.03")
    assert first.returncode == 4, first.stderr
    assert "the next attempt is estimated at 0.040000" in first.stderr

    plan = afc.json("plan", "manifest.yaml", "--max-spend", "0.03")
    assert plan["jobs"] == [{"key": "a", "action": "render", "model": "local/dear"}]
    assert plan["estimated_spend"] == "0.040000"
    assert plan["fits_budget"] is False
    again = afc("submit", "manifest.yaml", "--max-spend", "0.03")
    assert again.returncode == 4, again.stderr  # as the plan now says

    plan = afc.json("plan", "manifest.yaml", "--max-spend", "0.04")
    assert plan["estimated_spend"] == "0.040000" and plan["fits_budget"] is True
    done = afc("submit", "manifest.yaml", "--max-spend", "0.04")
    assert done.returncode == 0, done.stderr
    assert afc.rows("SELECT model, cost_micros FROM attempts ORDER BY number") == [
        ("cheap", 0),
        ("dear", 40_000),
    ]


def test_a_plan_prices_an_unlisted_job_stopped_at_its_fallback_by_that_model(afc):
    """The same for a job an earlier manifest admitted and this one leaves out, which the
    submit runs too."""
    data = _fallback_job()
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--max-spend", "0.03").returncode == 4
    data["jobs"] = [{"key": "b", "prompt": "q"}]
    afc.write_manifest(data)
    plan = afc.json("plan", "manifest.yaml")
    # b: one render of the first model (0.01); a: its fallback's (0.04)
    assert plan["estimated_spend"] == "0.050000", plan
    assert {"key": "a", "action": "render (not in this manifest)", "model": "local/dear"} in plan[
        "jobs"
    ]


def test_a_plan_on_postgresql_prices_a_job_stopped_at_its_fallback_by_that_model(afc, pg_url):
    """The same plan of a PostgreSQL ledger (its own read of the admitted jobs)."""
    afc.write_manifest(_fallback_job())
    first = afc("submit", "manifest.yaml", "--max-spend", "0.03", "--ledger", pg_url)
    assert first.returncode == 4, first.stderr
    plan = afc.json("plan", "manifest.yaml", "--max-spend", "0.03", "--ledger", pg_url)
    assert plan["jobs"] == [{"key": "a", "action": "render", "model": "local/dear"}]
    assert plan["estimated_spend"] == "0.040000" and plan["fits_budget"] is False


def test_a_paid_render_fetched_from_the_url_a_killed_run_left_keeps_its_usage(afc, fake):
    """An OpenAI-compatible answer names its output's URL; the run is killed during the
    download, and the next run fetches the URL for free (``HttpProvider.fetch_left``). The
    attempt ended succeeded at its cost with its usage ``{}``: what the answer reported (the
    images it made, a gateway's tokens, from which the cost is derived) was on the attempt
    nowhere, so the figure could not be checked against the provider's own usage. The usage
    is now committed with the URL and the cost (``Ledger.record_answer_url``) and kept when
    the next run fetches it."""
    import signal

    from test_audit28c_answer_url import start

    proc = start(afc, fake)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    [(status, cost, usage)] = afc.rows("SELECT status, cost_micros, usage_json FROM attempts")
    assert (status, cost) == ("started", 40_000)
    assert usage is not None and '"images":1' in usage, usage
    fake.cdn_back.set()
    assert afc.json("resume")["exit_code"] == 0
    assert fake.counts["openai_billed"] == 1
    assert afc.rows("SELECT status, cost_micros, usage_json FROM attempts") == [
        ("succeeded", 40_000, '{"images":1}')
    ]


def _wait_open(pid: int, path, timeout: float = 30) -> None:
    """Wait until process ``pid`` has the ledger file open (a worker reads its budget's spend
    as it opens the ledger), then a moment more."""
    import os
    import time

    deadline = time.time() + timeout
    while time.time() < deadline:
        fds = f"/proc/{pid}/fd"
        with contextlib.suppress(OSError):
            if any(os.readlink(f"{fds}/{fd}") == str(path) for fd in os.listdir(fds)):
                time.sleep(0.2)
                return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} never opened {path}")


def test_a_worker_whose_sibling_spent_the_shared_budget_is_not_told_it_was_spent_before(afc):
    """Two workers of one shared budget, as README "One budget for all workers" runs them:
    the second, started first, waits for a job a person has yet to approve; the first spends
    the whole cap meanwhile. Approved, the waiting job met the spent budget, and its worker
    ended "stopped by the budget spent before this worker started (a budget ... is never
    reset: a new --budget NAME starts another ...)": the budget was spent after it started,
    by its sibling, and the advice to name a new budget, taken, would have let the night
    spend the cap again. That note is for a budget spent before the worker started
    (tests/test_audit29c_nightly_budget.py); the worker now reads the budget's spend as it
    starts, and one its other workers spent meanwhile is said so."""
    from conftest import jobs

    gated = manifest(
        [
            {"key": "gate", "prompt": "style frame", "review": True},
            {"key": "x", "prompt": "shot", "needs": ["gate"]},
        ],
        batch="b2",
    )
    afc.write_manifest(gated, "gated.yaml")
    assert afc("submit", "gated.yaml").returncode == 0  # no budget: gate awaits review
    waiting = afc.popen(
        "worker", "--batch", "b2", "--poll", "0.1", "--max-spend", "0.30",
        env={"AFC_HOST_ID": "host-b"},
    )  # fmt: skip
    _wait_open(waiting.pid, afc.cwd / "afc.db")  # it has read the budget's spend
    afc.write_manifest(manifest(jobs(7)))
    spender = afc("submit", "manifest.yaml", "--no-run")
    assert spender.returncode == 0, spender.stderr
    first = afc("worker", "--until-idle", "--batch", "b1", "--max-spend", "0.30")
    assert first.returncode == 4, first.stderr
    assert "spent 0.300000 USD (priced)" in first.stderr, first.stderr
    assert afc("review", "approve", "gate", "--batch", "b2").returncode == 0
    assert waiting.wait(timeout=60) == 4
    text = waiting.stderr.read()
    assert "spent 0.000000 USD (priced)" in text, text
    assert "before this worker started" not in text and "never reset" not in text, text
    assert "stopped by the budget its other workers spent while this one ran" in text, text
