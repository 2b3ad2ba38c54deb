"""Outside audit 32b: the crash-loop guard (AFC_MAX_INTERRUPTS) bounds a job whose runs keep
ending while its Replicate or fal request renders, when the provider has let that request's
output go by the time the next run polls it.

Each run submits a request (paid), ends (SIGKILL, or SIGTERM: a drain leaves a job-style
request to the next run), and the next run polls that request by its id: it completed, and
was billed, but its output is gone (fal's result deleted, Replicate's data removed). That
attempt ends ``failed``/``interrupted`` at its cost (outside audit 31g) and a new request
follows. Counted only while ``unknown``, such attempts were never bounded: a job whose
renders outlast its runs (a cron'd ``timeout 5m afc resume`` and a long video) paid for a new
request at every run, for ever. Now they count toward AFC_MAX_INTERRUPTS, as the README says
("The bound is AFC_MAX_INTERRUPTS")."""

from __future__ import annotations

import signal
import time

import pytest
from test_audit26f_killpoints import HoldingFakes, _chain, _write


class LostOutputs(HoldingFakes):
    """A request renders on while the run that submitted it lives; once that run ended
    (``ended``: the ids the test marks), it has completed, billed, and its output is gone."""

    def __init__(self) -> None:
        super().__init__()
        self.ended: set[str] = set()

    def fal_request(self, h, method, rid, tail):
        if rid in self.fal and tail == "/status":
            if rid in self.ended:
                return h.reply(200, {"status": "COMPLETED", "logs": None})
            return h.reply(202, {"status": "IN_PROGRESS", "logs": None})
        if rid in self.ended and tail == "":
            return h.reply(404, {"detail": "Request not found"})  # its result deleted
        return super().fal_request(h, method, rid, tail)

    def replicate_get(self, h, pid):
        p = self.predictions.get(pid)
        if p is None:
            return super().replicate_get(h, pid)
        if pid in self.ended:  # it ran (billed for its seconds); its data removed
            p.update(status="succeeded", data_removed=True, metrics={"predict_time": 3.2})
        else:
            p["status"] = "processing"
        return h.reply(200, {k: v for k, v in p.items() if k not in ("polls", "prompt")})

    def requests(self) -> set[str]:
        return set(self.fal) | set(self.predictions)


@pytest.fixture
def lost(afc):
    server = LostOutputs().start()
    afc.env.update(server.env())
    yield server
    server.stop()


@pytest.mark.parametrize(
    "provider,sig",
    [
        ("fal", signal.SIGKILL),
        ("fal", signal.SIGTERM),
        ("replicate", signal.SIGKILL),
        ("replicate", signal.SIGTERM),
    ],
)
def test_runs_that_keep_ending_while_the_provider_renders_are_bounded(afc, lost, provider, sig):
    afc.env["AFC_MAX_INTERRUPTS"] = "2"
    _write(afc, _chain(provider, attempts=1))
    for run in range(4):
        before = set(lost.requests())
        proc = afc.popen(*(["submit", "manifest.yaml"] if run == 0 else ["resume"]))
        deadline = time.time() + 60
        while lost.requests() == before and proc.poll() is None:
            assert time.time() < deadline, "no request was submitted"
            time.sleep(0.05)
        if proc.poll() is None:  # a request made: the run ends while it renders
            time.sleep(0.3)
            proc.send_signal(sig)
        code = proc.wait(timeout=60)
        lost.ended |= lost.requests()
        if proc.returncode not in (-signal.SIGKILL, 130):
            break
    # two paid requests lost by the runs' ends, then the job is dead-lettered for a person:
    # no third request is paid for
    assert len(lost.requests()) == 2, lost.log
    assert code == 1, proc.stderr.read()
    assert afc.rows("SELECT status, error_code FROM jobs") == [("dead", "CRASH_LOOP")]
    attempts = afc.rows("SELECT status, error_class, cost_micros FROM attempts ORDER BY number")
    assert [a[:2] for a in attempts] == [("failed", "interrupted")] * 2, attempts
    assert all(a[2] for a in attempts), attempts  # each at its known cost
    shown = afc("show", "j")
    assert "AFC_MAX_INTERRUPTS=2" in shown.stdout + shown.stderr
