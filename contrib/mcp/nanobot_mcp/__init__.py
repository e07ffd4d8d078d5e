"""nanobot-mcp: tools of MCP servers (stdio) as nanobot tools named ``mcp_<server>_<tool>``.

Registered through the ``nanobot.plugins`` entry point; this module is the
plugin. Servers are configured in a TOML file (see `nanobot_mcp.config`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from nanobot_core import hookimpl

from nanobot_mcp.bridge import McpBridge, ServerHandle, default_bridge, reset_default_bridge
from nanobot_mcp.cache import ToolListCache, cache_directory
from nanobot_mcp.config import CONFIG_ENV, ServerConfig, config_path, load_servers
from nanobot_mcp.connection import McpServerError
from nanobot_mcp.discovery import discover_tools
from nanobot_mcp.failures import FailureMemory
from nanobot_mcp.folders import log_directory
from nanobot_mcp.names import bridged_name
from nanobot_mcp.tool import McpTool, to_tool_result

if TYPE_CHECKING:
    from nanobot_core import PluginContext

__all__ = [
    "CONFIG_ENV",
    "FailureMemory",
    "McpBridge",
    "McpServerError",
    "McpTool",
    "ServerConfig",
    "ServerHandle",
    "ToolListCache",
    "bridged_name",
    "default_bridge",
    "discover_tools",
    "load_servers",
    "nanobot_kept_files",
    "nanobot_tools",
    "reset_default_bridge",
    "to_tool_result",
]


@hookimpl
def nanobot_tools(ctx: PluginContext) -> list[McpTool]:
    """The tools of every configured MCP server (none when no server is configured)."""
    servers = load_servers(ctx.workspace, os.environ)
    if not servers:
        return []
    return discover_tools(servers, ctx.workspace, default_bridge())


@hookimpl
def nanobot_kept_files(ctx: PluginContext) -> list[Path]:
    """The server list this plugin reads, and the folders of its cache and logs: no
    ``--output`` of the CLI may write over them."""
    workspace = ctx.workspace
    return [
        config_path(workspace, os.environ),
        cache_directory(workspace),
        log_directory(workspace),
    ]
