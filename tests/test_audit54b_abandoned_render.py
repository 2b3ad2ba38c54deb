"""Outside audit 54b (cancellation between paying and recording): what a run that abandons
its calls (a second signal, the grace running out) does with a paid render whose call has
ended and whose bytes are not in the spool yet."""

from __future__ import annotations

import signal

from conftest import frozen_at, manifest

RATES = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]


def test_an_abandoning_run_keeps_the_paid_renders_it_holds_and_the_next_run_stores_them(afc, fake):
    """The call is over and paid, its image in memory on its way to the spool (here the run
    frozen at that moment, as a loaded machine may hold it; AFC_STALL_POINT), when the person
    presses Ctrl-C twice. The abandon cancelled the job there: its image was dropped, its
    attempt left 'unknown' at the cost the answer said, and 'afc resume' paid OpenAI for the
    same image again. It is now written to the spool as the run stops (as when the ledger
    breaks), and the next run stores it without a new call."""
    data = manifest([{"key": "shot", "prompt": "a shot"}], rates=RATES)
    data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1"}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml", env={"AFC_STALL_POINT": "rendered"})
    try:
        frozen_at(proc)
        # two signals (two kinds: a stopped process would merge two of one) while it is
        # frozen: on waking it acts on both, a drain and then the abandon
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGCONT)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    assert "abandoning" in err, err
    assert fake.counts["openai_billed"] == 1
    # the paid attempt is kept at the cost its answer said, its outcome left to the next run
    assert afc.rows("SELECT status, cost_micros FROM attempts") == [("unknown", 40_000)]
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert fake.counts["openai_billed"] == 1, "the image in hand was paid for again"
    assert afc.rows("SELECT status, cost_micros FROM attempts") == [("succeeded", 40_000)]
    assert (afc.outputs() / "b1" / "shot.png").exists()
