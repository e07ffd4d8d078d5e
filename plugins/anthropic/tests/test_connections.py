"""The provider keeps its connection from call to call, and closes it with its event loop."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import config_for, retry_sink
from messages_server import MessagesServer, text_reply
from nanobot_core.providers import RetryNotice

from nanobot_anthropic.provider import AnthropicProvider

MESSAGES = [{"role": "user", "content": "hi"}]


def _provider(
    server: MessagesServer, notices: list[RetryNotice] | None = None
) -> AnthropicProvider:
    return AnthropicProvider(config_for(server), progress=retry_sink(notices), environ={})


def _closed_soon(server: MessagesServer) -> bool:
    """Whether the server sees every connection closed within a few seconds."""
    deadline = time.monotonic() + 5
    while server.open_connections and time.monotonic() < deadline:
        time.sleep(0.01)
    return server.open_connections == 0


@pytest.fixture
def resource_warnings() -> Iterator[None]:
    """Fail the test on any ResourceWarning (an unclosed socket or transport) it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        yield
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_several_calls_on_one_loop_share_one_connection_closed_with_the_loop(
    server: MessagesServer, resource_warnings: None
) -> None:
    """Three calls of one turn (one event loop) open one connection, closed when it ends."""
    server.add(*(text_reply(f"answer {n}") for n in range(3)))
    provider = _provider(server)

    async def turn() -> list[str]:
        return [(await provider.complete(MESSAGES, [])).content for _ in range(3)]

    assert asyncio.run(turn()) == ["answer 0", "answer 1", "answer 2"]
    assert server.connections == 1
    assert _closed_soon(server)


def test_aclose_closes_the_connection_and_the_next_call_opens_another(
    server: MessagesServer, resource_warnings: None
) -> None:
    """`aclose` closes the kept connection at once; the provider goes on working after."""
    server.add(text_reply("one"), text_reply("two"))
    provider = _provider(server)

    async def calls() -> tuple[list[str], int]:
        first = (await provider.complete(MESSAGES, [])).content
        await provider.aclose()
        deadline = time.monotonic() + 5
        while server.open_connections and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        left = server.open_connections
        return [first, (await provider.complete(MESSAGES, [])).content], left

    answers, left_after_close = asyncio.run(calls())
    assert answers == ["one", "two"]
    assert left_after_close == 0
    assert server.connections == 2


def test_a_connection_the_server_dropped_is_replaced_without_a_retry(
    server: MessagesServer, resource_warnings: None
) -> None:
    """A kept connection closed by the server between calls costs no retry and no error."""
    server.add(text_reply("one"), text_reply("two"))
    notices: list[RetryNotice] = []
    provider = _provider(server, notices)

    async def calls() -> list[str]:
        first = (await provider.complete(MESSAGES, [])).content
        assert server.drop_connections() == 1
        while server.open_connections:
            await asyncio.sleep(0.01)
        return [first, (await provider.complete(MESSAGES, [])).content]

    assert asyncio.run(calls()) == ["one", "two"]
    assert notices == [] and len(server.requests) == 2
    assert server.connections == 2


def test_two_threads_calling_one_provider_each_use_a_connection_of_their_own(
    server: MessagesServer, resource_warnings: None
) -> None:
    """Calls from two threads (two event loops) never share a connection."""
    server.add(*(text_reply("ok") for _ in range(4)))
    provider = _provider(server)
    done: list[Any] = []

    def session() -> None:
        async def two() -> list[str]:
            return [(await provider.complete(MESSAGES, [])).content for _ in range(2)]

        done.append(asyncio.run(two()))

    threads = [threading.Thread(target=session) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert done == [["ok", "ok"], ["ok", "ok"]]
    assert server.connections == 2
    assert _closed_soon(server)
