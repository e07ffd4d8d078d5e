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
