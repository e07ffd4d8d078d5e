"""Every table of the repository's Markdown renders as written: each row has its header's cells.

A ``|`` inside a code span still ends a table cell (GitHub's tables read it before the
spans), so a row quoting ``--kind tool|stage`` without escaping it as ``\\|`` falls
apart into more cells than its header has.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT

# A cell ends at every pipe a backslash does not escape, in a code span too.
_CELL_END = re.compile(r"(?<!\\)\|")


def _pages() -> list[str]:
    """Every tracked Markdown file but the third-party data's."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "*.md"], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and not name.startswith("tests/data/")]


def _cells(row: str) -> int:
    """How many cells GitHub reads in table row `row` (its outer pipes are no cells)."""
    return len(_CELL_END.split(row.strip().removeprefix("|").removesuffix("|")))


def _misshapen_rows(text: str) -> list[str]:
    """Each row of a table in `text`, outside fenced blocks, whose cells are not its header's."""
    found: list[str] = []
    fenced = False
    header: int | None = None
    for number, line in enumerate(text.split("\n"), start=1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced or not line.startswith("|"):
            header = None
            continue
        if header is None:
            header = _cells(line)
        elif _cells(line) != header:
            found.append(f"line {number}: {_cells(line)} cells, its header {header}")
    return found


@pytest.mark.parametrize("page", _pages())
def test_every_table_row_has_its_headers_cells(page: str) -> None:
    """No row of a table has more or fewer cells than its header (a `|` unescaped in code)."""
    assert _misshapen_rows((REPO_ROOT / page).read_text(encoding="utf-8")) == []


def test_a_pipe_in_code_is_a_cell_end_unless_escaped() -> None:
    """The reader counts `a|b` in a code span as two cells and `a\\|b` as one, as GitHub does."""
    table = "| flag | what |\n|---|---|\n| `--kind a\\|b` | ok |\n| `--kind a|b` | split |\n"
    assert _misshapen_rows(table) == ["line 4: 3 cells, its header 2"]
    assert _misshapen_rows("```\n| a | b |\n| c |\n```\n") == []


def test_the_pages_include_the_readmes_and_docs() -> None:
    """The check covers the README, docs/, the plugins' and the bench's pages."""
    pages = set(_pages())
    assert {"README.md", "docs/headless.md", "bench/README.md"} <= pages
    assert any(Path(page).parts[0] == "contrib" for page in pages)
