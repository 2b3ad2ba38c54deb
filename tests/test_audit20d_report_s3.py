"""``afc report --html`` over S3 storage that cannot be reached, found by outside audit 20d."""

from __future__ import annotations

import socket
import threading

import pytest
from conftest import jobs, manifest

pytest.importorskip("PIL", reason="the web extra: pip install 'afc-cli[web]'")


def _stored(afc, s3, n: int) -> None:  # noqa: F811
    afc.write_manifest(manifest(jobs(n, size="32x32")))
    result = afc("submit", "manifest.yaml", "--storage", s3.url)
    assert result.returncode == 0, result.stderr


def test_a_misconfigured_endpoint_marks_the_pictures_not_the_whole_report(afc, s3):  # noqa: F811
    """The report is the ledger's (spend, failures, attempts) with the stored outputs'
    pictures: an S3 endpoint the environment names wrongly at report time (``minio:9000``,
    its scheme left out in a shell's profile) failed the whole report, exit 2 and no file,
    where an object it cannot read has a card saying why. Each card says why now, and the
    report is written."""
    _stored(afc, s3, 2)
    afc.env["AWS_ENDPOINT_URL_S3"] = "minio:9000"
    result = afc("report", "--html", "report.html")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    text = (afc.cwd / "report.html").read_text()
    assert "AWS_ENDPOINT_URL_S3 is not an S3 endpoint URL" in text
    assert "2 stored outputs have no picture in the report" in result.stderr


def test_an_endpoint_that_fails_every_connection_is_not_asked_for_every_picture(afc, s3):  # noqa: F811
    """An S3 endpoint that cannot be reached (a MinIO down, a VPN not up) failed each object's
    read on its own: every stored output was one more connection tried (each up to botocore's
    10 s connect timeout, 120 s read timeout when the host takes the connection and says
    nothing), so a report of a thousand pictures sat for many minutes with no line said.
    Once reads from a store fail for want of a connection, its other pictures are not asked
    for: their cards say the same."""
    n = 40
    _stored(afc, s3, n)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    connections = []

    def refuse() -> None:  # takes each connection and closes it unanswered
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            connections.append(1)
            conn.close()

    threading.Thread(target=refuse, daemon=True).start()
    try:
        afc.env["AWS_ENDPOINT_URL_S3"] = f"http://127.0.0.1:{listener.getsockname()[1]}"
        result = afc("report", "--html", "report.html")
    finally:
        listener.close()
    assert result.returncode == 0, result.stderr
    text = (afc.cwd / "report.html").read_text()
    assert "connection problem" in text
    assert f"{n} stored outputs have no picture in the report" in result.stderr
    assert len(connections) < n // 2, len(connections)
