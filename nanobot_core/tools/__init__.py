"""Tools: the Tool API, the registry that prepares calls, and the executor that runs them.

Names load lazily, so importing this package costs nothing until one is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nanobot_core.tools.base import (
        ForeignTool,
        ForeignToolContext,
        FunctionTool,
        Tool,
        ToolResult,
        as_tool,
        tool,
    )
    from nanobot_core.tools.executor import (
        Executor,
        ToolCallHooks,
        ToolCallOutcome,
        ToolCallRequest,
    )
    from nanobot_core.tools.registry import PreparedCall, ToolRegistry
    from nanobot_core.tools.workspace import resolve_in_workspace

__all__ = [
    "Executor",
    "ForeignTool",
    "ForeignToolContext",
    "FunctionTool",
    "PreparedCall",
    "Tool",
    "ToolCallHooks",
    "ToolCallOutcome",
    "ToolCallRequest",
    "ToolRegistry",
    "ToolResult",
    "as_tool",
    "resolve_in_workspace",
    "tool",
]

_LOCATIONS: dict[str, str] = {
    "ForeignTool": "nanobot_core.tools.base",
    "ForeignToolContext": "nanobot_core.tools.base",
    "FunctionTool": "nanobot_core.tools.base",
    "Tool": "nanobot_core.tools.base",
    "ToolResult": "nanobot_core.tools.base",
    "as_tool": "nanobot_core.tools.base",
    "tool": "nanobot_core.tools.base",
    "Executor": "nanobot_core.tools.executor",
    "ToolCallHooks": "nanobot_core.tools.executor",
    "ToolCallOutcome": "nanobot_core.tools.executor",
    "ToolCallRequest": "nanobot_core.tools.executor",
    "PreparedCall": "nanobot_core.tools.registry",
    "ToolRegistry": "nanobot_core.tools.registry",
    "resolve_in_workspace": "nanobot_core.tools.workspace",
}


def __getattr__(name: str) -> Any:
    location = _LOCATIONS.get(name)
    if location is None:
        raise AttributeError(f"module 'nanobot_core.tools' has no attribute {name!r}")
    value = getattr(importlib.import_module(location), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
