"""One running MCP server: its process, its client session, and the task that owns both.

The MCP SDK is built on anyio, whose task groups must be entered and left by
the same task. So each connection has an *owner* task that opens the stdio
transport and the session, reports the tool list, then waits until it is told
to close; other tasks use the session meanwhile (MCP multiplexes requests).

The SDK validates a ``tools/list`` answer as a whole: one tool it refuses (no
name, an ``inputSchema`` whose ``type`` is not ``object``, a property schema
that is not an object) would lose every tool of the server. So the answers to
``tools/list`` are screened on their way in: a tool the SDK would refuse is
taken out of the list and remembered with the reason (`RejectedTool`), and
the SDK sees the good ones. Likewise the content blocks of a ``tools/call``
answer: one block the SDK refuses (a content type it does not know) would
lose the whole result, so such a block is replaced by a line of text saying
what was left out, and the rest of the result gets through.

The tool list is read within bounds (`ServerConnection._list_tools`): at most
``max_tools`` tools of at most ``max_tool_bytes`` each, 100 pages, and no
cursor twice; what is left out is said in `ServerConnection.problems`. A
server that says its tools changed (``notifications/tools/list_changed``) has
them listed again before the next call (`ServerConnection.list_again`).

The server's output is read by `bounded_stdio_client`, not the SDK's own
reader: a line longer than the server's ``max_line_bytes`` ends the server,
and the connection keeps why (`ServerConnection.fault`) for the calls it fails
(unless this ``mcp`` lacks the helpers it needs: then it is the SDK's reader).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import json
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

import anyio
import anyio.to_thread
import attrs
from nanobot_core import NotRegularFileError, PluginError, open_regular_file, quoted

from nanobot_mcp.config import ServerConfig
from nanobot_mcp.folders import folder_of
from nanobot_mcp.stdio import LineTooLong, bounded_stdio_client, describe_size

__all__ = [
    "CONNECTION_CLOSED",
    "McpServerError",
    "RejectedTool",
    "ServerConnection",
    "definition_size",
    "output_checker",
    "screen_content",
    "screen_tools",
    "stderr_tail",
    "validation_summary",
]

#: The JSON-RPC error code the MCP SDK raises when the server's pipe is gone.
CONNECTION_CLOSED = -32000
_MAX_PAGES = 100
_STDERR_TAIL = 800
#: The most of a stderr log read for its tail (white space at its end may be longer).
_TAIL_WINDOW = 1 << 20
_FALLBACK_VERSION = "2025-11-25"
#: Where a screened ``tools/list`` answer says what was taken out of it (see `_Listing`).
_SCREENED = "nanobot-mcp/screened"
#: The content types of MCP, and the SDK's model (the arm of its union) for each.
_CONTENT_ARMS = {
    "text": "TextContent",
    "image": "ImageContent",
    "audio": "AudioContent",
    "resource_link": "ResourceLink",
    "resource": "EmbeddedResource",
}


class McpServerError(PluginError):
    """An MCP server could not be started, or stopped answering."""


@attrs.frozen
class RejectedTool:
    """A tool a server listed that cannot be used: its name (None when it had none) and why."""

    tool: str | None
    reason: str

    def describe(self, server: str) -> str:
        """One line naming the server and the tool, and what is wrong with it."""
        tool = "a tool without a name" if self.tool is None else f"tool {self.tool!r}"
        return f"MCP server {server!r}: {tool} left out: its definition is invalid ({self.reason})"


class _Listing:
    """What one listing left out, as its pages come in.

    The screening of a ``tools/list`` answer (in the relay, before the SDK reads it)
    says what it took out under `_SCREENED` in the answer's ``_meta``, so the
    listing that asked for the page, and only that one, takes it back.
    """

    def __init__(self) -> None:
        self.rejected: list[RejectedTool] = []
        self.problems: list[str] = []

    @staticmethod
    def mark(result: dict[str, Any], rejected: list[RejectedTool], cut: bool) -> dict[str, Any]:
        """`result` saying what its screening took out (`cut`: tools past max_tools)."""
        meta = result.get("_meta", {})
        if not isinstance(meta, dict):
            return result  # the SDK refuses such an answer anyway
        said = {"rejected": [[r.tool, r.reason] for r in rejected], "cut": cut}
        return {**result, "_meta": {**meta, _SCREENED: said}}

    def take_screened(self, page: Any) -> bool:
        """Add what the screening took out of `page` (and remove it from its ``_meta``);
        whether the page was cut at max_tools."""
        meta = getattr(page, "meta", None)
        said = meta.pop(_SCREENED, None) if isinstance(meta, dict) else None
        if not isinstance(said, dict):
            return False
        self.rejected += [RejectedTool(tool, reason) for tool, reason in said["rejected"]]
        return bool(said["cut"])


class ServerConnection:
    """A started (or starting) MCP server; built and used on the bridge's event loop only."""

    def __init__(self, config: ServerConfig, stderr_log: Path, *, root: Path | None = None) -> None:
        self.config = config
        self.stderr_log = stderr_log
        #: Where the folders down to the log are walked from without following a link
        #: (the workspace; by default the folder above the log's).
        self.log_root = root
        self.tools: list[dict[str, Any]] = []
        #: The tools of the last listing that were left out, and why.
        self.rejected: list[RejectedTool] = []
        #: What else the last listing left out, one line each (pages past the last read).
        self.problems: list[str] = []
        #: Whether the server said its tools changed (notifications/tools/list_changed) since
        #: they were last listed.
        self.tools_changed = False
        #: Whether the tools were listed again during the session (see `list_again`).
        self.listed_again = False
        self._listing_again = asyncio.Lock()
        self._session: Any = None
        self._protocol_version: Any = None  # the session's negotiated version, once known
        self._listing_ids: set[Any] = set()  # ids of tools/list requests not answered yet
        #: The ids of tools/call requests not answered yet, and the tool each calls: an id
        #: goes at its answer or at its cancellation, so they are the calls under way.
        self._call_ids: dict[Any, str | None] = {}
        self._calls = 0  # how many `call`s are waiting on the session
        #: Each tool's outputSchema, kept from the SDK (the plugin checks results against it).
        self._output_schemas: dict[str, dict[str, Any]] = {}
        #: A compiled check of each tool's outputSchema (see `output_checker`).
        self._output_checks: dict[str, tuple[dict[str, Any], Callable[[Any], str | None]]] = {}
        #: Why the connection was ended from this side (the server broke a limit), or None.
        self.fault: str | None = None
        self._closing = asyncio.Event()
        #: What the start is waiting on, for the message when it takes too long.
        self._phase = "starting its program"
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
        except asyncio.CancelledError:
            # The caller gave up (its call was cancelled): nobody will use or close this
            # connection, so stop the server now rather than leave its process running.
            await self._abort()
            raise
        except TimeoutError:
            await self._abort()
            raise McpServerError(
                self.fault
                or f"MCP server {self.config.name!r} did not start within {timeout:g} s "
                f"(see {self.config.key('startup_timeout')}): it was {self._phase}"
                + self._stderr_tail()
            ) from None
        except Exception as exc:
            await self._abort()
            if self.fault is not None:
                raise McpServerError(self.fault) from None
            raise McpServerError(
                f"MCP server {self.config.name!r} failed to start: {self._start_failure(exc)}"
                + self._stderr_tail()
            ) from exc
        return self.tools

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Call `tool` and return the result as MCP sends it (``content``, ``isError``...)."""
        session = self._session
        if session is None:
            raise McpServerError(f"MCP server {self.config.name!r} is not running")
        self._calls += 1
        try:
            result = await session.call_tool(tool, arguments)
        finally:
            self._calls -= 1
            if not self._calls:
                # No call waits for an answer now: a call noted still is one given up on
                # whose cancellation did not go out (a server not reading its input).
                self._call_ids.clear()
        return result.model_dump(by_alias=True, exclude_none=True, mode="json")  # type: ignore[no-any-return]

    async def list_again(self) -> bool:
        """List the tools again if the server said they changed; whether they were.

        Within ``startup_timeout``, as the listing at start. Every call waits
        here for a listing under way, so calls that come at once share one
        listing and each is checked against the new list. `tools`, `rejected`
        and `problems` are then those of the new listing; on a failure they
        stay those of the last.
        """
        async with self._listing_again:
            session = self._session
            if not self.tools_changed or session is None:
                return False
            self.tools_changed = False  # a change said during the listing lists once more
            self.tools = await asyncio.wait_for(
                self._list_tools(session), self.config.startup_timeout
            )
            self.listed_again = True
            return True

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
        from mcp import ClientSession, StdioServerParameters

        params = StdioServerParameters(
            command=self.config.command,
            args=list(self.config.args),
            env=dict(self.config.env) or None,
            cwd=self.config.cwd,
            # A byte that is not UTF-8 must not end the reader: under "strict" it stops
            # reading for good while the process lives on, and every call then hangs.
            encoding_error_handler="replace",
        )
        try:
            with _open_log(self.stderr_log, self.log_root) as errlog:
                async with (
                    bounded_stdio_client(params, errlog, self.config.max_line_bytes) as (
                        read,
                        write,
                    ),
                    anyio.create_task_group() as group,
                ):
                    # The session reads through a relay that notices the server's end of
                    # output, so a server that died while idle is known dead before the
                    # next call instead of failing it.
                    # Requests go out through a relay too, which notes the ids of
                    # tools/list requests, so their answers can be screened.
                    relay_send, relay_receive = anyio.create_memory_object_stream[Any](0)
                    out_send, out_receive = anyio.create_memory_object_stream[Any](0)
                    group.start_soon(self._relay, read, relay_send)
                    group.start_soon(self._relay_out, out_receive, write)
                    async with ClientSession(relay_receive, out_send) as session:
                        self._protocol_version = lambda: session.protocol_version
                        self._phase = "waiting for its answer to initialize (the handshake)"
                        await session.initialize()
                        self._phase = "waiting for its tool list (tools/list)"
                        tools = await self._list_tools(session)
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

    async def _list_tools(self, session: Any) -> list[dict[str, Any]]:
        """Every page of the server's tool list, as the server sent each tool.

        What the listing could not take is said in `problems` (and the tools the SDK
        would refuse in `rejected`): a tool larger than ``max_tool_bytes``, the tools
        past ``max_tools`` (the pages after them are not asked for), the pages past
        `_MAX_PAGES`, and those after a cursor the server already gave (it would list
        the same page for ever). Both are set when the listing is done, from what was
        screened out of its own pages only: the SDK may list the tools for itself
        meanwhile (to check a result of a tool it never saw listed).
        """
        listing = _Listing()
        tools = await self._list_pages(session, listing)
        self.rejected, self.problems = listing.rejected, listing.problems
        # The outputSchemas of tools no longer listed (a listing that changed) are dropped.
        names = {str(spec.get("name")) for spec in tools}
        self._output_schemas = {n: s for n, s in self._output_schemas.items() if n in names}
        return tools

    async def _list_pages(self, session: Any, listing: _Listing) -> list[dict[str, Any]]:
        from mcp.types import PaginatedRequestParams

        tools: list[dict[str, Any]] = []
        cursors: set[str] = set()
        cursor: str | None = None
        limit = self.config.max_tools
        for _ in range(_MAX_PAGES):
            page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
            cut = listing.take_screened(page)
            for tool in page.tools:
                spec = tool.model_dump(by_alias=True, exclude_none=True, mode="json")
                schema = self._output_schemas.get(tool.name)
                if schema is not None:  # the cache keeps each tool as the server sent it
                    spec["outputSchema"] = schema
                if self._fits(spec, listing.problems):
                    tools.append(spec)
                else:
                    self._output_schemas.pop(tool.name, None)
            if len(tools) > limit or cut:
                # The pages left would only be left out too: they are not asked for.
                for spec in tools[limit:]:
                    self._output_schemas.pop(str(spec.get("name")), None)
                tools = tools[:limit]
                listing.problems.append(
                    f"MCP server {self.config.name!r} lists more than {limit} tools (see "
                    f"{self.config.key('max_tools')}); the first {len(tools)} are kept, the "
                    "others are left out"
                )
                return tools
            cursor = page.next_cursor
            if not cursor:
                return tools
            if cursor in cursors:
                listing.problems.append(
                    f"MCP server {self.config.name!r} gave the same tools/list cursor twice "
                    f"({quoted(cursor, 60)}), which would list one page for ever; the "
                    f"{len(tools)} tools listed before it are kept"
                )
                return tools
            cursors.add(cursor)
        listing.problems.append(
            f"MCP server {self.config.name!r} lists its tools on more than {_MAX_PAGES} pages "
            f"(tools/list); the {len(tools)} tools of the first {_MAX_PAGES} pages are kept, "
            "the tools on later pages are left out"
        )
        return tools

    def _fits(self, spec: dict[str, Any], problems: list[str]) -> bool:
        """Whether a tool's definition is within ``max_tool_bytes``; if not, a problem says so."""
        size = definition_size(spec)
        limit = self.config.max_tool_bytes
        if size <= limit:
            return True
        problems.append(
            f"MCP server {self.config.name!r}: tool {quoted(spec.get('name'), 100)} left out: its "
            f"definition is {describe_size(size)}, more than {describe_size(limit)} (see "
            f"{self.config.key('max_tool_bytes')})"
        )
        return False

    async def _relay(self, source: Any, sink: Any) -> None:
        """Pass the server's messages on; at its end of output, mark the connection closing."""
        try:
            async with sink:
                async for item in source:
                    if isinstance(item, LineTooLong):
                        # The transport has ended the server; this is why, for its calls.
                        self.fault = f"MCP server {self.config.name!r} sent {item} and was stopped"
                        self._closing.set()
                        continue
                    method = getattr(getattr(item, "message", None), "method", None)
                    if method == "notifications/tools/list_changed":
                        self.tools_changed = True  # listed again before the next call
                    await sink.send(await self._screen(item))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the session closed its end first: we are shutting down
        finally:
            self._closing.set()

    async def _relay_out(self, source: Any, sink: Any) -> None:
        """Pass the session's messages on to the server, noting the ids of tools/list requests."""
        try:
            async with sink:
                async for item in source:
                    message = getattr(item, "message", None)
                    method = getattr(message, "method", None)
                    if method == "tools/list":
                        self._listing_ids.add(message.id)  # type: ignore[union-attr]
                    elif method == "tools/call":
                        params = getattr(message, "params", None)
                        tool = params.get("name") if isinstance(params, dict) else None
                        self._call_ids[message.id] = tool if isinstance(tool, str) else None  # type: ignore[union-attr]
                    elif method == "notifications/cancelled":
                        # The SDK gave up on the request (its caller was cancelled or timed
                        # out): an answer that still comes is dropped by the SDK unread.
                        params = getattr(message, "params", None)
                        ident = params.get("requestId") if isinstance(params, dict) else None
                        self._forget_request(ident)
                    await sink.send(item)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the process is gone; the inbound relay notices its end of output

    def _forget_request(self, ident: Any) -> None:
        """Stop waiting for the answer to request `ident` (no answer will be wanted)."""
        with contextlib.suppress(TypeError):  # an unhashable id from the wire
            self._call_ids.pop(ident, None)
            self._listing_ids.discard(ident)

    @property
    def awaited_answers(self) -> int:
        """How many requests (tool calls and listings) are noted as waiting for an answer."""
        return len(self._call_ids) + len(self._listing_ids)

    async def _screen(self, item: Any) -> Any:
        """The item, with what the SDK would refuse taken out of a tools/list or call answer."""
        message = getattr(item, "message", None)
        ident = getattr(message, "id", None)
        if ident is None or (ident not in self._listing_ids and ident not in self._call_ids):
            return item
        listing = ident in self._listing_ids
        self._listing_ids.discard(ident)
        tool = self._call_ids.pop(ident, None)
        result = getattr(message, "result", None)
        if not isinstance(result, dict):
            return item  # an error answer: the SDK raises it as usual
        # Before the handshake the SDK checks answers against this revision, so do we.
        version = (self._protocol_version and self._protocol_version()) or _FALLBACK_VERSION
        if not listing:
            # Screening must never stop the relay: on any failure the SDK judges as before.
            with contextlib.suppress(Exception):
                message.result = screen_content(result, version)  # type: ignore[union-attr]
            if tool is not None and tool in self._output_schemas:
                # Off the bridge's loop: checking a large value takes seconds, and the
                # other servers' calls go on meanwhile.
                with contextlib.suppress(Exception):
                    checked = await anyio.to_thread.run_sync(
                        self._check_structured,
                        tool,
                        message.result,  # type: ignore[union-attr]
                        abandon_on_cancel=True,
                    )
                    message.result = checked  # type: ignore[union-attr]
            return item
        tools = result.get("tools")
        cut = False
        if isinstance(tools, list) and len(tools) > self.config.max_tools:
            # No more than max_tools of a page can be kept: the others are not checked or
            # read (100,000 tools took the bridge's loop 30 s), and the listing says so.
            result = {**result, "tools": tools[: self.config.max_tools]}
            cut = True
        # What was screened out goes with the page, to whoever asked for it: the plugin's
        # listing, or one the SDK makes for itself (which ignores it).
        try:
            kept, rejected = screen_tools(result, version)
        except Exception:  # screening must never stop the relay: the SDK judges as before
            message.result = _Listing.mark(result, [], cut)  # type: ignore[union-attr]
            return item
        kept = self._take_output_schemas(kept)
        message.result = _Listing.mark(kept, rejected, cut)  # type: ignore[union-attr]
        return item

    def _take_output_schemas(self, result: dict[str, Any]) -> dict[str, Any]:
        """The listing without the tools' outputSchemas, which are kept here instead.

        The SDK would check each result against them and word a mismatch with the
        whole schema and the whole value pretty-printed (see `_check_structured`);
        without them it checks nothing, and the plugin checks each result once.
        """
        tools = result.get("tools")
        if not isinstance(tools, list):
            return result
        stripped: list[Any] = []
        for tool in tools:
            schema = tool.get("outputSchema") if isinstance(tool, dict) else None
            name = tool.get("name") if isinstance(tool, dict) else None
            if not isinstance(schema, dict) or not isinstance(name, str):
                if isinstance(name, str):  # a schema it had is gone with a listing that changed
                    self._output_schemas.pop(name, None)
                stripped.append(tool)
                continue
            self._output_schemas[name] = schema
            stripped.append({key: value for key, value in tool.items() if key != "outputSchema"})
        return {**result, "tools": stripped}

    def _check_structured(self, tool: str, result: Any) -> Any:
        """The result, or an error result when its structuredContent breaks the tool's outputSchema.

        As the SDK would, but the SDK words a mismatch with the whole schema and the
        whole value, pretty-printed: 14 MB of error and 5 s of the bridge's loop (every
        server's calls waiting) for a 10 MB value. So the SDK is not given the schemas
        (`_take_output_schemas`), and each result is checked here, once.
        """
        schema = self._output_schemas.get(tool)
        if schema is None or not isinstance(result, dict) or result.get("isError"):
            return result
        checker = self._output_checks.get(tool)
        if checker is None or checker[0] is not schema:
            checker = self._output_checks[tool] = (schema, output_checker(schema))
        fault = checker[1](result.get("structuredContent"))
        if fault is None:
            return result
        # The tool's name is the server's, of any length: cut, so the line stays one of a few
        # hundred characters.
        line = f"MCP server {self.config.name!r}: {quoted(tool, 100)} answered with {fault}"
        content = result.get("content")
        rest = content if isinstance(content, list) else []
        return {**result, "isError": True, "content": [{"type": "text", "text": line}, *rest]}

    def _start_failure(self, exc: BaseException) -> str:
        """Why the start failed: the step a server that ended was in; the config key to fix
        when the command or cwd cannot be used."""
        cause = _innermost(exc)
        if getattr(getattr(cause, "error", None), "code", None) == CONNECTION_CLOSED:
            # The SDK's words, "Connection closed", tell neither who closed it nor when.
            return (
                "its output ended (the process exited or closed its stdout) while the start "
                f"was {self._phase}"
            )
        filename = getattr(cause, "filename", None)
        if isinstance(cause, OSError) and filename is not None:
            what = cause.strerror or _describe(cause)
            # The command first: it is the one that failed when it names the cwd too.
            if str(filename) == self.config.command:
                return (
                    f"its command {self.config.command!r} cannot be run: {what} "
                    f"(see {self.config.key('command')})"
                )
            if str(filename) == str(self.stderr_log):
                return f"its stderr log {str(filename)!r} cannot be written: {what}"
            if self.config.cwd is not None and str(filename) == str(self.config.cwd):
                return (
                    f"its directory {str(self.config.cwd)!r} cannot be used: {what} "
                    f"(see {self.config.key('cwd')})"
                )
        return _describe(exc)

    def _stderr_tail(self) -> str:
        text = stderr_tail(self.stderr_log)
        return f"; its stderr ends with: {text}" if text else ""


def stderr_tail(log: Path, chars: int = _STDERR_TAIL) -> str:
    """The last `chars` characters of a server's stderr log, as written (white space at its
    end left out).

    Only the end of the file is read (at most `_TAIL_WINDOW` bytes): a server may have
    written gigabytes before it failed. Its terminal escapes are kept: the CLI shows a
    problem or an error escaped where it writes to a terminal (the core's one rule,
    `nanobot_core.escape_controls`), and a pipe, ``--json`` and the model get what the
    server wrote (a problem makes each run of white space one space).
    """
    try:
        # Opened without waiting: a named pipe with no writer would hold the bridge's loop
        # (every server's calls) until something writes to it. What is no regular file
        # (a pipe, /dev/null) has no tail: refused, it is an OSError as any other.
        with os.fdopen(open_regular_file(log), "rb") as file:
            end = file.seek(0, io.SEEK_END)
            # At most 4 bytes a character in UTF-8 (and one more cut at the start); more
            # while white space at the end leaves too few, up to the window.
            size = 4 * chars + 4
            while True:
                start = max(0, end - size)
                file.seek(start)
                data = file.read(end - start)
                # The bytes of a character cut at the window's start (three at most) are left
                # out: decoded, each would be a U+FFFD counted as a character of the tail.
                cut = 0
                while start > 0 and cut < min(3, len(data)) and 0x80 <= data[cut] < 0xC0:
                    cut += 1
                text = data[cut:].decode("utf-8", errors="replace").strip()
                if start == 0 or len(text) > chars or size >= _TAIL_WINDOW:
                    break
                size = min(2 * size, _TAIL_WINDOW)
    except OSError:
        return ""
    return text[-chars:]


def _open_log(path: Path, root: Path | None = None) -> TextIO:
    """`path` emptied and opened to take a server's stderr, without waiting.

    A plain open waits, on the bridge's loop (every server's calls held), until
    something reads a named pipe; opened without waiting, a pipe nothing reads
    is a `NotRegularFileError` naming it, and a pipe that is read, or a device
    such as ``/dev/null`` linked there, takes the stderr as the user meant.

    Its folders are made from `root` down (`folder_of`), none gone through as a
    link. A file is emptied only when it is the log's own: a link to a file (a
    session's, one outside the workspace) is refused, naming where it leads, and
    so is a file with other names (hard links); neither is emptied.
    """
    try:
        with folder_of(path, root, create=True) as folder:
            try:
                fd = open_regular_file(
                    path.name,
                    os.O_WRONLY | os.O_CREAT,
                    follow_links=False,
                    regular_only=False,
                    dir_fd=folder,
                    shown=str(path),
                )
            except NotRegularFileError as exc:
                if exc.errno != errno.ELOOP:
                    raise
                # A link: taken only to what is no regular file (/dev/null), opened
                # without creating or emptying anything.
                fd = _open_log_link(path, folder)
    except NotRegularFileError:
        raise
    except OSError as exc:
        # Named as the log, so the start's failure says "its stderr log ... cannot be
        # written" (a folder on the way that is a link names itself in the reason).
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    try:
        status = os.fstat(fd)
        if stat.S_ISREG(status.st_mode):
            if status.st_nlink > 1:
                raise NotRegularFileError(
                    str(path),
                    "file with other names (hard links)",
                    "which is not emptied: remove this name, and the log is made anew",
                )
            os.ftruncate(fd, 0)
        return os.fdopen(fd, "w", encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


def _open_log_link(path: Path, folder: int) -> int:
    """The log `path`, a symbolic link in `folder`, opened through the link when it leads
    to what is no regular file (a device, a pipe something reads); refused otherwise."""
    try:
        fd = open_regular_file(
            path.name, os.O_WRONLY, regular_only=False, dir_fd=folder, shown=str(path)
        )
    except FileNotFoundError:
        fd = -1  # a link to nothing: refused below, nothing created where it leads
    if fd >= 0 and not stat.S_ISREG(os.fstat(fd).st_mode):
        return fd
    if fd >= 0:
        os.close(fd)
    target = os.path.realpath(path)
    raise NotRegularFileError(
        str(path),
        "symbolic link",
        f"which leads to {target}: a log is written through a link only to a device or a "
        f"pipe ({os.devnull} silences the server); remove the link, and the log is made anew",
    )


def definition_size(spec: Mapping[str, Any]) -> int:
    """The size of a tool's definition: its bytes as compact JSON in UTF-8."""
    text = json.dumps(spec, ensure_ascii=False, separators=(",", ":"))
    # A lone surrogate (a JSON escape of half a pair) is counted as the 3 bytes it would take.
    return len(text.encode("utf-8", "surrogatepass"))


def screen_tools(result: dict[str, Any], version: str) -> tuple[dict[str, Any], list[RejectedTool]]:
    """A ``tools/list`` result without the tools the SDK would refuse, and those tools.

    Each tool is checked as the SDK checks the whole answer (against the
    negotiated protocol version's schema, then the SDK's ``ListToolsResult``),
    but on its own, so one bad tool does not take the others with it. An answer
    that is valid as a whole, or that is wrong outside its tools, is left as it is.
    """
    tools = result.get("tools")
    if (
        not isinstance(tools, list)
        or _refusal(result, version) is None
        or _refusal({**result, "tools": []}, version) is not None  # wrong outside the tools
    ):
        return result, []
    kept: list[Any] = []
    rejected: list[RejectedTool] = []
    for tool in tools:
        reason = _refusal({**result, "tools": [tool]}, version)
        if reason is None:
            kept.append(tool)
            continue
        name = tool.get("name") if isinstance(tool, Mapping) else None
        rejected.append(RejectedTool(name if isinstance(name, str) else None, reason))
    return {**result, "tools": kept}, rejected


def screen_content(result: dict[str, Any], version: str) -> dict[str, Any]:
    """A ``tools/call`` result whose content blocks the SDK would refuse are lines of text.

    Each block is checked as the SDK checks the whole answer, but on its own; a
    refused one becomes a text block naming its type and what is wrong, so the
    model still sees the rest. A result that is valid, or wrong outside its
    content, is left as it is (the SDK then refuses it as a whole).
    """
    content = result.get("content")
    if (
        not isinstance(content, list)
        or _refusal(result, version, "tools/call") is None
        or _refusal({**result, "content": []}, version, "tools/call") is not None
    ):
        return result
    kept: list[Any] = []
    for block in content:
        kind = block.get("type") if isinstance(block, Mapping) else None
        arm = _CONTENT_ARMS.get(kind) if isinstance(kind, str) else None
        reason = _refusal({**result, "content": [block]}, version, "tools/call", arm)
        if reason is None:
            kept.append(block)
            continue
        if arm is None:
            known = ", ".join(_CONTENT_ARMS)
            reason = f"not a content type of MCP ({known})"
        what = f"content of type {kind!r}" if isinstance(kind, str) else "a content block"
        kept.append({"type": "text", "text": f"[{what} left out: {reason}]"})
    return {**result, "content": kept}


def _refusal(
    result: dict[str, Any], version: str, method: str = "tools/list", arm: str | None = None
) -> str | None:
    """Why the SDK would refuse this result of `method`, or None when it would accept it.

    `arm` names the one content model whose problems are told (see `validation_summary`).
    """
    from mcp.types import CallToolResult, ListToolsResult
    from mcp_types import methods
    from pydantic import ValidationError

    model = CallToolResult if method == "tools/call" else ListToolsResult
    try:
        # No table for this version and method: the SDK skips this check too.
        with contextlib.suppress(KeyError):
            methods.validate_server_result(method, version, result)
        model.model_validate(result, by_name=False)
    except ValidationError as exc:
        return validation_summary(exc, arm)
    return None


def validation_summary(exc: Any, arm: str | None = None) -> str:
    """The first few problems of a pydantic error, as ``where: what`` (one per place).

    With `arm`, the problems of a content block are those of that model of the
    union only (a text block is not also told it lacks an image's ``data``).
    """
    problems: dict[str, str] = {}
    for error in exc.errors():
        location = [str(part) for part in error.get("loc", ())]
        if location[:2] in (["tools", "0"], ["content", "0"]):
            location = location[2:]
            if arm is not None and location and location[0] in _CONTENT_ARMS.values():
                if location[0] != arm:
                    continue
                location = location[1:]
        # A union reports each of its arms (``b.dict[str,any]``, ``b.bool``): keep the first.
        where = ".".join(part for part in location if not _is_union_arm(part)) or "the tool"
        problems.setdefault(where, str(error.get("msg", "invalid")))
    if not problems and arm is not None:  # none of them was the arm's own
        return validation_summary(exc)
    shown = [f"{where}: {what}" for where, what in list(problems.items())[:3]]
    more = len(problems) - len(shown)
    return "; ".join(shown) + (f" (and {more} more)" if more > 0 else "")


def _is_union_arm(part: str) -> bool:
    """Whether a part of a pydantic error location names a union's arm, not a field."""
    return "[" in part or part in {"bool", "int", "str", "float", "list", "dict", "none"}


def output_checker(schema: dict[str, Any]) -> Callable[[Any], str | None]:
    """A check of a structuredContent against `schema` (a tool's outputSchema), as the SDK's.

    It answers None for a value the schema allows, else one line of at most about
    300 characters saying where and what is wrong (or what is wrong with the schema).
    """
    # jsonschema and referencing come with the SDK (it checks results with them too); jsonschema
    # has no type hints.
    from jsonschema import SchemaError  # type: ignore[import-untyped,unused-ignore]
    from jsonschema.exceptions import best_match  # type: ignore[import-untyped,unused-ignore]
    from jsonschema.validators import validator_for  # type: ignore[import-untyped,unused-ignore]
    from referencing import Registry
    from referencing.exceptions import Unresolvable

    try:
        validator_class = validator_for(schema)
        validator_class.check_schema(schema)
        validator = validator_class(schema, registry=Registry())
    except SchemaError as exc:
        fault = f"a result it gave an invalid outputSchema for ({_cut(exc.message)})"
        return lambda value: fault
    except RecursionError:
        return lambda value: "a result whose outputSchema nests too deep to check"

    def check(value: Any) -> str | None:
        if value is None:
            return "no structuredContent, which its outputSchema asks for"
        try:
            error = best_match(validator.iter_errors(value))
        except Unresolvable as exc:
            ref = _cut(str(getattr(exc, "ref", "?")))
            return f"a result its outputSchema cannot check (its $ref {ref!r} leads nowhere)"
        except RecursionError:
            return "a result its outputSchema cannot check (its $ref loops or nests too deep)"
        if error is None:
            return None
        where = "structuredContent" + error.json_path[1:]
        return (
            "structuredContent its outputSchema does not allow "
            f"({_cut(where, 100)}: {_cut(error.message)})"
        )

    return check


def _cut(text: str, limit: int = 200) -> str:
    """`text` on one line, cut to about `limit` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "\u2026"


def _innermost(exc: BaseException) -> BaseException:
    """The exception inside the one-exception groups anyio wraps it in."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    """A one-line reason, looking inside the exception groups anyio raises."""
    exc = _innermost(exc)
    message = str(exc).strip()
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
