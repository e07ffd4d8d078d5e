"""The stdio transport to an MCP server, with a bound on the length of a line it sends.

The SDK's stdio client adds each chunk the server writes to the part of a line
it holds and splits the whole again: a line that does not end costs time
quadratic in its length on the event loop every server shares (45 s for 50 MB,
the other servers' calls waiting meanwhile) and memory without limit. This
transport starts and stops the process with the SDK's own helpers (the same
process group, and the same shutdown: stdin closed, a grace period, then the
whole process tree ended), but splits the lines itself (`LineSplitter`): each
byte is looked at once, and at most ``max_line_bytes`` of a line are held. A
longer line ends the server at once: the session reads `LineTooLong`, then the
end of the stream, so the requests waiting on the server fail.

Those helpers are private to the SDK, and a release within the pin may rename
or remove one: then every server is started with the SDK's public
``stdio_client`` instead (its lines unbounded, as before this transport), and
one warning names the ``mcp`` version and the helpers missing.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import anyio.lowlevel
from nanobot_core import PluginError

if TYPE_CHECKING:
    from mcp import StdioServerParameters

__all__ = ["DEFAULT_MAX_LINE_BYTES", "LineSplitter", "LineTooLong", "bounded_stdio_client"]

#: The longest line a server may send (one JSON-RPC message): room for a
#: result with a few large images in base64, and bounded.
DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
_MIB = 1024 * 1024
_KIB = 1024
# As the SDK's stdio client: time for the writer to send what the session already handed over.
_WRITER_FLUSH_TIMEOUT = 0.5

logger = logging.getLogger(__name__)

#: What the bounded transport takes from the SDK, as (module, name). The names
#: starting with ``_`` are private to it; the others are checked with them, so that
#: whatever one release moves, the transport is used whole or not at all.
_SDK_NAMES = (
    ("mcp.client.stdio", "_create_platform_compatible_process"),
    ("mcp.client.stdio", "_drain_stdout"),
    ("mcp.client.stdio", "_get_executable_command"),
    ("mcp.client.stdio", "_stop_server_process"),
    ("mcp.client.stdio", "_terminate_process_tree"),
    ("mcp.client.stdio", "get_default_environment"),
    ("mcp.shared.message", "SessionMessage"),
    ("mcp_types", "jsonrpc_message_adapter"),
)
_sdk_lock = threading.Lock()
_sdk_missing: tuple[str, ...] | None = None


class LineTooLong(PluginError):
    """A server sent a line longer than the limit (`limit` bytes, the newline not counted)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"a line longer than {describe_size(limit)} (max_line_bytes)")
        self.limit = limit


class LineSplitter:
    """Cuts a stream of bytes into lines of at most `limit` bytes, in time linear in its length.

    The part of a line not ended yet is kept as the chunks it came in, joined
    once when its newline comes, so no byte is copied or searched twice.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._parts: list[bytes] = []
        #: How many bytes of an unfinished line are held (never more than `limit`).
        self.buffered = 0

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        """The lines `chunk` ends, without their newlines; `LineTooLong` once one is too long.

        The lines ended before the one that is too long are yielded first.
        """
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            if self.buffered + end - start > self.limit:
                raise LineTooLong(self.limit)
            self._parts.append(chunk[start:end])
            line = b"".join(self._parts)
            self._parts.clear()
            self.buffered = 0
            yield line
            start = end + 1
        if self.buffered + len(chunk) - start > self.limit:
            raise LineTooLong(self.limit)
        if start < len(chunk):
            self._parts.append(chunk[start:])
            self.buffered += len(chunk) - start


def describe_size(size: int) -> str:
    """`size` bytes as people write it: ``16 MiB``, ``512 KiB``, ``1000 bytes``."""
    for unit, name in ((_MIB, "MiB"), (_KIB, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} byte" if size == 1 else f"{size} bytes"


def missing_sdk_names() -> tuple[str, ...]:
    """The names the bounded transport needs that this ``mcp`` lacks (``module.name``); () if none.

    Looked up once per process, all at once: if any is missing, one warning names
    the ``mcp`` version and every name missing.
    """
    global _sdk_missing
    with _sdk_lock:  # servers may start from several threads; the warning is said once
        if _sdk_missing is None:
            _sdk_missing = _look_up_sdk()
        return _sdk_missing


def _look_up_sdk() -> tuple[str, ...]:
    missing: list[str] = []
    for module_name, name in _SDK_NAMES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            module = None
        if not hasattr(module, name):
            missing.append(f"{module_name}.{name}")
    if missing:
        try:
            version = importlib.metadata.version("mcp")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        logger.warning(
            "MCP servers' lines are not bounded (max_line_bytes is not enforced) with mcp %s:"
            " it lacks %s; the SDK's stdio_client is used instead",
            version,
            ", ".join(missing),
        )
    return tuple(missing)


@contextlib.asynccontextmanager
async def bounded_stdio_client(
    server: StdioServerParameters, errlog: TextIO, max_line_bytes: int
) -> AsyncIterator[tuple[Any, Any]]:
    """Spawn the server and yield its (read, write) streams, as the SDK's ``stdio_client``.

    Lines are decoded with ``server.encoding`` and ``server.encoding_error_handler``
    (each line on its own: a newline byte is never part of a UTF-8 character).
    A line longer than `max_line_bytes` ends the server's process tree, is read as
    `LineTooLong`, and closes the read stream. Where this ``mcp`` lacks a helper
    (`missing_sdk_names`), it is the SDK's ``stdio_client``, without the bound.
    """
    if missing_sdk_names():
        from mcp import stdio_client

        async with stdio_client(server, errlog) as streams:
            yield streams
        return
    # The SDK's helpers: the process is started and stopped as its stdio_client does.
    from mcp.client.stdio import (
        _create_platform_compatible_process,
        _drain_stdout,
        _get_executable_command,
        _stop_server_process,
        _terminate_process_tree,
        get_default_environment,
    )
    from mcp.shared.message import SessionMessage
    from mcp_types import jsonrpc_message_adapter

    command = await _get_executable_command(server.command)
    process = await _create_platform_compatible_process(
        command=command,
        args=server.args,
        env=get_default_environment() | (server.env or {}),
        errlog=errlog,
        cwd=server.cwd,
    )
    # No awaits until the task group is entered: a cancellation in the gap would leave
    # the process running.
    read_send, read_receive = anyio.create_memory_object_stream[Any](0)
    write_send, write_receive = anyio.create_memory_object_stream[Any](0)
    shutting_down = False
    writer_done = anyio.Event()

    def parse(line: bytes) -> Any:
        text = line.decode(server.encoding, server.encoding_error_handler)
        try:
            return SessionMessage(jsonrpc_message_adapter.validate_json(text, by_name=False))
        except ValueError as exc:  # the session reports it, as the SDK's reader does
            return exc

    async def stdout_reader() -> None:
        assert process.stdout is not None
        splitter = LineSplitter(max_line_bytes)
        overflow: LineTooLong | None = None
        try:
            async with read_send:
                try:
                    async for chunk in process.stdout:
                        for line in splitter.feed(chunk):
                            try:
                                await read_send.send(parse(line))
                            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                                return  # the session is gone; only the drain below remains
                except LineTooLong as exc:
                    overflow = exc
                finally:
                    if overflow is None:
                        # A server stuck writing stdout cannot see its stdin close.
                        await _drain_stdout(process)
                if overflow is not None:
                    # Its output is no longer read, so the server is ended now rather than
                    # after the grace period of a shutdown it might ignore.
                    with anyio.CancelScope(shield=True):
                        await _terminate_process_tree(process)
                    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                        await read_send.send(overflow)
        except anyio.ClosedResourceError:
            pass  # our own shutdown closed the stdout stream under the read
        except (anyio.BrokenResourceError, ConnectionError):
            if not shutting_down:
                logger.exception("Reading from the MCP server's stdout failed mid-session")

    async def stdin_writer() -> None:
        assert process.stdin is not None
        try:
            async with write_receive:
                async for message in write_receive:
                    json = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    data = (json + "\n").encode(server.encoding, server.encoding_error_handler)
                    await process.stdin.send(data)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The server may still be alive: end the read stream, so the session sees the
            # connection end rather than wait on a request for ever.
            await read_send.aclose()
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_receive.close()  # unblock the reader into its drain
        write_send.close()
        with anyio.move_on_after(_WRITER_FLUSH_TIMEOUT):
            await writer_done.wait()
        await _stop_server_process(process)
        for stream in (read_receive, write_send, read_send, write_receive):
            await stream.aclose()
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        group.start_soon(stdout_reader)
        group.start_soon(stdin_writer)
        try:
            yield read_receive, write_send
        finally:
            shutting_down = True
            # Every wait in it is bounded, and it must finish even when the caller is
            # cancelled, or the process would outlive the connection.
            with anyio.CancelScope(shield=True):
                await shutdown()
            group.cancel_scope.cancel()
