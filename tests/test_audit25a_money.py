"""Outside audit 25a (interruptions): a paid render whose output was out of reach (a CDN's
outage), its cost known and counted by the run that stopped while it fetched the output again,
is not counted again by the run that finishes it. Real ``afc`` children, real signals, the
fake fal at the wire."""

from __future__ import annotations

import json
import re
import signal

import pytest
from conftest import manifest, wait_for

RATES = [{"provider": "fal", "model": "fal-ai/flux/dev", "per_image": "0.025"}]


def _left_fetching(afc, sig: int, *command: str) -> str:
    """One fal job whose render is paid and priced while its output is out of reach, the
    run (``command``) stopped by ``sig`` during the fetches: its stderr."""
    data = manifest([{"key": "j0", "prompt": "cdn-held a lighthouse"}], rates=RATES)
    data["defaults"]["chain"] = [{"provider": "fal", "model": "fal-ai/flux/dev", "attempts": 1}]
    afc.write_manifest(data)
    if command[0] == "worker":
        assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    proc = afc.popen(*command)
    wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE cost_micros IS NOT NULL", 1, timeout=60)
    proc.send_signal(sig)
    proc.wait(timeout=60)
    return proc.stderr.read()


def _spent(text: str) -> list[str]:
    return re.findall(r"spent (\d+\.\d+) USD \(priced\)", text)


@pytest.mark.parametrize("command", [("submit", "manifest.yaml"), ("worker", "--until-idle")])
def test_a_render_a_stopped_run_counted_is_not_counted_again_by_the_run_that_fetches_it(
    afc, fake, command
):
    """Found by outside audit 25a: the stopped run's summary said 'spent 0.025000 USD
    (priced)' for the render (its cost is written on the attempt as the later fetches begin),
    and the next run, which only polled the request and fetched its output, said 'spent
    0.025000 USD (priced)' too, and counted it against its own budget: summed, the two lines
    (a cron log's, or workers', which README says never count one attempt twice) made two
    renders of the one paid for."""
    first = _left_fetching(afc, signal.SIGTERM, *command)
    assert _spent(first)[-1] == "0.025000", first
    fake.cdn_back.set()
    again = afc(*(command if command[0] == "worker" else ("resume",)), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["spent"] == "0.000000", again.stderr
    assert fake.counts["fal_submit"] == 1
    assert afc.rows("SELECT status, cost_micros FROM attempts") == [("succeeded", 25_000)]
    assert afc.json("costs", "report")["total"]["priced"] == "0.025000"


def test_a_render_a_killed_run_never_counted_is_counted_by_the_run_that_fetches_it(afc, fake):
    """A run killed (SIGKILL) meanwhile said nothing: the run that fetches the output counts
    its cost, as before."""
    _left_fetching(afc, signal.SIGKILL, "submit", "manifest.yaml")
    fake.cdn_back.set()
    resumed = afc.json("resume")
    assert resumed["spent"] == "0.025000", resumed
    assert fake.counts["fal_submit"] == 1


def test_workers_of_a_shared_budget_count_such_a_render_in_one_line(afc, fake):
    """Under a shared '--budget' the attempt stays the budget's, and the worker that polls it
    to its end becomes its owner: its own 'spent' (the attempts it started, README: so that
    summing workers' lines never counts one attempt twice) counted the render the stopped
    worker's line had counted."""
    first = _left_fetching(afc, signal.SIGTERM, "worker", "--until-idle", "--max-spend", "1")
    assert _spent(first)[-1] == "0.025000", first
    fake.cdn_back.set()
    again = afc.json("worker", "--until-idle", "--max-spend", "1")
    assert again["spent"] == "0.000000", again
    assert again["budget"]["priced"] == "0.025000", again  # the budget counts it, once
    assert fake.counts["fal_submit"] == 1
