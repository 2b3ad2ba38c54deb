"""A damaged spool file is moved aside for a person (``spool.set_aside``): a job's second one
(retried, its new render damaged again) goes beside the first, never over it."""

from __future__ import annotations

from afc_cli.spool import set_aside


def test_a_second_damaged_file_of_a_job_keeps_the_first(tmp_path):
    spooled = tmp_path / "job.spool"
    spooled.write_bytes(b"first render, damaged")
    first = set_aside(spooled)
    spooled.write_bytes(b"second render, damaged")
    second = set_aside(spooled)
    assert first == tmp_path / "job.damaged"
    assert second == tmp_path / "job.damaged-2"
    assert first.read_bytes() == b"first render, damaged"
    assert second.read_bytes() == b"second render, damaged"
    assert not spooled.exists()
