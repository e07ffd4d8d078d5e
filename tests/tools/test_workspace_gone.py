"""A workspace folder removed, moved or replaced after the tools were made: each tool says so.

Before, each answered with whatever the folder's absence made fail: ``No such
file or directory: .`` (write_file), ``file not found: notes.txt`` (read_file),
``directory not found: .`` (list_dir, find_files), or, for a search that found
the folder gone midway, ``No matches`` as if the tree had been searched.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nanobot_core.tools.base import ToolResult
from nanobot_core.tools.builtin import (
    EditFileTool,
    FindFilesTool,
    GrepTool,
    ListDirTool,
    ReadFileTool,
    WorkspaceTool,
    WriteFileTool,
    _contained,
)
from tests.tools.support import CAN_BE_REFUSED, WORKSPACE_GONE, run, run_unprivileged

GONE = WORKSPACE_GONE

#: Each tool with arguments that work in the workspace while it is there.
TOOLS: list[tuple[type[WorkspaceTool], dict[str, Any]]] = [
    (ReadFileTool, {"path": "notes.txt"}),
    (WriteFileTool, {"path": "src/new.txt", "content": "x"}),
    (EditFileTool, {"path": "notes.txt", "old_text": "alpha", "new_text": "omega"}),
    (ListDirTool, {"path": "."}),
    (FindFilesTool, {"pattern": "**/*"}),
    (GrepTool, {"pattern": "a"}),
]
IDS = [tool.name for tool, _ in TOOLS]


def _removed(workspace: Path) -> None:
    shutil.rmtree(workspace)


def _moved(workspace: Path) -> None:
    workspace.rename(workspace.with_name("moved"))


def _replaced_by_a_file(workspace: Path) -> None:
    shutil.rmtree(workspace)
    workspace.write_text("not a folder", encoding="utf-8")


def _replaced_by_a_link(workspace: Path) -> None:
    # To a folder holding the same names: the tools must not work there instead.
    _moved(workspace)
    workspace.symlink_to(workspace.with_name("moved"), target_is_directory=True)


def _parent_removed(workspace: Path) -> None:
    shutil.rmtree(workspace.parent)


WAYS: dict[str, Callable[[Path], None]] = {
    "removed": _removed,
    "moved": _moved,
    "replaced by a file": _replaced_by_a_file,
    "replaced by a link": _replaced_by_a_link,
    "its parent removed": _parent_removed,
}


def _called(tool: WorkspaceTool, arguments: dict[str, Any]) -> ToolResult:
    """The call as the agent makes it (grep: also its search, as its child process runs it)."""
    result = run(tool.execute(**arguments))
    if isinstance(tool, GrepTool):
        assert _contained(tool.search, **arguments) == result
    return result


@pytest.mark.parametrize(("tool", "arguments"), TOOLS, ids=IDS)
@pytest.mark.parametrize("way", list(WAYS))
def test_every_tool_says_the_workspace_folder_is_gone(
    tmp_path: Path, tool: type[WorkspaceTool], arguments: dict[str, Any], way: str
) -> None:
    """Whatever took the folder away, each tool answers that it is gone, not where it was."""
    workspace = tmp_path / "project" / "ws"
    (workspace / "src").mkdir(parents=True)
    (workspace / "notes.txt").write_text("alpha\n", encoding="utf-8")
    made = tool(workspace)
    assert not _called(made, arguments).is_error  # the arguments work while it is there
    (workspace / "src" / "new.txt").unlink(missing_ok=True)  # what write_file wrote then
    WAYS[way](workspace)
    result = _called(made, arguments)
    assert result == GONE and result.is_error
    assert str(tmp_path) not in result
    assert not (tmp_path / "project" / "moved" / "src" / "new.txt").exists()


def test_a_workspace_back_in_its_place_is_worked_in_again(tmp_path: Path) -> None:
    """The answer is about now: once the folder is back, the same tool works in it."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    tool = WriteFileTool(workspace)
    workspace.rmdir()
    assert run(tool.execute(path="a.txt", content="x")) == GONE
    workspace.mkdir()
    assert run(tool.execute(path="a.txt", content="x")) == "Wrote 1 characters to a.txt."


def test_a_call_that_fails_as_the_workspace_goes_says_it_is_gone(tmp_path: Path) -> None:
    """Removed after the call began: its failure (``No such file or directory: .``) is
    answered as the workspace being gone."""
    workspace = tmp_path / "ws"
    workspace.mkdir()

    class Writer(WriteFileTool):
        def run(self, path: str, content: str) -> ToolResult:
            workspace.rmdir()
            return super().run(path, content)

    assert run(Writer(workspace).execute(path="a.txt", content="x")) == GONE


def test_a_search_that_finds_the_workspace_gone_midway_says_so_not_no_matches(
    tmp_path: Path,
) -> None:
    """A walk that goes on after the folder went finds nothing more: not "No matches"."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for name in ("a.txt", "b.txt"):
        (workspace / name).write_text("no hit here\n", encoding="utf-8")

    class Searcher(GrepTool):
        def _search(self, file: Path, regex: Any, read: Any) -> Iterator[str]:
            shutil.rmtree(workspace, ignore_errors=True)
            yield from ()

    assert _contained(Searcher(workspace).search, pattern="zzz") == GONE


def test_a_workspace_that_cannot_be_reached_is_named_by_why(tmp_path: Path) -> None:
    """A folder above it the system cannot go through (here a loop of links): why, not "gone"."""
    workspace = tmp_path / "above" / "ws"
    workspace.mkdir(parents=True)
    tool = ListDirTool(workspace)
    shutil.rmtree(tmp_path / "above")
    (tmp_path / "above").symlink_to(tmp_path / "above")
    result = run(tool.execute())
    assert result == (
        "Error: the workspace folder cannot be reached (Too many levels of symbolic links): "
        "no file can be read, written, listed or searched until it can; tell the user"
    )
    assert str(tmp_path) not in result


_LOCKED = """
import asyncio, sys
from pathlib import Path
from nanobot_core.tools.builtin import ListDirTool, ReadFileTool

workspace = Path(sys.argv[1])
tools = [ListDirTool(workspace), ReadFileTool(workspace)]
locked = workspace if sys.argv[2] == "itself" else workspace.parent
locked.chmod(0o000)
print(asyncio.run(tools[0].execute()))
print(asyncio.run(tools[1].execute(path="notes.txt")))
"""


@pytest.mark.skipif(not CAN_BE_REFUSED, reason="root, and no setpriv to drop its capabilities")
@pytest.mark.parametrize("locked", ["itself", "a folder above it"])
def test_a_workspace_closed_since_is_named_by_the_refusal(tmp_path: Path, locked: str) -> None:
    """The folder, or one above it, made unsearchable (real permission bits): "cannot be
    reached (Permission denied)" from every tool, not a refusal of the path given."""
    workspace = tmp_path / "above" / "ws"
    workspace.mkdir(parents=True)
    (workspace / "notes.txt").write_text("a\n", encoding="utf-8")
    try:
        done = run_unprivileged(_LOCKED, str(workspace), locked, cwd=tmp_path)
    finally:
        (tmp_path / "above").chmod(0o755)
        workspace.chmod(0o755)
    assert done.returncode == 0, done.stderr
    assert done.stdout == 2 * (
        "Error: the workspace folder cannot be reached (Permission denied): "
        "no file can be read, written, listed or searched until it can; tell the user\n"
    )
