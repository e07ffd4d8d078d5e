"""The tools of every configured server: from the cache when it is fresh, else by starting it.

Servers are isolated from each other: one that fails to start (crashes,
exits, hangs past its ``startup_timeout``) loses only its own tools, and is
reported by name. Its failure is remembered for its ``retry_after`` seconds,
during which it is not started again (see `nanobot_mcp.failures`). A tool a
server lists with an invalid definition, or twice, or under a name another
tool took, loses only itself, and is reported with its server, its name and
what is wrong (from the server's start or its cached listing alike).

Each of these is reported with `nanobot_core.report_problem`: a warning on
stderr, and one line under this plugin's ``problems`` in ``nanobot-core
plugins`` (and ``--json``), as for a tool the core itself leaves out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from nanobot_core import report_problem

from nanobot_mcp.bridge import McpBridge, ServerHandle
from nanobot_mcp.config import ServerConfig
from nanobot_mcp.tool import McpTool

__all__ = ["discover_tools"]


def discover_tools(
    servers: Sequence[ServerConfig], workspace: Path, bridge: McpBridge
) -> list[McpTool]:
    """The bridged tools of the servers that can run, in server then tool order.

    A server whose cached tool list matches its config is not started (it
    starts on its first call); the others are started side by side. A server
    that failed, now or within its ``retry_after``, contributes no tools and is
    reported by name (see the module's docstring).
    """
    handles = [ServerHandle(config, workspace) for config in servers]
    remembered = {h: h.failures.recent(h.config) for h in handles}
    usable = [h for h in handles if remembered[h] is None]
    listed = {h: h.cache.load(h.config) for h in usable}
    started = bridge.start_servers([h for h in usable if listed[h] is None])
    names = [h.config.name for h in handles]
    tools: dict[str, McpTool] = {}
    for handle in handles:
        failure = remembered[handle]
        outcome = listed.get(handle) or started.get(handle)
        if failure is not None:
            _left_out(failure.describe(handle.config))
        elif isinstance(outcome, Exception):
            _left_out(str(outcome))
        else:
            for spec in outcome or []:
                _add(tools, McpTool(handle, spec, bridge, names))
            for rejected in handle.cache.rejected(handle.config):
                report_problem(rejected.describe(handle.config.name))
            for problem in handle.cache.problems(handle.config):
                report_problem(problem)
    return list(tools.values())


def _add(tools: dict[str, McpTool], tool: McpTool) -> None:
    """Add `tool` unless its name is taken (a server that lists a tool twice): then say so."""
    first = tools.setdefault(tool.name, tool)
    if first is tool:
        return
    server, remote = tool.handle.config.name, tool.remote_name
    if (first.handle.config.name, first.remote_name) == (server, remote):
        report_problem(
            f"MCP server {server!r} lists tool {remote!r} more than once; the first is kept"
        )
    else:
        report_problem(
            f"MCP server {server!r}: tool {remote!r} left out: its name {tool.name!r} is taken "
            f"by MCP server {first.handle.config.name!r}, tool {first.remote_name!r}"
        )


def _left_out(reason: str) -> None:
    report_problem(f"{reason}; its tools are left out")
