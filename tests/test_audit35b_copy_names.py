"""A copy killed between its two commits is finished by the same copy again, whatever the
spelling of the destination's path (audit 35b).

The destination refuses every run ("a copy ... that 'afc ledger copy' did not finish") and
names the command that finishes it, with the destination's path as that run spelled it. When
that spelling was not the copy's (the folder reached through a symbolic link, as a shared
mount often is), the command it named was refused ("moved to ... already: copy from there"),
and the copy stayed shut to every run: the user's jobs ran nowhere.
"""

from __future__ import annotations

import signal

from conftest import manifest


def test_a_copy_killed_after_the_mark_is_finished_under_another_spelling_of_its_path(afc):
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}, {"key": "b", "prompt": "q"}]))
    calls = afc.cwd / "calls.log"
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    real = afc.cwd / "real"
    real.mkdir()
    (afc.cwd / "link").symlink_to(real)
    died = afc(
        "ledger",
        "copy",
        "afc.db",
        str(afc.cwd / "link" / "back.db"),
        env={"AFC_CRASH_POINT": "copy_marked"},
    )
    assert died.returncode == -signal.SIGKILL, died.stderr
    back = str(real / "back.db")
    refused = afc("resume", env={"AFC_LEDGER": back})
    assert refused.returncode == 2 and "did not finish" in refused.stderr, refused.stderr
    # the command the refusal names finishes the move
    named = refused.stderr.split("Run '", 1)[1].split("'", 1)[0].split()
    assert named[:3] == ["afc", "ledger", "copy"] and named[4] == back, named
    finished = afc(*named[1:], "--json")
    assert finished.returncode == 0, finished.stderr
    assert '"source_moved": true' in finished.stdout, finished.stdout
    ran = afc("resume", env={"AFC_LEDGER": back, "AFC_LOCAL_CALL_LOG": str(calls)})
    assert ran.returncode == 0, ran.stderr
    assert len(calls.read_text().splitlines()) == 2
    assert afc("resume").returncode == 2  # the source is moved


def test_a_copy_killed_before_the_mark_is_copied_anew_under_another_spelling_of_its_source(afc):
    """Killed before the source was marked: the same copy again copies the source anew, its
    path spelled through the link or not."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    real = afc.cwd / "real"
    real.mkdir()
    (afc.cwd / "link").symlink_to(real)
    source = {"AFC_LEDGER": str(real / "afc.db")}
    assert afc("submit", "manifest.yaml", "--no-run", env=source).returncode == 0
    died = afc(
        "ledger",
        "copy",
        str(afc.cwd / "link" / "afc.db"),
        "back.db",
        env={"AFC_CRASH_POINT": "copy_committed"},
    )
    assert died.returncode == -signal.SIGKILL, died.stderr
    again = afc("ledger", "copy", str(real / "afc.db"), "back.db")
    assert again.returncode == 0, again.stderr
    assert afc("resume", env={"AFC_LEDGER": "back.db"}).returncode == 0
    assert afc("resume", env=source).returncode == 2  # the source is moved


def test_a_copy_into_postgresql_killed_after_the_mark_is_finished_by_the_url_its_runs_use(
    afc, pg_url
):
    """The copy was given the URL with its password, the workers theirs without (the password
    in PGPASSWORD or ~/.pgpass): the command a worker's refusal names finishes the move."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    assert pg_url.startswith("postgresql://afc@"), pg_url
    with_password = pg_url.replace("postgresql://afc@", "postgresql://afc:hunter2word@", 1)
    died = afc("ledger", "copy", "afc.db", with_password, env={"AFC_CRASH_POINT": "copy_marked"})
    assert died.returncode == -signal.SIGKILL, died.stderr
    refused = afc("resume", env={"AFC_LEDGER": pg_url})
    assert refused.returncode == 2 and "did not finish" in refused.stderr, refused.stderr
    finished = afc("ledger", "copy", str(afc.cwd / "afc.db"), pg_url)
    assert finished.returncode == 0, finished.stderr
    assert afc("resume", env={"AFC_LEDGER": pg_url}).returncode == 0
    assert afc("resume").returncode == 2  # the source is moved
