"""What a file tool answers names paths as the model gave them, never where the workspace is.

The tools work on resolved, absolute paths; an error that quoted one would show the
model the host's layout (``/home/alice/project/...``), which it has no use for, and
carry it into the provider's logs.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
from nanobot_core.tools.workspace import open_folder
from tests.tools.support import CAN_BE_REFUSED, path_parts, planted, run, run_unprivileged

#: Each tool with the arguments it needs besides `path`.
_TOOLS: list[tuple[type[WorkspaceTool], dict[str, Any]]] = [
    (ReadFileTool, {}),
    (WriteFileTool, {"content": "x"}),
    (EditFileTool, {"old_text": "a", "new_text": "b"}),
    (ListDirTool, {}),
    (FindFilesTool, {"pattern": "*"}),
    (GrepTool, {"pattern": "a"}),
]

_IDS = [tool.name for tool, _ in _TOOLS]


def _called(tool: WorkspaceTool, **arguments: Any) -> Callable[[], ToolResult]:
    """The call as the model makes it (grep: its search, as the child process runs it)."""
    if isinstance(tool, GrepTool):
        return lambda: _contained(tool.search, **arguments)
    return lambda: run(tool.execute(**arguments))


@pytest.mark.parametrize(("tool", "arguments"), _TOOLS, ids=_IDS)
@pytest.mark.parametrize("path", ["../elsewhere.txt", "/etc/passwd", "src/../../x"])
def test_a_path_outside_is_refused_without_saying_where_the_workspace_is(
    workspace: Path, tool: type[WorkspaceTool], arguments: dict[str, Any], path: str
) -> None:
    """A path out of the workspace is refused by its name alone, the workspace's place unsaid."""
    result = _called(tool(workspace), path=path, **arguments)()
    assert result == (
        f"Error: path {path!r} points outside the workspace; "
        "use a path inside the workspace, relative to it"
    )
    assert str(workspace.resolve()) not in result


@pytest.mark.parametrize(("tool", "arguments"), _TOOLS, ids=_IDS)
@pytest.mark.parametrize("path", ["a" * 300, "src/" + "b" * 300, "c" * 300 + "/d.txt"])
def test_a_name_too_long_is_named_relative_to_the_workspace(
    workspace: Path, tool: type[WorkspaceTool], arguments: dict[str, Any], path: str
) -> None:
    """The system's "File name too long" names the path from the workspace, as the model gave it."""
    result = _called(tool(workspace), path=path, **arguments)()
    assert result.is_error
    assert str(workspace.resolve()) not in result
    # Clipped to its head and tail: the head is the path's own beginning.
    assert result.startswith(f"Error: File name too long: {path[:60]}")


def test_an_os_error_naming_a_file_inside_is_answered_with_its_relative_path(
    workspace: Path,
) -> None:
    """A folder gone between its check and its open is named from the workspace, not the host."""

    class Lister(ListDirTool):
        def run(self, path: str = ".") -> ToolResult:
            # The folder was checked, then removed: open_folder names it by its absolute path.
            with open_folder(self.workspace, self.workspace / "gone" / "deeper"):
                return ToolResult("listed")

    result = run(Lister(workspace).execute())
    assert result == "Error: no such folder: gone"


def test_an_os_error_naming_a_file_outside_is_answered_as_it_is(workspace: Path) -> None:
    """Only paths inside the workspace are made relative: another is named as the error gives it."""

    class Opener(ReadFileTool):
        def run(self, *args: Any, **kwargs: Any) -> ToolResult:
            raise FileNotFoundError(2, "No such file or directory", "/nonexistent/x")

    assert run(Opener(workspace).execute()) == "Error: No such file or directory: /nonexistent/x"


@settings(max_examples=30, deadline=None)
@given(
    name=st.text(
        st.characters(codec="utf-8", exclude_characters="/\x00", exclude_categories=("Cs",)),
        min_size=1,
        max_size=300,
    ).filter(lambda name: name not in {".", ".."}),
    index=st.integers(0, len(_TOOLS) - 1),
)
def test_no_answer_to_any_name_says_where_the_workspace_is(name: str, index: int) -> None:
    """Whatever file name the model gives, no tool's answer holds the workspace's location."""
    tool, arguments = _TOOLS[index]
    with planted([(("src", "a.py"), "file")], "secret.txt") as (root, _):
        # And a name past the system's limit (255 bytes), which the system's error names.
        long = name * (256 // len(name) + 1)
        for path in (name, f"src/{name}", f"{name}/x", long, f"src/{long}"):
            result = _called(tool(root), path=path, **arguments)()
            assert str(root) not in result


@pytest.mark.parametrize(
    ("child", "said"),
    [
        (
            "import json\ndef fail():\n    raise RuntimeError('out of memory')\nfail()\n",
            "the search failed: RuntimeError: out of memory",
        ),
        (
            "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
            "the search failed: the search process was killed by signal 9 (SIGKILL)",
        ),
        ("import sys\nsys.exit(3)\n", "the search process ended with exit code 3"),
    ],
)
def test_a_failed_grep_child_is_named_by_its_error_not_its_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, child: str, said: str
) -> None:
    """The model hears the child's error or signal, never a traceback naming host paths."""
    from nanobot_core.tools import builtin

    (tmp_path / "a.txt").write_text("hit\n", encoding="utf-8")
    monkeypatch.setattr(builtin, "_CHILD_CODE", child)
    result = run(builtin.GrepTool(tmp_path).execute(pattern="hit"))
    assert result.is_error
    assert said in str(result)
    assert "Traceback" not in str(result) and 'File "' not in str(result)


_PARTS = path_parts(min_size=1)


@settings(max_examples=40, deadline=None)
@given(parts=_PARTS, refused=st.integers(0, 3), index=st.integers(0, 2))
def test_a_refused_open_names_the_path_from_the_workspace_not_its_last_part(
    parts: list[str], refused: int, index: int
) -> None:
    """The system refusing one part of a path (opened relative to its folder, which names only
    that part) is answered with the path from the workspace down to that part, as given."""
    tool = (WriteFileTool, ReadFileTool, EditFileTool)[index]
    arguments = ({"content": "x"}, {}, {"old_text": "a", "new_text": "b"})[index]
    refused = min(refused, len(parts) - 1)
    real_open = os.open

    def open_refusing(path: Any, flags: int, *args: Any, dir_fd: int | None = None) -> int:
        # As the kernel answers a folder or file this user may not open or make.
        if dir_fd is not None and path == parts[refused]:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, *args, dir_fd=dir_fd)

    with planted([], "secret.txt") as (root, _):
        folder = root.joinpath(*parts[:-1])
        folder.mkdir(parents=True, exist_ok=True)
        root.joinpath(*parts).write_text("a", encoding="utf-8")
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(os, "open", open_refusing)
            result = run(tool(root).execute(path="/".join(parts), **arguments))
    assert result == f"Error: Permission denied: {'/'.join(parts[: refused + 1])}"
    assert str(root) not in result


_REFUSED_CALLS = """
import asyncio, sys
from pathlib import Path
from nanobot_core.tools.builtin import EditFileTool, ReadFileTool, WriteFileTool

calls = [
    (WriteFileTool, {"path": "locked/new.txt", "content": "x"}),
    (WriteFileTool, {"path": "./locked/deeper/new.txt", "content": "x"}),
    (ReadFileTool, {"path": "open/private.txt"}),
    (EditFileTool, {"path": "open/../open/private.txt", "old_text": "a", "new_text": "b"}),
]
for tool, arguments in calls:
    print(asyncio.run(tool(Path(sys.argv[1])).execute(**arguments)))
"""


@pytest.mark.skipif(not CAN_BE_REFUSED, reason="root, and no setpriv to drop its capabilities")
def test_a_permission_denied_names_the_path_from_the_workspace(tmp_path: Path) -> None:
    """A file or folder the system refuses to open or make (real permission bits) is named
    from the workspace, never by its last part alone, nor by where the workspace is."""
    root = tmp_path / "ws"
    (root / "locked").mkdir(parents=True)
    (root / "open").mkdir()
    (root / "open" / "private.txt").write_text("a", encoding="utf-8")
    (root / "locked").chmod(0o555)
    (root / "open" / "private.txt").chmod(0o000)
    try:
        done = run_unprivileged(_REFUSED_CALLS, str(root), cwd=tmp_path)
    finally:
        (root / "locked").chmod(0o755)
        (root / "open" / "private.txt").chmod(0o644)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "Error: Permission denied: locked/new.txt",
        "Error: Permission denied: locked/deeper",
        "Error: Permission denied: open/private.txt",
        "Error: Permission denied: open/private.txt",
    ]
