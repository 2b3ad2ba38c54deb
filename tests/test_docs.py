"""The documentation names what is in the repository.

README.md and docs/*.md cite files, functions, classes, tests and make targets so that a
reader can check them (docs/README.md: "Cite files in this repository by path"). A rename
that leaves a page behind is found here, not by the next maintainer. Checked: every
backticked repository path exists; every backticked ``module.name`` whose first part is one
of afc_cli's modules is defined at the top of that module (or of its package), and every
``Class.member`` whose class is defined in the repository is a member of that class or of a
class it derives from or that derives from it; every backticked ``test_...`` name is a test
function; every ``make TARGET`` is a Makefile target. Anything else in backticks (options,
SQL, shell, the standard library) is not checked. docs/benchmarks.md is left out: it records
measurements of earlier builds, with the files and names of their time.
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md"] + sorted(
    p for p in (ROOT / "docs").glob("*.md") if p.name != "benchmarks.md"
)
CODE_DIRS = ("afc_cli", "tests", "bench")
TOP_DIRS = ("afc_cli/", "tests/", "bench/", "examples/", "docs/")
EXTENSIONS = {"py", "md", "yaml", "yml", "json", "jsonl", "csv", "txt", "sh", "toml", "png"}
# dotted names that are not afc's code though they start like it
NOT_CODE = {"fal.run"}  # fal's synchronous endpoint, which afc never calls


def _ticks(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # examples, not citations
    return re.findall(r"`([^`\n]+)`", text)


@cache
def _trees() -> dict[Path, ast.Module]:
    return {
        path: ast.parse(path.read_text())
        for folder in CODE_DIRS
        for path in sorted((ROOT / folder).rglob("*.py"))
    }


def _defined(body: list[ast.stmt]) -> set[str]:
    """Names a module's or a class's body defines (functions, classes, assignments), not the
    ones it imports."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _top_names(tree: ast.Module) -> set[str]:
    """Names a module defines at its top (not the ones it imports)."""
    names = _defined(tree.body)
    if "__getattr__" in names:  # a lazy attribute: the names the module compares against
        names.update(
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier()
        )
    return names


@cache
def _modules() -> dict[str, list[set[str]]]:
    """afc_cli's modules by dotted tail ('pipeline', 'base', 'storage.base', 'ledger'): the
    names each defines. A package stands for every module in it."""
    found: dict[str, list[set[str]]] = {}
    for path, tree in _trees().items():
        if path.parts[len(ROOT.parts)] != "afc_cli":
            continue
        rel = path.relative_to(ROOT / "afc_cli").with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        names = _top_names(tree)
        for start in range(len(parts)):
            for end in range(start + 1, len(parts) + 1):
                found.setdefault(".".join(parts[start:end]), []).append(names)
    return found


@cache
def _classes() -> dict[str, list[tuple[set[str], set[str]]]]:
    """Every class in the repository's code by name: (its bases' names, its members)."""
    found: dict[str, list[tuple[set[str], set[str]]]] = {}
    for tree in _trees().values():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {
                b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
            }
            members = _defined(node.body)
            for sub in ast.walk(node):  # self.x = ... in its methods
                if (
                    isinstance(sub, ast.Attribute)
                    and isinstance(sub.ctx, ast.Store)
                    and isinstance(sub.value, ast.Name)
                    and sub.value.id == "self"
                ):
                    members.add(sub.attr)
            found.setdefault(node.name, []).append((bases, members))
    return found


def _kin(name: str) -> set[str]:
    """A class and every class it derives from or that derives from it (by name)."""
    classes = _classes()
    kin, todo = set(), [name]
    while todo:
        current = todo.pop()
        if current in kin:
            continue
        kin.add(current)
        for bases, _ in classes.get(current, []):
            todo.extend(b for b in bases if b in classes)
        todo.extend(n for n, defs in classes.items() if any(current in b for b, _ in defs))
    return kin


def _member(cls: str, attr: str) -> bool:
    return any(attr in members for k in _kin(cls) for _, members in _classes().get(k, []))


def _problem(token: str) -> str | None:
    """Why a backticked token names nothing in the repository, or None."""
    token = token.strip()
    if token.startswith(TOP_DIRS) and " " not in token:
        path, _, test = token.partition("::")
        path = path.rstrip("/")
        if not (list(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()):
            return f"no file {path}"
        if test and test not in _tests():
            return f"no test {test} in {path}"
        return None
    match = re.fullmatch(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(.*\))?", token)
    if match:
        parts = match.group(1).split(".")
        if parts[-1] in EXTENSIONS or match.group(1) in NOT_CODE:
            return None  # a file name
        if _in_stdlib(parts):
            return None  # html.escape, http.server, secrets.token_hex: not afc's modules
        if len(parts) == 2 and parts[0] in _columns():
            if parts[1] in _columns()[parts[0]]:
                return None  # a ledger column (afc_cli/migrations.py)
        modules = _modules()
        for split in range(len(parts) - 1, 0, -1):
            module = ".".join(parts[:split])
            if module in modules:
                name = parts[split]
                if not any(name in names for names in modules[module]):
                    return f"afc_cli's {module} defines no {name}"
                if split + 1 < len(parts) and name in _classes():
                    if not _member(name, parts[split + 1]):
                        return f"{name} has no member {parts[split + 1]}"
                return None
        if parts[0] in _classes() and not _member(parts[0], parts[1]):
            return f"{parts[0]} has no member {parts[1]}"
        return None
    if re.fullmatch(r"test_\w+", token) and token not in _tests():
        return f"no test function {token}"
    match = re.fullmatch(r"make ([a-z][\w-]*)", token)
    if match and match.group(1) not in _make_targets():
        return f"no Makefile target {match.group(1)}"
    return None


def _in_stdlib(parts: list[str]) -> bool:
    """A dotted name the standard library has (some of afc's modules share a name with one of
    its modules: html, http, secrets, copy)."""
    if parts[0] not in sys.stdlib_module_names:
        return False
    for split in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for name in parts[split:]:
            if not hasattr(value, name):
                return False
            value = getattr(value, name)
        return True
    return False


@cache
def _columns() -> dict[str, set[str]]:
    """The ledger's tables and the names of their columns, from the migrations."""
    text = (ROOT / "afc_cli" / "migrations.py").read_text()
    columns: dict[str, set[str]] = {}
    for table, body in re.findall(
        r"CREATE TABLE (\w+) \((.*?)\)\s*(?:WITHOUT ROWID)?;", text, re.S
    ):
        # a column's line starts with its lowercase name; ``PRIMARY KEY (...)`` is no column
        columns.setdefault(table, set()).update(re.findall(r"(?m)^\s*([a-z_]\w*) [A-Z]", body))
    for table, column in re.findall(r"ALTER TABLE (\w+) ADD COLUMN (\w+)", text):
        columns.setdefault(table, set()).add(column)
    return columns


@cache
def _tests() -> set[str]:
    return {
        node.name
        for path, tree in _trees().items()
        if path.parts[len(ROOT.parts)] == "tests"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    }


@cache
def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"(?m)^([a-z][\w-]*):", text))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_name_a_page_cites_is_in_the_repository(page):
    problems = sorted({f"`{t}`: {why}" for t in _ticks(page) if (why := _problem(t))})
    assert not problems, f"{page.relative_to(ROOT)} cites what is not there:\n" + "\n".join(
        problems
    )


def test_every_ledger_table_is_named_where_the_pages_list_the_tables():
    """README's design notes list the ledger's tables ("Tables: ...") and docs/ledger.md
    describes each (a section of its own, or an item of the review tables' list): a table a
    migration added (m010's `ledger_moves`) was missing from README's list, which a reader
    takes for the whole schema."""
    tables = set(_columns())
    readme = re.sub(r"\s+", " ", (ROOT / "README.md").read_text())
    listed = re.search(r"Tables: (.*?)\(`docs/ledger\.md`\)", readme)
    assert listed, "README's design notes no longer list the ledger's tables"
    assert tables - set(re.findall(r"`(\w+)`", listed.group(1))) == set()
    ledger = (ROOT / "docs" / "ledger.md").read_text()
    headed = set(re.findall(r"(?m)^(?:### |- )`(\w+)` ", ledger))
    assert tables - headed == set()


def test_docs_ledger_describes_the_latest_migration_and_every_object_it_made():
    """docs/ledger.md says which migration its schema is after, lists every migration, and names
    every column, index and trigger they make: it said "after `m018`, the latest migration" two
    migrations later (m019's `run_spend` and its triggers, m020's `attempts_in_flight`), and a
    reader takes that sentence for the schema's extent."""
    text = (ROOT / "afc_cli" / "migrations.py").read_text()
    ledger = (ROOT / "docs" / "ledger.md").read_text()
    after = re.search(r"describes the schema after `(m\d+)`, the\s+latest migration", ledger)
    assert after, "docs/ledger.md no longer says which migration its schema is after"
    from afc_cli import migrations

    assert migrations.names()[-1].startswith(after.group(1) + "_"), (
        f"docs/ledger.md describes the schema after {after.group(1)}, "
        f"the latest migration is {migrations.names()[-1]}"
    )
    named = set(re.findall(r"\w+", " ".join(re.findall(r"`([^`\n]+)`", ledger))))
    assert set(migrations.names()) - named == set(), "docs/ledger.md does not list these"
    made = set(re.findall(r"CREATE (?:INDEX|TRIGGER) (\w+)", text))
    made |= {column for columns in _columns().values() for column in columns}
    assert made - named == set(), "docs/ledger.md does not name these"


def _member_rows(text: str, header: str) -> list[str]:
    """The first column's backticked names of the table of ``text`` headed ``header``."""
    table = text[text.index(header) :]
    table = table[: table.find("\n\n") if "\n\n" in table else len(table)]
    return re.findall(r"(?m)^\| `([^`]+)` \|", table)


@pytest.mark.parametrize(
    "header, module, name",
    [
        ("| member | what to do |", "afc_cli.providers.http", "HttpProvider"),
        ("| member | contract |", "afc_cli.storage.base", "Storage"),
    ],
)
def test_extending_tables_name_each_member_as_it_is_called(header, module, name):
    """docs/extending.md's interface tables name each member a new provider or storage backend
    implements, written as it is called (``cancel_answer(request_id, model)``). Their names
    are not dotted, so ``test_every_name_a_page_cites_is_in_the_repository`` never read them:
    a member renamed, or its arguments changed, left a maintainer writing an adapter the
    pipeline never calls (found by outside audit 51b)."""
    import inspect

    cls = getattr(importlib.import_module(module), name)
    text = (ROOT / "docs" / "extending.md").read_text()
    problems = []
    for written in _member_rows(text, header):
        member, paren, args = written.partition("(")
        if not hasattr(cls, member) and member not in getattr(cls, "__annotations__", {}):
            problems.append(f"{written}: {name} has no member {member}")
            continue
        if paren:
            said = [a.split("=")[0].strip() for a in args.rstrip(")").split(",") if a.strip()]
            real = [p for p in inspect.signature(getattr(cls, member)).parameters if p != "self"]
            if said != real:
                problems.append(f"{written}: {name}.{member} takes ({', '.join(real)})")
    assert not problems, "docs/extending.md:\n" + "\n".join(problems)


def test_extending_names_every_field_the_pipeline_hands_an_adapter():
    """docs/extending.md lists what an ``AttemptRequest`` carries and what an
    ``AttemptResult`` carries: a field added to either and left out of the page (the fields
    the pipeline fills for ``HttpProvider``'s fetches were, until d4e4a2b) is one a new
    adapter never reads or never sets."""
    import dataclasses

    from afc_cli.providers import base

    text = (ROOT / "docs" / "extending.md").read_text()
    for cls, start, end in (
        (base.AttemptRequest, "`AttemptRequest` carries", "`AttemptResult` carries"),
        (base.AttemptResult, "`AttemptResult` carries", "`HttpProvider` adds"),
    ):
        said = set(re.findall(r"`(\w+)`", text[text.index(start) : text.index(end)]))
        missing = {f.name for f in dataclasses.fields(cls)} - said
        assert missing == set(), f"docs/extending.md leaves out {cls.__name__}'s {missing}"


def test_extending_names_every_ledger_hook_the_backends_override():
    """docs/extending.md ("Adding a ledger backend") lists what a backend provides or may
    override: a method of ``Ledger`` that postgres.py or sqlite.py overrides and the page
    leaves out is one a new engine's author does not know to write (two audits found the
    page short so: f385689's serialisation hooks, 59b7645's after_copy; then PostgreSQL's
    ``_any_of`` and ``_none_of``, found by outside audit 51b)."""
    from afc_cli.ledger import core, postgres, sqlite

    text = (ROOT / "docs" / "extending.md").read_text()
    named = set(re.findall(r"\w+", " ".join(re.findall(r"`([^`\n]+)`", text))))
    missing = {
        f"{cls.__name__}.{name}"
        for module in (postgres, sqlite)
        for cls in vars(module).values()
        if isinstance(cls, type) and issubclass(cls, core.Ledger) and cls is not core.Ledger
        for name in vars(cls)
        if name in vars(core.Ledger) and not name.startswith("__") and name not in named
    }
    assert missing == set(), "docs/extending.md does not name these"


def _code_citations(path: Path) -> list[tuple[int, str]]:
    """The ``double-backticked`` names, the repository paths and the members of afc's classes
    (``Ledger.claim``, backticked or not) a module's comments and docstrings cite, with their
    lines."""
    import io
    import tokenize

    found = []
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        string = token.string
        if token.type == tokenize.STRING and not string.lstrip("rbuRBU").startswith('"""'):
            continue
        if token.type not in (tokenize.COMMENT, tokenize.STRING):
            continue
        cited = re.findall(r"``([^`\n]+)``", string)
        cited += re.findall(
            r"(?<![\w/.])((?:afc_cli|tests|bench|docs|examples)/[\w/.-]+\.\w+)", string
        )
        # and a class's member named without backticks (Ledger.claim)
        cited += [
            name
            for name in re.findall(r"(?<![\w.`])([A-Z]\w*\.[a-z_]\w*)(?![\w`])", string)
            if name.split(".")[0] in _classes()
        ]
        found += [(token.start[0], name.rstrip(".,;:")) for name in cited]
    return found


def test_every_name_the_code_cites_in_its_comments_is_in_the_repository():
    """afc_cli's comments and docstrings cite functions, members and files as the pages do
    (``HttpProvider.call_timeout``, afc_cli/pipeline.py), for the reader who follows them: a
    rename left ``HttpProvider.window_timeout`` in afc_cli/ops.py and
    ``Ledger.record_output_url`` in m015's comment, names no reader could find (found by
    outside audit 54c)."""
    problems = sorted(
        f"{path.relative_to(ROOT)}:{line}: `{name}`: {why}"
        for path in _trees()
        if path.parts[len(ROOT.parts)] == "afc_cli"
        for line, name in _code_citations(path)
        if (why := _problem(name))
    )
    assert not problems, "the code cites what is not there:\n" + "\n".join(problems)


def test_nothing_in_the_repository_cites_a_path_outside_it():
    """docs/README.md: "Cite nothing outside the repository: its next maintainers will have
    only the repository." A test's docstring cited the project's notes beside the checkout by
    path (found by outside audit 54c)."""
    import subprocess

    outside = re.compile("/work/" + "shared|\\.\\./" + "shared")
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    cited = [
        name
        for name in files
        if (ROOT / name).is_file()
        and outside.search((ROOT / name).read_bytes().decode("utf-8", "replace"))
    ]
    assert cited == [], f"these cite a path outside the repository: {cited}"


def test_readme_shows_the_example_manifests_as_they_are():
    """README quotes an example manifest of examples/ where it names one just before its YAML
    block; a reader runs the file and reads its output against the text. The review gates'
    block had lost the file's rate card, so the cost 'afc review list' shows came from a line
    the page did not have (found by outside audit 54c)."""
    import yaml

    readme = (ROOT / "README.md").read_text()
    quoted = re.findall(r"\(`(examples/[\w-]+\.yaml)`[^()]*\):\n\n```yaml\n(.*?)```", readme, re.S)
    assert quoted, "README no longer quotes an example manifest"
    for path, block in quoted:
        assert yaml.safe_load(block) == yaml.safe_load((ROOT / path).read_text()), path


@pytest.mark.parametrize(
    "name, module, function, unit",
    [
        ("AFC_MAX_INTERRUPTS", "afc_cli.run", "max_interrupts", 1),
        ("AFC_LEASE_S", "afc_cli.run", "lease_seconds", 1),
        ("AFC_POLL_S", "afc_cli.run", "poll_seconds", 1),
        ("AFC_MIN_FREE_MB", "afc_cli.run", "min_free_bytes", 2**20),
        ("AFC_PG_STALL_S", "afc_cli.ledger.postgres", "stall_seconds", 1),
    ],
)
def test_the_defaults_the_pages_give_a_setting_are_the_codes(
    name, module, function, unit, monkeypatch
):
    """README and docs/ state each run setting's default (a job whose runs keep
    dying mid-call is dead-lettered after AFC_MAX_INTERRUPTS, default 5), and a person sizes a
    cron job or a lease by them; no test read them, each test setting its own value."""
    monkeypatch.delenv(name, raising=False)
    said = set()
    for page in PAGES:
        text = re.sub(r"\s+", " ", page.read_text())
        said |= {
            float(figure)
            for figure in re.findall(
                rf"`{name}`[^.;`]{{0,30}}?(?:default:? ([\d.]+)|([\d.]+) s by default)", text
            )
            for figure in figure
            if figure
        }
    assert said, f"no page gives {name}'s default"
    default = getattr(importlib.import_module(module), function)() / unit
    assert said == {default}, f"the pages give {name}'s default as {said}, afc's is {default}"
