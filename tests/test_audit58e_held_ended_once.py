"""Outside audit 58e: a job held at its probe for its batch's storage that waits in the run
(a multipart refusal, until a store of the batch succeeds; a failing store, until one look
at it) was told ended as it began to wait: a cron log or a script reading afc's plain
lines ('afc: batch/key: ended ...', README) read 'ended waiting' for jobs that then went on
and ended succeeded, two ends of one job, and the live panel counted each twice (its bar
past the total, 'left waiting' lines for jobs that were stored). Now such a job is told
waiting as it waits, and ended once, when it ends. Through the real afc command: the fake
Replicate (tests/fakeproviders.py), moto's S3 server behind the fault proxy of
tests/s3fake.py."""

from __future__ import annotations

import re

from test_audit58a_refusal_lifted import submit_under_refusal


def test_a_job_held_in_the_run_is_told_ended_once(afc, fake, s3):
    """j0's 70 MiB output is refused (its multipart upload's request: 501); j1 is held at the
    provider, so later jobs come to their probe under the refusal and wait in the run; then
    j1 is let go, its store succeeds, and they are rendered and stored. Each job's plain
    'ended' line is written once, saying how it ended (was: 'ended waiting', then 'ended
    succeeded', for each job held)."""
    parked, stderr, _ = submit_under_refusal(afc, fake, s3)
    assert parked, stderr
    assert "Traceback" not in stderr
    ends: dict[str, list[str]] = {}
    for key, how in re.findall(r"^afc: b1/(j\d+): ended (\S+)", stderr, re.M):
        ends.setdefault(key, []).append(how)
    statuses = dict(afc.rows("SELECT key, status FROM jobs"))
    assert statuses["j0"] == "waiting" and set(parked) <= {
        key for key, status in statuses.items() if status == "succeeded"
    }, (parked, statuses)
    assert ends == {key: [status] for key, status in statuses.items()}, (parked, stderr)
    assert fake.counts["replicate_submit"] == 8, "each rendered once"
