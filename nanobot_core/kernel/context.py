"""Value types handed to plugin hooks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from nanobot_core.config import Config


@attrs.frozen
class PluginContext:
    """What every hook receives: the workspace directory and the loaded configuration."""

    workspace: Path
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
