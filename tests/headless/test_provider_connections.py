"""The built-in provider keeps its connection from call to call, and closes it with its loop."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanobot_core.config import Config
from nanobot_core.errors import ProviderError
from nanobot_core.jsonl_store import JsonlSessionStore
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.providers import OpenAIProvider, ProviderReply, RetryNotice
from nanobot_core.runner import Runner
from nanobot_core.testing_http import (
    LoopbackRequest,
    LoopbackResponse,
    LoopbackServer,
    counting_ca_loads,
)
from tests.headless.conftest import provider_config
from tests.headless.fake_server import FakeChatServer, Reply, text_reply, tool_call_reply

MESSAGES = [{"role": "user", "content": "hi"}]


def _until(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    """Whether `condition()` holds within `seconds` (the server sees a close a moment later)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _provider(server: FakeChatServer, notices: list[RetryNotice] | None = None) -> OpenAIProvider:
    sink = notices.append if notices is not None else None
    return OpenAIProvider(provider_config(server.base_url), progress=sink)


def _reading_rounds(count: int) -> list[Reply]:
    """`count` rounds that each read a file, then an answer."""
    calls = [
        tool_call_reply([(f"call_{n}", "read_file", '{"path": "notes.txt"}')]) for n in range(count)
    ]
    return [*calls, text_reply("done")]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace with one file to read."""
    (tmp_path / "notes.txt").write_text("a note\n", encoding="utf-8")
    return tmp_path


def _runner(workspace: Path, server: FakeChatServer, session: Any) -> Runner:
    config = Config()
    config.provider = provider_config(server.base_url)
    manager = PluginManager(config, workspace=workspace, autoload=False).load()
    return Runner.from_plugins(manager, session=session)


@pytest.fixture
def resource_warnings() -> Iterator[list[warnings.WarningMessage]]:
    """The ResourceWarnings (an unclosed socket or transport) raised while the test runs."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        yield caught
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_a_turn_of_several_model_calls_opens_one_connection_and_closes_it_at_its_end(
    workspace: Path, server: FakeChatServer, resource_warnings: list[warnings.WarningMessage]
) -> None:
    """Four model calls of one turn go over one connection, closed when `run_turn` returns."""
    server.add(*_reading_rounds(3))
    with JsonlSessionStore(workspace).open("default") as session:
        result = _runner(workspace, server, session).run_turn("read it")
    assert result.answer == "done" and result.iterations == 4
    assert len(server.requests) == 4
    assert server.connections == 1
    assert _until(lambda: server.open_connections == 0)


def test_an_async_host_keeps_one_connection_over_turns_until_the_runner_is_closed(
    workspace: Path, server: FakeChatServer, resource_warnings: list[warnings.WarningMessage]
) -> None:
    """Turns awaited on one loop share a connection; `Runner.aclose` closes it there and then."""
    server.add(*_reading_rounds(1), text_reply("second"))

    async def host() -> tuple[list[str], int]:
        with JsonlSessionStore(workspace).open("default") as session:
            runner = _runner(workspace, server, session)
            answers = [(await runner.run_turn_async(text)).answer for text in ("one", "two")]
            await runner.aclose()
            deadline = time.monotonic() + 5
            while server.open_connections and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            return answers, server.open_connections

    answers, still_open = asyncio.run(host())
    assert answers == ["done", "second"]
    assert server.connections == 1
    assert still_open == 0


def test_a_provider_closed_goes_on_working_over_a_new_connection(server: FakeChatServer) -> None:
    """After `aclose` the next call opens a connection again and succeeds."""
    server.add(text_reply("one"), text_reply("two"))
    provider = _provider(server)

    async def calls() -> list[str]:
        first = await provider.complete(MESSAGES, [])
        await provider.aclose()
        await provider.aclose()  # twice, or with nothing open: nothing to do
        second = await provider.complete(MESSAGES, [])
        return [first.content, second.content]

    assert asyncio.run(calls()) == ["one", "two"]
    assert server.connections == 2


def test_a_connection_the_server_dropped_between_calls_is_replaced_without_a_retry(
    server: FakeChatServer, resource_warnings: list[warnings.WarningMessage]
) -> None:
    """A kept connection the server closed (its keep-alive timeout) is not an error: the
    next call opens a new one, with no retry and no retry notice."""
    server.add(text_reply("one"), text_reply("two"), text_reply("three"))
    notices: list[RetryNotice] = []
    provider = _provider(server, notices)

    async def calls() -> list[str]:
        answers = [(await provider.complete(MESSAGES, [])).content]
        for _ in range(2):
            assert server.drop_connections() == 1
            while server.open_connections:
                await asyncio.sleep(0.01)
            answers.append((await provider.complete(MESSAGES, [])).content)
        return answers

    assert asyncio.run(calls()) == ["one", "two", "three"]
    assert notices == []
    assert len(server.requests) == 3 and server.connections == 3


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.sampled_from(["call", "drop"]), min_size=1, max_size=8))
def test_any_order_of_calls_and_dropped_connections_ends_every_call_with_its_answer(
    steps: list[str],
) -> None:
    """Whatever the server drops between calls, each call gets its own answer, unretried,
    and a new connection is opened only for a call after a drop."""
    with FakeChatServer() as server:
        server.add(*(text_reply(f"answer {n}") for n in range(steps.count("call"))))
        notices: list[RetryNotice] = []
        provider = _provider(server, notices)
        expected_connections = 0

        async def run() -> list[str]:
            nonlocal expected_connections
            answers: list[str] = []
            kept = False
            for step in steps:
                if step == "drop":
                    kept = kept and server.drop_connections() != 1
                    while server.open_connections:
                        await asyncio.sleep(0.01)
                    continue
                answers.append((await provider.complete(MESSAGES, [])).content)
                expected_connections += 0 if kept else 1
                kept = True
            return answers

        answers = asyncio.run(run())
    assert answers == [f"answer {n}" for n in range(steps.count("call"))]
    assert notices == []
    assert server.connections == expected_connections


def _echo_server(together: threading.Barrier) -> LoopbackServer:
    """A server that answers each request with its user text, once `together` is full."""

    def answer(request: LoopbackRequest) -> LoopbackResponse:
        together.wait()
        text = request.json["messages"][-1]["content"]
        message = {"role": "assistant", "content": f"echo {text}"}
        return LoopbackResponse(
            200, {"choices": [{"message": message, "finish_reason": "stop"}], "model": "m"}
        )

    return LoopbackServer(answer)


def _asking(provider: OpenAIProvider, text: str) -> Any:
    return provider.complete([{"role": "user", "content": text}], [])


def test_calls_at_once_on_one_loop_each_get_a_connection_and_their_own_answer() -> None:
    """Three calls in flight at once on one loop are never queued on one connection: the
    server holds each answer until all three have arrived, and each gets its own."""
    together = threading.Barrier(3, timeout=10)
    with _echo_server(together) as server:
        provider = OpenAIProvider(provider_config(server.url, max_retries=0))

        async def at_once() -> list[ProviderReply]:
            return list(await asyncio.gather(*(_asking(provider, t) for t in "abc")))

        replies = asyncio.run(at_once())
        assert [r.content for r in replies] == ["echo a", "echo b", "echo c"]
        assert server.connections == 3
        assert _until(lambda: server.open_connections == 0)


def test_one_provider_called_from_two_threads_keeps_a_connection_per_loop() -> None:
    """A provider called at once from two threads (each its own loop) shares no connection
    between them; each loop's is closed when that loop ends."""
    together = threading.Barrier(2, timeout=10)
    with _echo_server(together) as server:
        provider = OpenAIProvider(provider_config(server.url, max_retries=0))
        answers: dict[str, list[str]] = {}

        def session(name: str) -> None:
            async def two_calls() -> list[str]:
                return [(await _asking(provider, f"{name}{n}")).content for n in range(2)]

            answers[name] = asyncio.run(two_calls())

        threads = [threading.Thread(target=session, args=(name,)) for name in ("x", "y")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert answers == {"x": ["echo x0", "echo x1"], "y": ["echo y0", "echo y1"]}
        assert server.connections == 2
        assert _until(lambda: server.open_connections == 0)


def test_an_attempt_cut_off_at_the_timeout_leaves_no_broken_connection_behind() -> None:
    """An attempt cut off mid-reply is retried as before, and the calls after it are
    answered at once on a sound connection."""
    replies = iter(
        [
            LoopbackResponse(200, {"choices": [{"message": {"content": "slow"}}]}, pace=0.05),
            LoopbackResponse(200, {"choices": [{"message": {"content": "retried"}}]}),
            LoopbackResponse(200, {"choices": [{"message": {"content": "next"}}]}),
        ]
    )
    with LoopbackServer(lambda request: next(replies)) as server:
        notices: list[RetryNotice] = []
        provider = OpenAIProvider(
            provider_config(server.url, timeout=0.5, max_retries=1), progress=notices.append
        )

        async def calls() -> list[str]:
            return [(await provider.complete(MESSAGES, [])).content for _ in range(2)]

        assert asyncio.run(calls()) == ["retried", "next"]
        assert [n.reason for n in notices] == [
            "timed out after 0.5s (no complete reply in that time)"
        ]
        assert server.connections == 2  # the one cut off is closed, not used again


def test_the_ca_certificates_are_loaded_once_not_for_every_call(server: FakeChatServer) -> None:
    """Calls on new loops and new providers reuse one SSL context: the CA certificates
    (tens of milliseconds of CPU to load) are read at most once in the process."""
    server.add(*(text_reply(str(n)) for n in range(4)))
    with counting_ca_loads() as loaded:
        for _ in range(2):
            provider = _provider(server)
            for _ in range(2):
                asyncio.run(provider.complete(MESSAGES, []))
    assert len(server.requests) == 4
    assert len(loaded) <= 1


class _ClosingProvider:
    """A provider of a plugin whose `aclose` fails."""

    name = "closing"

    async def complete(self, messages: Any, tools: Any) -> ProviderReply:
        raise AssertionError("not called")

    async def aclose(self) -> None:
        raise OSError("socket already gone")


def _bare_runner(provider: Any, workspace: Path, session: Any) -> Runner:
    manager = PluginManager(Config(), workspace=workspace, autoload=False).load()
    return Runner(
        provider,
        manager.tool_registry(),
        manager.tool_registry(),  # type: ignore[arg-type]  # never run: no turn is taken
        manager.governor(),
        manager.prompt_builder(),
        session,
        provider_owner="plugin 'closing' from closing 1.0",
    )


def test_closing_a_runner_whose_provider_has_no_aclose_does_nothing(workspace: Path) -> None:
    """`Runner.aclose` leaves a provider without ``aclose`` (most plugins' so far) alone."""

    class Plain:
        name = "plain"

        async def complete(self, messages: Any, tools: Any) -> ProviderReply:
            raise AssertionError("not called")

    with JsonlSessionStore(workspace).open("default") as session:
        asyncio.run(_bare_runner(Plain(), workspace, session).aclose())


def test_an_aclose_that_raises_is_a_provider_error_naming_the_plugin(workspace: Path) -> None:
    """What a provider's ``aclose`` raises reaches the host as a ProviderError naming it."""
    with JsonlSessionStore(workspace).open("default") as session:
        runner = _bare_runner(_ClosingProvider(), workspace, session)
        with pytest.raises(ProviderError) as caught:
            asyncio.run(runner.aclose())
    assert str(caught.value) == (
        "provider 'closing' of plugin 'closing' from closing 1.0 raised "
        "OSError: socket already gone"
    )


def test_a_transport_given_carries_every_call_and_is_closed_with_the_loop(
    server: FakeChatServer, resource_warnings: list[warnings.WarningMessage]
) -> None:
    """The `transport` argument still replaces httpx's own: the calls of a loop go through
    it (one connection of its pool), and it is closed when the loop ends."""
    import httpx

    server.add(*(text_reply(str(n)) for n in range(3)))
    transport = httpx.AsyncHTTPTransport()
    provider = OpenAIProvider(provider_config(server.base_url), transport=transport)

    async def calls() -> list[str]:
        return [(await provider.complete(MESSAGES, [])).content for _ in range(3)]

    assert asyncio.run(calls()) == ["0", "1", "2"]
    assert server.connections == 1
    assert _until(lambda: server.open_connections == 0)
