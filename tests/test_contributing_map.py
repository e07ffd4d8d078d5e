"""CONTRIBUTING.md's map of the code names every module of nanobot_core, and only real ones."""

from __future__ import annotations

import re

from tests.helpers import REPO_ROOT

PACKAGE = REPO_ROOT / "nanobot_core"
_ENTRY = re.compile(r"^  (\S+)(?:\s+(.*))?$")
_CONTINUATION = re.compile(r"^ {3,}(\S.*)$")
_MODULE = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*\.py)\b")


def _map_block() -> list[str]:
    text = (REPO_ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    layout = text.split("## Layout", 1)[1]
    block = layout.split("```", 2)[1]
    return block.splitlines()


def mapped_modules(lines: list[str]) -> set[str]:
    """The module paths (relative to nanobot_core/) that the map's lines name."""
    found: set[str] = set()
    inside = False
    folder = ""
    for line in lines:
        if line == "nanobot_core/":
            inside = True
            continue
        if inside and line and not line.startswith(" "):
            break
        entry = _ENTRY.match(line)
        if entry and not _CONTINUATION.match(line):
            name, rest = entry.group(1), entry.group(2) or ""
            if name.endswith("/"):
                folder = name
                found.update(folder + m for m in _MODULE.findall(rest))
            else:
                folder = ""
                found.add(name)
            continue
        more = _CONTINUATION.match(line)
        if more and folder:
            found.update(folder + m for m in _MODULE.findall(more.group(1)))
    return found


def real_modules() -> set[str]:
    """Every Python module under nanobot_core/, relative to it (templates are not modules)."""
    return {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "templates" not in path.relative_to(PACKAGE).parts
    }


def test_every_module_is_in_the_map() -> None:
    """A module that exists but is not named in CONTRIBUTING.md's map fails."""
    missing = sorted(real_modules() - mapped_modules(_map_block()))
    assert missing == [], f"add these to CONTRIBUTING.md's Layout: {missing}"


def test_every_mapped_module_exists() -> None:
    """A module named in CONTRIBUTING.md's map that does not exist fails."""
    stale = sorted(mapped_modules(_map_block()) - real_modules())
    assert stale == [], f"CONTRIBUTING.md's Layout names modules that do not exist: {stale}"


def test_the_map_reader_sees_folders_and_continuations() -> None:
    """The reader attributes a continuation line's modules to the folder entry above it."""
    lines = [
        "nanobot_core/",
        "  a.py             top",
        "  pkg/             x.py (first),",
        "                   y.py; __init__.py",
        "  pkg/sub/         z.py",
        "other/             not.py",
    ]
    assert mapped_modules(lines) == {
        "a.py",
        "pkg/x.py",
        "pkg/y.py",
        "pkg/__init__.py",
        "pkg/sub/z.py",
    }


def _folder_texts(lines: list[str]) -> dict[str, str]:
    """Each folder entry of the map (``kernel/``) and its text, continuation lines joined."""
    texts: dict[str, str] = {}
    folder = ""
    for line in lines:
        entry = _ENTRY.match(line)
        if entry and not _CONTINUATION.match(line):
            folder = entry.group(1) if entry.group(1).endswith("/") else ""
            if folder:
                texts[folder] = entry.group(2) or ""
        elif (more := _CONTINUATION.match(line)) and folder:
            texts[folder] += " " + more.group(1)
    return texts


_NAMED = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*\.py) \(([^)]*)\)")
_CODE_NAME = re.compile(r"^(?:also )?@?([A-Za-z_][A-Za-z0-9_]*)$")


def named_in_modules(lines: list[str]) -> set[tuple[str, str]]:
    """(module, name) for each code name the map puts in parentheses after a module."""
    found: set[tuple[str, str]] = set()
    for folder, text in _folder_texts(lines).items():
        for module, inside in _NAMED.findall(text):
            for item in inside.split(","):
                name = _CODE_NAME.match(item.strip())
                code = name and (
                    item.strip().startswith("@") or name.group(1) != name.group(1).lower()
                )
                if name and (code or "_" in name.group(1)):
                    found.add((folder + module, name.group(1)))
    return found


def _defines(module: str, name: str) -> bool:
    """Whether the module (relative to nanobot_core/) defines `name`, at top level or in a class."""
    source = (PACKAGE / module).read_text(encoding="utf-8")
    pattern = rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b|^{name}\s*[:=]"
    return re.search(pattern, source, re.MULTILINE) is not None


def test_the_names_the_map_gives_a_module_live_there() -> None:
    """`records.py (PluginInfo, ...)`: each code name the map gives a module is defined in it."""
    named = named_in_modules(_map_block())
    assert ("kernel/records.py", "PluginInfo") in named
    assert ("tools/_function.py", "run_in_daemon_thread") in named
    assert sorted(pair for pair in named if not _defines(*pair)) == []


def test_the_map_reader_takes_code_names_not_prose() -> None:
    """Only identifiers (CamelCase, snake_case or a decorator) in parentheses count as names."""
    lines = [
        "nanobot_core/",
        "  pkg/             a.py (Thing, the_func,",
        "                   @deco), b.py (pipeline), c.py (also run_x, a turn's loop)",
    ]
    assert named_in_modules(lines) == {
        ("pkg/a.py", "Thing"),
        ("pkg/a.py", "the_func"),
        ("pkg/a.py", "deco"),
        ("pkg/c.py", "run_x"),
    }


def test_each_context_type_lives_where_contributing_says() -> None:
    """Each `*Context` CONTRIBUTING.md places is defined in that module and exported."""
    import nanobot_core

    text = (REPO_ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    placed = re.findall(r"`(\w+Context)`(?:[^`]|`[A-Z]\w*`)*?in\s+`([\w/]+\.py)`", text)
    assert {name for name, _ in placed} == {"PluginContext", "StageContext", "SectionContext"}
    assert [(n, m) for n, m in placed if not _defines(m, n)] == []
    assert {name for name, _ in placed} <= set(nanobot_core.__all__)


def test_the_kernel_package_imports_nothing() -> None:
    """kernel/__init__.py, as the map says, imports nothing."""
    import ast

    tree = ast.parse((PACKAGE / "kernel" / "__init__.py").read_text(encoding="utf-8"))
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]
    assert [node for node in imports if not _is_future(node)] == []


def _is_future(node: object) -> bool:
    import ast

    return isinstance(node, ast.ImportFrom) and node.module == "__future__"


def test_each_cli_subcommand_has_its_module() -> None:
    """_commands/ holds one module per subcommand of the CLI, and besides them only _waiting."""
    from nanobot_core.cli import COMMANDS

    modules = {path.stem for path in (PACKAGE / "_commands").glob("*.py")}
    assert modules - {"__init__", "_waiting"} == set(COMMANDS.values())


def test_the_folders_outside_the_package_are_as_the_map_says() -> None:
    """Each plugin distribution has its pyproject and tests; tests/ has the folders listed."""
    distributions = [p for g in ("plugins", "contrib") for p in (REPO_ROOT / g).iterdir()]
    assert distributions
    for folder in distributions:
        assert (folder / "pyproject.toml").is_file() and (folder / "tests").is_dir(), folder
    block = "\n".join(_map_block())
    listed = re.search(r"^tests/\s+(.*?)^tests/data/", block, re.MULTILINE | re.DOTALL)
    assert listed
    named = set(re.findall(r"(\w+)/", listed.group(1)))
    real = {p.name for p in (REPO_ROOT / "tests").iterdir() if (p / "__init__.py").is_file()}
    assert named == real
    assert (REPO_ROOT / "bench" / "RESULTS.md").is_file()
