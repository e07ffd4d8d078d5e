"""Built-in plugin: the six workspace tools (read, list, find, grep, write and edit files)."""

from __future__ import annotations

from nanobot_core.hookspecs import hookimpl
from nanobot_core.kernel.context import PluginContext
from nanobot_core.tools.base import Tool
from nanobot_core.tools.builtin import BUILTIN_TOOLS


@hookimpl
def nanobot_tools(ctx: PluginContext) -> list[Tool]:
    """The six workspace tools, built for the context's workspace."""
    return [tool_class.create(ctx) for tool_class in BUILTIN_TOOLS]
