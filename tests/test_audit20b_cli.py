"""Outside audit 20b: the command-line contract against README's "Commands" and "Exit codes", through the real ``afc``
command: what a person reads on a terminal or a pipe, and what a script reads."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys

import pytest
from conftest import manifest


def test_show_writes_a_person_s_words_in_their_own_script_not_as_json_escapes(afc):
    """README: text is written as backslash escapes only where the output's encoding cannot
    write it. 'afc show' printed its events' details (and its steps' and attempts' usage) with
    JSON's ASCII escapes on a UTF-8 terminal or pipe: a reviewer's rejection reason '暗すぎる',
    their name 'José', read '\\u6697\\u3059\\u304e\\u308b' and 'Jos\\u00e9' in the job's
    story, while the decision line above said them plainly."""
    afc.write_manifest(manifest([{"key": "frame", "prompt": "p", "review": True}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    reason = "暗すぎる — trop sombre, «refaire» ☕"
    rejected = afc("review", "reject", "frame", "--reason", reason, "--by", "José")
    assert rejected.returncode == 0, rejected.stderr
    shown = afc("show", "frame", env={"PYTHONIOENCODING": "utf-8"})
    assert shown.returncode == 0, shown.stderr
    [event] = [line for line in shown.stdout.splitlines() if "Z  rejected  " in line]
    assert reason in event and "José" in event, event
    assert "\\u" not in shown.stdout, shown.stdout


LONG_KEY = "trailer-2026-act-three-scene-fourteen-shot-0042-keeper-close-up-alt-take"


def test_what_is_said_under_a_table_wider_than_the_terminal_is_wrapped_at_the_terminal(afc):
    """README: if even a table's essential columns do not fit, the table is printed wider
    than the terminal rather than cut a key. Everything said under it was wrapped at the
    table's width too: with a 72-character key (keys may have 200) at 80 columns, a failed
    job's reason ('KEY: reason') and the note naming the columns not shown came in lines of
    85 to 90 characters, which the terminal broke again, a word or two a line. Only the
    table may be wider than the terminal."""
    from terminal import on_pty

    afc.write_manifest(
        manifest([{"key": LONG_KEY, "prompt": "hands", "params": {"fail": ["invalid"]}}])
    )
    assert afc("submit", "manifest.yaml").returncode == 1
    shown = on_pty(afc.command("status"), cwd=afc.cwd, env=afc.env, columns=80)
    assert shown.returncode == 0, shown.output
    lines = shown.lines
    [row] = [i for i, line in enumerate(lines) if line.startswith(f"{LONG_KEY} ")]
    assert len(lines[row]) > 80  # the table itself: wider, its key whole
    under = [line for line in lines[row + 1 :] if line.strip()]
    assert under[0].startswith(f"{LONG_KEY}:"), lines
    assert any(line.startswith("(not shown at 80 columns") for line in under), lines
    for line in under:
        assert len(line) <= 80, line
    said = " ".join(line.strip() for line in under)
    assert "injected invalid on attempt 1 (invalid stops the chain)" in said, said


def test_a_wide_character_output_key_is_shortened_from_the_left_keeping_its_file_name(afc):
    """README: long output keys are shortened from the left ('…titles/title-card.png'), so
    the file name that tells jobs apart stays. Tables measured text in characters, not in the
    terminal's columns: an output folder named in Japanese (two columns a character) was given
    half the room it needed and cut at the right, 'b1/予告編の素材フォルダ/第三' on every
    row, the file names gone and two jobs' rows alike. Widths are now the terminal's cells."""
    import unicodedata

    from terminal import on_pty

    afc.write_manifest(
        manifest(
            [
                {"key": key, "prompt": "p", "params": {"fail": ["invalid"]}}
                for key in ("shot-001", "shot-002")
            ],
            defaults={
                "output": "{batch}/予告編の素材フォルダ/第三幕のショット/{key}.{ext}",
                "chain": [{"provider": "local", "model": "m1", "attempts": 1}],
            },
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 1
    shown = on_pty(afc.command("status"), cwd=afc.cwd, env=afc.env, columns=120)
    assert shown.returncode == 0, shown.output
    for key in ("shot-001", "shot-002"):
        [row] = [line for line in shown.lines if line.startswith(f"{key} ")]
        assert f"/{key}.png" in row, shown.output
    for line in shown.lines:
        cells = sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)
        assert cells <= 120, line


def test_an_admission_s_json_says_the_exit_code_it_exits_with(afc):
    """README: submit's --json ends with ``exit_code``. 'afc submit --no-run --json' exits 0
    (3 for a conflict) once its jobs are admitted, but its JSON said ``"exit_code": 1``, the
    code of a run that had not happened (its jobs queued, not succeeded): a script reading the
    document (``jq .exit_code``) took every admission for a failure. A conflict still says 3."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}, {"key": "b", "prompt": "q"}]))
    result = afc("submit", "manifest.yaml", "--no-run", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["exit_code"] == 0
    afc.write_manifest(manifest([{"key": "a", "prompt": "changed"}, {"key": "b", "prompt": "q"}]))
    conflict = afc("submit", "manifest.yaml", "--no-run", "--json")
    assert conflict.returncode == 3, conflict.stderr
    assert json.loads(conflict.stdout)["exit_code"] == 3


def test_with_several_batches_a_reason_said_under_the_table_is_under_its_batch(afc):
    """README "The manifest": two films may both have a shot-001. With several batches 'afc status'
    gives each batch a heading over its rows; a failed job's reason that found no room as a
    column was printed as 'KEY: reason' under the last batch's table, every batch's together:
    two batches' failed shots of one key read as two reasons of one job, with nothing to say
    which batch had which. Each batch's reasons are now under its own table."""
    from terminal import on_pty

    for batch, fail in (("film-a", "invalid"), ("film-b", "refusal")):
        afc.write_manifest(
            manifest(
                [{"key": LONG_KEY, "prompt": "p", "params": {"fail": [fail]}}],
                batch=batch,
                defaults={"chain": [{"provider": "local", "model": "m1", "attempts": 1}]},
            ),
            f"{batch}.yaml",
        )
        assert afc("submit", f"{batch}.yaml").returncode == 1
    shown = on_pty(afc.command("status"), cwd=afc.cwd, env=afc.env, columns=80)
    assert shown.returncode == 0, shown.output
    text = " ".join(line.strip() for line in shown.lines)
    a, b = text.index("batch film-a"), text.index("batch film-b")
    invalid, refusal = text.index("injected invalid"), text.index("injected refusal")
    assert a < invalid < b < refusal, shown.output


def test_money_written_as_a_yaml_number_is_refused_with_the_fix(afc):
    """README: every failure a user can cause ends with one message naming the field and the
    fix. A manifest's 'budget: 25' or a rate card's 'per_image: 0.04', as anyone writes YAML,
    was refused as "field 'budget': Input should be a valid string", which says neither why
    (money is an exact decimal string, never a float) nor how: quote it. It now says both,
    with the value to write; nothing is written, exit 2 as before."""
    data = manifest([{"key": "a", "prompt": "p"}], budget=25)
    data["rates"] = [{"provider": "local", "model": "m1", "per_image": 0.04}]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 2, result.stderr
    assert "field 'budget': Input should be a valid string: write USD in quotes, as \"25\"" in (
        result.stderr
    )
    assert "field 'rates[0].per_image': " in result.stderr
    assert 'write USD in quotes, as "0.04"' in result.stderr
    assert "Traceback" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()


def test_a_plan_names_a_few_unlisted_jobs_not_every_key_of_the_batch(afc):
    """A submit names the first ten unfinished jobs an earlier manifest admitted and this one
    leaves out, 'and N more'. 'afc plan' printed every key in one line: a batch of thousands
    (README "Big job lists") planned from a manifest of one job gave a line of every key,
    megabytes for a 100,000-job list. It now names ten and how many more, as the submit does;
    --json still lists them all."""
    listed = [{"key": f"shot-{i:04d}", "prompt": "p"} for i in range(300)]
    afc.write_manifest(manifest(listed), "all.yaml")
    assert afc("submit", "all.yaml", "--no-run", "-q").returncode == 0
    afc.write_manifest(manifest(listed[:1]), "one.yaml")
    text = afc("plan", "one.yaml")
    assert text.returncode == 0, text.stderr
    [line] = [line for line in text.stdout.splitlines() if "not in this manifest" in line]
    assert "shot-0010 and 289 more" in line and "shot-0011" not in line, line
    assert len(afc.json("plan", "one.yaml")["unlisted"]) == 299


def test_a_postgresql_connection_string_is_refused_not_made_a_sqlite_file(afc):
    """README: --ledger is a path, a sqlite:/// URL or a postgresql:// URL. A PostgreSQL
    connection string in libpq's key=value form, as psycopg's and libpq's documents show it
    first ('host=db.internal dbname=afc user=afc password=...'), was taken for a file name:
    'afc submit' admitted the batch into a new SQLite ledger in the working folder named after
    it, password and all, beside the shared ledger the workers run (a second ledger of one
    batch renders, and pays for, its jobs again), and every other command echoed the string
    with its password ('no ledger at dbname=afc password=...'). It is refused, exit 2, naming
    the URL form, without the string."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    conninfo = "host=db.internal dbname=afc user=afc password=Sup3rSecretPw"
    submitted = afc("submit", "manifest.yaml", "--no-run", "--ledger", conninfo)
    assert submitted.returncode == 2, submitted.stderr
    assert "postgresql://" in submitted.stderr
    assert sorted(p.name for p in afc.cwd.iterdir()) == ["manifest.yaml"]
    status = afc("status", env={"AFC_LEDGER": "dbname=afc password=Sup3rSecretPw"})
    assert status.returncode == 2, status.stderr
    for said in (submitted, status):
        assert "Sup3rSecretPw" not in said.stdout + said.stderr, said.stderr
        assert "Traceback" not in said.stderr


def test_a_rate_file_that_is_not_a_mapping_is_named_in_the_user_s_words(afc):
    """A manifest that is a list is refused as 'the manifest must be a mapping ...'. The
    AFC_CONFIG rate file in that shape (a list of cards without 'rates:', or a file named by
    mistake) was refused as "field '': Input should be a valid dictionary or instance of
    RatesConfig": an empty field name and afc's internal class. It now says what the file
    must be; exit 2, nothing written, as before."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    (afc.cwd / "rates.yaml").write_text("- {provider: local, model: m1, per_image: '0.05'}\n")
    result = afc("submit", "manifest.yaml", env={"AFC_CONFIG": "rates.yaml"})
    assert result.returncode == 2, result.stderr
    assert "invalid AFC_CONFIG rate file rates.yaml" in result.stderr, result.stderr
    assert "must be a mapping holding a rates: list" in result.stderr
    assert "RatesConfig" not in result.stderr and "field ''" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()


def test_a_field_that_must_be_a_mapping_is_said_in_yaml_s_words_not_afc_s_classes(afc):
    """README: an error names the file, the job and the field, and the fix. A job written as
    a bare key ('jobs: [shot-001]'), a chain entry as a model's name, 'defaults' as a list or
    a provider's 'limits' as a number were refused as 'Input should be a valid dictionary or
    instance of JobSpec' (ChainEntry, Defaults, ProviderLimits): afc's internal classes, and
    no word of what to write. They now say a mapping of fields is needed, and what was given."""
    data = manifest([{"key": "a", "prompt": "p", "chain": ["m1"]}])
    data["jobs"].append("shot-002")
    data["limits"] = {"local": 2}
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 2, result.stderr
    said = result.stderr
    assert "job 0 (key 'a'): field 'chain[0]': must be a mapping of fields (name: value), got" in (
        said
    )
    assert "job 1: must be a mapping of fields (name: value), got the text 'shot-002'" in said
    assert "field 'limits.local': must be a mapping of fields (name: value), got a number" in said
    assert "instance of" not in said and "Traceback" not in said
    assert not (afc.cwd / "afc.db").exists()


def test_a_plan_s_dependency_order_names_a_few_jobs_of_each_wave(afc):
    """The plan's 'order' line listed every key of each wave: three hundred shots that need
    one style frame made a line of 3,300 characters (a job list's 100,000, megabytes). Each
    wave now names ten and how many more; --json's order is whole."""
    listed = [{"key": "style", "prompt": "p"}] + [
        {"key": f"shot-{i:04d}", "prompt": "p", "needs": ["style"]} for i in range(300)
    ]
    afc.write_manifest(manifest(listed))
    text = afc("plan", "manifest.yaml")
    assert text.returncode == 0, text.stderr
    [line] = [line for line in text.stdout.splitlines() if line.startswith("  order: ")]
    assert line == "  order: style -> " + ", ".join(f"shot-{i:04d}" for i in range(10)) + (
        " and 290 more"
    ), line
    assert len(afc.json("plan", "manifest.yaml")["order"][1]) == 300


def test_a_worker_s_claim_past_what_a_database_counts_is_a_usage_error(afc):
    """README: exit 2 for a usage error, and an error afc did not expect is 'a bug in afc'.
    'afc worker --claim 99999999999999999999' (a slip of the finger) passed the option's
    checks and failed in the database driver at its first claim: 'unexpected error:
    OverflowError: Python int too large to convert to SQLite INTEGER (a bug in afc)', exit 1.
    It is refused before the worker starts, exit 2, naming the range."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    assert afc("submit", "manifest.yaml", "--no-run", "-q").returncode == 0
    result = afc("worker", "--until-idle", "--claim", "99999999999999999999")
    assert result.returncode == 2, result.stderr
    assert "--claim must be from 1 to" in result.stderr, result.stderr
    assert "a bug in afc" not in result.stderr and "Traceback" not in result.stderr
    assert afc.rows("SELECT status FROM jobs") == [("queued",)]


def test_an_empty_webhooks_list_says_so(afc):
    """'afc review list' and 'afc outputs' say when they have nothing to list. 'afc webhooks
    list' (and '--dead', an operator's check after a receiver's outage) printed a header and
    a rule and nothing else on a terminal, and only the header line on a pipe: nothing told a
    person that there was nothing, rather than that the command had failed to show it."""
    from terminal import on_pty

    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    for args, said in (
        (("webhooks", "list"), "no webhook deliveries"),
        (("webhooks", "list", "--dead"), "no dead deliveries"),
    ):
        shown = on_pty(afc.command(*args), cwd=afc.cwd, env=afc.env, columns=80)
        assert shown.returncode == 0 and said in shown.output, shown.output
        piped = afc(*args)
        assert piped.stdout.splitlines() == [
            "id\tstatus\tattempts\tlast_status\tlast_error\turl\tevent"
        ], piped.stdout
        assert said in piped.stderr, piped.stderr


@pytest.mark.skipif(
    sys.platform != "linux" or not shutil.which("unshare"), reason="needs unshare (Linux)"
)
def test_a_plan_reads_a_ledger_in_a_folder_it_cannot_write(afc):
    """README: 'afc plan' writes nothing, the ledger opened read-only. A ledger in a folder
    the planner cannot write (a read-only mount of the render host's ledger, the folder of
    the user who runs the renders) was refused, exit 2, as 'cannot open the ledger ...
    (unable to open database file): check the path and folder': SQLite's reader of a WAL
    database makes a shared-memory file beside it. With no -wal file there (no run is
    writing it) the plan now reads it, and says the job is replayed, as it is."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("unprivileged mount namespaces are not available")
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    (afc.cwd / "data").mkdir()
    assert afc("submit", "manifest.yaml", "--ledger", "data/afc.db").returncode == 0
    assert not (afc.cwd / "data" / "afc.db-wal").exists()
    command = " ".join(
        shlex.quote(part)
        for part in afc.command("plan", "manifest.yaml", "--ledger", "data/afc.db", "--json")
    )
    script = (
        "mount --bind data data && mount -o remount,bind,ro data || exit 9\n"
        f"touch data/probe 2>/dev/null && exit 8\n{command}"
    )
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        cwd=afc.cwd,
        env=afc.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert (plan["new"], plan["replayed"], plan["to_render"]) == (0, 1, 0), plan


def test_a_damaged_ledger_found_by_a_command_that_reads_is_exit_2_not_a_failed_write(afc):
    """README: a damaged ledger is one line and exit 2. A damaged page that the up-front
    checks do not read (they read the ledger's first pages; 'afc submit' and 'afc resume'
    read every page) was met by 'afc status' (and outputs, costs report, review list, report)
    as 'cannot write to the ledger: database disk image is malformed. The run stopped; ...
    then run 'afc resume'', exit 1: no run, no write, and a fix that refuses the ledger. And
    'afc plan' read it as a ledger with nothing admitted: every job 'new', its render priced,
    exit 0, where the submit it plans is refused with exit 2. Both now say the ledger is
    damaged and how to recover it, exit 2."""
    import sqlite3

    listed = [{"key": f"shot-{i:03d}", "prompt": "p" * 200} for i in range(20)]
    afc.write_manifest(manifest(listed))
    assert afc("submit", "manifest.yaml", "--no-run", "-q").returncode == 0
    ledger = afc.cwd / "afc.db"
    conn = sqlite3.connect(ledger)
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'jobs'").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    data = bytearray(ledger.read_bytes())
    data[(root - 1) * size : (root - 1) * size + 8] = b"\xff" * 8  # the jobs table's root page
    ledger.write_bytes(bytes(data))
    # 'afc status --all' reads every job's row; the default view counts the jobs in the
    # (batch, status) index and reads only the rows it lists (outside audit 24e), so with
    # nothing to list it may never meet a damaged page of the table
    for args in (("status", "--all"), ("plan", "manifest.yaml")):
        result = afc(*args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert "afc.db is damaged" in result.stderr and ".recover" in result.stderr, result.stderr
        assert "afc resume" not in result.stderr and "Traceback" not in result.stderr
