"""Outside audit 54e: what a third signal, which exits at once (``Interruption.exit_now``),
leaves on the terminal the live panel drew on."""

from __future__ import annotations

import os
import signal

from conftest import manifest, wait_for
from test_unread_output import _on_a_pty, _reading

RATES = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]


def test_a_third_signal_gives_the_terminal_its_cursor_back(afc, fake):
    """The panel hides the cursor as it starts and shows it again at its end; the third
    signal's exit (os._exit, in the signal handler since 72d3d7d) skips that end, and the
    terminal was left with no cursor until a 'reset'. Three signals of three kinds at once
    (a stopped or busy process would merge three of one) while a call is in flight."""
    data = manifest([{"key": "slow", "prompt": "slow-5s slow"}], rates=RATES)
    data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1"}]
    path = afc.write_manifest(data)
    proc, leader = _on_a_pty(afc, afc.command("submit", str(path)))
    read: list[bytes] = []
    thread = _reading(leader, read)
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            proc.send_signal(sig)
        assert proc.wait(timeout=30) == 130
        thread.join(timeout=10)
    finally:
        proc.kill()
        os.close(leader)
    out = b"".join(read)
    hidden = out.rindex(b"\x1b[?25l")
    assert b"\x1b[?25h" in out[hidden:], out[-400:]
