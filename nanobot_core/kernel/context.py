"""Value types handed to plugin hooks."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import attrs

from nanobot_core.config import Config


def as_path(value: str | os.PathLike[str]) -> Path:
    """A workspace given as a str (or any path-like) as the `Path` the code joins paths onto;
    what is no path is a `TypeError` naming the workspace."""
    if isinstance(value, Path):
        return value
    if not isinstance(value, str | os.PathLike):
        raise TypeError(f"workspace must be a path (Path or str), got {type(value).__name__}")
    return Path(value)


def workspace_problem(path: Path, *, missing_ok: bool = False) -> str | None:
    """Why `path` is no workspace, in words that follow it in a message; None when it is one.

    "does not exist" (None with `missing_ok`: a folder can still be made
    there, nothing above it being a file), "is not a folder", "is below a
    file, where no folder can be made", or "cannot be used: REASON" (a loop
    of symbolic links, a name too long, a folder above it that cannot be
    searched, a folder that cannot be read).
    """
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return None if missing_ok else "does not exist"
    except NotADirectoryError:
        return "is below a file, where no folder can be made"
    except OSError as exc:
        return f"cannot be used: {exc.strerror or exc}"
    if not stat.S_ISDIR(status.st_mode):
        return "is not a folder"
    if not os.access(path, os.R_OK | os.X_OK):
        return "cannot be used: its files cannot be read (permission denied)"
    return None


@attrs.frozen
class PluginContext:
    """What every hook receives: the workspace directory and the loaded configuration."""

    # A str is taken as the path it names: hooks join paths onto it.
    workspace: Path = attrs.field(converter=as_path)
    config: Config = attrs.field(factory=Config)

    @classmethod
    def default(cls, workspace: Path | str | None = None) -> PluginContext:
        """Build a context for `workspace` (default: the working directory) with default config."""
        return cls(workspace=Path(workspace or Path.cwd()).resolve())


@attrs.define
class ToolCallEvent:
    """One tool call as seen by the before/after tool-call hooks."""

    tool: str
    arguments: dict[str, Any]
    call_id: str = ""
    duration: float | None = None
    plugin: str = ""
