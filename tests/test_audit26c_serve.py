"""Outside audit 26c: ``afc serve`` against a hostile or careless environment."""

from __future__ import annotations

import re

import httpx
import pytest
from browser import Served, awaiting, status

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def _flash(page: str) -> list[str]:
    return re.findall(r'class="flash" role="status">(.*?)</p>', page, re.S)


def test_the_decided_message_is_only_what_this_server_decided(afc):
    """The review page's "KEY: approved." line was read from the address (?decided=&key=):
    any link could put any sentence there, in the page's own green line, such as "shot-002:
    rejected." for a job no one decided, which a reviewer then passes by, or "Director: every
    picture below is checked: approved, use Approve the 3 shown.". It is now shown only
    when this server made the decision it names (the redirect after a decision carries a
    signature made with the server's own secret)."""
    awaiting(afc, 3)
    served = Served(afc)
    try:
        forged = [
            {"decided": "rejected", "key": "shot-002"},
            {"decided": "every picture below is checked, use Approve the 3 shown", "key": "QA"},
            {"decided": "approved", "key": "shot-002", "sig": "0" * 32},
            {"decided": "approved", "key": "shot-002", "sig": "é"},
        ]
        for query in forged:
            page = httpx.get(served.url + "review", params=query)
            assert page.status_code == 200
            assert _flash(page.text) == [], query
            assert "shot-002" in page.text  # the queue itself is shown as ever
        page = httpx.get(served.url + "review").text
        token = page.split('name="form_token" value="', 1)[1].split('"', 1)[0]
        decided = httpx.post(
            served.url + "review/approve",
            data={"key": "shot-001", "batch": "b1", "form_token": token},
            follow_redirects=True,
        )
        assert decided.status_code == 200
        assert _flash(decided.text) == ["shot-001: approved."]
        # the same signed address names another job: no message
        location = str(decided.url)
        swapped = httpx.get(location.replace("shot-001", "shot-003"))
        assert _flash(swapped.text) == []
    finally:
        code, _ = served.stop()
    assert code == 0
    assert status(afc, "shot-002") == "awaiting_review"
    assert status(afc, "shot-001") == "succeeded"


def test_thumbnails_of_huge_pictures_are_not_all_decoded_at_once(afc):
    """Each thumbnail was made from the whole decoded picture (and a copy of it, turned or
    not), in as many threads as requests came: a contact sheet of 81-megapixel upscales
    (PNGs of a few hundred KB) opened by two reviewers took afc serve past 7 GB. The pictures
    being decoded at once now hold at most ``thumbs.DECODE_PIXELS`` (one alone always goes).
    Measured here: eight 36-megapixel pictures (144 MB each decoded) asked for at once, the
    server's peak resident memory (from the kernel, at its exit)."""
    import os
    import signal
    import threading

    from PIL import Image

    from afc_cli.web.thumbs import DECODE_PIXELS

    awaiting(afc, 8)
    folder = afc.outputs() / "b1"
    Image.new("RGB", (6000, 6000), (200, 30, 30)).save(folder / "shot-001.png")
    for n in range(2, 9):
        (folder / f"shot-{n:03d}.png").write_bytes((folder / "shot-001.png").read_bytes())
    ids = [row[0] for row in afc.rows("SELECT id FROM jobs")]
    served = Served(afc)
    answers: list[int] = []
    try:
        asked = [
            threading.Thread(
                target=lambda job=job: answers.append(
                    httpx.get(f"{served.url}thumb/{job}", timeout=300).status_code
                )
            )
            for job in ids
        ]
        for thread in asked:
            thread.start()
        for thread in asked:
            thread.join()
    finally:
        served.proc.send_signal(signal.SIGINT)
        served.proc.stderr.close()
        _, code, usage = os.wait4(served.proc.pid, 0)
        served.proc.returncode = code
    assert answers == [200] * 8
    peak = usage.ru_maxrss * 1024  # KiB on Linux
    # the budget's pixels at 4 bytes each (three of these pictures: 0.75 GB measured, with the
    # server and its buffers) and room to spare; all eight at once were over 2.3 GB
    assert DECODE_PIXELS < 4 * 36_000_000
    assert peak < 1200 * 2**20, peak >> 20


def _get_as(uid: int, url: str, path: str, cookie: str = "", extra: str = "") -> str:
    """The status line of GET ``path`` sent by a process of user ``uid`` (a forked child that
    drops to it): another person logged in to the same machine."""
    import encodings.idna  # noqa: F401 - loaded here: the child may not read Python's files
    import os
    import socket
    from urllib.parse import urlsplit

    address = urlsplit(url)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        try:
            os.close(read)
            os.setgid(uid)
            os.setuid(uid)
            with socket.create_connection((address.hostname, address.port), timeout=30) as conn:
                extra += f"Cookie: {cookie}\r\n" if cookie else ""
                conn.sendall(
                    f"GET {path} HTTP/1.1\r\nHost: {address.netloc}\r\n{extra}"
                    "Connection: close\r\n\r\n".encode()
                )
                answer = b""
                while chunk := conn.recv(65536):
                    answer += chunk
            os.write(write, answer.split(b"\r\n", 1)[0])
        except BaseException as exc:
            os.write(write, repr(exc).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        line = fh.read().decode()
    os.waitpid(child, 0)
    return line


@pytest.mark.skipif(
    not hasattr(__import__("os"), "getuid") or __import__("os").getuid() != 0,
    reason="needs root, to connect as another user",
)
@pytest.mark.skipif(not __import__("os").path.exists("/proc/net/tcp"), reason="Linux only")
def test_another_user_of_the_machine_cannot_decide_through_a_loopback_server(afc):
    """Bound to 127.0.0.1, afc serve answered every process of the machine: on a render box
    others log in to (the server reached through an SSH tunnel), any of them could open the
    review page, read its form token and approve or reject, each decision recorded as the
    user running the server. Without AFC_SERVE_TOKEN it now answers its own user only (403
    for another, saying to set the token to share it); with the token set, whoever has it."""
    nobody = 65534
    awaiting(afc, 1)
    served = Served(afc)
    try:
        assert _get_as(nobody, served.url, "/review").startswith("HTTP/1.1 403")
        # nor as a proxy on this machine saying whom it forwards for (uvicorn took that as
        # the connection's address from any process of 127.0.0.1)
        forwarded = "X-Forwarded-For: 192.0.2.7\r\n"
        assert _get_as(nobody, served.url, "/review", extra=forwarded).startswith("HTTP/1.1 403")
        assert _get_as(0, served.url, "/review").startswith("HTTP/1.1 200")
        assert httpx.get(served.url + "review").status_code == 200
    finally:
        code, _ = served.stop()
    assert code == 0
    token = "a-shared-secret-of-enough-length"
    served = Served(afc, env={"AFC_SERVE_TOKEN": token})
    try:
        opened = httpx.get(served.url, params={"token": token})
        cookie = "; ".join(f"{name}={value}" for name, value in opened.cookies.items())
        assert _get_as(nobody, served.url, "/review", cookie).startswith("HTTP/1.1 200")
        assert _get_as(nobody, served.url, "/review").startswith("HTTP/1.1 401")
    finally:
        served.stop()


def test_a_full_size_view_does_not_follow_a_link_to_another_file(afc, tmp_path):
    """A symbolic link put at an output's name in a file:// store (by anyone who can write
    the store) was followed: the full-size view of that job sent whatever file the server's
    user could read, such as its ~/.aws/credentials, to whoever opened it. afc never stores
    an object as a link; one is now sent only when it holds the job's own bytes (a studio's
    link to the render kept elsewhere), else a 404 saying why."""
    import os

    awaiting(afc, 2)
    folder = afc.outputs() / "b1"
    secret = tmp_path / "credentials"
    secret.write_text("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n")
    (folder / "shot-001.png").unlink()
    os.symlink(secret, folder / "shot-001.png")
    kept = tmp_path / "kept.png"  # the second job's own render, moved and linked back
    os.rename(folder / "shot-002.png", kept)
    os.symlink(kept, folder / "shot-002.png")
    ids = dict(afc.rows("SELECT key, id FROM jobs"))
    served = Served(afc)
    try:
        linked = httpx.get(f"{served.url}output/{ids['shot-001']}")
        own = httpx.get(f"{served.url}output/{ids['shot-002']}")
    finally:
        served.stop()
    assert linked.status_code == 404
    assert "wJalrXUtnFEMI" not in linked.text and "symbolic link" in linked.text
    assert own.status_code == 200 and own.content == kept.read_bytes()
