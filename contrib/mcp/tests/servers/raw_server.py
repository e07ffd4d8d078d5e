"""A hand-written MCP server over stdio (no SDK), for what the SDK's own server never sends.

It answers ``initialize``, ``tools/list`` and ``tools/call`` one JSON line at a
time. Its one tool, ``echo``, answers with its ``text`` argument. Environment
switches:

- ``RAW_SERVER_LATIN1``: every answer of ``echo`` holds a byte that is not UTF-8.
- ``RAW_SERVER_CALL_RESULT``: a JSON object sent as it is as the result of every call.
- ``RAW_SERVER_STRUCTURED_ITEMS``: the result of every call (as above) gets a
  ``structuredContent`` of ``{"items": [...]}`` with this many small objects (a large value).
- ``RAW_SERVER_EXTRA_TOOLS``: a JSON list of tool definitions listed after ``echo``, sent as
  they are (invalid ones included); calling any of them answers like ``echo``.
- ``RAW_SERVER_PAD``: the text of every answer of ``echo`` is followed by this many ``x``.
- ``RAW_SERVER_FLOOD``: every call is answered with this many bytes and no newline (then the
  server waits for more requests), as a broken or hostile server might.
- ``RAW_SERVER_FLOOD_IDLE``: after answering ``tools/list``, send this many bytes and no
  newline unasked.
- ``RAW_SERVER_HANG``: never answer a request of this method (``initialize``, ``tools/list``).
- ``RAW_SERVER_STDERR_MIB``: at start, write this many MiB of ``e`` to stderr.
- ``RAW_SERVER_STDERR``: at start, write this text to stderr (after the MiB above).
- ``RAW_SERVER_EXIT``: at start, exit with this status (after writing to stderr).
- ``RAW_SERVER_PAGES``: list the tools over this many pages of ``tools/list``, all of them on
  the first and one tool ``page<n>`` on each other (the cursor is the next page's number).
- ``RAW_SERVER_SAME_CURSOR``: every page of ``tools/list`` asks for more with this same cursor.
- ``RAW_SERVER_TOOL_COUNT``: this many more tools, ``t0``, ``t1``... (listed after the extra ones).
- ``RAW_SERVER_BIG_TOOL``: one more tool, ``big``, whose description is this many ``d``.
- ``RAW_SERVER_CHANGING``: calling the tool ``change`` (listed with the others), or any name
  that begins so, replaces ``echo`` with ``echo2`` and sends
  ``notifications/tools/list_changed``.
- ``RAW_SERVER_EXIT_ON_RELIST``: exit when asked for its tool list a second time (a server
  that dies listing its tools again after saying they changed).
- ``RAW_SERVER_PAGE_DELAY``: wait this many seconds before answering each page of
  ``tools/list`` after the first listing (a slow listing again).
- ``NOTES_SERVER_SPAWN_LOG``: append the process id to this file at start (as the notes
  server does).
"""

from __future__ import annotations

import json
import os
import sys
import time

RESULT = "RAW_SERVER_CALL_RESULT"
_CHUNK = 1 << 20
TOOLS = [
    {
        "name": "echo",
        "description": "Answer with the text.",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    }
]


def send(message: dict[str, object]) -> None:
    sys.stdout.buffer.write(json.dumps(message).encode() + b"\n")
    sys.stdout.buffer.flush()


def answer(request: dict[str, object]) -> None:
    method, ident = request.get("method"), request.get("id")
    if ident is None or method == os.environ.get("RAW_SERVER_HANG"):
        return  # a notification, or a request it is told to leave unanswered
    if method == "initialize":
        params = request["params"]
        assert isinstance(params, dict)
        result: dict[str, object] = {
            "protocolVersion": params["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "0"},
        }
    elif method == "tools/list":
        result = list_tools(request.get("params"))
    elif method == "tools/call":
        params = request["params"]
        assert isinstance(params, dict)
        text = str(params["arguments"].get("text", params["name"]))
        if str(params["name"]).startswith("change") and os.environ.get("RAW_SERVER_CHANGING"):
            TOOLS[0] = {**TOOLS[0], "name": "echo2"}
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        if os.environ.get("RAW_SERVER_FLOOD"):
            flood(int(os.environ["RAW_SERVER_FLOOD"]))
            return
        text += "x" * int(os.environ.get("RAW_SERVER_PAD", "0"))
        if os.environ.get(RESULT):
            result = json.loads(os.environ[RESULT])
            if os.environ.get("RAW_SERVER_STRUCTURED_ITEMS"):
                count = int(os.environ["RAW_SERVER_STRUCTURED_ITEMS"])
                items = [{"a": index, "b": "x" * 10} for index in range(count)]
                result["structuredContent"] = {"items": items}
            send({"jsonrpc": "2.0", "id": ident, "result": result})
            return
        if os.environ.get("RAW_SERVER_LATIN1"):
            line = {"jsonrpc": "2.0", "id": ident, "result": {"content": "@"}}
            head, tail = json.dumps(line).encode().split(b'"@"')
            body = b'[{"type": "text", "text": "caf\xe9 ' + text.encode() + b'"}]'
            sys.stdout.buffer.write(head + body + tail + b"\n")
            sys.stdout.buffer.flush()
            return
        result = {"content": [{"type": "text", "text": text}]}
    else:
        result = {}
    send({"jsonrpc": "2.0", "id": ident, "result": result})
    if method == "tools/list" and os.environ.get("RAW_SERVER_FLOOD_IDLE"):
        flood(int(os.environ["RAW_SERVER_FLOOD_IDLE"]))


LISTINGS = [0]  # how many listings (first pages) were asked for


def list_tools(params: object) -> dict[str, object]:
    """One page of the tool list (see the switches above)."""
    cursor = params.get("cursor") if isinstance(params, dict) else None
    if cursor is None:
        LISTINGS[0] += 1
        if LISTINGS[0] > 1 and os.environ.get("RAW_SERVER_EXIT_ON_RELIST"):
            os._exit(0)
    if LISTINGS[0] > 1:
        time.sleep(float(os.environ.get("RAW_SERVER_PAGE_DELAY", "0")))
    pages = int(os.environ.get("RAW_SERVER_PAGES", "1"))
    page = int(cursor) if isinstance(cursor, str) and cursor.isdigit() else 0
    tools = all_tools() if page == 0 else [{**TOOLS[0], "name": f"page{page}"}]
    result: dict[str, object] = {"tools": tools}
    if page + 1 < pages:
        result["nextCursor"] = str(page + 1)
    if os.environ.get("RAW_SERVER_SAME_CURSOR"):
        result["nextCursor"] = os.environ["RAW_SERVER_SAME_CURSOR"]
    return result


def all_tools() -> list[dict[str, object]]:
    """Every tool of one page: echo, the extra tools, then the counted and big ones."""
    tools = TOOLS + json.loads(os.environ.get("RAW_SERVER_EXTRA_TOOLS", "[]"))
    if os.environ.get("RAW_SERVER_CHANGING"):
        tools.append({**TOOLS[0], "name": "change"})
    count = int(os.environ.get("RAW_SERVER_TOOL_COUNT", "0"))
    tools += [{**TOOLS[0], "name": f"t{index}"} for index in range(count)]
    if os.environ.get("RAW_SERVER_BIG_TOOL"):
        size = int(os.environ["RAW_SERVER_BIG_TOOL"])
        tools.append({**TOOLS[0], "name": "big", "description": "d" * size})
    return tools


def flood(size: int) -> None:
    """Write `size` bytes of one JSON string, never ending it or the line."""
    sys.stdout.buffer.write(b'{"jsonrpc": "2.0", "id": 1, "result": "')
    for start in range(0, size, _CHUNK):
        sys.stdout.buffer.write(b"x" * min(_CHUNK, size - start))
    sys.stdout.buffer.flush()


if os.environ.get("NOTES_SERVER_SPAWN_LOG"):
    with open(os.environ["NOTES_SERVER_SPAWN_LOG"], "a", encoding="utf-8") as log:
        log.write(f"{os.getpid()}\n")

for _ in range(int(os.environ.get("RAW_SERVER_STDERR_MIB", "0"))):
    sys.stderr.write("e" * _CHUNK)
sys.stderr.write(os.environ.get("RAW_SERVER_STDERR", ""))
sys.stderr.flush()
if os.environ.get("RAW_SERVER_EXIT"):
    sys.exit(int(os.environ["RAW_SERVER_EXIT"]))

for raw in sys.stdin.buffer:
    answer(json.loads(raw))
