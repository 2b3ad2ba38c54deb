"""Outside audit 54e: a run that an error stopped (a drain: afc's own error, a ``StopsRun``)
and that then abandons its calls (a second signal, the grace run out) while a paid render
is back from its call and not yet in the spool."""

from __future__ import annotations

import signal

from conftest import frozen_at, manifest
from test_postgres_e2e import pg  # noqa: F401 (the fixture)

RATES = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]
CHAIN = [{"provider": "openai", "model": "gpt-image-1", "attempts": 1}]


def test_a_render_held_when_an_error_drain_is_abandoned_is_kept(afc, fake):
    _error_then_abandon(afc, fake)


def test_a_render_held_when_an_error_drain_is_abandoned_is_kept_on_postgresql(pg, fake):  # noqa: F811
    """As on SQLite, with the run's signals acted on at once (no commit sync to wait for)."""
    pg.env.update(fake.env())
    _error_then_abandon(pg, fake)


def _error_then_abandon(afc, fake) -> None:
    """'fast' meets an error of afc's own at its store step (AFC_FAIL_POINT), which drains the
    run while 'slow''s paid call is in flight. That call ends and the run is frozen with its
    image in memory (AFC_STALL_POINT 'rendered'), when the person presses Ctrl-C: the drain
    is abandoned. The image must go to the spool, as an abandon's does without the error,
    and the next run store it without paying OpenAI again."""
    data = manifest(
        [{"key": "fast", "prompt": "fast"}, {"key": "slow", "prompt": "slow-2s slow"}],
        rates=RATES,
    )
    data["defaults"]["chain"] = CHAIN
    afc.write_manifest(data)
    proc = afc.popen(
        "submit",
        "manifest.yaml",
        env={"AFC_FAIL_POINT": "spooled", "AFC_STALL_POINT": "rendered"},
    )
    try:
        frozen_at(proc)  # 'fast' rendered: let it go on to its store step and the error
        proc.send_signal(signal.SIGCONT)
        frozen_at(proc)  # 'slow' rendered, the run draining for the error
        assert fake.counts["openai_billed"] == 2
        proc.send_signal(signal.SIGINT)  # after the error's drain: the abandon
        proc.send_signal(signal.SIGCONT)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    assert code == 1, err
    assert "fail point spooled" in err, err
    assert "Traceback" not in err, err
    assert "abandoning" in err, err
    assert "kept in the spool" in err, err
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert afc.rows("SELECT key, status FROM jobs ORDER BY key") == [
        ("fast", "succeeded"),
        ("slow", "succeeded"),
    ]
    assert fake.counts["openai_billed"] == 2, "the image in hand was paid for again"
