"""Outside audit 29c, a studio's ledger after weeks of use: hundreds of batches that each have
a ``shot-001`` (README "The manifest": two films may both have one). A command given such a key
without ``--batch`` is refused, as it should be, and the refusal stays readable."""

from __future__ import annotations

import sqlite3

from conftest import jobs, manifest


def many_batches(afc, count: int) -> None:
    """Batch b1 rendered for real, then ``count`` more batches of the same keys written by SQL
    (copies of b1's rows, each a day later than the one before), as months of runs leave them."""
    afc.write_manifest(manifest(jobs(2, size="16x16")))
    assert afc("submit", "manifest.yaml").returncode == 0
    conn = sqlite3.connect(afc.cwd / "afc.db")
    columns = [row[1] for row in conn.execute("PRAGMA table_info(jobs)")]
    b_columns = [row[1] for row in conn.execute("PRAGMA table_info(batches)")]
    with conn:
        for n in range(2, count + 2):
            name, later = f"film{n:03d}", n * 86400.0
            changed = {"name": "?", "created_at": f"created_at + {later}"}
            conn.execute(
                f"INSERT INTO batches ({', '.join(b_columns)}) SELECT"
                f" {', '.join(changed.get(c, c) for c in b_columns)} FROM batches"
                " WHERE name = 'b1'",
                (name,),
            )
            changed = {
                "id": f"'{name}-' || id",
                "batch": f"'{name}'",
                "output_key": f"'{name}/' || key",
                "created_at": f"created_at + {later}",
            }
            conn.execute(
                f"INSERT INTO jobs ({', '.join(columns)}) SELECT"
                f" {', '.join(changed.get(c, c) for c in columns)} FROM jobs WHERE batch = 'b1'"
            )
    conn.close()


def test_a_key_of_hundreds_of_batches_is_refused_in_a_readable_line(afc):
    """'afc show shot-001' on a ledger of 300 batches named every one of them in its refusal
    (a line of some 3,000 characters), and 'afc retry shot-001 shot-002' (or cancel, review
    approve) once per key. The refusal names the newest few and how many more, and --batch
    with one it names shows the job."""
    many_batches(afc, 300)
    shown = afc("show", "shot-001")
    assert shown.returncode == 2
    [line] = [x for x in shown.stderr.splitlines() if "several batches" in x]
    assert len(line) < 240, line
    assert "film301, film300, film299" in line and "and 293 older" in line
    assert "film002" not in line and "b1," not in line
    assert afc("show", "shot-001", "--batch", "film301").returncode == 0

    for command in (
        ("retry", "shot-001", "shot-002"),
        ("cancel", "shot-001", "shot-002"),
        ("review", "approve", "shot-001", "--by", "ana"),
    ):
        refused = afc(*command)
        assert refused.returncode == 2, (command, refused.stderr)
        lines = [x for x in refused.stderr.splitlines() if "several batches" in x]
        assert lines, (command, refused.stderr)
        assert all(len(x) < 240 and "and 293 older" in x for x in lines), (command, lines)


def test_a_key_of_a_few_batches_names_them_all(afc):
    """Up to eight batches are all named, as before."""
    many_batches(afc, 3)
    shown = afc("show", "shot-001")
    assert shown.returncode == 2
    assert "several batches (b1, film002, film003, film004)" in shown.stderr
    refused = afc("cancel", "shot-001")
    assert "('b1', 'film002', 'film003', 'film004'): add --batch" in refused.stderr
