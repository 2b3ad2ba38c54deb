"""Outside audit 52c: a paid render a dead run left at its output URL (``attempts.answer_url``)
is fetched by the next run however old it is (cb44801), and so by every run after a killed
one, each a free GET of a render paid for already: no call start at the provider."""

from __future__ import annotations

import asyncio
import signal
import time

from conftest import manifest
from test_audit28c_answer_url import PRICED
from test_providers import MODELS

from afc_cli import storage as storage_mod
from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.pipeline import ProviderLimit, RunContext, Slots, run_job
from afc_cli.spool import Spool


def test_a_render_left_at_its_url_takes_no_per_minute_start_of_its_provider(afc, fake, monkeypatch):
    """A provider's ``per_minute`` counts call starts (README "limits"; the ledger counts
    the attempt rows started in the last minute, and a URL fetched again starts none). The
    run's own count took one for each render a dead run left at its URL, as for a paid
    call: under ``per_minute: 1`` the second of two such renders waited a minute for a free
    GET, and a resume after a killed run with 300 of them under ``per_minute: 5`` spent an
    hour of the provider's starts on fetches, the batch's new renders waiting behind them."""
    data = manifest(
        [{"key": f"j{i}", "prompt": f"dalle-url cdn-held {i}"} for i in range(2)], rates=PRICED
    )
    data["defaults"]["chain"] = [{"provider": "openai", "model": MODELS["openai"]}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml", "--concurrency", "2")
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                left = afc.rows("SELECT job_id FROM attempts WHERE answer_url IS NOT NULL")
            except Exception:  # noqa: BLE001 - the ledger is being made
                left = []
            if len(left) == 2:
                break
            time.sleep(0.01)
        assert len(left) == 2, "the paid answers' URLs were not committed"
    finally:
        proc.send_signal(signal.SIGKILL)  # killed while both outputs were out of reach
        proc.wait(timeout=30)
    fake.cdn_back.set()
    for name, value in fake.env().items():
        monkeypatch.setenv(name, value)

    now, waits = [1000.0], []

    async def sleep(seconds: float) -> None:  # the run's waits, counted, not slept
        waits.append(seconds)
        now[0] += seconds
        await asyncio.sleep(0)

    ledger = Ledger(afc.cwd / "afc.db")
    batch = ledger.batch("b1")

    async def main() -> list[str]:
        ctx = RunContext(
            ledger=ledger,
            spool=Spool.beside(ledger.path),
            storages={"b1": storage_mod.open(batch["storage"])},
            rates={"b1": RateCards.from_text(batch["rates_json"])},
            slots=Slots(2),
            limits={"openai": ProviderLimit(per_minute=1, clock=lambda: now[0])},
            sleep=sleep,
        )
        with ledger.grouped(asyncio.get_running_loop()):
            return await asyncio.gather(*(run_job(ctx, job_id) for (job_id,) in left))

    try:
        statuses = asyncio.run(main())
    finally:
        ledger.close()
    assert statuses == ["succeeded", "succeeded"]
    assert fake.counts["openai_billed"] == 2, "a render left at its URL was paid for again"
    assert [w for w in waits if w >= 1] == [], "a fetch of a paid render waited for a start"
