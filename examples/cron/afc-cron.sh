#!/usr/bin/env bash
# Unattended afc: resume every unfinished job, then check the backlog.
#
#   AFC_DIR     the folder holding afc.db and the spool (default: this script's folder)
#   AFC_BIN     the afc command (default: afc on PATH; cron's own PATH is only /usr/bin:/bin,
#               without /usr/local/bin or a virtualenv where pip puts afc: set PATH in the
#               crontab, as examples/cron/crontab does, or give afc's full path here)
#   AFC_LEDGER  / AFC_STORAGE / AFC_CONFIG are read by afc itself
#   AFC_CONCURRENCY  afc resume's --concurrency (default 32)
#   AFC_MAX_SPEND    afc resume's --max-spend, a cap per run (default: none)
#   AFC_MAX_AGE_S    the oldest_age_seconds threshold of the queue check (default 21600)
#
# Exit codes (cron mails or your monitor alerts on non-zero):
#   0   everything finished, queue healthy
#   1   some job failed or waits (see `afc status`), or a --fail-if threshold was crossed,
#       or the ledger's database or the storage could not be reached (an outage: the next
#       run continues once it answers)
#   2   a usage problem: a bad AFC_* value, no ledger, a missing API key, no afc command
#       (nothing was done)
#   3   a job's stored output belongs to another request (IDEMPOTENCY_CONFLICT; see `afc show`)
#   4   the run stopped at its spending budget (work is resumable)
#   75  another run still holds the lock (EX_TEMPFAIL): nothing was done
#   130 interrupted: everything is resumable, the next run continues
#
# The lock is $AFC_DIR/.afc-cron.lock. If it cannot be taken for another reason (the file
# cannot be opened: a read-only or full folder, a lock file left by another user; flock(1)
# missing) the wrapper says so and exits 2, never 75: that is not an overlap, and it would
# skip every run to come.
set -uo pipefail

AFC_DIR=${AFC_DIR:-$(cd "$(dirname "$0")" && pwd)}
cd "$AFC_DIR" || exit 2

# Without it every run would end 'afc: command not found' (exit 127) and render nothing, night
# after night: say so as the usage problem it is.
AFC_BIN=${AFC_BIN:-afc}
if ! command -v "$AFC_BIN" >/dev/null 2>&1; then
    echo "$(date -Is) afc-cron: no afc command '$AFC_BIN' (PATH=$PATH): set PATH in the crontab or AFC_BIN to afc's full path; nothing was done"
    exit 2
fi

# One afc per ledger at a time is not needed for safety (leases keep two runs off the same
# job), but a cron run that overlaps the previous one only adds contention: skip it.
if ! exec 9>"$AFC_DIR/.afc-cron.lock"; then
    echo "$(date -Is) afc-cron: cannot open the lock file $AFC_DIR/.afc-cron.lock; nothing was done"
    exit 2
fi
flock -n -E 75 9
locked=$?
if [ "$locked" -eq 75 ]; then
    echo "$(date -Is) afc-cron: previous run still active; skipping"
    exit 75
elif [ "$locked" -ne 0 ]; then
    echo "$(date -Is) afc-cron: flock failed (exit $locked; is flock(1) installed?); nothing was done"
    exit 2
fi

echo "$(date -Is) afc-cron: resume"
"$AFC_BIN" resume --concurrency "${AFC_CONCURRENCY:-32}" ${AFC_MAX_SPEND:+--max-spend "$AFC_MAX_SPEND"}
run=$?

# Alert on what needs a person, not on the error rate: failed and dead-lettered jobs that
# wait for 'afc retry' (stuck: not a job failed only because a person rejected or cancelled
# a job it needs, which no retry clears), and a backlog that stopped draining.
"$AFC_BIN" queue stats --fail-if "stuck>0" \
    --fail-if "oldest_age_seconds>${AFC_MAX_AGE_S:-21600}"
queue=$?

echo "$(date -Is) afc-cron: resume exit $run, queue exit $queue"
if [ "$run" -ne 0 ]; then exit "$run"; fi
exit "$queue"
