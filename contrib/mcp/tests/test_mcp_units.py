"""The parts of the bridge that need no server: config, names, cache, result conversion."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from nanobot_core import ConfigError
from nanobot_core.testing import run_tool

from nanobot_mcp import (
    FailureMemory,
    McpBridge,
    McpTool,
    ServerConfig,
    ServerHandle,
    ToolListCache,
    bridged_name,
    load_servers,
    to_tool_result,
)
from nanobot_mcp.config import CONFIG_ENV, MAX_CONFIG_BYTES, parse_servers
from nanobot_mcp.connection import (
    RejectedTool,
    ServerConnection,
    output_checker,
    screen_tools,
    stderr_tail,
)
from nanobot_mcp.failures import RememberedFailure
from nanobot_mcp.stdio import (
    DEFAULT_MAX_LINE_BYTES,
    LineSplitter,
    LineTooLong,
    describe_size,
    missing_sdk_names,
)


def parse(servers: dict[str, Any], workspace: Path = Path("/ws")) -> list[ServerConfig]:
    return parse_servers({"servers": servers}, workspace=workspace, source="mcp.toml")


def test_a_full_server_table_is_read() -> None:
    """Every key of a [servers.<name>] table lands in the config; cwd is workspace-relative."""
    (server,) = parse(
        {
            "files": {
                "command": "uvx",
                "args": ["mcp-files", "--ro"],
                "env": {"B": "2", "A": "1"},
                "cwd": "tools",
                "startup_timeout": 3,
                "call_timeout": 7.5,
                "max_line_bytes": 1024,
                "max_tools": 5,
                "max_tool_bytes": 2048,
            }
        }
    )
    assert server == ServerConfig(
        name="files",
        command="uvx",
        args=("mcp-files", "--ro"),
        env=(("A", "1"), ("B", "2")),
        cwd=Path("/ws/tools"),
        startup_timeout=3.0,
        call_timeout=7.5,
        max_line_bytes=1024,
        max_tools=5,
        max_tool_bytes=2048,
    )


def test_defaults_and_server_order() -> None:
    """Servers come sorted by name, with the workspace as cwd and 10 s / 60 s timeouts."""
    servers = parse({"zeta": {"command": "z"}, "alpha": {"command": "a"}})
    assert [s.name for s in servers] == ["alpha", "zeta"]
    assert (servers[0].cwd, servers[0].startup_timeout, servers[0].call_timeout) == (
        Path("/ws"),
        10.0,
        60.0,
    )
    assert servers[0].max_line_bytes == DEFAULT_MAX_LINE_BYTES == 16 * 1024 * 1024
    assert (servers[0].max_tools, servers[0].max_tool_bytes) == (256, 64 * 1024)


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ({"x": {}}, "'command' is required"),
        ({"x": {"command": "c", "argv": []}}, r"unknown key\(s\) \['argv'\]"),
        ({"x": {"command": "c", "args": "a b"}}, "'args' must be a list"),
        ({"x": {"command": "c", "env": {"A": 1}}}, "'env' must be a table of strings"),
        ({"x": {"command": "c", "startup_timeout": 0}}, "'startup_timeout' must be a positive"),
        # A whole number too large for a float (a TOML hex literal): an OverflowError, once.
        ({"x": {"command": "c", "call_timeout": 2**1100}}, "'call_timeout' must be a positive"),
        ({"x": {"command": "c", "retry_after": 2**1100}}, "'retry_after' must be a number"),
        ({"x": {"command": "c", "max_line_bytes": 0}}, "'max_line_bytes' must be a positive"),
        ({"x": {"command": "c", "max_line_bytes": 1.5}}, "'max_line_bytes' must be a positive"),
        ({"x": {"command": "c", "max_line_bytes": True}}, "'max_line_bytes' must be a positive"),
        ({"x": {"command": "c", "max_line_bytes": "1M"}}, "'max_line_bytes' must be a positive"),
        (
            {"x": {"command": "c", "max_tools": 0}},
            r"'max_tools' must be a positive integer \(tools",
        ),
        ({"x": {"command": "c", "max_tools": 2.5}}, "'max_tools' must be a positive integer"),
        ({"x": {"command": "c", "max_tools": True}}, "'max_tools' must be a positive integer"),
        ({"x": {"command": "c", "max_tool_bytes": -1}}, r"'max_tool_bytes' must be .* \(bytes"),
        ({"x": {"command": "c", "max_tool_bytes": "64K"}}, "'max_tool_bytes' must be a positive"),
        ({"x": {"command": "c", "env": {"A=B": "1"}}}, r"'env' key 'A=B' is not a variable"),
        ({"x": {"command": "c", "env": {"": "1"}}}, r"'env' key '' is not a variable name"),
        ({"x": {"command": "c", "env": {"A": "x\x00"}}}, r"'env' value of 'A' holds a NUL"),
        ({"x": {"command": "c", "args": ["-v", "a\x00"]}}, r"'args' item 1 holds a NUL"),
        ({"x": {"command": "c\x00"}}, r"'command' holds a NUL"),
        ({"x": {"command": "c", "cwd": "a\x00"}}, r"'cwd' holds a NUL"),
        ({"x": {"url": "http://127.0.0.1:8000/mcp"}}, r"'url' given, but only stdio servers"),
        (
            {"x": {"command": "c", "type": "sse", "url": "u"}},
            r"servers.x: 'url', 'type' given, but only stdio servers are supported",
        ),
        ({"bad name": {"command": "c"}}, "a server name is"),
        ({"x": "python"}, "must be a table"),
    ],
)
def test_bad_server_tables_are_config_errors(servers: dict[str, Any], message: str) -> None:
    """Each mistake is a ConfigError naming the server and the key."""
    with pytest.raises(ConfigError, match=message):
        parse(servers)


def test_the_config_hash_follows_what_runs_not_the_timeouts() -> None:
    """Command, args, env and cwd change the hash; timeouts do not."""
    base = ServerConfig(name="s", command="c", args=("a",))
    assert (
        base.config_hash
        == ServerConfig(name="s", command="c", args=("a",), startup_timeout=1.0).config_hash
    )
    for changed in (
        ServerConfig(name="s", command="d", args=("a",)),
        ServerConfig(name="s", command="c", args=("b",)),
        ServerConfig(name="s", command="c", args=("a",), env=(("K", "v"),)),
        ServerConfig(name="s", command="c", args=("a",), cwd=Path("/x")),
    ):
        assert changed.config_hash != base.config_hash


def test_bridged_names_are_legal_function_names() -> None:
    """Names get the mcp_<server>_ prefix, illegal characters become _, and stay <= 64 chars."""
    assert bridged_name("notes", "add_note") == "mcp_notes_add_note"
    changed = bridged_name("web", "fetch.page v2")
    assert re.fullmatch(r"mcp_web_fetch_page_v2_[0-9a-f]{16}", changed)
    long_a = bridged_name("server", "a" * 80 + "x")
    long_b = bridged_name("server", "a" * 80 + "y")
    assert len(long_a) == len(long_b) == 64
    assert long_a != long_b
    assert long_a.startswith("mcp_server_aaaa")


def test_bridged_names_are_injective_for_one_server() -> None:
    """Tools whose legal forms agree (a.b, a_b, a b) get different names; legal ones are kept."""
    names = [bridged_name("s", tool) for tool in ["a.b", "a_b", "a b", "a-b"]]
    assert len(set(names)) == 4
    assert names[1] == "mcp_s_a_b" and names[3] == "mcp_s_a-b"
    mimic = "a_b_" + names[0].rsplit("_", 1)[1]  # a legal name posing as a changed one
    assert bridged_name("s", mimic) not in names
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) for name in names)


def test_distinct_tool_names_never_share_a_bridged_name() -> None:
    """Every tool name of up to four characters from a colliding alphabet maps to its own name."""
    alphabet = "a._ -é"
    tools = ["".join(p) for n in range(1, 5) for p in itertools.product(alphabet, repeat=n)]
    tools += ["x" * 70 + suffix for suffix in alphabet]  # cut to 64, still apart
    names = [bridged_name("srv", tool) for tool in tools]
    assert len(set(names)) == len(tools)
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) for name in names)


def test_a_tool_in_another_servers_namespace_gets_a_digest() -> None:
    """Server a's tool b_c and server a_b's tool c get two names; names with no overlap stay."""
    servers = ["a", "a_b", "notes"]
    assert bridged_name("a_b", "c", servers) == "mcp_a_b_c"
    assert re.fullmatch(r"mcp_a_b_c_[0-9a-f]{16}", bridged_name("a", "b_c", servers))
    assert bridged_name("a", "bc", servers) == "mcp_a_bc"
    assert bridged_name("a", "b", servers) == "mcp_a_b"
    assert bridged_name("notes", "add_note", servers) == "mcp_notes_add_note"
    assert bridged_name("a", "b_c", ["a", "notes"]) == "mcp_a_b_c"


_PART = st.text("ab_", min_size=1, max_size=4)


@given(st.lists(_PART, min_size=1, max_size=5, unique=True), st.lists(_PART, max_size=8))
def test_no_two_tools_of_any_servers_share_a_name(servers: list[str], tools: list[str]) -> None:
    """Every (server, tool) pair of a config maps to its own name, and only overlaps change."""
    pairs = [(server, tool) for server in servers for tool in tools]
    names = [bridged_name(server, tool, servers) for server, tool in pairs]
    assert len(set(names)) == len(set(pairs))
    for (server, tool), name in zip(pairs, names, strict=True):
        overlaps = any(
            other != server and f"mcp_{server}_{tool}".startswith(f"mcp_{other}_")
            for other in servers
        )
        if not overlaps:
            assert name == bridged_name(server, tool)  # as before: no other server in sight


def test_the_cache_round_trips_and_rejects_stale_entries(tmp_path: Path) -> None:
    """A stored list reads back for the same config, and not for a changed one or a broken file."""
    cache = ToolListCache(tmp_path)
    server = ServerConfig(name="s", command="c")
    tools = [{"name": "t", "inputSchema": {"type": "object"}}]
    assert cache.load(server) is None
    cache.store(server, tools)
    assert cache.load(server) == tools
    assert cache.load(ServerConfig(name="s", command="other")) is None
    cache.path(server).write_text("{not json")
    assert cache.load(server) is None
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    written=st.text(max_size=60)
    | st.builds(
        json.dumps,
        st.dictionaries(
            st.sampled_from(["format", "config_hash", "time", "reason", "tools"]),
            st.none() | st.integers() | st.text(max_size=8) | st.just([]),
        ),
    )
)
def test_a_file_of_anything_is_no_record_unless_it_is_one(tmp_path: Path, written: str) -> None:
    """A tool-list or failure file holding anything but a record of the config raises nothing
    and is no record; a failure written is read back for its config only."""
    server = ServerConfig(name="s", command="c", retry_after=60)
    cache, failures = ToolListCache(tmp_path), FailureMemory(tmp_path, clock=lambda: 100.0)
    for path in (cache.path(server), failures.path(server)):
        path.write_text(written, encoding="utf-8")
    # No hash drawn is the config's (a text of 8 characters at most): nothing is a record.
    assert cache.load(server) is None
    assert failures.recent(server) is None
    failures.record(server, "it broke")
    assert failures.recent(server) == RememberedFailure("it broke", 0.0)
    assert failures.recent(ServerConfig(name="s", command="other", retry_after=60)) is None


@settings(max_examples=100, deadline=None)
@given(
    moment=st.sampled_from(["1e400", "-1e400", "NaN", "Infinity", str(10**400), str(-(10**400))])
    | st.floats(allow_nan=False, allow_infinity=False).map(repr)
    | st.integers().map(str)
)
def test_a_failure_record_of_any_time_is_recent_only_for_a_time_of_the_wait(moment: str) -> None:
    """A failure record of the server's config whose time (a JSON number) is too large for a
    float, NaN or infinite is no record, not an OverflowError failing the plugin nor a wait
    for ever; one of any other time is recent exactly within retry_after of it."""
    server = ServerConfig(name="s", command="c", retry_after=60)
    with tempfile.TemporaryDirectory() as folder:
        failures = FailureMemory(Path(folder), clock=lambda: 100.0)
        record = {"format": 1, "server": "s", "config_hash": server.config_hash, "reason": "r"}
        text = json.dumps(record)[:-1] + f', "time": {moment}}}'
        failures.path(server).write_text(text, encoding="utf-8")
        remembered = failures.recent(server)
    time = float(moment)  # inf where the record's number is too large for a float
    if math.isfinite(time) and 0 <= 100.0 - time < 60:
        assert remembered == RememberedFailure("r", 100.0 - time)
    else:
        assert remembered is None


@pytest.mark.parametrize("opening", ["[", '{"a": '])
def test_a_file_nested_past_what_json_walks_is_no_record(tmp_path: Path, opening: str) -> None:
    """A tool-list or failure file nested 100,000 deep is no record (listed again), no crash."""
    server = ServerConfig(name="s", command="c")
    cache, failures = ToolListCache(tmp_path), FailureMemory(tmp_path)
    for path in (cache.path(server), failures.path(server)):
        path.write_text(opening * 100_000, encoding="utf-8")
    assert cache.load(server) is None
    assert cache.rejected(server) == []
    assert failures.recent(server) is None


def test_results_become_text_and_errors_become_error_results() -> None:
    """Text blocks are joined; isError gives an Error result; other blocks get placeholders."""
    ok = to_tool_result({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]})
    assert (str(ok), ok.is_error) == ("a\nb", False)
    failed = to_tool_result({"content": [{"type": "text", "text": "disk full"}], "isError": True})
    assert failed.is_error
    assert str(failed) == "Error: disk full"
    mixed = to_tool_result(
        {
            "content": [
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "hello"}},
                {"type": "resource_link", "uri": "file:///b.bin", "name": "b"},
            ]
        }
    )
    assert str(mixed) == (
        "[image image/png, about 3 bytes, not shown]\nhello\n[resource file:///b.bin]"
    )


def test_structured_only_results_are_sent_as_json() -> None:
    """A result with only structuredContent is returned as its JSON text."""
    result = to_tool_result({"content": [], "structuredContent": {"total": 3}})
    assert str(result) == '{"total": 3}'


def test_an_empty_error_still_says_it_failed() -> None:
    """An error result without any content gets a message that says so."""
    result = to_tool_result({"content": [], "isError": True})
    assert result.is_error
    assert "without saying why" in result


class _RecordingBridge(McpBridge):
    """A bridge that answers every call itself and remembers the arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def call_tool(
        self, handle: ServerHandle, tool: str, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        self.calls.append((tool, arguments))
        return {"content": [{"type": "text", "text": "done"}]}


@pytest.mark.parametrize("argument", ["self", "arguments", "handle", "tool", "kwargs"])
def test_any_argument_name_of_the_server_reaches_it(argument: str) -> None:
    """An MCP tool may name its parameter `self` (or anything else): the call passes it on."""
    bridge = _RecordingBridge()
    spec = {
        "name": "t",
        "inputSchema": {
            "type": "object",
            "properties": {argument: {"type": "string"}},
            "required": [argument],
        },
    }
    tool = McpTool(ServerHandle(ServerConfig(name="s", command="c"), Path("/ws")), spec, bridge)
    assert run_tool(tool, {argument: "value"}) == "done"
    assert bridge.calls == [("t", {argument: "value"})]


_GOOD_TOOL = {"name": "good", "inputSchema": {"type": "object", "properties": {}}}
_BAD_TOOLS: list[Any] = [
    {"name": "props", "inputSchema": {"type": "object", "properties": {"b": 5}}},
    {"name": "scalar", "inputSchema": {"type": "string"}},
    {"inputSchema": {"type": "object"}},
    {"name": 7, "inputSchema": {"type": "object"}},
    {"name": "no_schema"},
    "not a tool",
]


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["2025-06-18", "2025-11-25"]),
    st.lists(
        st.one_of(
            st.builds(
                lambda name, described: {
                    "name": name,
                    "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}},
                    **({"description": "d"} if described else {}),
                },
                st.text(max_size=8),
                st.booleans(),
            ),
            st.sampled_from(_BAD_TOOLS),
        ),
        max_size=8,
    ),
)
def test_screening_keeps_exactly_the_valid_tools_in_order(version: str, tools: list[Any]) -> None:
    """Screening keeps each tool the SDK accepts, in order, and names each one it refuses."""
    from mcp.types import ListToolsResult

    result, rejected = screen_tools({"tools": tools}, version)
    valid = [t for t in tools if t not in _BAD_TOOLS]
    assert result["tools"] == valid
    assert len(rejected) == len(tools) - len(valid)
    ListToolsResult.model_validate(result)  # the SDK now accepts the answer
    wrong_outside = {"tools": tools, "nextCursor": 5}
    assert screen_tools(wrong_outside, version) == (wrong_outside, [])
    assert all(r.reason for r in rejected)


def test_a_refused_tool_is_named_with_what_is_wrong() -> None:
    """Each refused tool keeps its name (None without one) and the place and kind of its fault."""
    answer = {"tools": [_GOOD_TOOL, *_BAD_TOOLS[:3]], "nextCursor": "2"}
    result, rejected = screen_tools(answer, "2025-11-25")
    assert result == {"tools": [_GOOD_TOOL], "nextCursor": "2"}
    assert [r.tool for r in rejected] == ["props", "scalar", None]
    assert "inputSchema.properties.b: Input should be a valid dictionary" in rejected[0].reason
    assert "inputSchema.type: Input should be 'object'" in rejected[1].reason
    assert rejected[2].describe("s") == (
        "MCP server 's': a tool without a name left out: its definition is invalid "
        "(name: Field required)"
    )
    valid = {"tools": [_GOOD_TOOL]}
    assert screen_tools(valid, "2025-11-25") == (valid, [])
    # The newest revision's answers carry cache hints, which stay.
    hints = {"resultType": "complete", "cacheScope": "private", "ttlMs": 0}
    result, rejected = screen_tools({"tools": [_GOOD_TOOL, _BAD_TOOLS[1]], **hints}, "2026-07-28")
    assert result == {"tools": [_GOOD_TOOL], **hints}
    assert [r.tool for r in rejected] == ["scalar"]


def test_the_cache_keeps_the_refused_tools(tmp_path: Path) -> None:
    """A cached listing remembers which tools were left out and why, for the next process."""
    cache = ToolListCache(tmp_path)
    server = ServerConfig(name="s", command="c")
    cache.store(server, [_GOOD_TOOL], [RejectedTool("bad", "why"), RejectedTool(None, "no name")])
    assert cache.load(server) == [_GOOD_TOOL]
    assert cache.rejected(server) == [RejectedTool("bad", "why"), RejectedTool(None, "no name")]
    assert cache.rejected(ServerConfig(name="s", command="other")) == []


@given(
    problems=st.lists(st.text()),
    junk=st.sampled_from([(None, []), (3, []), ("x", []), ({"a": 1}, []), (["y", 1], ["y"])]),
)
def test_the_cache_keeps_the_problems_of_a_listing(
    problems: list[str], junk: tuple[Any, list[str]]
) -> None:
    """What else a listing left out is cached line for line; a problems field of anything
    else (the file is anyone's to write) is read as none, or as its lines alone."""
    with tempfile.TemporaryDirectory() as folder:
        cache = ToolListCache(Path(folder))
        server = ServerConfig(name="s", command="c")
        cache.store(server, [_GOOD_TOOL], problems=problems)
        assert cache.problems(server) == problems
        record = json.loads(cache.path(server).read_text())
        written, read = junk
        cache.path(server).write_text(json.dumps({**record, "problems": written}))
        assert cache.problems(server) == read
        assert cache.load(server) == [_GOOD_TOOL]


def test_a_name_clash_names_both_servers_and_tools(capsys: pytest.CaptureFixture[str]) -> None:
    """Should two tools still meet on one name, the warning says which server's tool was lost."""
    from nanobot_mcp.discovery import _add

    def tool(server: str, name: str) -> McpTool:
        handle = ServerHandle(ServerConfig(name=server, command="c"), Path("/ws"))
        made = McpTool(handle, {"name": name}, McpBridge())
        made._name = "mcp_same"
        return made

    tools: dict[str, McpTool] = {}
    first, second = tool("one", "x"), tool("two", "y")
    _add(tools, first)
    _add(tools, second)
    assert tools == {"mcp_same": first}
    assert (
        "MCP server 'two': tool 'y' left out: its name 'mcp_same' is taken by "
        "MCP server 'one', tool 'x'"
    ) in capsys.readouterr().err


@settings(max_examples=300, deadline=None)
@given(
    stream=st.lists(st.binary(max_size=50), max_size=8).map(b"\n".join),
    cuts=st.lists(st.integers(min_value=0, max_value=450), max_size=12),
    limit=st.integers(min_value=1, max_value=40),
)
def test_lines_come_out_whole_and_never_past_the_limit(
    stream: bytes, cuts: list[int], limit: int
) -> None:
    """However a server's output is cut into chunks, the splitter gives its lines up to the
    first that is longer than the limit, then refuses, holding no more than the limit."""
    *ended, unfinished = stream.split(b"\n")
    too_long = next((i for i, line in enumerate(ended) if len(line) > limit), None)
    expected = ended if too_long is None else ended[:too_long]
    refused = too_long is not None or len(unfinished) > limit
    bounds = [0, *sorted(c for c in cuts if c < len(stream)), len(stream)]
    splitter = LineSplitter(limit)
    lines: list[bytes] = []
    with pytest.raises(LineTooLong) if refused else contextlib.nullcontext():
        for start, end in itertools.pairwise(bounds):
            for line in splitter.feed(stream[start:end]):
                lines.append(line)
            assert splitter.buffered <= limit
    assert lines == expected


def test_a_line_of_exactly_the_limit_passes() -> None:
    """The limit counts the line's bytes without its newline; one byte more is refused."""
    assert list(LineSplitter(3).feed(b"abc\n")) == [b"abc"]
    with pytest.raises(LineTooLong, match=r"a line longer than 3 bytes \(max_line_bytes\)"):
        list(LineSplitter(3).feed(b"abcd"))


@pytest.mark.parametrize(
    ("size", "said"),
    [(16 * 1024 * 1024, "16 MiB"), (1536 * 1024, "1536 KiB"), (1000, "1000 bytes"), (1, "1 byte")],
)
def test_sizes_are_said_as_people_write_them(size: int, said: str) -> None:
    """A limit in an error reads as MiB or KiB when it is a whole number of them."""
    assert describe_size(size) == said


def test_the_installed_mcp_has_every_helper_the_bounded_transport_uses() -> None:
    """The mcp installed for the tests lacks none of the SDK's names the line bound needs."""
    assert missing_sdk_names() == ()


_WHITE = st.text(alphabet=" \n\t\r", max_size=300)
# Any text a server writes: terminal escapes, bidirectional overrides, characters of up to
# four bytes in UTF-8.
_WRITTEN = st.text(st.characters(exclude_categories=("Cs",)), max_size=400)


@settings(max_examples=300, deadline=None)
@given(_WRITTEN, _WHITE, st.integers(min_value=1, max_value=50))
# A 4-byte character cut by the first window, the rest of it white space: the cut bytes were
# taken for characters of the tail.
@example("\U00010000", "     ", 1)
def test_a_stderr_tail_is_its_end_as_written(text: str, end: str, chars: int) -> None:
    """Whatever a server wrote, its tail is its last characters as written, white space at its
    end left out (however much of it there is): a terminal is the CLI's to protect."""
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "server.log"
        log.write_bytes((text + end).encode("utf-8"))
        assert stderr_tail(log, chars) == text.strip()[-chars:]


def test_a_character_the_read_window_cuts_into_is_not_counted() -> None:
    """A four-byte character before white space is the tail, not the U+FFFD of its cut bytes."""
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "server.log"
        log.write_bytes(("\U00010000" + " " * 13).encode("utf-8"))
        assert stderr_tail(log, 1) == "\U00010000"


def test_a_missing_stderr_log_has_no_tail(tmp_path: Path) -> None:
    """A server that never got to write its log is told without a stderr tail."""
    assert stderr_tail(tmp_path / "absent.log") == ""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_stderr_log_that_is_a_pipe_or_a_device_has_no_tail_and_is_not_waited_on(
    tmp_path: Path,
) -> None:
    """A log that is a named pipe nothing writes to, or a link to /dev/null, has no tail, and
    asking for one does not wait for a writer."""
    os.mkfifo(tmp_path / "piped.log")
    (tmp_path / "quiet.log").symlink_to(os.devnull)
    tails: list[str] = []
    asking = threading.Thread(
        target=lambda: tails.extend(stderr_tail(tmp_path / n) for n in ("piped.log", "quiet.log")),
        daemon=True,
    )
    asking.start()
    asking.join(5)
    if asking.is_alive():
        os.close(os.open(tmp_path / "piped.log", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("asking for the tail waited on the named pipe")
    assert tails == ["", ""]


def _servers_refused_within_seconds(pipe: Path, workspace: Path, environ: dict[str, str]) -> str:
    """The `ConfigError` message of `load_servers`, which must come within 10 seconds; one
    still waiting then (on the named pipe `pipe`, if it is one) fails the test."""
    caught: list[BaseException] = []

    def load() -> None:
        try:
            load_servers(workspace, environ)
        except BaseException as exc:  # handed to the test's thread
            caught.append(exc)

    loading = threading.Thread(target=load, daemon=True)
    loading.start()
    loading.join(10)
    if loading.is_alive():
        os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))  # lets the waiting open go
        pytest.fail(f"load_servers waited on {pipe}")
    (refused,) = caught
    assert type(refused) is ConfigError, repr(refused)
    return str(refused)


@pytest.mark.parametrize("kind", ["fifo", "device", "folder", "link-loop", "huge"])
def test_a_config_path_that_cannot_be_config_is_refused_at_once_naming_it(
    tmp_path: Path, kind: str
) -> None:
    """NANOBOT_MCP_CONFIG naming a named pipe, /dev/zero, a folder, a loop of links or a file
    past the limit fails at once naming the variable, the path and what is wrong (the pipe was
    waited on for ever; the others were "no such file", the huge file read whole)."""
    path = tmp_path / "mcp.toml"
    refusal = "not a regular file, so it cannot be read as MCP server config"
    said = {
        "fifo": f"a named pipe (FIFO), {refusal}",
        "device": f"a character device, {refusal}",
        "folder": f"a directory, {refusal}",
        "link-loop": "cannot read MCP server config: Too many levels of symbolic links",
        "huge": "larger than 16 MiB, the most read of an MCP server config: not a config file",
    }[kind]
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path = Path("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    elif kind == "link-loop":
        path.symlink_to(tmp_path / "other.toml")
        (tmp_path / "other.toml").symlink_to(path)
    else:
        with path.open("wb") as handle:
            handle.truncate(MAX_CONFIG_BYTES + 1)
    said_in_full = _servers_refused_within_seconds(path, tmp_path, {CONFIG_ENV: str(path)})
    assert said_in_full == f"environment variable {CONFIG_ENV}: {path}: {said}"


def test_a_pipe_at_the_default_config_path_is_refused_not_passed_over(tmp_path: Path) -> None:
    """A named pipe where .nanobot/mcp.toml is looked for is an error naming it: it was taken
    for no config at all (no server, nothing said)."""
    path = tmp_path / ".nanobot" / "mcp.toml"
    path.parent.mkdir()
    os.mkfifo(path)
    assert _servers_refused_within_seconds(path, tmp_path, {}) == (
        f"{path}: a named pipe (FIFO), not a regular file, so it cannot be read as MCP server "
        "config"
    )


def test_a_config_file_at_the_limit_is_read_whole(tmp_path: Path) -> None:
    """An mcp.toml of exactly the most read is still read and its servers found."""
    text = '[servers.x]\ncommand = "c"\n'
    path = tmp_path / ".nanobot" / "mcp.toml"
    path.parent.mkdir()
    path.write_text(text + "#" * (MAX_CONFIG_BYTES - len(text)), encoding="utf-8")
    assert [server.name for server in load_servers(tmp_path, {})] == ["x"]


@settings(max_examples=10, deadline=None)
@given(digits=st.integers(min_value=4_301, max_value=20_000))
def test_an_integer_longer_than_python_reads_is_a_config_error_naming_the_file(
    digits: int,
) -> None:
    """A decimal integer of thousands of digits in mcp.toml is a config error naming the file,
    not tomllib's ValueError (which advised sys.set_int_max_str_digits and named no file)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / ".nanobot" / "mcp.toml"
        path.parent.mkdir()
        path.write_text(f'[servers.x]\ncommand = "c"\nstartup_timeout = {"9" * digits}\n')
        with pytest.raises(ConfigError) as caught:
            load_servers(Path(folder), {})
    assert str(caught.value) == (
        f"{path}: cannot read MCP server config: an integer of more than "
        f"{sys.get_int_max_str_digits()} digits (a TOML integer has 19 at most)"
    )


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3))
def test_an_env_table_is_refused_by_name_or_can_be_given_to_a_process(
    env: dict[str, str],
) -> None:
    """Any env table is either a config error naming 'env', or one a real process starts with."""
    try:
        (server,) = parse({"x": {"command": "c", "env": env}})
    except ConfigError as exc:
        assert str(exc).startswith("mcp.toml: servers.x: 'env' ")
        return
    true = shutil.which("true")
    assert true is not None
    subprocess.run([true], env=dict(server.env), check=True)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=10,
)
_OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "n": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["n"],
}


@settings(max_examples=300, deadline=None)
@given(_JSON | st.fixed_dictionaries({"n": _JSON}, optional={"tags": _JSON}))
def test_the_output_check_agrees_with_json_schema_in_one_short_line(value: Any) -> None:
    """Whatever structuredContent a server sends, the check passes exactly what jsonschema
    passes, and words a refusal in one line of a few hundred characters at most."""
    import jsonschema

    fault = output_checker(_OUTPUT_SCHEMA)(value)
    valid = value is not None and jsonschema.Draft202012Validator(_OUTPUT_SCHEMA).is_valid(value)
    assert (fault is None) == valid
    if fault is not None:
        assert "\n" not in fault and len(fault) < 400


class _Pages:
    """A session whose tools/list answers are the given pages, each with its next cursor."""

    def __init__(self, pages: dict[str | None, tuple[list[dict[str, Any]], str | None]]) -> None:
        self.pages = pages
        self.asked: list[str | None] = []

    async def list_tools(self, *, params: Any) -> Any:
        from mcp.types import ListToolsResult

        self.asked.append(params.cursor)
        tools, cursor = self.pages[params.cursor or "0"]
        return ListToolsResult.model_validate({"tools": tools, "nextCursor": cursor})


_PAGE = st.lists(
    st.builds(
        lambda name, size: {
            "name": name,
            "description": "d" * size,
            "inputSchema": {"type": "object"},
        },
        st.text(min_size=1, max_size=3),
        st.integers(0, 300),
    ),
    max_size=4,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pages=st.lists(st.tuples(_PAGE, st.integers(0, 6)), min_size=1, max_size=6),
    max_tools=st.integers(1, 12),
    max_tool_bytes=st.integers(60, 400),
    extra_pages=st.integers(0, 1),
)
def test_a_listing_keeps_what_its_bounds_allow_and_says_what_it_left_out(
    pages: list[tuple[list[dict[str, Any]], int]],
    max_tools: int,
    max_tool_bytes: int,
    extra_pages: int,
) -> None:
    """Whatever pages and cursors a server sends, the listing keeps, in order, the tools within
    max_tool_bytes up to max_tools, asks for no cursor twice and no page past the 100th, and
    says in a problem each thing it left out."""
    from nanobot_mcp import connection

    config = ServerConfig(name="s", command="c", max_tools=max_tools, max_tool_bytes=max_tool_bytes)
    # Each page names the next by its number; the last may name any page (a cursor given
    # twice, or the first page's again under a cursor of its own).
    script: dict[str | None, tuple[list[dict[str, Any]], str | None]] = {}
    for index, (tools, goes_to) in enumerate(pages):
        last = index == len(pages) - 1
        following = goes_to % len(pages) if last else index + 1
        script[str(index)] = (tools, None if last and not extra_pages else str(following))
    session = _Pages(script)
    listing = ServerConnection(config, Path("/nonexistent"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(connection, "_MAX_PAGES", 4)
        kept = asyncio.run(listing._list_tools(session))

    asked = session.asked
    assert len(asked) == len(set(asked)) and len(asked) <= 4
    sent = [tool for cursor in asked for tool in script[cursor or "0"][0]]
    small = [t for t in sent if connection.definition_size(t) <= max_tool_bytes]
    assert [t["name"] for t in kept] == [t["name"] for t in small][:max_tools]
    told = " ".join(listing.problems)
    for tool in sent:
        if tool not in small:
            assert f"tool {tool['name']!r} left out" in told
    assert (len(small) > max_tools) == ("lists more than" in told)
    if len(small) <= max_tools:
        # Not cut by max_tools: a problem about pages exactly when the server offered more.
        more = script[asked[-1] or "0"][1]
        assert bool(more) == ("cursor twice" in told or "more than 4 pages" in told)
