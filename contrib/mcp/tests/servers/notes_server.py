"""A tiny MCP server over stdio, for the nanobot-mcp tests (run as a script, never imported).

Environment switches make it misbehave on purpose:

- ``NOTES_SERVER_SPAWN_LOG``: append one line to this file each time the server starts;
- ``NOTES_SERVER_CRASH``: exit with status 3 before speaking MCP, after a line on stderr;
- ``NOTES_SERVER_STARTUP_DELAY``: sleep this many seconds before serving.
"""

from __future__ import annotations

import os
import sys
import threading
import time

if os.environ.get("NOTES_SERVER_SPAWN_LOG"):
    with open(os.environ["NOTES_SERVER_SPAWN_LOG"], "a", encoding="utf-8") as log:
        log.write(f"{os.getpid()}\n")
if os.environ.get("NOTES_SERVER_CRASH"):
    print("notes server: cannot open the notes database", file=sys.stderr, flush=True)
    sys.exit(3)
time.sleep(float(os.environ.get("NOTES_SERVER_STARTUP_DELAY", "0")))

# The switches above must act before the (slow) SDK import, as a real server's would.
from mcp.server.mcpserver import MCPServer  # noqa: E402
from mcp.server.mcpserver.exceptions import ToolError  # noqa: E402

server = MCPServer("notes")
notes: list[str] = []


@server.tool()
def add_note(text: str) -> str:
    """Store a note and say how many there are."""
    notes.append(text)
    return f"stored note {len(notes)}"


@server.tool()
def list_notes() -> str:
    """List the stored notes, one per line."""
    return "\n".join(notes) if notes else "no notes"


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fail(reason: str) -> str:
    """Always fail, with the given reason."""
    raise ToolError(f"refusing on purpose: {reason}")


@server.tool()
def exit_now() -> str:
    """Terminate the server process (to test a server that dies mid-session)."""
    os._exit(0)


@server.tool()
def exit_soon(delay: float) -> str:
    """Answer, then terminate the server process `delay` seconds later (dies while idle)."""
    threading.Timer(delay, os._exit, args=(0,)).start()
    return "exiting soon"


@server.tool()
async def pause(seconds: float) -> str:
    """Wait `seconds`, then answer (to test the call timeout)."""
    import anyio

    await anyio.sleep(seconds)
    return f"paused {seconds:g} s"


if __name__ == "__main__":
    server.run("stdio")
