"""The bridge: MCP sessions on a private event loop, shared by every caller in the process.

Tool calls come from whatever event loop the agent runs (and a test helper
may start a new loop per call), but an MCP session belongs to the loop that
opened it. So the bridge runs one loop in a daemon thread, opens every
session there, and hands each call over to it. Sessions stay up between calls
(servers can keep state) and are closed when the process exits.

A closed bridge stays closed: a call that comes after (a thread still running
when the exit hook ran) is an error naming its server, not a new loop that
would start a server nothing stops, nor a use of the old loop's locks.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import threading
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
from nanobot_core import quoted, report_problem

from nanobot_mcp.cache import ToolListCache
from nanobot_mcp.config import ServerConfig, real_workspace
from nanobot_mcp.connection import (
    CONNECTION_CLOSED,
    McpServerError,
    ServerConnection,
    validation_summary,
)
from nanobot_mcp.failures import FailureMemory
from nanobot_mcp.folders import log_directory

__all__ = ["GRACE", "McpBridge", "ServerHandle", "default_bridge", "reset_default_bridge"]

T = TypeVar("T")

# Time to wait on top of a server's own startup timeout: stopping a server that did not
# start takes the SDK up to about 5 s (stdin closed, 2 s grace, SIGTERM, SIGKILL).
GRACE = 10.0


@attrs.frozen
class ServerHandle:
    """A configured server within one workspace (where its cache and stderr log live).

    The workspace is kept as its real path (`real_workspace`): one workspace spelled two
    ways is one handle, so one server.
    """

    config: ServerConfig
    workspace: Path = attrs.field(converter=real_workspace)

    @property
    def cache(self) -> ToolListCache:
        """The tool-list cache of the workspace."""
        return ToolListCache.for_workspace(self.workspace)

    @property
    def failures(self) -> FailureMemory:
        """The failed starts remembered in the workspace."""
        return FailureMemory.for_workspace(self.workspace)

    @property
    def stderr_log(self) -> Path:
        """Where the server's stderr goes (overwritten at each start)."""
        return log_directory(self.workspace) / f"{self.config.name}.log"


class McpBridge:
    """Starts MCP servers on demand and routes tool calls to them."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()
        self._closed = False
        # The calls handed to the loop and not answered yet: a call the loop stopped before
        # answering is cancelled at close, so its caller is told, not left waiting.
        self._pending: set[concurrent.futures.Future[Any]] = set()
        # Touched only on the bridge loop:
        self._connections: dict[ServerHandle, ServerConnection] = {}
        self._starting: dict[ServerHandle, asyncio.Lock] = {}

    # -- from synchronous code (plugin hooks) -----------------------------------------------

    def start_servers(
        self, handles: Sequence[ServerHandle]
    ) -> dict[ServerHandle, list[dict[str, Any]] | McpServerError]:
        """Start the servers side by side; each maps to its tools or to why it failed."""
        if not handles:
            return {}
        # A thread waits at most threading.TIMEOUT_MAX (about 292 years): past it, the wait
        # would raise OverflowError, not wait.
        deadline = min(
            max(h.config.startup_timeout for h in handles) + GRACE, threading.TIMEOUT_MAX
        )

        async def start_all() -> list[list[dict[str, Any]] | BaseException]:
            return await asyncio.gather(
                *(self._tools_of(h) for h in handles), return_exceptions=True
            )

        try:
            outcomes = self._submit(start_all()).result(timeout=deadline)
        except _BridgeClosed:
            return {
                h: McpServerError(f"MCP server {h.config.name!r} was not started: {_CLOSED}")
                for h in handles
            }
        results: dict[ServerHandle, list[dict[str, Any]] | McpServerError] = {}
        for handle, outcome in zip(handles, outcomes, strict=True):
            if isinstance(outcome, McpServerError):
                results[handle] = outcome
            elif isinstance(outcome, BaseException):
                results[handle] = McpServerError(f"MCP server {handle.config.name!r}: {outcome!r}")
            else:
                results[handle] = outcome
        return results

    @property
    def closed(self) -> bool:
        """Whether `close` was called: the bridge then starts and calls nothing."""
        return self._closed

    def close(self, timeout: float = 5.0) -> None:
        """Close every session and stop the loop thread (idempotent); the bridge stays closed."""
        with self._guard:
            # Under the guard that `_submit` takes: every call handed over before this is on
            # the loop ahead of `_close_all` (which stops it), and none is handed over after.
            self._closed = True
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        # A session that will not close in time is abandoned; the process is exiting anyway.
        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            asyncio.run_coroutine_threadsafe(self._close_all(timeout), loop).result(timeout + 1)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        # A call still running (its server slow to stop) is frozen with the stopped loop:
        # its caller gets the bridge's closing as its answer instead of waiting for ever.
        with self._guard:
            pending, self._pending = list(self._pending), set()
        if thread.is_alive():  # the loop still runs (and may yet answer them)
            return
        for future in pending:
            # Not `cancel`: that would pass the cancellation on to the closed loop.
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                future.set_exception(_BridgeClosed())

    # -- from any event loop (tool calls) ---------------------------------------------------

    async def call_tool(
        self, handle: ServerHandle, tool: str, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        """Call `tool` on the server (starting it if needed); the MCP result as a dict."""
        try:
            future = self._submit(self._call(handle, tool, arguments))
        except _BridgeClosed:
            raise McpServerError(
                f"MCP server {handle.config.name!r}: {tool!r} was not called: {_CLOSED}"
            ) from None
        try:
            return await asyncio.wrap_future(future)
        except (asyncio.CancelledError, _BridgeClosed):
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # our caller is being cancelled
            # The bridge closed (the process is exiting) before the call was done.
            raise McpServerError(
                f"MCP server {handle.config.name!r}: {tool!r} was stopped: the MCP bridge "
                "closed before the call finished"
            ) from None

    # -- on the bridge loop -----------------------------------------------------------------

    async def _connection(self, handle: ServerHandle) -> ServerConnection:
        lock = self._starting.setdefault(handle, asyncio.Lock())
        async with lock:
            connection = self._connections.pop(handle, None)
            if connection is not None:
                if connection.alive:
                    self._connections[handle] = connection
                    return connection
                # It died while idle: start a fresh one now rather than fail the call,
                # unless it was stopped for breaking a limit (then it is remembered as failed).
                await connection.close(timeout=1.0)
            failures = handle.failures
            if connection is not None and connection.fault is not None:
                failures.record(handle.config, connection.fault)
            remembered = failures.recent(handle.config)
            if remembered is not None:
                raise McpServerError(remembered.describe(handle.config))
            connection = ServerConnection(handle.config, handle.stderr_log, root=handle.workspace)
            try:
                tools = await connection.start()
            except McpServerError as exc:
                failures.record(handle.config, str(exc))
                raise
            failures.forget(handle.config)
            self._connections[handle] = connection
            # Every start refreshes the cache, so a server that changed its tools is
            # listed correctly from the next process on.
            handle.cache.store(handle.config, tools, connection.rejected, connection.problems)
            return connection

    async def _tools_of(self, handle: ServerHandle) -> list[dict[str, Any]]:
        return (await self._connection(handle)).tools

    async def _call(
        self, handle: ServerHandle, tool: str, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        connection = await self._connection(handle)
        # Lists the tools again if they changed, or waits for such a listing under way, so
        # the call is checked against the new list.
        await self._list_again(handle, connection)
        if not connection.alive:
            # It ended while listing: the call goes to a fresh start, as after a server
            # that died while idle, not to the ended session.
            connection = await self._connection(handle)
        if connection.listed_again and all(t.get("name") != tool for t in connection.tools):
            raise McpServerError(
                f"MCP server {handle.config.name!r} no longer lists {tool!r}: its tool list "
                "changed during this session (notifications/tools/list_changed)"
            )
        limit = handle.config.call_timeout
        try:
            # The limit covers the call alone: a lazy start has its own startup_timeout.
            return await asyncio.wait_for(connection.call(tool, arguments), limit)
        except TimeoutError:
            raise McpServerError(
                f"MCP server {handle.config.name!r}: {tool!r} did not answer within "
                f"{limit:g} s (call_timeout)"
            ) from None
        except Exception as exc:
            # Imported here, as the SDK that brings it is: the plugin imports without it.
            from pydantic import ValidationError

            if isinstance(exc, ValidationError):
                # An answer the SDK refuses (a result without a content list...): one line,
                # not pydantic's report of every arm of every union.
                raise McpServerError(
                    f"MCP server {handle.config.name!r}: {tool!r} answered with an invalid "
                    f"result ({validation_summary(exc)})"
                ) from None
            if getattr(getattr(exc, "error", None), "code", None) == CONNECTION_CLOSED:
                # The process is gone: forget it, so the next call starts a fresh one (or,
                # when it was stopped for breaking a limit, is told why for retry_after).
                # Only this call's connection: another call may have started its successor.
                # Both before any wait, so no start slips in between them.
                if self._connections.get(handle) is connection:
                    del self._connections[handle]
                if connection.fault is not None:
                    handle.failures.record(handle.config, connection.fault)
                await connection.close(timeout=1.0)
                if connection.fault is not None:
                    raise McpServerError(f"{connection.fault} while {tool!r} was running") from None
                raise McpServerError(
                    f"MCP server {handle.config.name!r} closed the connection during the call"
                ) from exc
            raise

    async def _list_again(self, handle: ServerHandle, connection: ServerConnection) -> None:
        """List the tools of a server that said they changed, before a call to it.

        The tools offered to the model stay those listed when the command began
        (the core takes a plugin's tools once): the cache is refreshed, so the
        next command offers the new list, and a warning names what was added.
        A listing that fails leaves the tools as they were, with a warning.
        """
        name = handle.config.name
        before = {t.get("name") for t in connection.tools}
        try:
            if not await connection.list_again():
                return
        except Exception as exc:
            if not connection.alive:
                return  # it ended: the call starts it again, and that start lists its tools
            report_problem(
                f"MCP server {name!r} said its tools changed, but listing them again failed "
                f"({_describe_failure(exc, handle)}); the tools listed before are used"
            )
            return
        tools, rejected, problems = connection.tools, connection.rejected, connection.problems
        handle.cache.store(handle.config, tools, rejected, problems)
        added = [str(t.get("name")) for t in tools if t.get("name") not in before]
        if added:
            shown = ", ".join(quoted(n, 60) for n in added[:5])
            more = f" and {len(added) - 5} more" if len(added) > 5 else ""
            report_problem(
                f"MCP server {name!r} now lists tools it did not when this command began "
                f"({shown}{more}); they are offered from the next command"
            )
        for problem in [r.describe(name) for r in rejected] + problems:
            report_problem(problem)

    async def _close_all(self, timeout: float) -> None:
        connections = list(self._connections.values())
        self._connections.clear()
        await asyncio.gather(*(c.close(timeout) for c in connections), return_exceptions=True)
        # What is still running (a server starting for a call) would be frozen, its
        # process left running, once the loop stops: cancel it, which stops such a server.
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        if others:
            await asyncio.wait(others, timeout=timeout)

    # -- plumbing ---------------------------------------------------------------------------

    def _submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Hand `coroutine` to the bridge loop (started on first use); `_BridgeClosed` after
        `close`, the coroutine not run."""
        with self._guard:
            if self._closed:
                coroutine.close()
                raise _BridgeClosed
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=_run_loop, args=(loop,), name="nanobot-mcp", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
            self._pending.add(future)
        future.add_done_callback(self._settled)
        return future

    def _settled(self, future: concurrent.futures.Future[Any]) -> None:
        with self._guard:
            self._pending.discard(future)


class _BridgeClosed(McpServerError):
    """A call or start handed to the bridge after `McpBridge.close`, or frozen by it; the
    caller says which server (never shown as it is)."""


_CLOSED = "the MCP bridge is closed (it closes when the process exits)"


def _describe_failure(exc: Exception, handle: ServerHandle) -> str:
    """A one-line reason for a listing that failed during a session."""
    if isinstance(exc, TimeoutError):
        return (
            f"no answer within {handle.config.startup_timeout:g} s, see "
            f"{handle.config.key('startup_timeout')}"
        )
    return str(exc) or type(exc).__name__


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.close()


_default: McpBridge | None = None
_default_guard = threading.Lock()


def default_bridge() -> McpBridge:
    """The process-wide bridge used by the plugin hook, closed at interpreter exit."""
    global _default
    with _default_guard:
        if _default is None:
            _default = McpBridge()
            atexit.register(_default.close)
        return _default


def reset_default_bridge() -> None:
    """Close the process-wide bridge and forget it (tests use this between cases)."""
    global _default
    with _default_guard:
        bridge, _default = _default, None
    if bridge is not None:
        atexit.unregister(bridge.close)
        bridge.close()
