"""Path confinement for workspace tools: every path a model names must stay inside the workspace."""

from __future__ import annotations

from pathlib import Path

from nanobot_core.errors import WorkspaceEscapeError

__all__ = ["relative_display", "resolve_in_workspace"]


def resolve_in_workspace(workspace: Path, user_path: str) -> Path:
    """The absolute, symlink-resolved path for `user_path`, or `WorkspaceEscapeError`.

    Relative paths are taken from the workspace; absolute paths are allowed
    only when they point inside it. The check runs after resolving symlinks
    and ``..``, so a link inside the workspace that points out is refused too.
    """
    root = workspace.resolve()
    if "\x00" in user_path:
        raise WorkspaceEscapeError(f"path {user_path!r} contains a NUL character")
    target = (root / user_path).resolve()
    if not target.is_relative_to(root):
        raise WorkspaceEscapeError(
            f"path {user_path!r} points outside the workspace ({root}); "
            "use a path inside the workspace"
        )
    return target


def relative_display(workspace: Path, path: Path) -> str:
    """How a resolved path inside the workspace is shown to the model: relative, with '/'."""
    relative = path.relative_to(workspace.resolve())
    return relative.as_posix() if relative.parts else "."
