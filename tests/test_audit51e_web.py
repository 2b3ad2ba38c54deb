"""Outside audit 51e: the web security of ``afc serve`` and ``afc report --html``."""

from __future__ import annotations

import os
from urllib.parse import urlencode

import httpx
import pytest
from browser import Served, awaiting, rendered_as

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")

# an EPS "picture", as a hostile or broken provider may answer one: PostScript is a program
EPS = (
    b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 64 64\n"
    b"newpath 0 0 moveto 64 64 lineto stroke\nshowpage\n%%EOF\n"
)


def fake_ghostscript(afc, tmp_path) -> os.PathLike:
    """A ``gs`` first on the PATH of afc's processes, which notes each time it is run."""
    folder = tmp_path / "bin"
    folder.mkdir()
    ran = tmp_path / "gs-ran"
    gs = folder / "gs"
    gs.write_text(f'#!/bin/sh\necho "$@" >> {ran}\nexit 1\n')
    gs.chmod(0o755)
    afc.env["PATH"] = f"{folder}{os.pathsep}{afc.env.get('PATH', '')}"
    return ran


def test_a_postscript_output_is_never_given_to_ghostscript(afc, tmp_path):
    """Pillow opens some forty formats by their first bytes, and an EPS one it renders by
    running Ghostscript: an output whose bytes were PostScript (a provider's answer, whatever
    it says it is) made afc serve's thumbnail, and afc report --html, run ``gs`` on them,
    an interpreter of a programming language, on the reviewer's or the server's machine.
    Only the kinds of picture a model renders are previewed now: the card says the output
    is not a picture it can preview, and no program is run."""
    awaiting(afc, 2)
    rendered_as(afc, "shot-001", EPS)
    ran = fake_ghostscript(afc, tmp_path)
    ids = dict(afc.rows("SELECT key, id FROM jobs"))
    served = Served(afc)
    try:
        thumb = httpx.get(f"{served.url}thumb/{ids['shot-001']}")
        other = httpx.get(f"{served.url}thumb/{ids['shot-002']}")
    finally:
        served.stop()
    assert thumb.status_code == 200
    assert thumb.headers["content-type"].startswith("image/svg+xml")
    assert "not a picture this afc can preview" in thumb.text
    assert other.headers["content-type"] == "image/webp"  # a PNG still is
    report = afc("report", "--html", "report.html")
    assert report.returncode == 0, report.stderr
    assert "not a picture this afc can preview" in (afc.cwd / "report.html").read_text()
    assert not ran.exists(), ran.read_text()


def test_a_post_too_big_for_a_form_is_refused_before_it_is_read(afc):
    """The form token is in a post's body, so afc serve read the body whole before it could
    refuse it: any web page the reviewer opened could post to 127.0.0.1:8765 (a form's post
    needs no permission) 1,000 fields of 1 MB each, held in memory (or files of any size,
    spooled to disk) before the 403: a few such posts took the server, and the paid runs
    beside it, past the machine's memory. A post over 1 MiB is now a 413, nothing read past
    it and nothing decided; a decision's own form is still taken."""
    from browser import ledger_state

    awaiting(afc, 2)
    served = Served(afc)
    before = ledger_state(afc.cwd / "afc.db")
    try:
        page = httpx.get(f"{served.url}review").text
        token = page.split('name="form_token" value="', 1)[1].split('"', 1)[0]
        form = {"key": "shot-001", "batch": "b1", "form_token": token}
        padding = {f"pad{i}": "x" * 900_000 for i in range(3)}  # each under a field's 1 MB
        sized = httpx.post(f"{served.url}review/approve", data={**form, **padding})
        encoded = urlencode({**form, **padding}).encode()

        def pieces():
            for start in range(0, len(encoded), 65536):
                yield encoded[start : start + 65536]

        chunked = httpx.post(
            f"{served.url}review/approve",
            content=pieces(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert ledger_state(afc.cwd / "afc.db") == before
        taken = httpx.post(f"{served.url}review/approve", data=form)
    finally:
        served.stop()
    for answer in (sized, chunked):
        assert answer.status_code == 413, (answer.status_code, answer.text[:200])
        assert "nothing was decided" in answer.text
    assert taken.status_code == 303
    assert dict(afc.rows("SELECT key, status FROM jobs")) == {
        "shot-001": "succeeded",
        "shot-002": "awaiting_review",
    }


def test_an_address_s_escape_sequences_never_reach_the_operator_s_terminal(afc):
    """A page that cannot read the ledger (moved away, a PostgreSQL server restarting) says
    so in one line on serve's stderr, naming the address asked for, which is anyone's to
    write: a page of any site can have the reviewer's browser ask for
    /thumb/%1b]0;...%07%1b[2J, and its escape sequences, decoded, were written to the
    operator's terminal as they were (its title set, its screen cleared). They are shown as
    \\xNN, as every outside text on stderr is."""
    awaiting(afc, 1)
    served = Served(afc)
    try:
        (afc.cwd / "afc.db").rename(afc.cwd / "away.db")
        answer = httpx.get(f"{served.url}thumb/%1b%5d0;pwned%07%1b%5b2J")
    finally:
        code, stderr = served.stop()
    assert answer.status_code == 503
    assert code == 0
    assert "\x1b" not in stderr and "\x07" not in stderr
    assert "afc: serve: /thumb/\\x1b]0;pwned\\x07\\x1b[2J: no ledger at" in stderr


def test_a_folder_linked_out_of_the_store_sends_none_of_another_file(afc, tmp_path):
    """A symbolic link at an output's name is followed only to the job's own bytes, but a
    link in a folder on the way to it was followed blindly: the store's b1/ made a link to
    another folder (by someone who can write the store, not read that folder) holding a file
    of the output's name, and the full-size view sent that file but for its last MiB (the
    4 MiB read before the answer starts, then the rest, before its SHA-256 said it was not
    the job's). Such an output is now checked whole first, as a link at its name is: a 404
    saying why, nothing of it sent; a folder linked to the job's own bytes still shows."""
    import shutil

    awaiting(afc, 2)
    store = afc.outputs()
    private = tmp_path / "private"
    private.mkdir()
    secret = os.urandom(10 * 1024 * 1024)  # past the 4 MiB read before the answer starts
    (private / "shot-001.png").write_bytes(secret)
    shutil.copy(store / "b1" / "shot-002.png", private / "shot-002.png")  # the job's own
    (store / "b1").rename(store / "b1.real")
    os.symlink(private, store / "b1")
    ids = dict(afc.rows("SELECT key, id FROM jobs"))
    served = Served(afc)
    try:
        other = httpx.get(f"{served.url}output/{ids['shot-001']}", timeout=60)
        own = httpx.get(f"{served.url}output/{ids['shot-002']}", timeout=60)
    finally:
        served.stop()
    assert other.status_code == 404, (other.status_code, len(other.content))
    assert "symbolic link to other bytes" in other.text
    assert secret[:4096] not in other.content
    assert own.status_code == 200
    assert own.content == (store / "b1.real" / "shot-002.png").read_bytes()


def test_outputs_and_thumbnails_are_not_for_other_sites_to_embed(afc):
    """A job's id is uuid5 of its batch and key: a page elsewhere that guessed them could embed
    ``/thumb/ID`` or ``/output/ID`` in an <img> and learn, from the reviewer's browser,
    whether the output exists and its size (suspected by outside audit 51e). Both say
    Cross-Origin-Resource-Policy: same-origin, which browsers hold such an <img> to."""
    awaiting(afc, 1)
    [(job_id,)] = afc.rows("SELECT id FROM jobs")
    served = Served(afc)
    try:
        thumb = httpx.get(f"{served.url}thumb/{job_id}", timeout=60)
        full = httpx.get(f"{served.url}output/{job_id}", timeout=60)
    finally:
        served.stop()
    assert thumb.status_code == 200 and full.status_code == 200
    assert thumb.headers["cross-origin-resource-policy"] == "same-origin"
    assert full.headers["cross-origin-resource-policy"] == "same-origin"
