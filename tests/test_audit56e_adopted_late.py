"""Outside audit 56e, storage: an output found stored and adopted (no spool file: a ledger
made anew over the same bucket) is read back by a HEAD right after the probe's HEAD showed
it. Behind a load balancer, a replica not consistent at once answers that HEAD 404 for a
moment: the read-back took it as the answer and failed the job VERIFY_FAILED 'not there',
saying a retry pays for a new render, though the object was there a moment later. Through
the real afc command, moto's S3 server behind the fault proxy of tests/s3fake.py."""

from __future__ import annotations

import shutil

from conftest import jobs, manifest
from s3fake import Fault


def test_an_adopted_outputs_read_back_answered_404_a_moment_is_tried_again(afc, s3):
    afc.write_manifest(manifest(jobs(1)))
    assert afc.json("submit", "manifest.yaml", "--storage", s3.url)["counts"] == {"succeeded": 1}
    (afc.cwd / "afc.db").unlink()  # a ledger made anew: the output is found stored
    shutil.rmtree(afc.cwd / "afc.db-spool", ignore_errors=True)
    # the probe's HEAD shows it; the read-back's HEAD, next, meets a replica behind
    s3.plan.add(Fault("HEAD", r"/films/b1/", "404", 1, after=1))
    out = afc.json("submit", "manifest.yaml", "--storage", s3.url)
    assert ("HEAD", "404") in {(m, k) for m, _, k in s3.plan.injected}
    assert out["counts"] == {"succeeded": 1}, afc.rows("SELECT error_message FROM jobs")
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(0,)], "nothing rendered again"
