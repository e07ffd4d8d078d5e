"""The tools of every configured server: from the cache when it is fresh, else by starting it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from nanobot_core.errors import PluginError

from nanobot_mcp.bridge import McpBridge, ServerHandle
from nanobot_mcp.config import ServerConfig
from nanobot_mcp.tool import McpTool

__all__ = ["discover_tools"]


def discover_tools(
    servers: Sequence[ServerConfig], workspace: Path, bridge: McpBridge
) -> list[McpTool]:
    """The bridged tools of `servers`, in server then tool order.

    A server whose cached tool list matches its config is not started (it
    starts on its first call); the others are started side by side. Raises
    `PluginError` naming every server that failed to start, so the plugin shows
    up as failed while the core goes on without it.
    """
    handles = [ServerHandle(config, workspace) for config in servers]
    listed = {h: h.cache.load(h.config) for h in handles}
    started = bridge.start_servers([h for h, tools in listed.items() if tools is None])
    failures = [str(outcome) for outcome in started.values() if isinstance(outcome, Exception)]
    if failures:
        raise PluginError("; ".join(failures))
    fresh = {h: tools for h, tools in started.items() if not isinstance(tools, Exception)}
    tools: list[McpTool] = []
    for handle in handles:
        cached = listed[handle]
        specs = cached if cached is not None else fresh[handle]
        tools += [McpTool(handle, spec, bridge) for spec in specs]
    return tools
