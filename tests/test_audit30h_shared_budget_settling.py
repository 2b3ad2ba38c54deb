"""Outside audit 30h (a review of 'a job the budget refused while the run's own calls were in
flight waits for them'): that wait looked at this process's own calls only. Two workers of
one --budget, as README "One budget for all workers" runs them: the second worker's first job
met the cap that the first worker's first wave of calls reserved, and the second worker
stopped at once, exit 4 (a service that RestartPreventExitStatus=4 keeps stopped for the
night), saying "stopped by the budget spent before this worker started (... a new --budget
NAME starts another ...)", while those calls came back free: the budget, 0 of 0.02 USD spent,
was never spent at all. A job the shared budget refuses where the other workers' calls in
flight would make room, were they free, looks again after a pause (their ends are in another
process: ``Ledger.reserved_elsewhere``), and its worker stops once the budget's known spend
leaves no room."""

from __future__ import annotations

import json
import subprocess

from conftest import manifest, wait_for_ledger


def _refused(n: int) -> dict:
    """``n`` jobs whose one call fails as a refusal (free, no retry), each reserving 0.01."""
    jobs = [
        {"key": f"r{i:03}", "prompt": "p", "params": {"fail": ["refusal"], "latency_s": 0.4}}
        for i in range(n)
    ]
    data = manifest(jobs)
    data["defaults"]["chain"][0]["attempts"] = 1
    data["rates"] = [{"provider": "local", "model": "m1", "per_image": "0.01"}]
    return data


def test_a_worker_waits_for_its_siblings_calls_that_hold_the_shared_budget(afc, ledger_url):
    url = ledger_url if ledger_url.startswith("postgresql") else ""
    env = {**afc.env, **({"AFC_LEDGER": url} if url else {})}
    afc.write_manifest(_refused(36))  # the first worker claims 32 (its claim), the second 4
    assert afc("submit", "manifest.yaml", "--no-run", env=env).returncode == 0
    worker = (
        *("worker", "--until-idle", "--poll", "0.1", "--json"),
        *("--budget", "night", "--max-spend", "0.02", "--concurrency", "2"),
    )
    first = subprocess.Popen(
        afc.command(*worker),
        cwd=afc.cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # its first wave holds the whole cap (two calls of 0.01 each)
        wait_for_ledger(afc, url, "SELECT COUNT(*) FROM attempts", proc=first)
        second = afc(*worker, env=env)
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    mine = json.loads(second.stdout)
    assert "stopped by the budget" not in second.stderr, second.stderr
    assert not mine["stopped_by_budget"] and mine["exit_code"] == 1, second.stderr
    assert mine["claimed"] and mine["finished"] == mine["claimed"], mine
    assert json.loads(out)["exit_code"] == 1, err  # its jobs failed; no budget stop
    status = afc.json("status", "--all", expect=None, env=env)
    assert {j["status"] for j in status["jobs"]} == {"failed"}, status["jobs"]
