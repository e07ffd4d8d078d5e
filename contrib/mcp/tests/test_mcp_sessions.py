"""The bridge over a session's life against real MCP server processes: closing, restarts,
listings that overlap, and one workspace however its path is spelled."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from nanobot_core import PluginContext, ToolResult
from nanobot_core.testing import run_tool

from nanobot_mcp import McpBridge, McpTool, ServerHandle, load_servers, nanobot_tools

if TYPE_CHECKING:
    from conftest import Workspace

RAW_SERVER = Path(__file__).parent / "servers" / "raw_server.py"

CLOSED = (
    "Error: MCP server 'notes': 'add' was not called: the MCP bridge is closed (it closes "
    "when the process exits)"
)


def _add_tool(workspace: Workspace, bridge: McpBridge) -> McpTool:
    """The notes server's `add` tool, called through `bridge`."""
    (config,) = load_servers(workspace.root, {})
    spec = {"name": "add", "inputSchema": {"type": "object", "properties": {}}}
    return McpTool(ServerHandle(config, workspace.root), spec, bridge)


def _first_line(result: ToolResult) -> str:
    """The first line of a result (the core adds a hint under an error's)."""
    return str(result).split("\n", 1)[0]


def _at_once(tool: McpTool, count: int, *, text: bool = False) -> list[ToolResult]:
    """`count` calls of `tool` from as many threads, let go together (adding numbers, or
    with a `text` when `text`)."""
    results: list[ToolResult] = []
    barrier = threading.Barrier(count)

    def call(number: int) -> None:
        barrier.wait()
        arguments = {"text": str(number)} if text else {"a": number, "b": 1}
        results.append(run_tool(tool, arguments))

    threads = [threading.Thread(target=call, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return results


def test_calls_after_the_bridge_closed_are_an_error_naming_the_server(
    workspace: Workspace,
) -> None:
    """Calls that come at once after the bridge closed (its exit hook ran) are each an error
    naming the server and the tool, and start nothing: they were a new loop's server nothing
    stops, or a RuntimeError of a lock bound to the closed loop."""
    workspace.configure(notes={})
    bridge = McpBridge()
    add = _add_tool(workspace, bridge)
    try:
        assert sorted(str(r) for r in _at_once(add, 2)) == ["1", "2"]
        bridge.close()
        assert [_first_line(r) for r in _at_once(add, 2)] == [CLOSED, CLOSED]
        assert _first_line(run_tool(add, {"a": 1, "b": 1})) == CLOSED
        started = bridge.start_servers([add.handle])
        assert [str(e) for e in started.values()] == [
            "MCP server 'notes' was not started: the MCP bridge is closed (it closes when the "
            "process exits)"
        ]
        assert workspace.spawns() == 1
        assert bridge.closed
    finally:
        bridge.close()


def test_a_call_the_closing_bridge_cannot_finish_is_answered_at_once(
    workspace: Workspace,
) -> None:
    """A call whose server is still starting when the bridge closes, and stops slower than the
    close waits, is answered as stopped when the close returns: it waited, frozen with the
    stopped loop, until its own timeout."""
    workspace.configure(notes={"env": {"NOTES_SERVER_STARTUP_DELAY": "5"}})
    bridge = McpBridge()
    add = _add_tool(workspace, bridge)
    outcome: list[ToolResult] = []
    caller = threading.Thread(target=lambda: outcome.append(run_tool(add, {"a": 1, "b": 1})))
    caller.start()
    deadline = time.monotonic() + 30
    while workspace.spawns() < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    bridge.close(timeout=0.01)
    caller.join(5)
    assert not caller.is_alive()
    assert _first_line(outcome[0]) == (
        "Error: MCP server 'notes': 'add' was stopped: the MCP bridge closed before the call "
        "finished"
    )
    # The server left behind sees its input closed once it is up, and ends.
    pid = int(workspace.spawn_log.read_text().split()[0])
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(pid)


def _running(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie waiting to be reaped does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_one_workspace_spelled_several_ways_has_one_cache_record_and_one_server(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workspace given as a relative path, an absolute one, through a link or with a
    trailing slash is one workspace: one cache record, keyed by the real path, and one
    server, whose state every spelling's tools share. Each spelling was a cache record of
    its own that undid the others, and a server of its own."""
    workspace.configure(notes={"cwd": "tools"})
    (workspace.root / "tools").mkdir()
    (workspace.root / "here").symlink_to(workspace.root)
    monkeypatch.chdir(workspace.root)
    spellings = [
        Path("."),
        workspace.root,
        workspace.root / "here",
        f"{workspace.root}/",
        "here/tools/..",
    ]
    tools = [bridged_from(spelling) for spelling in spellings]
    assert all(list(t) == list(tools[0]) for t in tools)
    assert workspace.spawns() == 1
    assert run_tool(tools[0]["mcp_notes_add_note"], {"text": "one"}) == "stored note 1"
    for each in tools[1:]:
        assert run_tool(each["mcp_notes_list_notes"], {}) == "one"
    assert workspace.spawns() == 1  # the server the listing started took every call
    (server,) = load_servers(workspace.root, {})
    assert server.cwd == workspace.root.resolve() / "tools"
    record = workspace.root / ".nanobot" / "cache" / "mcp" / "notes.json"
    assert json.loads(record.read_text())["config_hash"] == server.config_hash
    assert {h.workspace for t in tools for h in [t["mcp_notes_add"].handle]} == {
        workspace.root.resolve()
    }


def bridged(workspace: Workspace) -> dict[str, McpTool]:
    """The plugin's tools for this workspace, by name."""
    return bridged_from(workspace.root)


def bridged_from(spelling: str | Path) -> dict[str, McpTool]:
    """The plugin's tools, by name, for the workspace as `spelling` names it."""
    return {tool.name: tool for tool in nanobot_tools(PluginContext(workspace=spelling))}


def test_a_server_that_ends_while_listing_again_is_started_again_for_the_call(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server that exits when asked to list its tools again (after saying they changed) is
    started again before the call, as one that died while idle, and the call is answered: it
    was sent on the ended connection ('closed the connection during the call'), with a
    warning that the tools listed before are used."""
    env = {"RAW_SERVER_CHANGING": "1", "RAW_SERVER_EXIT_ON_RELIST": "1"}
    workspace.configure(raw={"args": [str(RAW_SERVER)], "env": env})
    tools = bridged(workspace)
    assert run_tool(tools["mcp_raw_change"], {"text": "changed"}) == "changed"
    capsys.readouterr()
    assert run_tool(tools["mcp_raw_echo"], {"text": "after"}) == "after"
    assert workspace.spawns() == 2
    assert "MCP server" not in capsys.readouterr().err
    assert run_tool(tools["mcp_raw_echo"], {"text": "again"}) == "again"
    assert workspace.spawns() == 2


def test_calls_during_a_listing_again_wait_for_it(workspace: Workspace) -> None:
    """Calls that come together after the server said its tools changed all wait for the one
    listing: a tool it took away is refused to each. The calls after the first were checked
    against the list being replaced and sent to the server meanwhile."""
    env = {"RAW_SERVER_CHANGING": "1", "RAW_SERVER_PAGE_DELAY": "1"}
    workspace.configure(raw={"args": [str(RAW_SERVER)], "env": env})
    echo = bridged(workspace)["mcp_raw_echo"]
    assert run_tool(bridged(workspace)["mcp_raw_change"], {"text": "changed"}) == "changed"
    gone = (
        "Error: MCP server 'raw' no longer lists 'echo': its tool list changed during this "
        "session (notifications/tools/list_changed)"
    )
    assert [_first_line(r) for r in _at_once(echo, 3, text=True)] == [gone] * 3
    assert workspace.spawns() == 1


def _listings_awaited(bridge: McpBridge) -> int:
    """How many tools/list requests the bridge's sessions wait an answer to (from this thread)."""
    return sum(len(c._listing_ids) for c in list(bridge._connections.values()))


def test_a_listing_of_the_sdks_own_does_not_mix_into_ours(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    """A listing the MCP SDK makes for itself (after a call to a tool it never saw listed)
    while the plugin lists the tools again adds nothing to the plugin's listing: each tool
    left out is said once, and cached once. Its tools left out were added to the plugin's,
    so each was said and cached twice."""
    bad = {"name": "bad", "inputSchema": {"type": "string"}}
    env = {
        "RAW_SERVER_CHANGING": "1",
        "RAW_SERVER_PAGE_DELAY": "1.5",
        "RAW_SERVER_EXTRA_TOOLS": json.dumps([bad]),
    }
    workspace.configure(raw={"args": [str(RAW_SERVER)], "env": env})
    tools = bridged(workspace)
    unlisted = McpTool(
        tools["mcp_raw_change"].handle, {"name": "change_unlisted"}, tools["mcp_raw_change"].bridge
    )
    # Its answer comes with the change; the SDK then lists the tools for itself (1.5 s).
    sdk = threading.Thread(target=run_tool, args=(unlisted, {"text": "x"}))
    sdk.start()
    bridge = tools["mcp_raw_change"].bridge
    deadline = time.monotonic() + 30
    while not _listings_awaited(bridge) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _listings_awaited(bridge) == 1  # the SDK's own, under way
    capsys.readouterr()
    assert run_tool(tools["mcp_raw_change"], {"text": "again"}) == "again"  # lists again
    sdk.join(30)
    said = capsys.readouterr().err
    assert said.count("MCP server 'raw': tool 'bad' left out") == 1
    record = workspace.root / ".nanobot" / "cache" / "mcp" / "raw.json"
    assert [r["tool"] for r in json.loads(record.read_text())["rejected"]] == ["bad"]
