"""The agent loop with real parts (plugins, tools, governor, prompt, session) and HTTP server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nanobot_core import tool
from nanobot_core.config import Config
from nanobot_core.errors import ProviderError
from nanobot_core.governance.invariants import check_tool_pairing
from nanobot_core.hookspecs import hookimpl
from nanobot_core.jsonl_store import JsonlSessionStore
from nanobot_core.kernel.context import PluginContext
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.prompt import RUNTIME_BLOCK_CLOSE, RUNTIME_BLOCK_OPEN
from nanobot_core.providers import RetryNotice
from nanobot_core.runner import (
    EmptyReply,
    IterationLimitReached,
    ModelReplied,
    ModelWaiting,
    Runner,
    ToolFinished,
    ToolStarted,
    TurnResult,
)
from nanobot_core.sessions import Session
from tests.headless.conftest import API_KEY, provider_config
from tests.headless.fake_server import (
    FakeChatServer,
    Reply,
    error_reply,
    text_reply,
    tool_call_reply,
)

NOTES = "alpha line\nbeta line\n"
MARKER = "Always answer in the voice of HEADLESS-TEST-MARKER."


@tool
def explode(reason: str) -> str:
    """Fail on purpose.

    Args:
        reason: What to put in the error.
    """
    raise RuntimeError(reason)


@tool(read_only=True)
def big(lines: int) -> str:
    """Return many numbered lines.

    Args:
        lines: How many lines.
    """
    return "".join(f"line {n} of a very large tool result\n" for n in range(lines))


# Far longer than a turn with `stubborn` in it may take.
STUBBORN_SECONDS = 5.0


@tool(timeout=0.2)
async def stubborn() -> str:
    """Run on, swallowing every cancellation."""
    deadline = time.monotonic() + STUBBORN_SECONDS
    while time.monotonic() < deadline:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.01)
    return "finished anyway"


class HeadlessTestPlugin:
    """Three tools and a runtime-context line."""

    @hookimpl
    def nanobot_tools(self, ctx: PluginContext) -> list[Any]:
        return [explode, big, stubborn]

    @hookimpl
    def nanobot_runtime_context(self, ctx: PluginContext) -> list[str]:
        return ["branch: main"]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace with a notes file and an AGENTS.md whose text must reach the system prompt."""
    (tmp_path / "notes.txt").write_text(NOTES, encoding="utf-8")
    (tmp_path / "AGENTS.md").write_text(MARKER + "\n", encoding="utf-8")
    return tmp_path


class Harness:
    """Builds a runner over real parts for one workspace and one fake server."""

    def __init__(self, workspace: Path, server: FakeChatServer) -> None:
        self.workspace = workspace
        self.server = server
        self.config = Config()
        self.config.provider = provider_config(server.base_url)
        self.events: list[Any] = []

    def manager(self) -> PluginManager:
        manager = PluginManager(self.config, workspace=self.workspace, autoload=False).load()
        manager.register(HeadlessTestPlugin(), "headless-test")
        return manager

    def turn(self, text: str, *, session: str = "default", max_iterations: int = 10) -> TurnResult:
        with self.open(session) as opened:
            runner = Runner.from_plugins(
                self.manager(),
                session=opened,
                max_iterations=max_iterations,
                progress=self.events.append,
            )
            return runner.run_turn(text)

    def open(self, session: str = "default") -> Session:
        return JsonlSessionStore(self.workspace).open(session)

    def lines(self, session: str = "default") -> list[dict[str, Any]]:
        return _session_lines(self.workspace, session)


def _session_records(workspace: Path, session: str) -> list[dict[str, Any]]:
    path = JsonlSessionStore(workspace).path(session)
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _session_lines(workspace: Path, session: str) -> list[dict[str, Any]]:
    """The message lines of a session file (record lines, only ``_meta``, left out)."""
    return [r for r in _session_records(workspace, session) if set(r) != {"_meta"}]


@pytest.fixture
def harness(workspace: Path, server: FakeChatServer) -> Iterator[Harness]:
    """A runner factory over real parts, aimed at the fake server."""
    yield Harness(workspace, server)


def _without_meta(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in line.items() if k != "_meta"} for line in lines]


def test_a_tool_round_then_an_answer(harness: Harness, server: FakeChatServer) -> None:
    """The model reads a file, then answers: what the server got and what the session holds."""
    server.add(
        tool_call_reply(
            [("call_1", "read_file", '{"path": "notes.txt"}')],
            usage={"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        ),
        text_reply(
            "two lines", usage={"prompt_tokens": 150, "completion_tokens": 5, "total_tokens": 155}
        ),
    )
    result = harness.turn("what is in notes.txt?")

    assert result.answer == "two lines" and result.stop_reason == "answer"
    assert result.iterations == 2
    assert result.usage.to_json() == {
        "prompt_tokens": 250,
        "completion_tokens": 15,
        "total_tokens": 265,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }
    (call,) = result.tool_calls
    assert (call.round, call.call_id, call.name, call.arguments, call.is_error) == (
        1,
        "call_1",
        "read_file",
        {"path": "notes.txt"},
        False,
    )
    assert call.duration >= 0

    first, second = server.requests
    for request in (first, second):
        assert request.headers["authorization"] == f"Bearer {API_KEY}"
        system = request.body["messages"][0]
        assert system["role"] == "system" and MARKER in system["content"]
        assert all("_meta" not in m for m in request.body["messages"])
    # The tool definitions: built-ins and plugin tools, the same stable order every round.
    names = [d["function"]["name"] for d in first.body["tools"]]
    assert {"read_file", "explode", "big"} <= set(names)
    assert first.body["tools"] == harness.manager().tool_registry().definitions()
    assert second.body["tools"] == first.body["tools"]
    # The user message carries the runtime block, with the channel and the plugin's line.
    user = first.body["messages"][1]
    assert user["role"] == "user"
    assert user["content"].startswith("what is in notes.txt?\n\n" + RUNTIME_BLOCK_OPEN)
    assert user["content"].endswith(RUNTIME_BLOCK_CLOSE)
    assert 'Channel: "cli"' in user["content"] and 'Context: "branch: main"' in user["content"]
    # Round two: the call, then its result right after it.
    history = second.body["messages"][1:]
    assert [m["role"] for m in history] == ["user", "assistant", "tool"]
    assert history[1]["tool_calls"][0]["id"] == "call_1"
    assert history[2]["tool_call_id"] == "call_1" and "beta line" in history[2]["content"]

    lines = harness.lines()
    assert _without_meta(lines) == result.messages
    assert [m["role"] for m in lines] == ["user", "assistant", "tool", "assistant"]
    assert lines[0]["content"] == user["content"]
    assert lines[1]["_meta"]["usage"]["total_tokens"] == 110
    assert lines[2]["_meta"]["error"] is False and "duration" in lines[2]["_meta"]
    assert lines[3]["content"] == "two lines"


def test_token_counts_past_a_trillion_count_as_unreported_and_the_turn_is_stored(
    harness: Harness, server: FakeChatServer
) -> None:
    """Counts of thousands of digits (JSON allows them) are zero, not a sum no session can hold."""
    huge = int("9" * 4_300)  # the most digits the JSON boundary decodes
    server.add(
        text_reply("done", usage={"prompt_tokens": huge, "completion_tokens": huge}),
    )
    server.add(text_reply("again", usage={"prompt_tokens": 10**12, "completion_tokens": 7}))

    first = harness.turn("hello")
    second = harness.turn("hello again")

    assert first.answer == "done" and first.usage.to_json()["total_tokens"] == 0
    # A trillion is the largest count taken as sent.
    assert second.usage.to_json()["prompt_tokens"] == 10**12
    assert second.usage.to_json()["total_tokens"] == 10**12 + 7
    stored = [line["_meta"]["usage"] for line in harness.lines() if line["role"] == "assistant"]
    assert [usage["prompt_tokens"] for usage in stored] == [0, 10**12]


def test_progress_reports_tools_and_retries(harness: Harness, server: FakeChatServer) -> None:
    """Progress gets each tool's start and finish, and the provider's retry notices."""
    server.add(
        error_reply(503, "busy"),
        tool_call_reply([("c1", "read_file", '{"path": "notes.txt"}')]),
        text_reply("ok"),
    )
    harness.turn("go")
    waits = (ModelWaiting, ModelReplied)
    kinds = [type(e) for e in harness.events if not isinstance(e, waits)]
    assert kinds == [RetryNotice, ToolStarted, ToolFinished]
    rounds = [(type(e), e.round) for e in harness.events if isinstance(e, waits)]
    assert rounds == [(ModelWaiting, 1), (ModelReplied, 1), (ModelWaiting, 2), (ModelReplied, 2)]
    assert harness.events.index(ModelWaiting(1)) < [type(e) for e in harness.events].index(
        RetryNotice
    )
    finished = next(e for e in harness.events if isinstance(e, ToolFinished))
    assert (finished.name, finished.call_id, finished.is_error) == ("read_file", "c1", False)
    assert "read_file" in finished.describe()


def test_malformed_calls_are_answered_and_the_loop_goes_on(
    harness: Harness, server: FakeChatServer
) -> None:
    """A nameless call, truncated arguments, an unknown and a failing tool each get a result."""
    server.add(
        tool_call_reply(
            [
                ("c_none", None, "{}"),
                ("c_trunc", "read_file", '{"path": "notes.txt"'),
                ("c_unknown", "no_such_tool", "{}"),
                ("c_fail", "explode", '{"reason": "kaboom"}'),
            ]
        ),
        text_reply("recovered"),
    )
    result = harness.turn("try things")
    assert result.answer == "recovered"

    lines = harness.lines()
    results = {m["tool_call_id"]: m for m in lines if m["role"] == "tool"}
    assert list(results) == ["c_none", "c_trunc", "c_unknown", "c_fail"]
    assert results["c_none"]["content"].startswith("Error")
    assert "alpha line" in results["c_trunc"]["content"]  # repaired, then run
    assert (
        results["c_unknown"]["content"].startswith("Error")
        and "no_such_tool" in results["c_unknown"]["content"]
    )
    assert (
        results["c_fail"]["content"].startswith("Error")
        and "kaboom" in results["c_fail"]["content"]
    )
    assert [r["_meta"]["error"] for r in results.values()] == [True, False, True, True]

    sent = server.requests[1].body["messages"]
    assert check_tool_pairing(sent) == []
    sent_results = {m["tool_call_id"]: m["content"] for m in sent if m["role"] == "tool"}
    assert "kaboom" in sent_results["c_fail"] and "no_such_tool" in sent_results["c_unknown"]


def test_a_tool_that_ignores_its_timeout_does_not_hold_up_the_turn(
    harness: Harness, server: FakeChatServer
) -> None:
    """The model gets the timeout error at once and the turn ends long before the tool would."""
    server.add(tool_call_reply([("c1", "stubborn", "{}")]), text_reply("moved on"))
    started = time.monotonic()
    result = harness.turn("try the stubborn tool")
    assert time.monotonic() - started < STUBBORN_SECONDS
    assert result.answer == "moved on"
    (stored,) = [m for m in harness.lines() if m["role"] == "tool"]
    assert stored["content"].startswith(
        "Error: tool \"stubborn\" of plugin 'headless-test' timed out after 0.2s and did not stop "
        "when cancelled"
    )
    assert stored["_meta"]["error"] is True


def test_missing_ids_get_derived_ids_shared_by_call_and_result(
    harness: Harness, server: FakeChatServer
) -> None:
    """A call without id (as Gemini sends it) is stored with a derived id its result uses too."""
    server.add(tool_call_reply([("", "read_file", {"path": "notes.txt"})]), text_reply("ok"))
    harness.turn("read")
    lines = harness.lines()
    call = lines[1]["tool_calls"][0]
    assert (
        call["id"].startswith("call_") and call["function"]["arguments"] == '{"path": "notes.txt"}'
    )
    assert lines[2]["tool_call_id"] == call["id"]


def test_empty_reply_ends_the_turn_without_crashing(
    harness: Harness, server: FakeChatServer
) -> None:
    """A reply with no text and no calls is stored as "" and ends the turn as an empty reply."""
    server.add(text_reply(None))
    result = harness.turn("hello?")
    assert (result.answer, result.stop_reason, result.iterations) == ("", "empty_reply", 1)
    assert harness.lines()[-1]["content"] == ""
    assert any(isinstance(e, EmptyReply) for e in harness.events)


def test_max_iterations_is_reported_not_raised(harness: Harness, server: FakeChatServer) -> None:
    """With the model still calling tools after N rounds, the turn stops there and says so."""
    server.add(
        tool_call_reply([("r1", "read_file", '{"path": "notes.txt"}')]),
        tool_call_reply([("r2", "read_file", '{"path": "notes.txt"}')]),
        text_reply("never sent"),
    )
    result = harness.turn("loop", max_iterations=2)
    assert result.max_iterations_reached and result.stop_reason == "max_iterations"
    assert (result.iterations, result.answer, len(server.requests)) == (2, "", 2)
    assert [m.get("tool_call_id") for m in harness.lines() if m["role"] == "tool"] == ["r1", "r2"]
    assert IterationLimitReached(2) in harness.events
    assert result.to_json()["max_iterations_reached"] is True


def test_huge_results_are_stored_in_full_and_shortened_only_for_the_model(
    harness: Harness, server: FakeChatServer
) -> None:
    """Governance shortens a huge result in the copy it sends; the session keeps every character."""
    harness.config.governance.max_tool_result_chars = 2_000
    server.add(tool_call_reply([("b1", "big", '{"lines": 3000}')]), text_reply("seen"))
    result = harness.turn("make it big")
    full = big(lines=3000)
    stored = next(m for m in harness.lines() if m["role"] == "tool")
    assert stored["content"] == full
    sent = next(m for m in server.requests[1].body["messages"] if m["role"] == "tool")
    assert len(sent["content"]) < len(full)
    assert result.governance[1].to_json()["report"]  # the report says what was changed


def test_provider_failure_keeps_the_session_and_the_next_turn_continues(
    harness: Harness, server: FakeChatServer
) -> None:
    """A 4xx mid-turn raises ProviderError; what was stored stays and the next turn builds on it."""
    server.add(
        tool_call_reply([("k1", "read_file", '{"path": "notes.txt"}')]),
        error_reply(400, "context_length_exceeded: too long"),
    )
    with pytest.raises(ProviderError, match="context_length_exceeded"):
        harness.turn("first")
    assert [m["role"] for m in harness.lines()] == ["user", "assistant", "tool"]

    server.add(text_reply("second answer"))
    result = harness.turn("second")
    assert result.answer == "second answer"
    sent = server.requests[2].body["messages"]
    assert check_tool_pairing(sent) == []
    assert sent[-1]["role"] == "user" and sent[-1]["content"].startswith("second")
    assert any(m.get("tool_call_id") == "k1" for m in sent)


def test_a_reply_too_large_to_read_keeps_the_users_message(
    harness: Harness, server: FakeChatServer
) -> None:
    """A reply over the limit fails at once; the user's message stays for the next turn."""
    server.add(Reply(body={}, headers={"Content-Length": str(10**12)}))
    with pytest.raises(ProviderError, match=r"was larger than 67108864 bytes \(HTTP 200"):
        harness.turn("first")
    assert len(server.requests) == 1
    (kept,) = harness.lines()
    assert kept["role"] == "user" and kept["content"].startswith("first")

    server.add(text_reply("second answer"))
    assert harness.turn("second").answer == "second answer"
    sent = [m["content"] for m in server.requests[1].body["messages"] if m["role"] == "user"]
    assert sent[0].startswith("first") and "second" in sent[-1]


def test_a_wedged_session_is_healed_in_the_copy_only(
    harness: Harness, server: FakeChatServer
) -> None:
    """A dangling call and a torn line: the model gets a backfilled result, the file stays as is."""
    path = JsonlSessionStore(harness.workspace).path("wedged")
    path.parent.mkdir(parents=True)
    dangling = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "lost",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'},
            }
        ],
    }
    lines = [{"role": "user", "content": "earlier"}, dangling]
    path.write_text(
        "".join(json.dumps(m) + "\n" for m in lines) + '{"role": "tool", "tool_c', encoding="utf-8"
    )
    server.add(text_reply("carrying on"))
    result = harness.turn("continue", session="wedged")
    assert result.answer == "carrying on"

    sent = server.requests[0].body["messages"]
    assert check_tool_pairing(sent) == []
    index = next(i for i, m in enumerate(sent) if m.get("tool_calls"))
    assert sent[index + 1]["role"] == "tool" and sent[index + 1]["tool_call_id"] == "lost"
    stored = harness.lines("wedged")
    assert _without_meta(stored[:2]) == lines  # the file is never rewritten
    assert [m["role"] for m in stored[2:]] == ["user", "assistant"]
    assert path.with_name("wedged.jsonl.torn").read_text(encoding="utf-8") == (
        '{"role": "tool", "tool_c\n'
    )


def test_unknown_provider_is_a_config_error(harness: Harness) -> None:
    """Asking for a provider no plugin offers names the ones that exist."""
    from nanobot_core.errors import ConfigError

    with harness.open() as opened, pytest.raises(ConfigError, match="available: openai"):
        Runner.from_plugins(harness.manager(), "nope", session=opened)


def test_the_build_of_prepare_from_plugins_makes_one_runner_only(harness: Harness) -> None:
    """A second call of `build` raises RuntimeError: its governor is one session's."""
    build = Runner.prepare_from_plugins(harness.manager())
    with harness.open("first") as first:
        runner = build(first)
    with (
        harness.open("second") as second,
        pytest.raises(RuntimeError, match="call prepare_from_plugins again for another session"),
    ):
        build(second)
    assert runner.session is first
    again = Runner.prepare_from_plugins(harness.manager())
    with harness.open("second") as second:
        assert again(second).governor is not runner.governor


class _BrokenProvider:
    """A provider whose constructor or reply raises what a buggy plugin would."""

    name = "broken"
    fail_in_init = False

    def __init__(self, config: Any, progress: Any = None) -> None:
        if self.fail_in_init:
            raise RuntimeError("no client for you")

    async def complete(self, messages: Any, tools: Any) -> Any:
        raise KeyError("choices")


class _BrokenProviderPlugin:
    def __init__(self, provider: type[_BrokenProvider]) -> None:
        self.provider = provider

    @hookimpl
    def nanobot_providers(self, ctx: PluginContext) -> list[Any]:
        return [self.provider]


@pytest.mark.parametrize("fail_in_init", [True, False])
def test_a_plugin_provider_that_raises_is_named_with_its_version(
    harness: Harness, fail_in_init: bool
) -> None:
    """A provider raising when made or when asked is a NanobotError naming plugin and version."""
    from nanobot_core.errors import PluginError

    provider = type("Provider", (_BrokenProvider,), {"fail_in_init": fail_in_init})
    manager = harness.manager()
    manager.register(
        _BrokenProviderPlugin(provider), "broken-llm", distribution="broken-llm", version="0.4.2"
    )
    expected = PluginError if fail_in_init else ProviderError
    message = "could not be created: RuntimeError" if fail_in_init else "raised KeyError"
    with harness.open() as opened, pytest.raises(expected) as info:
        Runner.from_plugins(manager, "broken", session=opened).run_turn("hi")
    assert "plugin 'broken-llm' from broken-llm 0.4.2" in str(info.value)
    assert message in str(info.value)
    if not fail_in_init:  # the user's message is kept, as after any provider failure
        assert [line["role"] for line in harness.lines()] == ["user"]


def test_parts_can_be_given_explicitly(workspace: Path, server: FakeChatServer) -> None:
    """A runner built from hand-picked parts uses them: its clock, channel, lines and prompt."""
    from datetime import datetime, timedelta, timezone

    from nanobot_core.governance import Governor, builtin_stages
    from nanobot_core.prompt import PromptBuilder, Section, SectionContext
    from nanobot_core.providers import OpenAIProvider
    from nanobot_core.tools.executor import Executor
    from nanobot_core.tools.registry import ToolRegistry

    config = Config()
    registry = ToolRegistry()
    registry.add(big)
    prompt = PromptBuilder(
        [(Section("only", 1, lambda ctx: "You are terse."), "test")], config=config
    )
    fixed = datetime(2025, 1, 31, 9, 30, tzinfo=timezone(timedelta(hours=1)))
    server.add(tool_call_reply([("b", "big", '{"lines": 2}')]), text_reply("fine"))
    with JsonlSessionStore(workspace).open("explicit") as opened:
        runner = Runner(
            OpenAIProvider(provider_config(server.base_url)),
            registry,
            Executor(registry, default_timeout=5.0),
            Governor(builtin_stages(), config=config.governance, workspace=workspace),
            prompt,
            opened,
            prompt_context=SectionContext(workspace=workspace),
            runtime_lines=lambda: ["ticket: 42"],
            channel="telegram",
            chat_id="7",
            clock=lambda: fixed,
        )
        result = runner.run_turn("hi")
    assert result.answer == "fine"
    first = server.requests[0].body
    assert first["messages"][0] == {"role": "system", "content": "You are terse."}
    assert [d["function"]["name"] for d in first["tools"]] == ["big"]
    assert first["messages"][1]["content"] == (
        "hi\n\n" + RUNTIME_BLOCK_OPEN + "\n"
        'Current Time: "2025-01-31T09:30:00+01:00 (Friday)"\n'
        'Channel: "telegram"\nChat ID: "7"\nContext: "ticket: 42"\n' + RUNTIME_BLOCK_CLOSE
    )
    assert _session_lines(workspace, "explicit")[0]["_meta"] == {"time": fixed.isoformat()}


def test_max_iterations_must_be_positive(workspace: Path) -> None:
    """A runner that may never call the model is a programming error, caught at construction."""
    with (
        JsonlSessionStore(workspace).open() as opened,
        pytest.raises(ValueError, match="at least 1"),
    ):
        Runner(None, None, None, None, None, opened, max_iterations=0)  # type: ignore[arg-type]


def test_a_tool_call_record_names_argument_values_json_cannot_hold() -> None:
    """``run --json`` writes a call's arguments as a tool's own check returned them, naming
    by their type the values JSON cannot hold, where it raised TypeError."""
    from pathlib import PurePosixPath

    from nanobot_core._json_boundary import dumps
    from nanobot_core.runner import ToolCallRecord

    arguments = {"path": PurePosixPath("a"), "tags": {"x"}, "n": 1}
    record = ToolCallRecord(1, "c1", "where", arguments, False, 0.1, [])
    written = json.loads(dumps(record.to_json()))
    assert written["arguments"] == {"path": "<a PurePosixPath>", "tags": "<a set>", "n": 1}
    assert record.arguments is arguments  # the record itself keeps them as they are
