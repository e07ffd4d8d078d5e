"""The public testing kit for plugin authors (`nanobot_core.testing`)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nanobot_core import Stage, StageOutcome, Tool, ToolResult, hookimpl, tool
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.testing import (
    assert_tool_contract,
    check_tool_contract,
    govern_and_check,
    run_tool,
)


class _Good(Tool):
    name = "good_tool"
    description = "Add two integers."
    parameters = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }
    read_only = True

    async def execute(self, a: int, b: int) -> str:
        return str(a + b)


def test_a_good_tool_passes_the_contract() -> None:
    """A well-formed tool has no contract problems."""
    assert check_tool_contract(_Good) == []
    assert_tool_contract(_Good())


def test_contract_problems_are_each_reported() -> None:
    """A bad name, an empty description, a broken schema and a sync execute are all named."""

    class Bad:
        name = "bad name!"
        description = "  "
        parameters = {"type": "object", "properties": {"x": {"type": "nonsense"}}}
        exclusive = True
        concurrency_safe = True
        read_only = False

        def execute(self) -> str:
            return ""

    problems = "\n".join(check_tool_contract(Bad))
    assert "bad name!" in problems
    assert "description" in problems
    assert "valid JSON Schema" in problems
    assert "async" in problems


def test_exclusive_and_concurrency_safe_is_inconsistent() -> None:
    """A tool flagged exclusive cannot also claim to be concurrency-safe."""

    class Both(_Good):
        name = "both"
        exclusive = True
        concurrency_safe = True

    with pytest.raises(AssertionError, match="exclusive"):
        assert_tool_contract(Both())


def test_run_tool_goes_through_preparation() -> None:
    """run_tool parses, casts and validates what a model would send, like the agent does."""
    assert run_tool(_Good(), '{"a": "2", "b": 3}') == "5"
    broken = run_tool(_Good(), '{"a": 2,')
    assert isinstance(broken, ToolResult) and broken.is_error
    assert "b" in broken


def test_run_tool_accepts_function_tools() -> None:
    """A @tool function runs through the same path."""

    @tool
    def shout(text: str) -> str:
        """Upper-case the text."""
        return text.upper()

    assert run_tool(shout, {"text": "hi"}) == "HI"


def test_govern_and_check_catches_a_stage_that_mutates_its_input() -> None:
    """A stage that writes into the caller's dicts is caught by govern_and_check."""

    def vandal(messages: list[dict[str, Any]], ctx: Any) -> StageOutcome:
        for message in messages:
            if isinstance(message, dict) and message.get("role") == "user":
                message["content"] = "overwritten"
        return StageOutcome(messages=messages, changed=True, details=["vandalised"])

    history = [{"role": "user", "content": "hello"}]
    with pytest.raises(AssertionError, match="must be pure"):
        govern_and_check(history, stages=[Stage(name="vandal", func=vandal)])


def test_govern_and_check_returns_the_governed_copy() -> None:
    """A dangling tool call comes back paired, and the result is returned for more asserts."""
    history = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}
            ],
        },
    ]
    result = govern_and_check(history)
    assert [m["role"] for m in result.messages] == ["user", "assistant", "tool"]


def test_manager_fixture_is_isolated(nanobot_manager: PluginManager) -> None:
    """The fixture's manager loads built-ins only, with the test's tmp_path as workspace."""
    loaded = [r for r in nanobot_manager.records() if r.status == "loaded"]
    sources = {record.info.source for record in loaded}
    assert sources == {"builtin"}
    assert nanobot_manager.context.workspace.name.startswith("test_manager_fixture")


def test_register_fixture_adds_a_plugin_for_one_test(
    nanobot_manager: PluginManager, nanobot_register: Any
) -> None:
    """A plugin registered through the fixture contributes its tool to the registry."""

    class Plugin:
        @hookimpl
        def nanobot_tools(self, ctx: Any) -> list[Any]:
            return [_Good]

    record = nanobot_register(Plugin(), "adder", distribution="adder-dist", version="1.0")
    assert record.status == "loaded"
    assert "good_tool" in nanobot_manager.tool_registry().names()


def test_network_guard_refuses_the_outside_world() -> None:
    """Inside block_network, a public address fails at once while loopback still connects."""
    import socket

    from nanobot_core.testing import block_network

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    with block_network():
        with pytest.raises(OSError, match="network access blocked"):
            socket.create_connection(("192.0.2.1", 80), timeout=1)
        with pytest.raises(OSError, match="network access blocked"):
            socket.getaddrinfo("example.com", 443)
        client = socket.create_connection(server.getsockname(), timeout=5)
        client.close()
    server.close()


def test_network_guard_lets_a_numeric_only_lookup_through() -> None:
    """Inside block_network, getaddrinfo with AI_NUMERICHOST reads a public or odd address
    (which resolves nothing), while the same lookup without the flag is refused."""
    import socket

    from nanobot_core.testing import block_network

    with block_network():
        numeric = socket.getaddrinfo("192.0.2.1", 80, flags=socket.AI_NUMERICHOST)
        assert numeric[0][4][0] == "192.0.2.1"
        with pytest.raises(OSError, match="network access blocked"):
            socket.getaddrinfo("192.0.2.1", 80)
        found = socket.getaddrinfo(b"127.1", None, 0, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST)
        assert found[0][4][0] == "127.0.0.1"
        with pytest.raises(socket.gaierror):  # numeric only: a name is refused, not looked up
            socket.getaddrinfo("example.com", 443, flags=socket.AI_NUMERICHOST)


def test_a_name_ending_in_a_line_break_breaks_the_contract() -> None:
    """A tool name with a final line break, which no model API takes, is named as a problem."""

    class Trailing:
        name = "grep\n"
        description = "Searches."
        parameters = {"type": "object", "properties": {}}

        async def execute(self) -> str:
            return ""

    assert any("'grep\\n'" in problem for problem in check_tool_contract(Trailing))


def test_run_cli_runs_the_command_as_a_user_does(tmp_path: Path) -> None:
    """`run_cli` runs nanobot-core in a child process, in the folder given, with its stdin."""
    from nanobot_core.testing import run_cli

    listed = run_cli("call", "list_dir", "-", "--json", cwd=tmp_path, stdin='{"path": "."}')
    assert listed.returncode == 0, listed.stderr
    assert '"ok": true' in listed.stdout
    refused = run_cli("call", "no_such_tool", "{}", cwd=tmp_path)
    assert refused.returncode != 0


# Variables a developer's shell may hold: the three kinds of settings, and look-alikes
# that are none of them (and so stay).
_SHELL = {
    "NANOBOT_MODEL": "from-the-shell",
    "NANOBOT_PROVIDER__MAX_RETRIES": "many",  # not a number: a config error
    "OPENAI_API_KEY": "sk-shell",
    "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/",
    "NANOBOTX": "kept",
    "MY_NANOBOT_MODEL": "kept",
    "nanobot_model": "kept",
    "OPENAI": "kept",
}


def _environment() -> dict[str, str]:
    """The environment but pytest's own PYTEST_CURRENT_TEST (which names the test's phase)."""
    return {n: v for n, v in os.environ.items() if n != "PYTEST_CURRENT_TEST"}


@pytest.fixture
def shell_settings() -> Iterator[dict[str, str]]:
    """`_SHELL` in the environment; after the test's other fixtures are done, checks that
    the environment and working directory are as they were, then takes `_SHELL` out."""
    saved = {name: os.environ.get(name) for name in _SHELL}
    os.environ.update(_SHELL)
    environ, cwd = _environment(), os.getcwd()
    yield dict(_SHELL)
    try:
        assert _environment() == environ, "the environment was not put back"
        assert os.getcwd() == cwd, "the working directory was not put back"
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def test_the_workspace_fixture_is_an_empty_folder_without_settings(
    shell_settings: dict[str, str], nanobot_workspace: Path, tmp_path: Path
) -> None:
    """`nanobot_workspace` is the test's empty `tmp_path`, made the working directory, with
    each NANOBOT_, OPENAI_ and ANTHROPIC_ variable gone and every other one kept (both put
    back after the test: see `shell_settings`)."""
    assert nanobot_workspace == tmp_path
    assert Path.cwd() == tmp_path.resolve()
    assert list(nanobot_workspace.iterdir()) == []
    assert not [n for n in os.environ if n.startswith(("NANOBOT_", "OPENAI_", "ANTHROPIC_"))]
    kept = {n: v for n, v in shell_settings.items() if n[:3] not in ("NAN", "OPE", "ANT")}
    kept |= {"NANOBOTX": "kept", "nanobot_model": "kept", "OPENAI": "kept"}
    assert {n: os.environ.get(n) for n in kept} == kept


def test_a_child_in_the_workspace_fixture_sees_no_shell_settings(
    shell_settings: dict[str, str], nanobot_workspace: Path
) -> None:
    """`run_cli` there is not failed by the shell's broken NANOBOT_PROVIDER__MAX_RETRIES."""
    from nanobot_core.testing import run_cli

    listed = run_cli("tools")
    assert listed.returncode == 0, listed.stderr
    assert "read_file" in listed.stdout


_NAMES = st.builds(
    str.__add__,
    st.sampled_from(
        ["NANOBOT_", "OPENAI_", "ANTHROPIC_", "NANOBOT", "nanobot_", "X_NANOBOT_", "OPENAI"]
    ),
    st.from_regex(r"[A-Z0-9_]{0,12}", fullmatch=True),
)
_VALUES = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))


@given(st.dictionaries(_NAMES, _VALUES, max_size=8))
def test_only_the_three_prefixes_are_taken_out_and_all_comes_back(
    variables: dict[str, str],
) -> None:
    """Of any variables, exactly those starting NANOBOT_, OPENAI_ or ANTHROPIC_ are taken
    out; undoing the fixture's changes restores every one and the working directory."""
    from nanobot_core.testing import _enter_workspace

    cwd = os.getcwd()
    with pytest.MonkeyPatch.context() as outside:
        for name, value in variables.items():
            outside.setenv(name, value)
        before = dict(os.environ)
        with tempfile.TemporaryDirectory() as folder:
            with pytest.MonkeyPatch.context() as monkeypatch:
                assert _enter_workspace(Path(folder), monkeypatch) == Path(folder)
                assert Path.cwd() == Path(folder).resolve()
                left = {n: os.environ.get(n) for n in variables}
                assert left == {
                    n: None if n.startswith(("NANOBOT_", "OPENAI_", "ANTHROPIC_")) else v
                    for n, v in variables.items()
                }
            assert dict(os.environ) == before
            assert os.getcwd() == cwd
