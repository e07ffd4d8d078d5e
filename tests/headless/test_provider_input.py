"""What the runner hands a provider: copies, unless it declares it only reads them.

Governance hands back the session's own messages where it changed nothing, and keeps
what it made for the next call; a provider that edits what it is given must change
neither a later request, nor the session, nor the tool registry.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanobot_core.config import ProviderConfig
from nanobot_core.hookspecs import hookimpl
from nanobot_core.kernel.context import PluginContext
from nanobot_core.providers import OpenAIProvider, ProviderReply
from nanobot_core.runner import Runner
from tests.headless.conftest import provider_config
from tests.headless.fake_server import FakeChatServer, text_reply, tool_call_reply
from tests.headless.test_runner import NOTES, Harness, _session_records, big

MUTATED = "MUTATED-BY-THE-PROVIDER"


@pytest.fixture
def harness(tmp_path: Path, server: FakeChatServer) -> Harness:
    """A runner factory over real parts for a workspace with a notes file, aimed at the server."""
    (tmp_path / "notes.txt").write_text(NOTES, encoding="utf-8")
    return Harness(tmp_path, server)


class _Recording:
    """A provider of a plugin: sends through the built-in one, and keeps what it was handed."""

    name = "recording"

    def __init__(self, config: ProviderConfig, progress: Any = None) -> None:
        self.inner = OpenAIProvider(config, progress=progress)
        self.handed: list[list[Any]] = []

    async def complete(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> ProviderReply:
        self.handed.append(list(messages))
        return await self.inner.complete(messages, tools)


class _Vandal(_Recording):
    """Sends the request, then changes every message and tool definition it was handed."""

    name = "vandal"

    async def complete(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> ProviderReply:
        reply = await super().complete(messages, tools)
        for message in messages:
            assert isinstance(message, dict)
            message["content"] = MUTATED
            message[MUTATED] = True
            for call in message.get("tool_calls") or []:
                call["id"] = MUTATED
                call.setdefault("function", {})["arguments"] = MUTATED
            if "tool_calls" in message:
                message["tool_calls"].append({"id": MUTATED})
        for definition in tools:
            assert isinstance(definition, dict)
            definition["function"]["description"] = MUTATED
            definition["function"].setdefault("parameters", {})["properties"] = {}
        return reply


class _Declaring(_Recording):
    """Reads what it is handed and says so."""

    name = "declaring"
    leaves_input_unchanged = True


class _ProviderPlugin:
    """Contributes `provider`, and keeps each one it makes."""

    def __init__(self, provider: type[_Recording]) -> None:
        self.provider = provider
        self.name = provider.name
        self.made: list[_Recording] = []

    def __call__(self, config: ProviderConfig, *, progress: Any = None) -> _Recording:
        made = self.provider(config, progress)
        self.made.append(made)
        return made

    @hookimpl
    def nanobot_providers(self, ctx: PluginContext) -> list[Any]:
        return [self]


def _turn(harness: Harness, plugin: _ProviderPlugin, text: str) -> None:
    manager = harness.manager()
    manager.register(plugin, f"{plugin.provider.name}-plugin", distribution="p", version="1.0")
    with harness.open() as opened:
        Runner.from_plugins(manager, plugin.provider.name, session=opened).run_turn(text)


def test_a_provider_that_changes_what_it_is_handed_changes_no_later_request_nor_the_session(
    harness: Harness, server: FakeChatServer
) -> None:
    """Each request starts with the one before, and neither it nor the file holds what it wrote."""
    harness.config.governance.max_tool_result_chars = 2_000  # the big result is offloaded
    server.add(
        tool_call_reply([("b1", "big", '{"lines": 3000}')]),
        tool_call_reply([("r1", "read_file", '{"path": "notes.txt"}')]),
        text_reply("first answer"),
        text_reply("second answer"),
    )
    plugin = _ProviderPlugin(_Vandal)
    _turn(harness, plugin, "make it big")
    _turn(harness, plugin, "again")

    bodies = server.bodies()
    assert len(bodies) == 4
    for earlier, later in itertools.pairwise(bodies):
        assert later["messages"][: len(earlier["messages"])] == earlier["messages"]
        assert later["tools"] == bodies[0]["tools"]
    assert MUTATED not in json.dumps(bodies)
    offloaded = [m for m in bodies[1]["messages"] if m.get("tool_call_id") == "b1"]
    assert len(offloaded) == 1 and len(offloaded[0]["content"]) < len(big(lines=3000))
    stored = _session_records(harness.workspace, "default")
    assert MUTATED not in json.dumps(stored)
    messages = [r for r in stored if set(r) != {"_meta"}]
    assert [m["role"] for m in messages] == [
        *("user", "assistant", "tool", "assistant", "tool", "assistant"),
        *("user", "assistant"),
    ]
    assert messages[2]["content"] == big(lines=3000)
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == '{"lines": 3000}'


def test_a_provider_that_declares_it_leaves_its_input_unchanged_is_handed_the_same_objects(
    harness: Harness, server: FakeChatServer
) -> None:
    """Declared, the session's messages come again call after call; undeclared, fresh copies."""
    for provider in (_Declaring, _Recording):
        server.add(tool_call_reply([(f"{provider.name}1", "read_file", '{"path": "notes.txt"}')]))
        server.add(text_reply("done"))
        plugin = _ProviderPlugin(provider)
        _turn(harness, plugin, f"read it ({provider.name})")
        first, second = plugin.made[0].handed
        assert second[: len(first)] == first
        same = [a is b for a, b in zip(first[1:], second[1:], strict=False)]  # past the system
        assert all(same) if provider is _Declaring else not any(same)


_SENT = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "tool"]), "content": st.text(max_size=10)},
        optional={
            "tool_call_id": st.text(min_size=1, max_size=60),
            "tool_calls": st.lists(
                st.fixed_dictionaries(
                    {
                        "id": st.text(min_size=1, max_size=60),
                        "type": st.just("function"),
                        "function": st.fixed_dictionaries(
                            {"name": st.just("f"), "arguments": st.text(max_size=10)}
                        ),
                    }
                ),
                max_size=2,
            ),
        },
    ),
    max_size=4,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(messages=_SENT)
def test_the_built_in_provider_leaves_what_it_is_handed_unchanged(
    server: FakeChatServer, messages: list[dict[str, Any]]
) -> None:
    """It declares so, and keeps to it: call ids of any length, tools, all as they were."""
    assert OpenAIProvider.leaves_input_unchanged is True
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    expected = copy.deepcopy((messages, tools))
    server.add(text_reply("ok"))
    asyncio.run(OpenAIProvider(provider_config(server.base_url)).complete(messages, tools))
    assert (messages, tools) == expected


class _EditingSubclass(OpenAIProvider):
    """A subclass of the built-in provider that edits what it was handed once it is sent."""

    name = "editing-subclass"

    def __init__(self, config: ProviderConfig, progress: Any = None) -> None:
        super().__init__(config, progress=progress)

    async def complete(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> ProviderReply:
        reply = await super().complete(messages, tools)
        for message in messages:
            assert isinstance(message, dict)
            message["content"] = MUTATED
        return reply


def test_a_subclass_of_a_declaring_provider_is_handed_copies_unless_it_declares_it_too(
    harness: Harness, server: FakeChatServer
) -> None:
    """The declaration is not inherited: a subclass's edits reach no later request."""
    server.add(
        tool_call_reply([("r1", "read_file", '{"path": "notes.txt"}')]),
        text_reply("done"),
    )
    plugin = _ProviderPlugin(_EditingSubclass)  # type: ignore[arg-type]
    _turn(harness, plugin, "read it")
    bodies = server.bodies()
    assert len(bodies) == 2
    assert bodies[1]["messages"][: len(bodies[0]["messages"])] == bodies[0]["messages"]
    assert MUTATED not in json.dumps(bodies)
    assert MUTATED not in json.dumps(_session_records(harness.workspace, "default"))
