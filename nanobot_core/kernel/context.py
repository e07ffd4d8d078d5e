"""Value types handed to plugin hooks."""

from __future__ import annotations

import os
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
