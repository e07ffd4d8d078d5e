"""Workspace confinement: `..`, absolute paths and symlinks out are refused, by every built-in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nanobot_core.builtins.workspace_tools import nanobot_tools
from nanobot_core.errors import WorkspaceEscapeError
from nanobot_core.kernel.context import PluginContext
from nanobot_core.tools.base import Tool
from nanobot_core.tools.workspace import resolve_in_workspace
from tests.tools.support import SECRET, run


def test_paths_inside_resolve(workspace: Path) -> None:
    """Relative paths, inner `..` and absolute paths inside the workspace are allowed."""
    root = workspace.resolve()
    assert resolve_in_workspace(workspace, "notes.txt") == root / "notes.txt"
    assert resolve_in_workspace(workspace, "src/../notes.txt") == root / "notes.txt"
    assert resolve_in_workspace(workspace, str(root / "src")) == root / "src"
    assert resolve_in_workspace(workspace, "new/dir/file.txt") == root / "new/dir/file.txt"
    assert resolve_in_workspace(workspace, "") == root


@pytest.mark.parametrize(
    "user_path",
    ["../outside/secret.txt", "src/../../outside", "link_dir/secret.txt", "link_file", "a\x00b"],
)
def test_escapes_are_refused(workspace: Path, user_path: str) -> None:
    """`..` out of the root, symlinks pointing out, and NUL bytes raise WorkspaceEscapeError."""
    with pytest.raises(WorkspaceEscapeError):
        resolve_in_workspace(workspace, user_path)


def test_absolute_path_elsewhere_is_refused(workspace: Path, outside: Path) -> None:
    """An absolute path outside the workspace is refused with a message naming it."""
    with pytest.raises(WorkspaceEscapeError, match="points outside the workspace"):
        resolve_in_workspace(workspace, str(outside / "secret.txt"))


def _escapes(outside: Path) -> dict[str, list[dict[str, Any]]]:
    """For each built-in tool, argument sets that each try to leave the workspace."""
    absolute_file = str(outside / "secret.txt")
    files = ["../outside/secret.txt", absolute_file, "link_dir/secret.txt", "link_file"]
    dirs = ["../outside", str(outside), "link_dir", ".."]
    return {
        "read_file": [{"path": p} for p in files],
        "list_dir": [{"path": p} for p in dirs],
        "find_files": [{"pattern": "*", "path": p} for p in dirs]
        + [{"pattern": "../outside/*"}, {"pattern": absolute_file}],
        "grep": [{"pattern": "SECRET", "path": p} for p in files + dirs],
        "write_file": [{"path": p, "content": "pwned"} for p in files],
        "edit_file": [{"path": p, "old_text": SECRET, "new_text": "pwned"} for p in files],
    }


def _tools(ctx: PluginContext) -> dict[str, Tool]:
    return {t.name: t for t in nanobot_tools(ctx)}


@pytest.mark.parametrize(
    "tool_name", ["read_file", "list_dir", "find_files", "grep", "write_file", "edit_file"]
)
def test_every_builtin_refuses_escapes(tool_name: str, ctx: PluginContext, outside: Path) -> None:
    """Each escape attempt is an Error result that reveals and changes nothing outside."""
    tool = _tools(ctx)[tool_name]
    for arguments in _escapes(outside)[tool_name]:
        result = run(tool.execute(**arguments))
        assert result.is_error, (tool_name, arguments, str(result))
        assert "outside the workspace" in result or "must be relative" in result
        assert "Traceback" not in result, (tool_name, arguments, str(result))
        assert SECRET not in result
    assert (outside / "secret.txt").read_text(encoding="utf-8") == f"{SECRET}\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


@pytest.mark.parametrize("user_path", ["..", "link_dir", "a\x00b"])
def test_grep_refuses_an_escape_with_the_resolvers_message(
    ctx: PluginContext, user_path: str
) -> None:
    """grep's search process answers a path out of the workspace as the other tools do."""
    with pytest.raises(WorkspaceEscapeError) as refused:
        resolve_in_workspace(ctx.workspace, user_path)
    result = run(_tools(ctx)["grep"].execute(pattern="SECRET", path=user_path))
    assert result.is_error
    assert result == f"Error: {refused.value}"


def test_search_from_the_root_skips_links_out(ctx: PluginContext) -> None:
    """grep and find_files over the whole workspace never follow a symlink out."""
    tools = _tools(ctx)
    grep = run(tools["grep"].execute(pattern="SECRET"))
    assert SECRET not in grep and not grep.is_error
    found = run(tools["find_files"].execute(pattern="**/*"))
    assert "secret.txt" not in found and "src/main.py" in found
    listed = run(tools["find_files"].execute(pattern="link_dir/*"))
    assert "secret.txt" not in listed
