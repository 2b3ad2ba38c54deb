"""Outside audit 29a: a synchronous provider's paid render left at its output URL
(``attempts.answer_url``) by a run that stopped or died before its download ended, followed
through the commands that meet it next. Real ``afc`` children, real signals, the fake OpenAI-
compatible gateway of tests/fakeproviders.py, whose ``cdn-held`` outputs answer 503 until
``cdn_back`` is set."""

from __future__ import annotations

import re
import signal

from test_audit28c_answer_url import left_url, start

from afc_cli.providers.http import FETCH_TRIES


def _stopped(afc, fake) -> str:
    """One OpenAI job whose paid render's output is out of reach, the submit stopped by Ctrl-C
    during its later rounds of fetches (the URL committed with its cost): its stderr."""
    proc = start(afc, fake, "--grace", "20", tries=FETCH_TRIES + 1)
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 130, err
    left_url(afc)
    return err


def _spent(text: str) -> list[str]:
    return re.findall(r"spent (\d+\.\d+) USD \(priced\)", text)


def test_a_render_a_stopped_run_counted_is_not_counted_again_by_the_run_that_fetches_its_url(
    afc, fake
):
    """The stopped run's summary said 'spent 0.040000 USD (priced)' for the render (its cost
    came with the URL), and the next run, which only fetched the URL, said so too and counted
    it against its own --max-spend: two renders in the logs for the one paid for."""
    first = _stopped(afc, fake)
    assert _spent(first)[-1] == "0.040000", first
    fake.cdn_back.set()
    again = afc.json("resume", "--max-spend", "0.05")
    assert again["spent"] == "0.000000", again
    assert fake.counts["openai_billed"] == 1
    assert afc.rows("SELECT status, cost_micros FROM attempts") == [("succeeded", 40_000)]
    assert afc.json("costs", "report")["total"]["priced"] == "0.040000"
