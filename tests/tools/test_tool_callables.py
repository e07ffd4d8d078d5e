"""`@tool` over the callables a program has besides plain functions: partials, bound methods,
callable objects; a generator function, which cannot be a tool, refused when decorated; and
what a registry or an executor is handed by mistake, refused saying what it takes."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nanobot_core.testing import assert_tool_contract, run_tool
from nanobot_core.tools._function import tool
from nanobot_core.tools.base import Tool
from nanobot_core.tools.executor import Executor, ToolCallRequest, run_calls
from nanobot_core.tools.registry import ToolRegistry


def power(base: int, exp: int) -> int:
    """Raise a number to a power.

    Args:
        base: The number.
        exp: The power.
    """
    return int(base**exp)


class Search:
    """An index of words (the class's docstring is not the tool's)."""

    def __init__(self, words: list[str]) -> None:
        self.words = words

    async def __call__(self, query: str, limit: int = 2) -> str:
        """Find the words holding a text.

        Args:
            query: The text to find.
            limit: The most words to return.
        """
        await asyncio.sleep(0)
        return " ".join([w for w in self.words if query in w][:limit])

    def count(self, query: str) -> int:
        """Count the words holding a text.

        Args:
            query: The text to find.
        """
        return sum(query in w for w in self.words)


def test_a_partial_is_a_tool_of_its_function_without_the_bound_keywords() -> None:
    """A partial takes its function's name, docstring and hints; what it binds is not offered."""
    squared = tool(functools.partial(power, exp=2))
    assert_tool_contract(squared)
    assert (squared.name, squared.description) == ("power", "Raise a number to a power.")
    assert squared.parameters["properties"] == {
        "base": {"type": "integer", "description": "The number."}
    }
    assert run_tool(squared, '{"base": "3"}') == "9"
    assert run_tool(squared, {"base": 3, "exp": 5}).is_error  # the model cannot rebind it


def test_a_bound_method_is_a_tool_without_self() -> None:
    """A bound method runs on its object, `self` not among the parameters."""
    count = tool(Search(["apple", "apricot", "banana"]).count)
    assert list(count.parameters["properties"]) == ["query"]
    assert run_tool(count, {"query": "ap"}) == "2"


def test_a_callable_object_is_a_tool_of_its_call_method_given_a_name() -> None:
    """An object with an async `__call__` is awaited on the loop, with that method's docstring."""
    search = tool(name="search", read_only=True)(Search(["apple", "apricot", "banana"]))
    assert_tool_contract(search)
    assert search.description == "Find the words holding a text."
    assert not search.blocking
    assert run_tool(search, {"query": "ap", "limit": 1}) == "apple"


def test_a_callable_object_without_a_name_is_refused_saying_to_give_one() -> None:
    """An object has no name of its own (its class names a kind of thing): the error says so."""
    with pytest.raises(TypeError, match=r"Search object has no name of its own: give one"):
        tool(Search([]))


async def _words(n: int) -> AsyncIterator[str]:
    """Yield words.

    Args:
        n: How many.
    """
    for _ in range(n):
        yield "word"


def _numbers(n: int) -> Iterator[int]:
    """Yield numbers.

    Args:
        n: How many.
    """
    yield from range(n)


@pytest.mark.parametrize("function", [_words, _numbers])
def test_a_generator_function_is_refused_when_decorated(function: object) -> None:
    """A generator's result cannot be a tool's: refused at once, not as an error at each call."""
    with pytest.raises(TypeError, match=r"is a generator function: a tool returns its whole"):
        tool(function)  # type: ignore[call-overload]


def test_what_is_no_tool_is_refused_by_the_registry_saying_how_to_make_one() -> None:
    """A function, a Tool class or a number added to a registry: the error says what to do."""
    registry = ToolRegistry()
    with pytest.raises(TypeError, match=r"got function 'power': make it a tool with @nanobot_core"):
        registry.add(power)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"got the class Echo: add an instance, Echo\(\)"):
        registry.add(type("Echo", (Tool,), {}))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"expected a Tool, got int$"):
        registry.add(3)  # type: ignore[arg-type]


@given(st.integers(-20, 20), st.integers(0, 5))
def test_a_partial_tool_answers_what_its_function_answers(base: int, exp: int) -> None:
    """Whatever the model sends as the free argument, the partial's bound one is used."""
    bound = tool(functools.partial(power, exp=exp))
    assert run_tool(bound, {"base": base}) == str(power(base, exp))


def test_the_executor_refuses_calls_that_are_no_tool_call_requests() -> None:
    """A prepared call or a dict handed to `Executor.run` is a TypeError saying what it takes."""
    registry = ToolRegistry()
    registry.add(tool(functools.partial(power, exp=2)))
    executor = Executor(registry, default_timeout=5)
    prepared = registry.prepare_call("power", {"base": 2})
    for wrong, kind in ((prepared, "PreparedCall"), ({"name": "power"}, "dict")):
        with pytest.raises(TypeError, match=rf"calls\[0\] is a {kind}, not a ToolCallRequest"):
            run_calls(executor.run([wrong]))  # type: ignore[list-item]
    (outcome,) = run_calls(executor.run([ToolCallRequest("c1", "power", {"base": 2})]))
    assert outcome.result == "4"


@pytest.mark.parametrize("timeout", ["5", 0, -1, float("nan"), True, None])
def test_an_executor_timeout_that_is_no_number_of_seconds_is_refused_when_built(
    timeout: object,
) -> None:
    """A timeout of no use fails when the executor is built, not inside asyncio at a call."""
    with pytest.raises(ValueError, match=r"Executor: default_timeout is .*, expected a positive"):
        Executor(ToolRegistry(), default_timeout=timeout)  # type: ignore[arg-type]


def test_the_executor_runs_calls_given_as_a_generator() -> None:
    """Calls handed as a generator are all run, though the executor reads them twice."""
    registry = ToolRegistry()
    registry.add(tool(functools.partial(power, exp=2)))
    executor = Executor(registry, default_timeout=5)
    calls = (ToolCallRequest(f"c{n}", "power", {"base": n}) for n in range(3))
    assert [o.result for o in run_calls(executor.run(calls))] == ["0", "1", "4"]  # type: ignore[arg-type]


def test_a_lambda_is_asked_for_a_name() -> None:
    """A lambda has no name a tool can take: the error asks for one, and one given works."""
    with pytest.raises(TypeError, match=r"<lambda> has no name of its own: give one"):
        tool(lambda text: text)
    made = tool(name="echo")(lambda text: text)
    assert made.name == "echo"
