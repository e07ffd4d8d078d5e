"""Tools: the Tool API, the registry that prepares calls, and the executor that runs them.

Names load lazily, so importing this package costs nothing until one is used.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nanobot_core.tools._foreign import ForeignTool, ForeignToolContext
    from nanobot_core.tools._function import FunctionTool, tool
    from nanobot_core.tools.base import Tool, ToolResult, as_tool
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
    "ForeignTool": "nanobot_core.tools._foreign",
    "ForeignToolContext": "nanobot_core.tools._foreign",
    "FunctionTool": "nanobot_core.tools._function",
    "Tool": "nanobot_core.tools.base",
    "ToolResult": "nanobot_core.tools.base",
    "as_tool": "nanobot_core.tools.base",
    "tool": "nanobot_core.tools._function",
    "Executor": "nanobot_core.tools.executor",
    "ToolCallHooks": "nanobot_core.tools.executor",
    "ToolCallOutcome": "nanobot_core.tools.executor",
    "ToolCallRequest": "nanobot_core.tools.executor",
    "PreparedCall": "nanobot_core.tools.registry",
    "ToolRegistry": "nanobot_core.tools.registry",
    "resolve_in_workspace": "nanobot_core.tools.workspace",
}


def lazy_attributes(
    module_name: str, locations: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module's ``__getattr__`` and ``__dir__`` that import each name from its location on use.

    ``locations`` maps a name to the module defining it; a loaded name is cached in the module.
    """
    module = sys.modules[module_name]

    def load(name: str) -> Any:
        location = locations.get(name)
        if location is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(location), name)
        setattr(module, name, value)
        return value

    def names() -> list[str]:
        return sorted(set(vars(module)) | set(locations))

    return load, names


__getattr__, __dir__ = lazy_attributes(__name__, _LOCATIONS)
