"""An MCP tool as a nanobot tool, and MCP call results as nanobot results."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

from nanobot_core import Tool as NanobotTool
from nanobot_core import ToolResult

from nanobot_mcp.bridge import GRACE, McpBridge, ServerHandle
from nanobot_mcp.connection import McpServerError
from nanobot_mcp.names import bridged_name

__all__ = ["McpTool", "render_content", "to_tool_result"]


class McpTool(NanobotTool):
    """One tool of one MCP server, called through the bridge.

    ``read_only`` follows the server's ``readOnlyHint`` annotation, so read-only
    MCP tools may run side by side. The bridge holds the call to the server's
    ``call_timeout`` and a lazy start to its ``startup_timeout``; the tool's own
    timeout (the executor's) is only a backstop above both.
    """

    def __init__(
        self,
        handle: ServerHandle,
        spec: Mapping[str, Any],
        bridge: McpBridge,
        servers: Collection[str] = (),
    ) -> None:
        """`servers` names every configured server (it decides the name; see `bridged_name`)."""
        self.handle = handle
        self.bridge = bridge
        self.remote_name = str(spec["name"])
        server = handle.config.name
        self._name = bridged_name(server, self.remote_name, servers)
        # As the server wrote it: the model reads it so, and `nanobot-core tools` shows it
        # escaped where it writes to a terminal (the core's rule, for every plugin's tools).
        summary = str(spec.get("description") or "").strip()
        self._description = (
            f"{summary}\n\n(MCP server {server!r}, tool {self.remote_name!r})".strip()
        )
        self._parameters = _object_schema(spec.get("inputSchema"))
        annotations = spec.get("annotations")
        self.read_only = (
            isinstance(annotations, Mapping) and annotations.get("readOnlyHint") is True
        )
        self.timeout = handle.config.call_timeout + handle.config.startup_timeout + GRACE

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @property
    def parameters(self) -> dict[str, Any]:
        return self._parameters

    async def execute(self, /, **arguments: Any) -> ToolResult:
        """Call the MCP tool; protocol failures and error results become error results.

        ``self`` is positional-only, so an argument of the server's tool may be named ``self``.
        """
        try:
            result = await self.bridge.call_tool(self.handle, self.remote_name, arguments)
        except McpServerError as exc:
            return ToolResult.error(str(exc))
        except Exception as exc:
            return ToolResult.error(
                f"MCP server {self.handle.config.name!r} refused {self.remote_name!r}: {exc}"
            )
        return to_tool_result(result)


def to_tool_result(result: Mapping[str, Any]) -> ToolResult:
    """The nanobot result of an MCP ``CallToolResult`` (given as MCP sends it)."""
    text = render_content(result.get("content") or [])
    structured = result.get("structuredContent")
    if not text and structured is not None:
        text = json.dumps(structured, ensure_ascii=False)
    if result.get("isError"):
        return ToolResult.error(text or "the MCP tool failed without saying why")
    return ToolResult.of(text or None)


def render_content(blocks: list[Any]) -> str:
    """MCP content blocks as text: text as it is, anything else as a short placeholder."""
    parts: list[str] = []
    for block in blocks:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind in ("image", "audio"):
            size = len(str(block.get("data", ""))) * 3 // 4
            parts.append(f"[{kind} {block.get('mimeType', '?')}, about {size} bytes, not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.get('uri', '?')}]")
        elif kind == "resource":
            resource = block.get("resource")
            resource = resource if isinstance(resource, Mapping) else {}
            text = resource.get("text")
            parts.append(
                str(text)
                if isinstance(text, str)
                else f"[resource {resource.get('uri', '?')}, binary, not shown]"
            )
    return "\n".join(parts)


def _object_schema(schema: Any) -> dict[str, Any]:
    """The server's input schema, or an empty object schema when it sent none usable."""
    if isinstance(schema, Mapping) and schema.get("type") == "object":
        return dict(schema)
    return {"type": "object", "properties": {}}
