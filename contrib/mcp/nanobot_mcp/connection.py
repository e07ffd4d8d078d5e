"""One running MCP server: its process, its client session, and the task that owns both.

The MCP SDK is built on anyio, whose task groups must be entered and left by
the same task. So each connection has an *owner* task that opens the stdio
transport and the session, reports the tool list, then waits until it is told
to close; other tasks use the session meanwhile (MCP multiplexes requests).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import anyio

from nanobot_mcp.config import ServerConfig

__all__ = ["CONNECTION_CLOSED", "McpServerError", "ServerConnection"]

#: The JSON-RPC error code the MCP SDK raises when the server's pipe is gone.
CONNECTION_CLOSED = -32000
_MAX_PAGES = 100
_STDERR_TAIL = 800


class McpServerError(Exception):
    """An MCP server could not be started, or stopped answering."""


class ServerConnection:
    """A started (or starting) MCP server; built and used on the bridge's event loop only."""

    def __init__(self, config: ServerConfig, stderr_log: Path) -> None:
        self.config = config
        self.stderr_log = stderr_log
        self.tools: list[dict[str, Any]] = []
        self._session: Any = None
        self._closing = asyncio.Event()
        self._owner: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        """Whether the session is up and its owner still running."""
        return (
            self._session is not None
            and not self._closing.is_set()
            and self._owner is not None
            and not self._owner.done()
        )

    async def start(self) -> list[dict[str, Any]]:
        """Spawn the server, handshake, list its tools; raise `McpServerError` on failure."""
        ready: asyncio.Future[list[dict[str, Any]]] = asyncio.get_running_loop().create_future()
        self._owner = asyncio.create_task(self._own(ready), name=f"mcp-server-{self.config.name}")
        timeout = self.config.startup_timeout
        try:
            self.tools = await asyncio.wait_for(asyncio.shield(ready), timeout)
        except TimeoutError:
            await self._abort()
            raise McpServerError(
                f"MCP server {self.config.name!r} did not start within {timeout:g} s"
                + self._stderr_tail()
            ) from None
        except Exception as exc:
            await self._abort()
            raise McpServerError(
                f"MCP server {self.config.name!r} failed to start: {_describe(exc)}"
                + self._stderr_tail()
            ) from exc
        return self.tools

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Call `tool` and return the result as MCP sends it (``content``, ``isError``...)."""
        session = self._session
        if session is None:
            raise McpServerError(f"MCP server {self.config.name!r} is not running")
        result = await session.call_tool(tool, arguments)
        return result.model_dump(by_alias=True, exclude_none=True, mode="json")  # type: ignore[no-any-return]

    async def close(self, timeout: float = 5.0) -> None:
        """Ask the owner to shut the session and the process down; cancel it if it lingers."""
        self._closing.set()
        owner = self._owner
        if owner is None or owner.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(owner), timeout)
        except (TimeoutError, Exception):
            await self._abort()

    async def _abort(self) -> None:
        """Cancel the owner; the SDK still stops the process (stdin closed, then signals)."""
        if self._owner is not None and not self._owner.done():
            self._owner.cancel()
            await asyncio.gather(self._owner, return_exceptions=True)

    async def _own(self, ready: asyncio.Future[list[dict[str, Any]]]) -> None:
        from mcp import ClientSession, StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=self.config.command,
            args=list(self.config.args),
            env=dict(self.config.env) or None,
            cwd=self.config.cwd,
            # A byte that is not UTF-8 must not end the reader: under "strict" it stops
            # reading for good while the process lives on, and every call then hangs.
            encoding_error_handler="replace",
        )
        self.stderr_log.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self.stderr_log.open("w", encoding="utf-8") as errlog:
                async with (
                    stdio_client(params, errlog=errlog) as (read, write),
                    anyio.create_task_group() as group,
                ):
                    # The session reads through a relay that notices the server's end of
                    # output, so a server that died while idle is known dead before the
                    # next call instead of failing it.
                    relay_send, relay_receive = anyio.create_memory_object_stream[Any](0)
                    group.start_soon(self._relay, read, relay_send)
                    async with ClientSession(relay_receive, write) as session:
                        await session.initialize()
                        tools = await _list_all_tools(session)
                        self._session = session
                        ready.set_result(tools)
                        await self._closing.wait()
                    group.cancel_scope.cancel()
        except BaseException as exc:
            if not ready.done():
                if isinstance(exc, Exception):
                    ready.set_exception(exc)
                else:
                    ready.cancel()
            if not isinstance(exc, Exception):
                raise
        finally:
            self._session = None

    async def _relay(self, source: Any, sink: Any) -> None:
        """Pass the server's messages on; at its end of output, mark the connection closing."""
        try:
            async with sink:
                async for item in source:
                    await sink.send(item)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the session closed its end first: we are shutting down
        finally:
            self._closing.set()

    def _stderr_tail(self) -> str:
        try:
            text = self.stderr_log.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return ""
        if not text:
            return ""
        return f"; its stderr ends with: {text[-_STDERR_TAIL:]}"


async def _list_all_tools(session: Any) -> list[dict[str, Any]]:
    from mcp.types import PaginatedRequestParams

    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
        tools += [
            tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in page.tools
        ]
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _describe(exc: BaseException) -> str:
    """A one-line reason, looking inside the exception groups anyio raises."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    message = str(exc).strip()
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
