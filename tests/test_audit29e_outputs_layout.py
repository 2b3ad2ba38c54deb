"""Outside audit 29e: ``afc outputs`` while a run writes the ledger.

Since its rows are written as they are read (ed301d5), ``afc outputs`` chooses its columns (the
batch column when more than one batch has an output; path, url or path_or_url) from the
batches with an output (``listing.output_storages``), read before its rows in another read of
the ledger. A batch whose first job succeeded in between (``afc submit`` of a second batch
running) was listed under a layout chosen without it: two batches' rows with no batch column,
the same keys twice (``shot-001`` of each) and nothing to tell them apart in ``afc outputs |
cut -f1``. Before, the layout and the rows came from one read. The rows listed are now those of
the batches the layout was chosen for: the listing as of that read, for a batch that had none."""

from __future__ import annotations

from conftest import jobs, manifest

from afc_cli import cli, listing


def test_a_batch_that_got_its_first_output_meanwhile_is_not_listed_without_its_column(
    afc, monkeypatch, capsys
):
    afc.write_manifest(manifest(jobs(3)))
    assert afc("submit", "manifest.yaml", "-q").returncode == 0
    afc.write_manifest(manifest(jobs(2), batch="b2"), name="m2.yaml")
    assert afc("submit", "m2.yaml", "-q", "--no-run").returncode == 0
    read = listing.output_storages

    def then_b2_renders(*args, **options):
        storages = read(*args, **options)
        assert afc("resume", "--batch", "b2", "-q").returncode == 0  # a run, meanwhile
        return storages

    monkeypatch.setattr(listing, "output_storages", then_b2_renders)
    cli.outputs(ledger=str(afc.cwd / "afc.db"))  # on a pipe (capsys): written as read
    lines = capsys.readouterr().out.splitlines()
    header, rows = lines[0].split("\t"), [line.split("\t") for line in lines[1:]]
    assert "batch" not in header  # b1 alone had an output when the layout was chosen
    keys = [row[0] for row in rows]
    assert keys == ["shot-001", "shot-002", "shot-003"], lines  # b2's were b1's keys again
    assert all("/b1/" in row[1] for row in rows)
    monkeypatch.undo()
    cli.outputs(ledger=str(afc.cwd / "afc.db"))  # the next listing has both, with the column
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split("\t")[0] == "batch" and len(lines) == 6
