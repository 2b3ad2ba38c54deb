"""Outside audit 37b: ``afc review list`` on a pipe names the batch of a ledger of several.

README ("Reading the output") says a ledger of several batches puts a ``batch`` column first
when no ``--batch`` is given, and ``afc status`` does so. ``afc review list`` added the column
only when the jobs awaiting review were of several batches: with two films in the ledger, each
with a ``shot-001``, and only the second's awaiting review, its row was ``shot-001  file://...``
with no batch, and the approval a script (or a person) formed from it, ``afc review approve
shot-001``, was refused, exit 2 ("a key of several batches: add --batch"), while ``afc status``
said of the same job ``afc review approve shot-001 --batch teaser``. The batch column now
follows the ledger's batches, as in ``afc status``; a ledger of one batch lists no such column.
"""

from __future__ import annotations

from conftest import manifest


def _two_films(afc) -> None:
    afc.write_manifest(
        manifest([{"key": "shot-001", "prompt": "p", "review": True}], batch="trailer")
    )
    assert afc("submit", "manifest.yaml", "-q").returncode == 0
    afc.write_manifest(
        manifest([{"key": "shot-001", "prompt": "q", "review": True}], batch="teaser"),
        name="m2.yaml",
    )
    assert afc("submit", "m2.yaml", "-q").returncode == 0
    # the trailer's is approved: only the teaser's awaits review
    approved = afc("review", "approve", "shot-001", "--batch", "trailer")
    assert approved.returncode == 0, approved.stderr


def test_a_piped_review_list_names_the_batch_when_the_ledger_has_several(afc) -> None:
    _two_films(afc)
    listed = afc("review", "list")  # on a pipe: a header row, then tab-separated rows
    assert listed.returncode == 0, listed.stderr
    header, *rows = [line.split("\t") for line in listed.stdout.splitlines()]
    assert header[:2] == ["batch", "key"], listed.stdout
    assert [row[:2] for row in rows] == [["teaser", "shot-001"]], listed.stdout
    # the approval formed from the row, as afc status says it, decides that job
    status = afc("status")
    assert "afc review approve shot-001 --batch teaser" in status.stdout, status.stdout
    batch, key = rows[0][:2]
    decided = afc("review", "approve", key, "--batch", batch)
    assert decided.returncode == 0, decided.stderr


def test_a_review_list_of_one_batch_or_with_batch_has_no_batch_column(afc) -> None:
    afc.write_manifest(manifest([{"key": "shot-001", "prompt": "p", "review": True}]))
    assert afc("submit", "manifest.yaml", "-q").returncode == 0
    header = afc("review", "list").stdout.splitlines()[0].split("\t")
    assert header[0] == "key", header
    _two_films(afc)
    header = afc("review", "list", "--batch", "teaser").stdout.splitlines()[0].split("\t")
    assert header[0] == "key", header
