"""The bridge against a real MCP server process: listing, calling, caching, failing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from nanobot_core import Config, PluginContext, PluginManager, ToolResult
from nanobot_core.testing import run_cli, run_cli_in_terminal, run_tool

import nanobot_mcp
from nanobot_mcp import (
    FailureMemory,
    McpBridge,
    McpTool,
    ToolListCache,
    default_bridge,
    load_servers,
    nanobot_tools,
    reset_default_bridge,
)

if TYPE_CHECKING:
    from conftest import Workspace

RAW_SERVER = Path(__file__).parent / "servers" / "raw_server.py"
RAW_EXTRA = "RAW_SERVER_EXTRA_TOOLS"
MIB = 1 << 20


def bridged(workspace: Workspace) -> dict[str, McpTool]:
    """The tools the plugin contributes for this workspace, by name."""
    tools = nanobot_tools(PluginContext(workspace=workspace.root))
    return {tool.name: tool for tool in tools}


def through_the_core(workspace: Workspace) -> tuple[dict[str, McpTool], list[str]]:
    """The plugin's tools as the core's plugin manager collects them, and its problems."""
    manager = PluginManager(Config(), workspace=workspace.root, autoload=False)
    record = manager.register(nanobot_mcp, "mcp", distribution="nanobot-mcp", version="0.1.0")
    tools = {c.name: c.item for c in manager.contributions("tool") if c.plugin == record.info}
    assert record.status == "loaded", record.error
    return tools, record.problems


def _sessions_up(bridge: McpBridge) -> int:
    """How many of the bridge's servers it still takes for running (read from this thread)."""
    return sum(connection.alive for connection in list(bridge._connections.values()))


def test_server_tools_appear_with_prefixed_names_and_schemas(workspace: Workspace) -> None:
    """Each MCP tool becomes mcp_<server>_<tool>, with the server's description and schema."""
    workspace.configure(notes={})
    tools = bridged(workspace)
    assert list(tools) == [
        "mcp_notes_add_note",
        "mcp_notes_list_notes",
        "mcp_notes_add",
        "mcp_notes_fail",
        "mcp_notes_exit_now",
        "mcp_notes_exit_soon",
        "mcp_notes_pause",
    ]
    add_note = tools["mcp_notes_add_note"]
    assert add_note.description.startswith("Store a note and say how many there are.")
    assert "'notes'" in add_note.description
    assert add_note.parameters["required"] == ["text"]
    assert add_note.parameters["properties"]["text"]["type"] == "string"


def test_calls_reach_the_server_and_its_state_survives_between_calls(
    workspace: Workspace,
) -> None:
    """Calls (each from a new event loop) go to one long-lived server process."""
    workspace.configure(notes={})
    tools = bridged(workspace)
    assert run_tool(tools["mcp_notes_add_note"], {"text": "buy milk"}) == "stored note 1"
    assert run_tool(tools["mcp_notes_add_note"], '{"text": "call Ann"}') == "stored note 2"
    assert run_tool(tools["mcp_notes_list_notes"], {}) == "buy milk\ncall Ann"
    assert run_tool(tools["mcp_notes_add"], {"a": 2, "b": "3"}) == "5"
    assert workspace.spawns() == 1


def test_an_mcp_error_result_becomes_an_error_result(workspace: Workspace) -> None:
    """A tool that reports isError comes back as an "Error" result carrying its message."""
    workspace.configure(notes={})
    result = run_tool(bridged(workspace)["mcp_notes_fail"], {"reason": "no disk"})
    assert result.is_error
    assert result.startswith("Error")
    assert "refusing on purpose: no disk" in result


def test_the_tool_list_is_cached_and_the_server_starts_lazily(workspace: Workspace) -> None:
    """After a first start, listing tools in a new process reads the cache and spawns nothing."""
    workspace.configure(notes={})
    first = list(bridged(workspace))
    assert workspace.spawns() == 1
    cache_file = workspace.root / ".nanobot" / "cache" / "mcp" / "notes.json"
    cached = json.loads(cache_file.read_text())
    (server,) = load_servers(workspace.root, {})
    assert cached["config_hash"] == server.config_hash
    reset_default_bridge()  # as if the process had ended

    again = bridged(workspace)
    assert list(again) == first
    assert workspace.spawns() == 1
    assert run_tool(again["mcp_notes_add"], {"a": 1, "b": 1}) == "2"
    assert workspace.spawns() == 2


def test_a_changed_server_config_is_listed_afresh(workspace: Workspace) -> None:
    """Editing the server's command line or environment invalidates its cached tool list."""
    workspace.configure(notes={})
    bridged(workspace)
    reset_default_bridge()
    workspace.configure(notes={"env": {"NOTES_FLAVOUR": "other"}})
    bridged(workspace)
    assert workspace.spawns() == 2


def test_a_stale_cache_entry_gives_an_error_result_not_a_crash(workspace: Workspace) -> None:
    """Calling a tool the server no longer has is an error result naming the tool."""
    workspace.configure(notes={})
    (server,) = load_servers(workspace.root, {})
    ToolListCache.for_workspace(workspace.root).store(
        server, [{"name": "vanished", "inputSchema": {"type": "object", "properties": {}}}]
    )
    (tool,) = bridged(workspace).values()
    result = run_tool(tool, {})
    assert result.is_error
    assert "vanished" in result


def test_a_server_that_fails_to_start_loses_only_its_own_tools(workspace: Workspace) -> None:
    """A crashing server is reported by name with its stderr; the other server's tools stay."""
    workspace.configure(broken={"env": {"NOTES_SERVER_CRASH": "1"}}, notes={})
    tools, problems = through_the_core(workspace)
    assert "mcp_notes_add" in tools
    assert not any(name.startswith("mcp_broken_") for name in tools)
    (message,) = problems
    assert message.startswith("MCP server 'broken' failed to start")
    assert "cannot open the notes database" in message
    assert "its tools are left out" in message
    assert run_tool(tools["mcp_notes_add"], {"a": 1, "b": 2}) == "3"


def test_a_server_that_never_answers_hits_the_startup_timeout(workspace: Workspace) -> None:
    """A server slower than startup_timeout is reported as not started, by name, and left out."""
    workspace.configure(
        sleepy={"startup_timeout": 0.5, "env": {"NOTES_SERVER_STARTUP_DELAY": "30"}}
    )
    tools, problems = through_the_core(workspace)
    assert tools == {}
    assert [p for p in problems if "MCP server 'sleepy' did not start within 0.5 s" in p]


def test_a_startup_timeout_of_centuries_starts_the_server(workspace: Workspace) -> None:
    """A startup_timeout longer than a thread can wait (about 292 years) is waited like any
    other: the server starts and its tools are listed, where the plugin failed with an
    OverflowError."""
    workspace.configure(notes={"startup_timeout": 1e10})
    tools, problems = through_the_core(workspace)
    assert "mcp_notes_add" in tools
    assert problems == []


def test_a_failed_start_is_remembered_for_retry_after(workspace: Workspace) -> None:
    """Within retry_after a failed server is not started again, in this process or the next."""
    workspace.configure(broken={"env": {"NOTES_SERVER_CRASH": "1"}})
    assert bridged(workspace) == {}
    assert workspace.spawns() == 1
    record = workspace.root / ".nanobot" / "cache" / "mcp" / "broken.failed.json"
    assert "cannot open the notes database" in json.loads(record.read_text())["reason"]
    reset_default_bridge()  # as if the process had ended
    tools, (problem,) = through_the_core(workspace)
    assert tools == {}
    assert workspace.spawns() == 1
    assert "retry_after" in problem and "'broken'" in problem

    workspace.configure(broken={"env": {"NOTES_SERVER_CRASH": "1"}, "retry_after": 0})
    assert bridged(workspace) == {}
    assert workspace.spawns() == 2


def test_a_remembered_failure_answers_a_call_at_once(workspace: Workspace) -> None:
    """A cached tool of a server that failed to start is an error naming it, with no new start."""
    workspace.configure(notes={})
    tools = bridged(workspace)
    reset_default_bridge()
    workspace.configure(notes={"retry_after": 300})  # same server: the cache still holds
    (server,) = load_servers(workspace.root, {})
    FailureMemory.for_workspace(workspace.root).record(server, "MCP server 'notes' broke")
    assert bridged(workspace) == {}
    # The tool as listed from the cache, called through this process's bridge.
    add = tools["mcp_notes_add"]
    add.bridge = default_bridge()
    result = run_tool(add, {"a": 1, "b": 1})
    assert result.is_error and "'notes' broke" in result and "retry_after" in result
    assert workspace.spawns() == 1


def test_the_core_keeps_running_when_a_server_fails(workspace: Workspace) -> None:
    """Through the plugin manager, nanobot-mcp stays loaded with the tools of the good server."""
    from nanobot_core import PluginManager

    workspace.configure(broken={"env": {"NOTES_SERVER_CRASH": "1"}}, notes={})
    manager = PluginManager(Config(), workspace=workspace.root).load()
    tool_names = [c.name for c in manager.contributions("tool")]
    assert "mcp_notes_add" in tool_names
    assert not any(name.startswith("mcp_broken_") for name in tool_names)
    (record,) = [r for r in manager.records() if r.info.distribution == "nanobot-mcp"]
    assert record.status == "loaded"


def test_the_tools_command_reports_a_failed_server_on_stderr_and_remembers_it(
    workspace: Workspace,
) -> None:
    """`nanobot-core tools` names the failed server on stderr, exits 0, and lists the others."""
    workspace.configure(broken={"env": {"NOTES_SERVER_CRASH": "1"}}, notes={})
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}
    for _ in range(2):
        done = run_cli("tools", "--json", cwd=workspace.root, env=env)
        assert done.returncode == 0, done.stderr
        names = [tool["name"] for tool in json.loads(done.stdout)]
        assert "mcp_notes_add" in names and not any(n.startswith("mcp_broken_") for n in names)
        assert "MCP server 'broken'" in done.stderr
    assert workspace.spawns() == 2  # notes once, broken once: the second run started neither


def test_a_server_that_died_while_idle_is_restarted_before_the_next_call(
    workspace: Workspace,
) -> None:
    """A server that exited between calls is started again, and the next call just works."""
    workspace.configure(notes={})
    tools = bridged(workspace)
    assert run_tool(tools["mcp_notes_exit_soon"], {"delay": 0.2}) == "exiting soon"
    (pid,) = map(int, workspace.spawn_log.read_text().split())
    bridge = default_bridge()
    deadline = time.monotonic() + 30
    while (_running(pid) or _sessions_up(bridge)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid) and not _sessions_up(bridge)  # it died, and the bridge knows
    assert run_tool(tools["mcp_notes_add"], {"a": 20, "b": 22}) == "42"
    assert workspace.spawns() == 2


def test_the_call_timeout_applies_to_the_call_alone(workspace: Workspace) -> None:
    """A slow lazy start does not eat the call's time; a call past call_timeout is an error."""
    options = {"call_timeout": 3.0, "env": {"NOTES_SERVER_STARTUP_DELAY": "4"}}
    workspace.configure(notes=options)
    bridged(workspace)
    reset_default_bridge()  # the next process lists from the cache and starts on the call
    tools = bridged(workspace)
    assert run_tool(tools["mcp_notes_pause"], {"seconds": 0.1}) == "paused 0.1 s"
    started = time.monotonic()
    slow = run_tool(tools["mcp_notes_pause"], {"seconds": 30})
    assert slow.is_error and "did not answer within 3 s (call_timeout)" in slow
    assert time.monotonic() - started < 20


def test_a_server_that_dies_is_started_again_on_the_next_call(workspace: Workspace) -> None:
    """If the process exits mid-session, that call is an error and the next one respawns it."""
    workspace.configure(notes={})
    tools = bridged(workspace)
    died = run_tool(tools["mcp_notes_exit_now"], {})
    assert died.is_error
    assert "'notes'" in died
    assert run_tool(tools["mcp_notes_add"], {"a": 20, "b": 22}) == "42"
    assert workspace.spawns() == 2


def test_a_byte_that_is_not_utf8_on_stdout_does_not_wedge_the_server(
    workspace: Workspace,
) -> None:
    """A non-UTF-8 byte from the server is replaced: the call and the next one are answered."""
    workspace.configure(
        raw={"args": [str(RAW_SERVER)], "env": {"RAW_SERVER_LATIN1": "1"}, "call_timeout": 20}
    )
    echo = bridged(workspace)["mcp_raw_echo"]
    started = time.monotonic()
    assert run_tool(echo, {"text": "one"}) == "caf\ufffd one"
    assert run_tool(echo, {"text": "two"}) == "caf\ufffd two"
    assert time.monotonic() - started < 30


def test_a_tool_with_an_invalid_definition_loses_only_itself(workspace: Workspace) -> None:
    """The server's good tools are listed and called; each bad one is named with its fault."""
    empty = {"type": "object", "properties": {}}
    extra = [
        {"name": "good", "inputSchema": empty},
        {"name": "props", "inputSchema": {"type": "object", "properties": {"b": 5}}},
        {"name": "scalar", "inputSchema": {"type": "string"}},
        {"inputSchema": empty},
        {"name": "later", "inputSchema": empty},
    ]
    workspace.configure(raw={"args": [str(RAW_SERVER)], "env": {RAW_EXTRA: json.dumps(extra)}})
    expected = [
        "MCP server 'raw': tool 'props' left out: its definition is invalid "
        "(inputSchema.properties.b: Input should be a valid dictionary)",
        "MCP server 'raw': tool 'scalar' left out: its definition is invalid "
        "(inputSchema.type: Input should be 'object')",
        "MCP server 'raw': a tool without a name left out: its definition is invalid "
        "(name: Field required)",
    ]
    for _ in range(2):  # started, then from the cached listing in a new process
        tools, problems = through_the_core(workspace)
        assert list(tools) == ["mcp_raw_echo", "mcp_raw_good", "mcp_raw_later"]
        assert problems == expected
        assert run_tool(tools["mcp_raw_later"], {}) == "later"
        reset_default_bridge()


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}


def _cli(workspace: Workspace, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=workspace.root, env=_env())


@pytest.mark.parametrize("strict", [[], ["--strict"]])
def test_the_plugins_command_lists_the_tools_left_out(
    workspace: Workspace, strict: list[str]
) -> None:
    """`plugins` names the server and tool the plugin refused, beside the core's own refusal."""
    extra = [
        {"name": "good", "inputSchema": {"type": "object", "properties": {}}},
        {"name": "scalar", "inputSchema": {"type": "string"}},
        {"name": "regex", "inputSchema": {"type": "object", "properties": {"p": {"pattern": "("}}}},
    ]
    workspace.configure(raw={"args": [str(RAW_SERVER)], "env": {RAW_EXTRA: json.dumps(extra)}})
    refused = (
        "MCP server 'raw': tool 'scalar' left out: its definition is invalid "
        "(inputSchema.type: Input should be 'object')"
    )
    for _ in range(2):  # the server started, then its cached listing
        listed = _cli(workspace, *strict, "plugins", "--json")
        assert listed.returncode == 0, listed.stderr
        (row,) = [row for row in json.loads(listed.stdout) if row["distribution"] == "nanobot-mcp"]
        assert row["status"] == "loaded" and row["version"]
        tools = [c["name"] for c in row["contributions"] if c["kind"] == "tool"]
        assert tools == ["mcp_raw_echo", "mcp_raw_good"]
        assert row["problems"][0] == refused
        assert row["problems"][1].startswith(
            "tool 'mcp_raw_regex' left out: its parameters schema is invalid"
        )
        assert len(row["problems"]) == 2
        assert refused in listed.stderr and f"from nanobot-mcp {row['version']}" in listed.stderr
    shown = _cli(workspace, *strict, "plugins")
    assert shown.returncode == 0, shown.stderr
    assert f"    problem: {refused}\n" in shown.stdout
    assert "    tool mcp_raw_good\n" in shown.stdout


def test_tools_of_servers_with_overlapping_names_all_stay_apart(workspace: Workspace) -> None:
    """Server a_b's tool c and server a's tool b_c are two tools; a duplicate is named."""
    empty = {"type": "object", "properties": {}}

    def raw(*tools: str) -> dict[str, Any]:
        listed = json.dumps([{"name": tool, "inputSchema": empty} for tool in tools])
        return {"args": [str(RAW_SERVER)], "env": {RAW_EXTRA: listed}}

    workspace.configure(a=raw("b_c"), a_b=raw("c", "c"))
    for _ in range(2):  # the same names in a new process, from the cache
        tools, problems = through_the_core(workspace)
        assert tools["mcp_a_b_c"].handle.config.name == "a_b"
        (moved,) = [name for name in tools if name.startswith("mcp_a_b_c_")]
        assert sorted(tools) == sorted(["mcp_a_echo", moved, "mcp_a_b_echo", "mcp_a_b_c"])
        assert run_tool(tools["mcp_a_b_c"], {}) == "c"
        assert run_tool(tools[moved], {}) == "b_c"
        assert problems == ["MCP server 'a_b' lists tool 'c' more than once; the first is kept"]
        reset_default_bridge()


def test_no_config_file_means_no_tools(workspace: Workspace) -> None:
    """Without a config file the plugin contributes nothing and starts nothing."""
    assert nanobot_tools(PluginContext(workspace=workspace.root)) == []


def test_the_config_file_can_come_from_the_environment(
    workspace: Workspace,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """NANOBOT_MCP_CONFIG names the TOML file instead of <workspace>/.nanobot/mcp.toml."""
    elsewhere = workspace.configure(notes={}).rename(tmp_path_factory.mktemp("cfg") / "x.toml")
    assert nanobot_tools(PluginContext(workspace=workspace.root)) == []
    monkeypatch.setenv("NANOBOT_MCP_CONFIG", str(Path(elsewhere)))
    assert "mcp_notes_add" in bridged(workspace)


def _starting_slowly_on_the_call(workspace: Workspace) -> dict[str, McpTool]:
    """The tools of a server that takes 3 s to start, as a new process sees them: listed
    from the cache, the server started on the first call."""
    workspace.configure(notes={"env": {"NOTES_SERVER_STARTUP_DELAY": "3"}})
    bridged(workspace)
    reset_default_bridge()
    return bridged(workspace)


def test_a_call_cancelled_while_its_server_starts_stops_that_server(
    workspace: Workspace,
) -> None:
    """Cancelling a call during the server's lazy start stops that server's process."""
    tools = _starting_slowly_on_the_call(workspace)

    async def cancelled_call() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(tools["mcp_notes_add"].execute(a=1, b=2), 1.0)

    asyncio.run(cancelled_call())
    pids = [int(line) for line in workspace.spawn_log.read_text().split()]
    assert len(pids) == 2
    # The bridge stays open: the server must end because the call was cancelled.
    deadline = time.monotonic() + 30
    while _running(pids[1]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(pids[1])


def raw_call(workspace: Workspace, result: dict[str, Any]) -> ToolResult:
    """Call the raw server's echo tool, the server answering every call with `result`."""
    env = {"RAW_SERVER_CALL_RESULT": json.dumps(result)}
    workspace.configure(raw={"args": [str(RAW_SERVER)], "env": env, "call_timeout": 20})
    return run_tool(bridged(workspace)["mcp_raw_echo"], {"text": "hi"})


def test_a_content_block_of_an_unknown_type_loses_only_itself(workspace: Workspace) -> None:
    """A block the SDK refuses becomes a line saying so; the other blocks still reach the model."""
    content = [
        {"type": "text", "text": "before"},
        {"type": "video", "uri": "https://example.invalid/v.mp4"},
        {"type": "image", "mimeType": "image/png"},
        {"type": "text", "text": "after"},
    ]
    result = raw_call(workspace, {"content": content})
    assert not result.is_error
    assert str(result).splitlines() == [
        "before",
        "[content of type 'video' left out: not a content type of MCP "
        "(text, image, audio, resource_link, resource)]",
        "[content of type 'image' left out: data: Field required]",
        "after",
    ]


def test_an_invalid_call_result_is_one_clear_line(workspace: Workspace) -> None:
    """A result the SDK refuses as a whole is an error naming server and tool, in one line."""
    result = raw_call(workspace, {"content": "not a list"})
    assert result.is_error
    message = str(result).split("\n\n")[0]
    assert message == (
        "Error: MCP server 'raw': 'echo' answered with an invalid result "
        "(content: Input should be a valid list)"
    )


def test_closing_the_bridge_during_a_lazy_start_ends_the_call_and_the_server(
    workspace: Workspace,
) -> None:
    """A call whose server is starting when the bridge closes gets an error; no server stays."""
    tools = _starting_slowly_on_the_call(workspace)
    outcome: list[ToolResult] = []
    caller = threading.Thread(
        target=lambda: outcome.append(run_tool(tools["mcp_notes_add"], {"a": 1, "b": 2}))
    )
    caller.start()
    deadline = time.monotonic() + 30
    while workspace.spawns() < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    reset_default_bridge()
    caller.join(30)
    assert not caller.is_alive()
    assert outcome[0].is_error
    assert "'notes': 'add' was stopped: the MCP bridge closed" in outcome[0]
    pid = int(workspace.spawn_log.read_text().split()[1])
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(pid)


def test_a_line_without_end_stops_its_server_and_only_that_one(workspace: Workspace) -> None:
    """A server sending 50 MB with no newline is stopped at max_line_bytes (16 MiB), holding no
    more than that; its call and the next are errors saying so, and the other server answers."""
    flood_log = workspace.root / "flood-spawns.txt"
    env = {"RAW_SERVER_FLOOD": str(50_000_000), "NOTES_SERVER_SPAWN_LOG": str(flood_log)}
    workspace.configure(flood={"args": [str(RAW_SERVER)], "env": env, "call_timeout": 60}, notes={})
    tools = bridged(workspace)
    tracemalloc.start()
    try:
        result = run_tool(tools["mcp_flood_echo"], {"text": "hi"})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    reason = "MCP server 'flood' sent a line longer than 16 MiB (max_line_bytes) and was stopped"
    assert result.is_error
    assert str(result).split("\n\n")[0] == f"Error: {reason} while 'echo' was running"
    assert peak < 24 * MIB  # the line's first 16 MiB, and no copy of them
    assert run_tool(tools["mcp_notes_add"], {"a": 1, "b": 2}) == "3"
    (pid,) = map(int, flood_log.read_text().split())
    deadline = time.monotonic() + 30
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid)
    again = run_tool(tools["mcp_flood_echo"], {"text": "hi"})
    assert again.is_error and reason in again and "retry_after" in again
    assert len(flood_log.read_text().split()) == 1  # remembered: not started again


@pytest.mark.parametrize(
    ("limit", "pad", "answered"),
    [(None, 1_000_000, True), (4 * MIB, 3 * MIB, True), (MIB, 2 * MIB, False)],
)
def test_a_long_line_passes_up_to_max_line_bytes(
    workspace: Workspace, limit: int | None, pad: int, answered: bool
) -> None:
    """A 1 MB result passes the default limit; a configured max_line_bytes decides, named."""
    options: dict[str, Any] = {"args": [str(RAW_SERVER)], "env": {"RAW_SERVER_PAD": str(pad)}}
    if limit is not None:
        options["max_line_bytes"] = limit
    workspace.configure(raw=options)
    result = run_tool(bridged(workspace)["mcp_raw_echo"], {"text": "hi"})
    if answered:
        assert not result.is_error and str(result) == "hi" + "x" * pad
    else:
        assert result.is_error
        assert "'raw' sent a line longer than 1 MiB (max_line_bytes)" in result


def test_a_line_too_long_at_start_up_is_a_failed_start_naming_it(workspace: Workspace) -> None:
    """A tool list longer than max_line_bytes fails the start with the reason, not a timeout."""
    tools = [{"name": "big", "description": "d" * 4096, "inputSchema": {"type": "object"}}]
    env = {RAW_EXTRA: json.dumps(tools)}
    workspace.configure(
        raw={"args": [str(RAW_SERVER)], "env": env, "max_line_bytes": 2048}, notes={}
    )
    tools_seen, (problem,) = through_the_core(workspace)
    assert "mcp_notes_add" in tools_seen and "mcp_raw_echo" not in tools_seen
    assert problem.startswith(
        "MCP server 'raw' sent a line longer than 2 KiB (max_line_bytes) and was stopped"
    )


def test_a_line_too_long_while_idle_fails_the_next_call_without_a_restart(
    workspace: Workspace,
) -> None:
    """A server that floods between calls is stopped; the next call is told why, at once."""
    env = {"RAW_SERVER_FLOOD_IDLE": str(4 * MIB)}
    workspace.configure(raw={"args": [str(RAW_SERVER)], "env": env, "max_line_bytes": MIB})
    echo = bridged(workspace)["mcp_raw_echo"]
    (pid,) = map(int, workspace.spawn_log.read_text().split())
    # The process ends before the bridge reads why: a call in between (on a loaded machine)
    # would find the session up and fail as a call the flood cut short, not as this one.
    bridge = default_bridge()
    deadline = time.monotonic() + 30
    while (_running(pid) or _sessions_up(bridge)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid)
    assert not _sessions_up(bridge)
    result = run_tool(echo, {"text": "hi"})
    assert result.is_error and "retry_after" in result
    assert "MCP server 'raw' sent a line longer than 1 MiB (max_line_bytes) and was stopped" in (
        result
    )
    assert workspace.spawns() == 1


# A child process whose SDK lacks two of the private helpers the bounded transport
# uses, as after a release that renamed them: they are deleted from mcp.client.stdio
# before the plugin is imported, and its stdio_client keeps them under the old names
# (as the renamed SDK's own code would call them by the new ones).
_WITHOUT_PRIVATE_HELPERS = """
import contextlib, json, os, sys, time, types
from pathlib import Path

import mcp
import mcp.client.stdio as sdk

original = sdk.stdio_client.__wrapped__
code_globals = dict(vars(sdk))
defaults = original.__defaults__
renamed = types.FunctionType(original.__code__, code_globals, original.__name__, defaults)
sdk.stdio_client = mcp.stdio_client = contextlib.asynccontextmanager(renamed)
del sdk._stop_server_process, sdk._drain_stdout

from nanobot_core import PluginContext
from nanobot_core.testing import run_tool

from nanobot_mcp import nanobot_tools, reset_default_bridge

workspace = Path(sys.argv[1])
tools = {t.name: t for t in nanobot_tools(PluginContext(workspace=workspace))}
answers = [
    run_tool(tools["mcp_raw_echo"], {"text": "hi"}),
    run_tool(tools["mcp_notes_add"], {"a": 1, "b": 2}),
    run_tool(tools["mcp_notes_add"], {"a": 3, "b": 4}),
]
reset_default_bridge()


def running(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


pids = list(map(int, (workspace / "spawns.txt").read_text().split()))
deadline = time.monotonic() + 30
while any(map(running, pids)) and time.monotonic() < deadline:
    time.sleep(0.05)
print(json.dumps({"answers": [[str(a), a.is_error] for a in answers], "pids": pids,
                  "running": [pid for pid in pids if running(pid)]}))
"""


def test_an_sdk_without_the_private_helpers_falls_back_to_its_stdio_client(
    workspace: Workspace,
) -> None:
    """Without the SDK's private helpers, servers run through its public stdio_client (lines
    unbounded), with one warning naming the mcp version and the names missing."""
    from importlib.metadata import version

    # The answer is longer than max_line_bytes: the fallback does not bound lines.
    raw = {"args": [str(RAW_SERVER)], "env": {"RAW_SERVER_PAD": "4096"}, "max_line_bytes": 2048}
    workspace.configure(raw=raw, notes={})
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_PRIVATE_HELPERS, str(workspace.root)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["answers"] == [["hi" + "x" * 4096, False], ["3", False], ["7", False]]
    warning = (
        f"MCP servers' lines are not bounded (max_line_bytes is not enforced) with mcp "
        f"{version('mcp')}: it lacks mcp.client.stdio._drain_stdout, "
        "mcp.client.stdio._stop_server_process; the SDK's stdio_client is used instead"
    )
    assert done.stderr.count("max_line_bytes is not enforced") == 1
    assert warning in done.stderr
    # Both servers were started once, and the bridge stopped them before the child ended.
    assert len(report["pids"]) == 2
    assert report["running"] == []
    assert "Traceback" not in done.stderr and "Error" not in done.stderr


def test_a_huge_stderr_is_not_read_whole_to_name_a_failed_start(workspace: Workspace) -> None:
    """A server that wrote 48 MiB to stderr and exited is reported with the end of it, read
    without holding the whole log in memory."""
    env = {
        "RAW_SERVER_STDERR_MIB": "48",
        "RAW_SERVER_STDERR": "\nno database",
        "RAW_SERVER_EXIT": "3",
    }
    workspace.configure(raw={"args": [str(RAW_SERVER)], "env": env})
    through_the_core(workspace)  # the SDK's first import is not what is measured
    reset_default_bridge()
    (workspace.root / ".nanobot" / "cache" / "mcp" / "raw.failed.json").unlink()
    tracemalloc.start()
    try:
        _, (problem,) = through_the_core(workspace)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert problem.startswith("MCP server 'raw' failed to start")
    assert problem.endswith("eee no database; its tools are left out")
    assert peak < 16 * MIB


def test_control_characters_of_a_servers_stderr_are_escaped_on_a_terminal_only(
    workspace: Workspace,
) -> None:
    """Terminal escapes a failed server wrote to stderr reach a terminal escaped by the core's
    rule, and a pipe as the server wrote them."""
    text = "boom \x1b]0;owned\x07\x1b[2J\x1b[31mred\x1b[0m \u202eevil\x7f"
    env = {"RAW_SERVER_STDERR": text, "RAW_SERVER_EXIT": "3"}
    workspace.configure(raw={"args": [str(RAW_SERVER)], "env": env})
    listed = _cli(workspace, "plugins")
    assert listed.returncode == 0, listed.stderr
    assert f"its stderr ends with: {text}; its tools are left out" in listed.stdout
    # The failure is remembered: forgotten, the server starts (and fails) again.
    (workspace.root / ".nanobot" / "cache" / "mcp" / "raw.failed.json").unlink()
    shown = run_cli_in_terminal("plugins", cwd=workspace.root, env=_env())
    assert b"\x1b" not in shown.stdout + shown.stderr
    escaped = r"boom \x{1b}]0;owned\x{07}\x{1b}[2J\x{1b}[31mred\x{1b}[0m \x{202e}evil\x{7f}"
    assert f"its stderr ends with: {escaped}; its tools are left out".encode() in shown.stdout


def test_a_command_or_cwd_that_cannot_be_used_is_named_by_its_key_and_file(
    workspace: Workspace,
) -> None:
    """A missing program, a directory as the program and a missing cwd each fail their own
    server's start, naming the config key and file to fix; the other server still works."""
    config = workspace.configure(
        absent={"command": "no-such-mcp-server-program"},
        folder={"command": str(workspace.root)},
        nowhere={"cwd": "does/not/exist"},
        notes={},
    )
    tools, problems = through_the_core(workspace)
    assert list(tools) and all(name.startswith("mcp_notes_") for name in tools)
    assert problems == [
        "MCP server 'absent' failed to start: its command 'no-such-mcp-server-program' cannot "
        f"be run: No such file or directory (see [servers.absent] command in {config}); "
        "its tools are left out",
        f"MCP server 'folder' failed to start: its command {str(workspace.root)!r} cannot be "
        f"run: Permission denied (see [servers.folder] command in {config}); "
        "its tools are left out",
        f"MCP server 'nowhere' failed to start: its directory "
        f"{str(workspace.root / 'does/not/exist')!r} cannot be used: No such file or directory "
        f"(see [servers.nowhere] cwd in {config}); its tools are left out",
    ]


def _typed_call(
    workspace: Workspace, output: dict[str, Any], result: dict[str, Any], **env: str
) -> ToolResult:
    """Call a tool whose outputSchema is `output`, the server answering with `result`."""
    typed = [{"name": "typed", "inputSchema": {"type": "object"}, "outputSchema": output}]
    env = {RAW_EXTRA: json.dumps(typed), "RAW_SERVER_CALL_RESULT": json.dumps(result), **env}
    workspace.configure(raw={"args": [str(RAW_SERVER)], "env": env, "call_timeout": 60})
    return run_tool(bridged(workspace)["mcp_raw_typed"], {})


def test_structured_content_its_schema_refuses_is_one_short_line(workspace: Workspace) -> None:
    """A large structuredContent that breaks the tool's outputSchema is an error of one line
    saying where and what, with the tool's text; not the schema and the value pretty-printed."""
    output = {"type": "object", "required": ["n"]}
    content = {"content": [{"type": "text", "text": "counted"}]}
    result = _typed_call(workspace, output, content, RAW_SERVER_STRUCTURED_ITEMS="300000")
    assert result.is_error
    assert str(result).split("\n\n")[0] == (
        "Error: MCP server 'raw': 'typed' answered with structuredContent its outputSchema "
        "does not allow (structuredContent: 'n' is a required property)\ncounted"
    )
    assert len(str(result)) < 1000  # the 10 MB value is not in it


def test_structured_content_its_schema_allows_comes_through(workspace: Workspace) -> None:
    """A structuredContent that the tool's outputSchema allows is a plain result, as before."""
    output = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    result = _typed_call(workspace, output, {"content": [], "structuredContent": {"n": 3}})
    assert not result.is_error and str(result) == '{"n": 3}'
    cached = json.loads((workspace.root / ".nanobot" / "cache" / "mcp" / "raw.json").read_text())
    assert [t.get("outputSchema") for t in cached["tools"]] == [None, output]


@pytest.mark.parametrize(
    ("output", "structured", "fault"),
    [
        (
            {"type": "object", "properties": {"n": {"type": "integer"}}},
            {"n": "x" * 100_000},
            "structuredContent its outputSchema does not allow (structuredContent.n: 'xxx",
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"$ref": "#/$defs/x"}},
                "$defs": {"x": {"$ref": "#/$defs/x"}},
            },
            {"a": 1},
            "a result its outputSchema cannot check (its $ref loops or nests too deep)",
        ),
        (
            {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}},
            {"a": 1},
            "a result its outputSchema cannot check (its $ref '/nowhere' leads nowhere)",
        ),
        (
            {"type": "object", "properties": {"a": {"type": 5}}},
            {"a": 1},
            "a result it gave an invalid outputSchema for (5 is not valid under any of the given",
        ),
    ],
)
def test_an_output_schema_that_cannot_pass_the_result_is_named_in_one_line(
    workspace: Workspace, output: dict[str, Any], structured: dict[str, Any], fault: str
) -> None:
    """A mismatch, a $ref that loops or leads nowhere and an invalid outputSchema are each an
    error result of one line naming the server and the tool, at most a few hundred characters."""
    result = _typed_call(workspace, output, {"content": [], "structuredContent": structured})
    assert result.is_error
    (line,) = str(result).split("\n\n")[0].splitlines()
    assert line.startswith(f"Error: MCP server 'raw': 'typed' answered with {fault}")
    assert len(line) < 400


def test_the_schema_line_of_a_tool_of_a_long_name_stays_a_few_hundred_characters(
    workspace: Workspace,
) -> None:
    """A tool whose name is 10,000 characters long is named cut by its ends in the line saying
    its result breaks its outputSchema, which stays under 400 characters (as the README says)."""
    name = "t" * 5_000 + "u" * 5_000
    output = {"type": "object", "required": ["n"]}
    typed = [{"name": name, "inputSchema": {"type": "object"}, "outputSchema": output}]
    env = {RAW_EXTRA: json.dumps(typed), "RAW_SERVER_CALL_RESULT": json.dumps({"content": []})}
    workspace.configure(raw={"args": [str(RAW_SERVER)], "env": env, "call_timeout": 60})
    (tool,) = [t for t in bridged(workspace).values() if t.remote_name == name]
    result = run_tool(tool, {})
    assert result.is_error
    (line,) = str(result).split("\n\n")[0].splitlines()
    assert line.startswith("Error: MCP server 'raw': 'tttt")
    assert line.endswith(
        "uuuu' answered with no structuredContent, which its outputSchema asks for"
    )
    assert len(line) < 400


@pytest.mark.parametrize(
    ("method", "phase"),
    [
        ("initialize", "waiting for its answer to initialize (the handshake)"),
        ("tools/list", "waiting for its tool list (tools/list)"),
    ],
)
def test_a_start_that_hangs_names_its_key_and_what_it_waited_for(
    workspace: Workspace, method: str, phase: str
) -> None:
    """A server that never answers initialize, or tools/list, fails its start within
    startup_timeout, named with the key to raise and the step that hung."""
    env = {"RAW_SERVER_HANG": method, "RAW_SERVER_STDERR": "listening"}
    config = workspace.configure(
        raw={"args": [str(RAW_SERVER)], "env": env, "startup_timeout": 1.0}, notes={}
    )
    started = time.monotonic()
    tools, (problem,) = through_the_core(workspace)
    assert "mcp_notes_add" in tools and "mcp_raw_echo" not in tools
    assert problem == (
        f"MCP server 'raw' did not start within 1 s (see [servers.raw] startup_timeout in "
        f"{config}): it was {phase}; its stderr ends with: listening; its tools are left out"
    )
    assert time.monotonic() - started < 60


def test_terminal_escapes_in_a_tool_description_are_escaped_on_a_terminal_only(
    workspace: Workspace,
) -> None:
    """A server's tool description with a window-title escape and a bidirectional override
    reaches the model as written, and the `tools` listing on a terminal escaped."""
    description = "Shout \x1b]0;owned\x07loudly \u202eevil"
    described = [{"name": "shout", "description": description, "inputSchema": {"type": "object"}}]
    workspace.configure(raw={"args": [str(RAW_SERVER)], "env": {RAW_EXTRA: json.dumps(described)}})
    listed = _cli(workspace, "tools", "--json")
    assert listed.returncode == 0, listed.stderr
    (tool,) = [row for row in json.loads(listed.stdout) if row["name"] == "mcp_raw_shout"]
    assert tool["description"].startswith(description + "\n\n(MCP server 'raw'")
    shown = run_cli_in_terminal("tools", cwd=workspace.root, env=_env())
    (row,) = [line for line in shown.stdout.splitlines() if line.startswith(b"mcp_raw_shout")]
    assert row.endswith(rb"Shout \x{1b}]0;owned\x{07}loudly \x{202e}evil")


def test_checking_a_large_structured_result_does_not_hold_up_other_servers(
    workspace: Workspace,
) -> None:
    """While a 10 MB structuredContent is checked against its outputSchema, a call to another
    server is answered: the check runs once, off the bridge's event loop."""
    item = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"]}
    output = {"type": "object", "properties": {"items": {"type": "array", "items": item}}}
    typed = [{"name": "typed", "inputSchema": {"type": "object"}, "outputSchema": output}]
    env = {
        RAW_EXTRA: json.dumps(typed),
        "RAW_SERVER_CALL_RESULT": json.dumps({"content": []}),
        "RAW_SERVER_STRUCTURED_ITEMS": "300000",
    }
    workspace.configure(raw={"args": [str(RAW_SERVER)], "env": env, "call_timeout": 120}, notes={})
    tools = bridged(workspace)
    assert run_tool(tools["mcp_notes_add"], {"a": 1, "b": 2}) == "3"
    started = time.monotonic()
    took: list[float] = []

    def large_call() -> None:
        assert not run_tool(tools["mcp_raw_typed"], {}).is_error
        took.append(time.monotonic() - started)

    large = threading.Thread(target=large_call)
    large.start()
    slowest = 0.0
    while large.is_alive():  # small calls to the other server, all the while
        began = time.monotonic()
        assert run_tool(tools["mcp_notes_add"], {"a": 1, "b": 2}) == "3"
        slowest = max(slowest, time.monotonic() - began)
    large.join()
    # Checked on the loop, one small call waited for nearly all of it (5.1 s of 5.6 s).
    assert slowest < took[0] / 2


@pytest.mark.parametrize("status", ["0", "3"])
def test_a_server_that_exits_at_once_is_told_as_such(workspace: Workspace, status: str) -> None:
    """A server that exits before the handshake fails its start with a reason saying its output
    ended and in which step, not the SDK's bare "Connection closed"."""
    env = {"RAW_SERVER_EXIT": status}
    workspace.configure(raw={"args": [str(RAW_SERVER)], "env": env})
    _, (problem,) = through_the_core(workspace)
    assert problem == (
        "MCP server 'raw' failed to start: its output ended (the process exited or closed its "
        "stdout) while the start was waiting for its answer to initialize (the handshake); "
        "its tools are left out"
    )


def _running(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie waiting to be reaped does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_command_stopped_by_a_service_manager_stops_a_server_busy_with_a_call(
    workspace: Workspace, signum: int
) -> None:
    """SIGTERM or SIGHUP while a server runs a long call stops that server before the command
    ends, as Ctrl-C does, instead of leaving it behind to notice its closed stdin."""
    workspace.configure(notes={})
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}
    with subprocess.Popen(
        [sys.executable, "-m", "nanobot_core", "call", "mcp_notes_pause", '{"seconds": 120}'],
        cwd=workspace.root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A signal ignored here (a suite started under nohup ignores SIGHUP) stays ignored
        # in the command, which rightly keeps it so: the test sends the one it names.
        preexec_fn=lambda: signal.signal(signum, signal.SIG_DFL),
    ) as command:
        try:
            deadline = time.monotonic() + 60
            while not workspace.spawn_log.exists() or not workspace.spawn_log.read_text():
                assert command.poll() is None, command.communicate()[1]
                assert time.monotonic() < deadline, "the server never started"
                time.sleep(0.05)
            (server,) = map(int, workspace.spawn_log.read_text().split())
            time.sleep(3)  # the server lists its tools, then the call begins and pauses
            command.send_signal(signum)
            _, err = command.communicate(timeout=30)
        finally:
            if command.poll() is None:
                command.kill()
    assert command.returncode == 128 + signum, err
    # Stopped by the command, before it ended; not left to notice its stdin closed.
    assert not _running(server), "the server outlived the command"


def test_a_tool_list_of_more_than_100_pages_keeps_the_first_and_says_so(
    workspace: Workspace,
) -> None:
    """A listing past its 100th page keeps the tools of the first 100 and a problem names the
    server and how many were kept, at its start and from its cached listing alike."""
    workspace.configure(raw={"args": [str(RAW_SERVER)], "env": {"RAW_SERVER_PAGES": "150"}})
    expected = (
        "MCP server 'raw' lists its tools on more than 100 pages (tools/list); the 100 tools "
        "of the first 100 pages are kept, the tools on later pages are left out"
    )
    for _ in range(2):  # started, then from the cached listing in a new process
        tools, problems = through_the_core(workspace)
        assert len(tools) == 100 and "mcp_raw_page99" in tools
        assert problems == [expected]
        reset_default_bridge()
    assert workspace.spawns() == 1


def test_a_cursor_given_twice_ends_the_listing_at_once(workspace: Workspace) -> None:
    """A server that answers every tools/list page with the same cursor is asked for that page
    once, and a problem says the listing stopped there, not 100 pages of the same tools."""
    workspace.configure(raw={"args": [str(RAW_SERVER)], "env": {"RAW_SERVER_SAME_CURSOR": "x"}})
    tools, problems = through_the_core(workspace)
    assert list(tools) == ["mcp_raw_echo"]
    assert problems == [
        "MCP server 'raw' lists tool 'echo' more than once; the first is kept",
        "MCP server 'raw' gave the same tools/list cursor twice ('x'), which would list one "
        "page for ever; the 2 tools listed before it are kept",
    ]


def test_the_tools_past_max_tools_are_left_out_and_said_to_be(workspace: Workspace) -> None:
    """A server listing 100,000 tools offers the first max_tools (256 unless set), a problem
    names the server and the key; the cache keeps the cut list, until max_tools changes."""
    env = {"RAW_SERVER_TOOL_COUNT": "100000"}
    config = workspace.configure(raw={"args": [str(RAW_SERVER)], "env": env})
    expected = (
        "MCP server 'raw' lists more than 256 tools (see [servers.raw] max_tools in "
        f"{config}); the first 256 are kept, the others are left out"
    )
    for _ in range(2):  # started, then from the cached listing in a new process
        tools, problems = through_the_core(workspace)
        assert len(tools) == 256 and list(tools)[:2] == ["mcp_raw_echo", "mcp_raw_t0"]
        assert problems == [expected]
        reset_default_bridge()
    cached = json.loads((workspace.root / ".nanobot" / "cache" / "mcp" / "raw.json").read_text())
    assert len(cached["tools"]) == 256
    workspace.configure(raw={"args": [str(RAW_SERVER)], "env": env, "max_tools": 3})
    tools, problems = through_the_core(workspace)
    assert list(tools) == ["mcp_raw_echo", "mcp_raw_t0", "mcp_raw_t1"]
    assert problems == [expected.replace("256", "3")]
    assert workspace.spawns() == 2


def test_a_tool_larger_than_max_tool_bytes_is_left_out_by_name(workspace: Workspace) -> None:
    """A tool whose definition is past max_tool_bytes (64 KiB unless set) is left out, named
    with its size and the key; the server's other tools stay, and a raised bound takes it."""
    env = {"RAW_SERVER_BIG_TOOL": str(MIB)}
    config = workspace.configure(raw={"args": [str(RAW_SERVER)], "env": env})
    for _ in range(2):  # started, then from the cached listing in a new process
        tools, (problem,) = through_the_core(workspace)
        assert list(tools) == ["mcp_raw_echo"]
        assert problem == (
            f"MCP server 'raw': tool 'big' left out: its definition is {MIB + 123} bytes, more "
            f"than 64 KiB (see [servers.raw] max_tool_bytes in {config})"
        )
        reset_default_bridge()
    workspace.configure(raw={"args": [str(RAW_SERVER)], "env": env, "max_tool_bytes": 2 * MIB})
    tools, problems = through_the_core(workspace)
    assert list(tools) == ["mcp_raw_echo", "mcp_raw_big"] and problems == []
    assert len(tools["mcp_raw_big"].description) > MIB


def test_calls_given_up_on_leave_no_record_behind(tmp_path: Path) -> None:
    """Calls cancelled or timed out before their answer (the SDK sends notifications/cancelled)
    leave nothing noted as awaited: a long session's record of calls under way stays as long as
    the calls under way, and the server still answers the next call."""
    from nanobot_mcp.config import ServerConfig
    from nanobot_mcp.connection import ServerConnection

    notes = Path(__file__).parent / "servers" / "notes_server.py"
    config = ServerConfig(
        name="notes", command=sys.executable, args=(str(notes),), startup_timeout=60.0
    )

    async def session() -> tuple[int, dict[str, Any]]:
        connection = ServerConnection(config, tmp_path / "notes.log")
        await connection.start()
        try:
            # One call runs throughout, so the calls given up on are never the only ones.
            running = asyncio.create_task(connection.call("pause", {"seconds": 8}))
            for _ in range(20):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(connection.call("pause", {"seconds": 30}), 0.2)
            left = connection.awaited_answers
            await running
            return left, await connection.call("add", {"a": 1, "b": 2})
        finally:
            await connection.close()

    left, answer = asyncio.run(session())
    assert left == 1  # the call still running
    assert answer["content"][0]["text"] == "3"


def test_a_cache_or_failure_record_that_is_a_named_pipe_is_no_record(
    workspace: Workspace,
) -> None:
    """A named pipe where the tool-list cache or the failure record goes is taken as no record,
    at once, with a problem naming it: the command does not wait for something to write to it,
    the server starts, and the pipe is replaced by the listing."""
    workspace.configure(notes={})
    folder = workspace.root / ".nanobot" / "cache" / "mcp"
    folder.mkdir(parents=True)
    pipes = [folder / "notes.json", folder / "notes.failed.json"]
    for pipe in pipes:
        os.mkfifo(pipe)
    listed = run_cli("plugins", cwd=workspace.root, env=_env(), timeout=60)
    assert listed.returncode == 0, listed.stderr
    for pipe in pipes:
        assert (
            f"MCP server 'notes': {pipe} is a named pipe (FIFO), not a regular file; it is "
            "taken as no record"
        ) in listed.stdout
    assert workspace.spawns() == 1
    assert (folder / "notes.json").is_file() and not (folder / "notes.failed.json").exists()
    assert "mcp_notes_add" in _cli(workspace, "tools").stdout
    assert workspace.spawns() == 1


def test_a_stderr_log_that_is_a_named_pipe_fails_only_its_server_at_once(
    workspace: Workspace,
) -> None:
    """A named pipe nothing reads, in place of a server's stderr log, fails that server's start
    at once, naming the log; it held the bridge (every server) until the plugin failed whole.
    A log linked to /dev/null takes the stderr, as its user meant."""
    workspace.configure(piped={}, quiet={})
    logs = workspace.root / ".nanobot" / "logs" / "mcp"
    logs.mkdir(parents=True)
    os.mkfifo(logs / "piped.log")
    (logs / "quiet.log").symlink_to(os.devnull)
    listed = run_cli("plugins", cwd=workspace.root, env=_env(), timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert (
        f"MCP server 'piped' failed to start: its stderr log '{logs / 'piped.log'}' cannot be "
        "written: a named pipe (FIFO), which nothing reads from; its tools are left out"
    ) in listed.stdout
    tools = _cli(workspace, "tools").stdout
    assert "mcp_quiet_add" in tools and "mcp_piped_add" not in tools
    assert workspace.spawns() == 1


def test_a_tool_list_changed_during_a_session_is_listed_again_before_the_next_call(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    """After notifications/tools/list_changed the server's tools are listed again at the next
    call: a tool it took away is an error saying so, a tool it added is named in a warning,
    and the cache holds the new list for the next command (with no new start)."""
    env = {"RAW_SERVER_CHANGING": "1"}
    workspace.configure(raw={"args": [str(RAW_SERVER)], "env": env})
    tools = bridged(workspace)
    assert list(tools) == ["mcp_raw_echo", "mcp_raw_change"]
    assert run_tool(tools["mcp_raw_echo"], {"text": "before"}) == "before"
    assert run_tool(tools["mcp_raw_change"], {"text": "changed"}) == "changed"
    capsys.readouterr()
    result = run_tool(tools["mcp_raw_echo"], {"text": "after"})
    assert result.is_error
    assert result.startswith(
        "Error: MCP server 'raw' no longer lists 'echo': its tool list changed during this "
        "session (notifications/tools/list_changed)\n"
    )
    assert (
        "MCP server 'raw' now lists tools it did not when this command began ('echo2'); "
        "they are offered from the next command"
    ) in capsys.readouterr().err
    assert run_tool(tools["mcp_raw_change"], {"text": "still here"}) == "still here"
    reset_default_bridge()  # as if the command had ended
    assert list(bridged(workspace)) == ["mcp_raw_echo2", "mcp_raw_change"]
    assert workspace.spawns() == 1


def test_calls_that_come_at_once_share_one_lazy_start(workspace: Workspace) -> None:
    """Calls that come together from several threads to a server not yet started (its tools
    listed from the cache) start one server process, and each gets its own answer."""
    slow = {"env": {"NOTES_SERVER_STARTUP_DELAY": "1"}}
    workspace.configure(notes=slow)
    bridged(workspace)
    reset_default_bridge()  # as if the process had ended: the next calls start it lazily
    add = bridged(workspace)["mcp_notes_add"]
    assert workspace.spawns() == 1
    answers: dict[int, str] = {}
    barrier = threading.Barrier(4)

    def call(number: int) -> None:
        barrier.wait()
        answers[number] = str(run_tool(add, {"a": number, "b": 100}))

    threads = [threading.Thread(target=call, args=(number,)) for number in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert answers == {number: str(number + 100) for number in range(4)}
    assert workspace.spawns() == 2
