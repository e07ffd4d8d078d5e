"""The executor: batching, exclusivity, order, error results, timeouts, and tool-call hooks."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import textwrap
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from nanobot_core import Tool, ToolResult, hookimpl, tool
from nanobot_core.kernel.context import ToolCallEvent
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.kernel.records import PluginInfo
from nanobot_core.tools.executor import (
    ERROR_HINT,
    Executor,
    ToolCallOutcome,
    ToolCallRequest,
    run_calls,
)
from nanobot_core.tools.registry import ToolRegistry, parse_arguments
from tests.helpers import REPO_ROOT, ReprRaises, plugin_values, run_python
from tests.tools.support import run

Body = Callable[..., Awaitable[Any]]


class FakeTool(Tool):
    """A tool whose behaviour is an async function given by the test."""

    def __init__(
        self,
        name: str,
        body: Body,
        *,
        read_only: bool = True,
        exclusive: bool = False,
        timeout: float | None = None,
    ) -> None:
        self._name = name
        self._body = body
        self.read_only = read_only
        self.exclusive = exclusive
        self.timeout = timeout

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._name

    @property
    def parameters(self) -> dict[str, Any]:
        return {"type": "object"}

    async def execute(self, **kwargs: Any) -> Any:
        return await self._body(**kwargs)


class Journal:
    """Records when tools start and end, and how many run at once."""

    def __init__(self) -> None:
        self.entries: list[str] = []
        self.active = 0
        self.peak_seen_by: dict[str, int] = {}

    def tool(self, name: str, **flags: Any) -> FakeTool:
        async def body(**kwargs: Any) -> str:
            self.entries.append(f"start {name}")
            self.active += 1
            self.peak_seen_by[name] = self.active
            for _step in range(5):  # yield so that anything running alongside gets to start
                await asyncio.sleep(0)
                self.peak_seen_by[name] = max(self.peak_seen_by[name], self.active)
            self.active -= 1
            self.entries.append(f"end {name}")
            return name

        return FakeTool(name, body, **flags)


def _executor(*tools: Tool, timeout: float = 5.0, hooks: Any = None) -> Executor:
    registry = ToolRegistry()
    for item in tools:
        registry.add(item)
    return Executor(registry, default_timeout=timeout, hooks=hooks)


def _calls(*names: str) -> list[ToolCallRequest]:
    return [ToolCallRequest(f"id-{i}", name, {}) for i, name in enumerate(names)]


# -- batching -------------------------------------------------------------------------------


def test_concurrency_safe_calls_run_together() -> None:
    """Two read-only tools that each wait for the other finish: they ran at the same time."""
    ping_ready, pong_ready = asyncio.Event(), asyncio.Event()

    async def ping() -> str:
        ping_ready.set()
        await pong_ready.wait()
        return "ping"

    async def pong() -> str:
        pong_ready.set()
        await ping_ready.wait()
        return "pong"

    executor = _executor(FakeTool("ping", ping), FakeTool("pong", pong))
    outcomes = run(executor.run(_calls("ping", "pong")))
    assert [str(o.result) for o in outcomes] == ["ping", "pong"]


def test_unsafe_call_runs_alone_between_batches() -> None:
    """A call that is not concurrency-safe waits for the batch before it and blocks the next."""
    journal = Journal()
    tools = [journal.tool(n) for n in ("r1", "r2", "r3", "r4")]
    writer = journal.tool("w", read_only=False)
    run(_executor(*tools, writer).run(_calls("r1", "r2", "w", "r3", "r4")))
    entries = journal.entries
    assert set(entries[:2]) == {"start r1", "start r2"}  # r1 and r2 overlapped
    assert entries[4:6] == ["start w", "end w"]  # w alone, after r1 and r2 ended
    assert set(entries[6:8]) == {"start r3", "start r4"}
    assert journal.peak_seen_by["w"] == 1
    assert journal.peak_seen_by["r1"] == 2 and journal.peak_seen_by["r3"] == 2


def test_exclusive_tool_runs_alone_even_if_marked_concurrency_safe() -> None:
    """An exclusive tool never overlaps another call, whatever concurrency_safe says."""

    class Exclusive(FakeTool):
        concurrency_safe = True

    journal = Journal()
    inner = journal.tool("x")
    exclusive = Exclusive("x", inner._body, exclusive=True)
    tools = [journal.tool("a"), exclusive, journal.tool("b")]
    run(_executor(*tools).run(_calls("a", "x", "b")))
    assert journal.entries == ["start a", "end a", "start x", "end x", "start b", "end b"]
    assert journal.peak_seen_by == {"a": 1, "x": 1, "b": 1}


def test_exclusive_tool_that_fails_when_not_alone_succeeds() -> None:
    """A tool that raises if anything else is running never sees company."""
    running = 0

    async def lonely() -> str:
        nonlocal running
        if running:
            raise RuntimeError("not alone")
        running += 1
        await asyncio.sleep(0)
        running -= 1
        return "alone"

    async def busy() -> str:
        nonlocal running
        running += 1
        for _ in range(3):
            await asyncio.sleep(0)
        running -= 1
        return "busy"

    tools = [FakeTool("busy", busy), FakeTool("lonely", lonely, exclusive=True)]
    outcomes = run(_executor(*tools).run(_calls("busy", "lonely", "busy", "lonely")))
    assert [str(o.result) for o in outcomes] == ["busy", "alone", "busy", "alone"]


def test_results_come_in_call_order() -> None:
    """Outcomes follow the call order even when a later call finishes first."""
    first_may_finish = asyncio.Event()

    async def slow() -> str:
        await first_may_finish.wait()
        return "slow"

    async def fast() -> str:
        first_may_finish.set()
        return "fast"

    executor = _executor(FakeTool("slow", slow), FakeTool("fast", fast))
    outcomes = run(executor.run(_calls("slow", "fast")))
    assert [(o.call_id, str(o.result)) for o in outcomes] == [("id-0", "slow"), ("id-1", "fast")]


# -- error results --------------------------------------------------------------------------


def _single(body: Body, **flags: Any) -> ToolCallOutcome:
    (outcome,) = run(_executor(FakeTool("t", body, **flags)).run(_calls("t")))
    return outcome


async def _raises() -> str:
    raise ValueError("bad input")


async def _cancels_itself() -> str:
    raise asyncio.CancelledError


class _Escape(BaseException):
    """Not an Exception, as some libraries' own escapes are."""


async def _raises_base_exception() -> str:
    raise _Escape("out of here")


async def _raises_generator_exit() -> str:
    raise GeneratorExit


async def _raises_system_exit() -> str:
    raise SystemExit(3)


async def _returns_object() -> object:
    return object()


async def _returns_error_text() -> str:
    return "Error: quota exceeded"


async def _returns_unprefixed_error() -> ToolResult:
    return ToolResult("quota exceeded", is_error=True)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (_raises, 'Error: tool "t" failed: ValueError: bad input'),
        (_cancels_itself, 'Error: tool "t" was cancelled before it finished.'),
        (
            _raises_base_exception,
            'Error: tool "t" failed: PluginEscapeError: raised _Escape: out of here',
        ),
        (_raises_generator_exit, 'Error: tool "t" failed: PluginEscapeError: raised GeneratorExit'),
        (_raises_system_exit, 'Error: tool "t" failed: PluginEscapeError: raised SystemExit(3)'),
        (_returns_object, 'Error: tool "t" returned an object, which cannot be turned into text'),
        (_returns_error_text, "Error: quota exceeded"),
        (_returns_unprefixed_error, "Error: quota exceeded"),
    ],
    ids=[
        "raises",
        "cancelled",
        "base-exception",
        "generator-exit",
        "system-exit",
        "unconvertible",
        "error-text",
        "unprefixed-error",
    ],
)
def test_failures_become_error_results_with_a_hint(body: Body, expected: str) -> None:
    """Raising (any BaseException), being cancelled, or returning garbage gives an Error result."""
    outcome = _single(body)
    assert outcome.result.is_error
    assert outcome.result.startswith(expected)
    assert outcome.result.endswith(ERROR_HINT)


def test_a_tool_that_returns_its_coroutine_unawaited_is_told_to_await_it() -> None:
    """``return self.helper()`` without await is an error saying so, and the coroutine is
    closed: Python's ``RuntimeWarning: coroutine ... was never awaited`` (with a traceback
    line and the interpreter's paths) went to stderr."""
    import gc
    import warnings

    async def helper() -> str:
        return "never run"

    async def forgets() -> Any:
        return helper()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcome = _single(forgets)
        gc.collect()
    assert outcome.result.startswith(
        'Error: tool "t" returned a coroutine instead of its result: its execute must await '
        "it (return await ...)"
    )
    assert [str(w.message) for w in caught if w.category is RuntimeWarning] == []


@pytest.mark.parametrize(
    ("escape", "said"),
    [
        (SystemExit(3), "raised SystemExit(3)"),
        (KeyboardInterrupt(), "raised KeyboardInterrupt"),
        (_Escape("out of here"), "raised _Escape: out of here"),
        (asyncio.CancelledError(), "raised CancelledError"),
    ],
    ids=["system-exit", "keyboard-interrupt", "base-exception", "cancelled-error"],
)
def test_a_sync_tool_escape_is_worded_as_an_async_one(escape: BaseException, said: str) -> None:
    """A sync tool's BaseException (run in its worker thread) reads like an async tool's."""

    @tool
    def quits() -> str:
        """Raises what the test gives."""
        raise escape

    (outcome,) = run(_executor(quits).run(_calls("quits")))
    assert outcome.result.is_error
    assert outcome.result.startswith(f'Error: tool "quits" failed: PluginEscapeError: {said}')


def test_run_in_daemon_thread_gives_an_escape_back_as_a_plugin_error() -> None:
    """A SystemExit in `run_in_daemon_thread` comes back as a PluginError of the one tree."""
    from nanobot_core import PluginError, run_in_daemon_thread

    def quits() -> None:
        raise SystemExit(3)

    with pytest.raises(PluginError, match=r"^raised SystemExit\(3\)$"):
        run(run_in_daemon_thread(quits))


class _FlagRaises(str):
    @property
    def is_error(self) -> bool:
        raise RuntimeError("flag unreadable")


class _FlagEscapes(str):
    @property
    def is_error(self) -> bool:
        raise _Escape("flag escaped")


class _ItemsRaise(dict[str, Any]):
    def items(self) -> Any:
        raise RuntimeError("items unreadable")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            _FlagRaises("text"),
            'Error: tool "t" returned a _FlagRaises that could not be read as a result: '
            "RuntimeError: flag unreadable",
        ),
        (
            _ItemsRaise(a=1),
            'Error: tool "t" returned a _ItemsRaise that could not be read as a result: '
            "RuntimeError: items unreadable",
        ),
        (
            _FlagEscapes("text"),
            'Error: tool "t" failed: PluginEscapeError: raised _Escape: flag escaped',
        ),
    ],
    ids=["raising-flag", "raising-dict", "escaping-flag"],
)
def test_a_return_value_that_raises_when_read_is_an_error_naming_the_tool(
    value: Any, expected: str
) -> None:
    """Reading what a tool returned runs its code too: a failure there is the tool's error."""

    async def returns() -> Any:
        return value

    outcome = _single(returns)
    assert outcome.is_error
    assert outcome.result.startswith(expected)
    assert outcome.result.endswith(ERROR_HINT)


def test_timeout_becomes_an_error_result() -> None:
    """A tool that overruns its own timeout is stopped and reported."""

    async def never() -> str:
        await asyncio.Event().wait()
        return "unreachable"

    outcome = _single(never, timeout=0.05)
    assert outcome.result.startswith('Error: tool "t" timed out after 0.05s')
    assert outcome.result.endswith(ERROR_HINT)


def test_default_timeout_applies_when_the_tool_has_none() -> None:
    """The executor's default timeout covers tools whose timeout is None."""

    async def never() -> str:
        await asyncio.Event().wait()
        return "unreachable"

    (outcome,) = run(_executor(FakeTool("t", never), timeout=0.05).run(_calls("t")))
    assert "timed out after 0.05s" in outcome.result


def test_invalid_call_is_an_error_outcome_without_running() -> None:
    """A call with invalid arguments returns the registry's error with the hint."""
    ran: list[int] = []

    @tool
    async def count(n: int) -> str:
        """Count."""
        ran.append(n)
        return "x"

    (outcome,) = run(_executor(count).run([ToolCallRequest("c", "count", '{"n": "many"}')]))
    assert outcome.result.startswith('Error: invalid arguments for tool "count": $.n')
    assert outcome.result.endswith(ERROR_HINT) and ran == []


class _Counts(Tool):
    """A tool taking a whole number ``n``, with an own check that counts its runs."""

    name = "counts"
    description = "Counts."
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
    }

    def __init__(self) -> None:
        self.checks = 0

    def validate_arguments(self, arguments: dict[str, Any]) -> Any:
        self.checks += 1
        n = arguments.get("n")
        return arguments, ([] if type(n) is int and n >= 0 else ["$.n: not a count"])

    async def execute(self, n: int) -> str:
        return "Error: odd" if n % 2 else "even"


_SENT_ARGUMENTS = st.one_of(
    st.text(max_size=30),
    st.builds(lambda n: f'{{"n": {n}}}', st.integers(-3, 3)),
    st.dictionaries(st.sampled_from(["n", "m"]), st.integers(-3, 3) | st.text(max_size=3)),
    st.none(),
)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(["counts", "count", ""]), sent=_SENT_ARGUMENTS)
def test_an_outcome_is_invalid_exactly_when_the_registry_refuses_the_call(
    name: str, sent: Any
) -> None:
    """Whatever a model sends, the outcome is invalid exactly when preparing the call refuses
    it, and the tool's own check has run once for the call."""
    counted = _Counts()
    executor = _executor(counted)
    (outcome,) = run(executor.run([ToolCallRequest("c", name, sent)]))
    checks = counted.checks
    refused = executor.registry.prepare_call(name, sent).error is not None
    assert outcome.invalid is refused
    assert outcome.is_error or not refused
    # The check sees every object the arguments are read as, once; nothing else runs it.
    read = name == "counts" and parse_arguments(sent).error is None
    assert checks == (1 if read else 0)


def test_a_call_the_tool_fails_or_a_hook_denies_is_not_invalid() -> None:
    """A tool's own error and a hook's denial are failures of a valid call, not invalid calls."""
    hooks = RecordingHooks(deny={"denied": "not today"})

    async def fine() -> str:
        return "fine"

    executor = _executor(_Counts(), FakeTool("denied", fine), hooks=hooks)
    odd, denied, good = run(
        executor.run(
            [
                ToolCallRequest("1", "counts", {"n": 3}),
                ToolCallRequest("2", "denied", {}),
                ToolCallRequest("3", "counts", {"n": 2}),
            ]
        )
    )
    assert [o.is_error for o in (odd, denied, good)] == [True, True, False]
    assert [o.invalid for o in (odd, denied, good)] == [False, False, False]


def test_caller_cancellation_propagates() -> None:
    """Cancelling the task that runs the executor cancels it; it is not turned into a result."""
    started = asyncio.Event()

    async def waits() -> str:
        started.set()
        await asyncio.Event().wait()
        return "unreachable"

    async def scenario() -> None:
        task = asyncio.create_task(_executor(FakeTool("t", waits)).run(_calls("t")))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(scenario())


def test_keyboard_interrupt_outside_plugin_code_still_stops_the_run() -> None:
    """Containment is for plugin code: a Ctrl-C landing in the core is not made a result."""

    class Interrupting:
        def before(self, call: ToolCallEvent) -> str | None:
            raise KeyboardInterrupt

        def after(self, call: ToolCallEvent, result: ToolResult) -> None:
            pass

    async def body() -> str:
        return "ran"

    with pytest.raises(KeyboardInterrupt):
        run(_executor(FakeTool("t", body), hooks=Interrupting()).run(_calls("t")))


def test_sync_tool_timeout_abandons_its_thread() -> None:
    """A sync tool past its timeout is reported, and its worker thread is left running."""
    release = threading.Event()
    entered = threading.Event()

    @tool(timeout=0.05)
    def stuck() -> str:
        """Block until released."""
        entered.set()
        release.wait(30)
        return "late"

    try:
        (outcome,) = run(_executor(stuck).run(_calls("stuck")))
        assert entered.is_set()
        assert "timed out" in outcome.result and "worker thread was abandoned" in outcome.result
        workers = [t for t in threading.enumerate() if t.name == "nanobot-tool-stuck"]
        assert len(workers) == 1 and workers[0].daemon and workers[0].is_alive()
    finally:
        release.set()
    for worker in [t for t in threading.enumerate() if t.name == "nanobot-tool-stuck"]:
        worker.join(5)


def test_abandoned_thread_does_not_block_interpreter_exit() -> None:
    """A process whose sync tool was abandoned still exits when its work is done."""
    script = textwrap.dedent(
        """
        import asyncio, threading
        from nanobot_core.tools import Executor, ToolRegistry, tool
        from nanobot_core.tools.executor import ToolCallRequest

        @tool(timeout=0.05)
        def stuck() -> str:
            '''Block forever.'''
            threading.Event().wait()
            return "never"

        registry = ToolRegistry()
        registry.add(stuck)
        executor = Executor(registry, default_timeout=1)
        (outcome,) = asyncio.run(executor.run([ToolCallRequest("1", "stuck", None)]))
        print("timed out" in outcome.result)
        """
    )
    completed = run_python(script, cwd=REPO_ROOT, check=True)
    assert completed.stdout.strip().splitlines()[-1] == "True"


# -- tools that do not stop ----------------------------------------------------------------

# How long the stubborn tools below would run: far longer than any bound the tests accept.
STUBBORN_SECONDS = 5.0

SLOW = PluginInfo("slow-plugin", "nanobot.plugins", "slow-dist", "1.2")
SLOW_NAMED = "plugin 'slow-plugin' from slow-dist 1.2"


async def _ignores_cancellation() -> str:
    """Run for STUBBORN_SECONDS, swallowing every cancellation on the way."""
    deadline = time.monotonic() + STUBBORN_SECONDS
    while time.monotonic() < deadline:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.01)
    return "finished anyway"


def test_tool_that_ignores_cancellation_is_reported_at_its_timeout() -> None:
    """A tool that swallows cancellation is abandoned: the model hears of the timeout at once."""
    started = time.monotonic()
    with capture_logs() as logs:
        (outcome,) = run_calls(
            _executor(FakeTool("t", _ignores_cancellation, timeout=0.2)).run(_calls("t"))
        )
    assert time.monotonic() - started < STUBBORN_SECONDS
    assert outcome.is_error
    assert outcome.result.startswith(
        'Error: tool "t" timed out after 0.2s and did not stop when cancelled: it was abandoned'
    )
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert any("ignored cancellation" in e["event"] and e["tool"] == "t" for e in warnings)


def test_abandoned_tool_names_its_plugin_and_is_kept_until_it_ends() -> None:
    """The warning names tool and plugin; the task is referenced while it runs, then let go."""
    from nanobot_core.tools import executor as module

    release = asyncio.Event()

    async def stubborn() -> str:
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await release.wait()
        return "late"

    registry = ToolRegistry()
    registry.add(FakeTool("t", stubborn, timeout=0.2), plugin=SLOW)
    executor = Executor(registry, default_timeout=5)

    async def scenario() -> tuple[int, int]:
        (outcome,) = await executor.run(_calls("t"))
        assert "abandoned" in outcome.result
        kept = len(module._ABANDONED)
        release.set()
        for _ in range(20):
            await asyncio.sleep(0)
        return kept, len(module._ABANDONED)

    with capture_logs() as logs:
        kept, left = run_calls(scenario())
    assert (kept, left) == (1, 0)
    (warning,) = [e for e in logs if "ignored cancellation" in e["event"]]
    assert (warning["tool"], warning["plugin"]) == ("t", SLOW_NAMED)


def test_threads_a_stopped_tool_left_are_logged_naming_its_plugin_and_version() -> None:
    """The warnings of a thread left working, at the timeout and at the loop's end, name both."""
    gate = threading.Event()

    async def blocked() -> str:
        await asyncio.to_thread(gate.wait, STUBBORN_SECONDS)
        return "late"

    registry = ToolRegistry()
    registry.add(FakeTool("stuck", blocked, timeout=0.2), plugin=SLOW)
    try:
        with capture_logs() as logs:
            (outcome,) = run_calls(Executor(registry, default_timeout=5).run(_calls("stuck")))
    finally:
        gate.set()
    assert "Its worker thread was abandoned" in outcome.result
    left = [e for e in logs if "thread" in e["event"] and e["log_level"] == "warning"]
    assert [(e["tool"], e["plugin"]) for e in left] == [("stuck", SLOW_NAMED)] * 2


def test_tool_that_cleans_up_when_cancelled_is_stopped_before_the_next_call() -> None:
    """A tool whose cancellation cleanup awaits is waited for, so exclusivity still holds."""
    journal: list[str] = []

    async def cooperative() -> str:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.05)  # e.g. waiting for a killed child process
            journal.append("cleaned up")
        return "unreachable"

    async def after() -> str:
        journal.append("next started")
        return "ok"

    tools = [FakeTool("slow", cooperative, timeout=0.2), FakeTool("next", after, read_only=False)]
    first, second = run_calls(_executor(*tools).run(_calls("slow", "next")))
    assert first.result.startswith('Error: tool "slow" timed out after 0.2s and was stopped.')
    assert second.result == "ok"
    assert journal == ["cleaned up", "next started"]


def test_exclusive_tool_next_to_an_abandoned_one_runs_with_a_warning() -> None:
    """One stuck tool does not disable the others; running beside it is logged, naming both."""
    ran: list[str] = []

    async def exclusive() -> str:
        ran.append("x")
        return "x done"

    tools = [
        FakeTool("stuck", _ignores_cancellation, timeout=0.2, read_only=False),
        FakeTool("x", exclusive, exclusive=True),
    ]
    with capture_logs() as logs:
        stuck, x = run_calls(_executor(*tools).run(_calls("stuck", "x")))
    assert "abandoned" in stuck.result and x.result == "x done" and ran == ["x"]
    (warning,) = [e for e in logs if "abandoned tool may still be running" in e["event"]]
    assert (warning["tool"], warning["abandoned"]) == ("x", "stuck")


def test_read_only_calls_do_not_warn_beside_an_abandoned_read_only_tool() -> None:
    """Concurrency-safe tools may overlap: an abandoned one among them is no broken rule."""

    async def quick() -> str:
        return "quick"

    executor = _executor(
        FakeTool("stuck", _ignores_cancellation, timeout=0.2), FakeTool("q", quick)
    )

    async def scenario() -> ToolCallOutcome:
        (stuck,) = await executor.run(_calls("stuck"))
        assert "abandoned" in stuck.result
        (quick_outcome,) = await executor.run(_calls("q"))  # the stuck one still runs
        return quick_outcome

    with capture_logs() as logs:
        assert run_calls(scenario()).result == "quick"
    assert not [e for e in logs if "starts while" in e["event"]]


def test_caller_cancellation_is_not_held_up_by_a_tool_that_ignores_it() -> None:
    """Cancelling the executor's task cancels it within the grace, whatever the tool does."""
    started = asyncio.Event()

    async def stubborn() -> str:
        started.set()
        return await _ignores_cancellation()

    async def scenario() -> float:
        task = asyncio.create_task(_executor(FakeTool("t", stubborn)).run(_calls("t")))
        await started.wait()
        began = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - began

    assert run_calls(scenario()) < STUBBORN_SECONDS


def test_abandoned_tool_does_not_hold_up_the_end_of_the_process() -> None:
    """A process whose tool never stops ends promptly and prints no traceback or asyncio noise."""
    script = textwrap.dedent(
        """
        import asyncio, time
        from nanobot_core import Tool
        from nanobot_core.tools import ToolRegistry
        from nanobot_core.tools.executor import Executor, ToolCallRequest, run_calls

        class Forever(Tool):
            name = "forever"
            description = "never stops"
            parameters = {"type": "object"}
            timeout = 0.2

            async def execute(self):
                while True:
                    try:
                        await asyncio.sleep(0.01)
                    except asyncio.CancelledError:
                        pass

        registry = ToolRegistry()
        registry.add(Forever())
        started = time.monotonic()
        (outcome,) = run_calls(Executor(registry, default_timeout=5).run(
            [ToolCallRequest("1", "forever", None)]
        ))
        print("abandoned" in outcome.result, time.monotonic() - started < 30)
        """
    )
    completed = run_python(script, cwd=REPO_ROOT, check=True)
    assert completed.stdout.strip().splitlines()[-1] == "True True"
    assert "Traceback" not in completed.stderr
    assert "destroyed but it is pending" not in completed.stderr
    assert "left unfinished" in completed.stderr


# -- hooks ----------------------------------------------------------------------------------


class RecordingHooks:
    """Hooks that deny some tools and record every event they see."""

    def __init__(self, deny: dict[str, str] | None = None) -> None:
        self.deny = deny or {}
        self.before_events: list[ToolCallEvent] = []
        self.after_events: list[tuple[ToolCallEvent, ToolResult]] = []

    def before(self, call: ToolCallEvent) -> str | None:
        self.before_events.append(call)
        return self.deny.get(call.tool)

    def after(self, call: ToolCallEvent, result: ToolResult) -> None:
        self.after_events.append((call, result))


def test_before_hook_can_deny_a_call() -> None:
    """A denied call does not run; the model gets the reason (naming the plugin) as an Error."""
    ran: list[str] = []

    async def body() -> str:
        ran.append("ran")
        return "ran"

    hooks = RecordingHooks(deny={"t": "writes are off (denied by plugin 'guard')"})
    (outcome,) = run(_executor(FakeTool("t", body), hooks=hooks).run(_calls("t")))
    assert ran == []
    assert outcome.result.startswith(
        "Error: call to tool \"t\" denied: writes are off (denied by plugin 'guard')"
    )
    ((event, result),) = hooks.after_events
    assert result.is_error and event.duration == 0.0


def test_hooks_observe_arguments_result_and_identity() -> None:
    """before and after see the tool, the prepared arguments, the call id and the result."""

    @tool
    async def shout(text: str) -> str:
        """Shout."""
        return text.upper()

    registry = ToolRegistry()
    registry.add(shout, plugin="loud-plugin")
    hooks = RecordingHooks()
    executor = Executor(registry, default_timeout=5, hooks=hooks)
    run(executor.run([ToolCallRequest("call-7", "shout", '{"text": "hi"}')]))
    (before,) = hooks.before_events
    ((after, result),) = hooks.after_events
    assert (before.tool, before.arguments, before.call_id) == ("shout", {"text": "hi"}, "call-7")
    assert after.plugin == "loud-plugin"
    assert result == "HI"


def test_duration_covers_the_awaited_execution() -> None:
    """The reported duration includes the time an async tool spent waiting, not just its start."""
    started, gate = asyncio.Event(), asyncio.Event()
    inside: dict[str, float] = {}

    async def gated() -> str:
        inside["start"] = time.perf_counter()
        started.set()
        await gate.wait()
        inside["end"] = time.perf_counter()
        return "through"

    hooks = RecordingHooks()

    async def scenario() -> list[ToolCallOutcome]:
        task = asyncio.create_task(_executor(FakeTool("g", gated), hooks=hooks).run(_calls("g")))
        await started.wait()
        for _ in range(50):  # keep the tool blocked for a while, without a fixed sleep
            await asyncio.sleep(0)
        gate.set()
        return await task

    (outcome,) = run(scenario())
    blocked = inside["end"] - inside["start"]
    assert blocked > 0
    assert outcome.duration >= blocked
    ((event, _),) = hooks.after_events
    assert event.duration == outcome.duration


class _UnreadableHookError(RuntimeError):
    """A hook's exception whose message cannot be read: its ``__str__`` exits."""

    def __str__(self) -> str:
        raise SystemExit(4)


@pytest.mark.parametrize(
    ("raised", "said"),
    [
        (RuntimeError("broke"), "RuntimeError: broke"),
        (
            _UnreadableHookError(),
            "_UnreadableHookError (its message could not be read: SystemExit)",
        ),
    ],
)
def test_raising_hooks_do_not_break_the_call(raised: Exception, said: str) -> None:
    """A before hook that raises allows the call; an after hook that raises is ignored; both
    are logged naming the tool and its plugin with its version."""

    class Broken:
        def before(self, call: ToolCallEvent) -> str | None:
            raise raised

        def after(self, call: ToolCallEvent, result: ToolResult) -> None:
            raise raised

    async def body() -> str:
        return "fine"

    registry = ToolRegistry()
    registry.add(FakeTool("t", body), plugin=SLOW)
    with capture_logs() as logs:
        (outcome,) = run(Executor(registry, default_timeout=5, hooks=Broken()).run(_calls("t")))
    assert outcome.result == "fine" and not outcome.is_error
    logged = [
        (e["event"], e["tool"], e["plugin"], e["error"]) for e in logs if "hook" in e["event"]
    ]
    assert logged == [
        ("before-tool-call hook raised; call allowed", "t", SLOW_NAMED, said),
        ("after-tool-call hook raised; ignored", "t", SLOW_NAMED, said),
    ]


# -- identical calls within a turn --------------------------------------------------------


def test_identical_read_only_calls_past_the_limit_are_refused_and_not_run() -> None:
    """The third identical read-only call of a turn is an error saying the result is known."""
    from nanobot_core.tools._repeats import RepeatedCalls

    ran: list[dict[str, Any]] = []

    async def body(**kwargs: Any) -> str:
        ran.append(kwargs)
        return "content"

    executor = _executor(FakeTool("look", body, read_only=True))
    repeats = RepeatedCalls(2)
    same = [ToolCallRequest(f"c{i}", "look", '{"path": "a", "n": 1}') for i in range(2)]
    first = run(executor.run(same, repeats=repeats))
    assert [o.is_error for o in first] == [False, False]
    # Same arguments in another order and spelling are the same call; others are not.
    again = [
        ToolCallRequest("c3", "look", {"n": 1, "path": "a"}),
        ToolCallRequest("c4", "look", {"path": "b", "n": 1}),
    ]
    third, other = run(executor.run(again, repeats=repeats))
    assert third.is_error and "already called with these same arguments 2 time(s)" in third.result
    assert "use that result" in third.result
    assert not other.is_error
    assert len(ran) == 3


def test_tools_that_are_not_read_only_are_never_refused_as_repeats() -> None:
    """Running the same write or test command again is legitimate: it always runs."""
    from nanobot_core.tools._repeats import RepeatedCalls

    ran: list[int] = []

    async def body(**kwargs: Any) -> str:
        ran.append(1)
        return "ok"

    executor = _executor(FakeTool("tests", body, read_only=False))
    repeats = RepeatedCalls(2)
    for index in range(5):
        (outcome,) = run(executor.run([ToolCallRequest(f"c{index}", "tests", {})], repeats=repeats))
        assert not outcome.is_error
    assert len(ran) == 5


def test_a_limit_of_zero_refuses_nothing() -> None:
    """max_identical_calls = 0 switches the check off."""
    from nanobot_core.tools._repeats import RepeatedCalls

    async def body(**kwargs: Any) -> str:
        return "ok"

    executor = _executor(FakeTool("look", body))
    calls = [ToolCallRequest(f"c{i}", "look", {}) for i in range(4)]
    outcomes = run(executor.run(calls, repeats=RepeatedCalls(0)))
    assert not any(o.is_error for o in outcomes)


def _cyclic() -> dict[str, Any]:
    looped: dict[str, Any] = {}
    looped["self"] = looped
    return looped


@pytest.mark.parametrize(
    "value",
    [
        pytest.param({1: "a", "b": 2}, id="keys-that-do-not-sort"),
        pytest.param(_cyclic(), id="cyclic"),
        pytest.param(10**5000, id="int-of-5001-digits"),
        pytest.param(ReprRaises(), id="repr-raises"),
    ],
)
def test_arguments_a_tool_check_returns_without_json_text_are_not_counted_as_repeats(
    value: Any,
) -> None:
    """A read-only call whose checked arguments no JSON text holds runs, every time, and the
    others of its batch with it: the repeat check raised out of `Executor.run` instead."""
    from nanobot_core.tools._repeats import RepeatedCalls

    async def body(**kwargs: Any) -> str:
        return "ran"

    class _ChecksItself(FakeTool):
        def validate_arguments(self, arguments: dict[str, Any]) -> Any:
            return {"x": value}, []

    async def fine() -> str:
        return "fine"

    executor = _executor(_ChecksItself("odd", body), FakeTool("ok", fine))
    repeats = RepeatedCalls(1)
    calls = [ToolCallRequest(f"c{i}", "odd", "{}") for i in range(3)]
    outcomes = run(executor.run([*calls, ToolCallRequest("c3", "ok", {})], repeats=repeats))
    assert [str(o.result) for o in outcomes] == ["ran", "ran", "ran", "fine"]


_ODD_VALUES = plugin_values()


@settings(max_examples=200, deadline=None)
@given(arguments=st.dictionaries(st.text(), _ODD_VALUES, max_size=4))
def test_the_repeat_check_never_raises_whatever_the_arguments_hold(
    arguments: dict[str, Any],
) -> None:
    """Counting a call refuses it or lets it through, for any arguments a check may return."""
    from nanobot_core.tools._repeats import RepeatedCalls

    repeats = RepeatedCalls(1)
    first, second = (repeats.refusal("look", arguments) for _ in range(2))
    assert first is None
    assert second is None or second.startswith('Error: tool "look" was already called')


# -- plugin code in the flags, the name and the result ---------------------------------------

PLUGIN = "plugin 'flags' from flags-dist 2.1.0"


class _Breaks:
    """What a flag property of `Flaky` does once the test breaks it (after registration)."""

    def __init__(self) -> None:
        self.flag = ""
        self.value: Any = None
        self.escape: BaseException | None = None

    def read(self, flag: str, default: Any) -> Any:
        if flag != self.flag:
            return default
        if self.escape is not None:
            raise self.escape
        return self.value


class Flaky(Tool):
    """A plugin tool whose flags are properties that work until the test breaks one."""

    breaks = _Breaks()
    ran: list[str] = []
    description = "flags as properties"
    parameters: dict[str, Any] = {"type": "object"}

    @property
    def name(self) -> str:
        return str(self.breaks.read("name", "flaky"))

    @property
    def read_only(self) -> bool:  # type: ignore[override]
        return bool(self.breaks.read("read_only", True))

    @property
    def exclusive(self) -> bool:  # type: ignore[override]
        return bool(self.breaks.read("exclusive", False))

    @property
    def concurrency_safe(self) -> bool:
        return bool(self.breaks.read("concurrency_safe", True))

    @property
    def timeout(self) -> float | None:  # type: ignore[override]
        value: float | None = self.breaks.read("timeout", None)
        return value

    async def execute(self, **kwargs: Any) -> str:
        self.ran.append("flaky")
        return "flaky ran"


class Steady(Tool):
    """A plain plugin tool of the same plugin, called in the same batch."""

    name = "steady"
    description = "plain flags"
    parameters: dict[str, Any] = {"type": "object"}
    read_only = True

    async def execute(self, **kwargs: Any) -> str:
        return "steady ran"


class Fails(Tool):
    """A plugin tool that raises."""

    name = "fails"
    description = "raises"
    parameters: dict[str, Any] = {"type": "object"}

    async def execute(self, **kwargs: Any) -> str:
        raise ValueError("bad input")


class Slow(Tool):
    """A plugin tool that overruns its timeout."""

    name = "slow"
    description = "never answers"
    parameters: dict[str, Any] = {"type": "object"}
    timeout = 0.05

    async def execute(self, **kwargs: Any) -> str:
        await asyncio.Event().wait()
        return "unreachable"


class Garbage(Tool):
    """A plugin tool that returns what cannot be a result."""

    name = "garbage"
    description = "returns an object"
    parameters: dict[str, Any] = {"type": "object"}

    async def execute(self, **kwargs: Any) -> object:
        return object()


@pytest.fixture
def flaky(nanobot_manager: PluginManager, nanobot_register: Any) -> Executor:
    """An executor over the tools of plugin 'flags' 2.1.0 (Flaky, Steady); Flaky reset."""

    class Plugin:
        @hookimpl
        def nanobot_tools(self, ctx: Any) -> list[Any]:
            return [Flaky, Steady, Fails, Slow, Garbage]

    record = nanobot_register(Plugin(), "flags", distribution="flags-dist", version="2.1.0")
    assert record.status == "loaded"
    Flaky.breaks = _Breaks()
    Flaky.ran = []
    return Executor(nanobot_manager.tool_registry(), default_timeout=5)


def _break(flag: str, *, value: Any = None, escape: BaseException | None = None) -> None:
    Flaky.breaks.flag, Flaky.breaks.value, Flaky.breaks.escape = flag, value, escape


@pytest.mark.parametrize(
    ("value", "escape", "said"),
    [
        (None, ValueError("when?"), "reading its timeout raised ValueError: when?"),
        (None, KeyboardInterrupt(), "reading its timeout raised KeyboardInterrupt"),
        ("soon", None, "its timeout is 'soon', expected a positive number"),
        (float("nan"), None, "its timeout is nan, expected a positive number"),
        (-1, None, "its timeout is -1, expected a positive number"),
        (object(), None, "its timeout is an object, expected a positive number"),
        (10**400, None, "its timeout is an int of 1329 bits, expected a positive"),
    ],
    ids=[
        "raising-timeout",
        "keyboard-interrupt-timeout",
        "text-timeout",
        "nan-timeout",
        "negative-timeout",
        "object-timeout",
        "int-past-any-float-timeout",
    ],
)
def test_a_timeout_that_fails_at_call_time_refuses_only_its_call(
    flaky: Executor, value: Any, escape: BaseException | None, said: str
) -> None:
    """A timeout raising or turned odd after registration refuses its call, naming plugin,
    version."""
    _break("timeout", value=value, escape=escape)
    calls = _calls("steady", "flaky", "steady")
    first, broken, last = run(flaky.run(calls))
    assert (first.result, last.result) == ("steady ran", "steady ran")
    assert Flaky.ran == []
    assert broken.is_error and broken.result.endswith(ERROR_HINT)
    assert broken.result.startswith(f'Error: tool "flaky" of {PLUGIN} cannot be run: {said}')


@pytest.mark.parametrize(
    ("flag", "value", "escape"),
    [
        ("read_only", None, RuntimeError("gone")),
        ("concurrency_safe", None, SystemExit(3)),
        ("exclusive", None, KeyboardInterrupt()),
        ("exclusive", None, _Escape("out")),
        ("exclusive", "yes", None),
    ],
    ids=[
        "raising-read-only",
        "system-exit-concurrency-safe",
        "keyboard-interrupt-exclusive",
        "base-exception-exclusive",
        "text-exclusive",
    ],
)
def test_a_flag_that_fails_after_registration_changes_no_call(
    flaky: Executor, flag: str, value: Any, escape: BaseException | None
) -> None:
    """A flag raising or turned odd after registration is not read again: its calls run,
    scheduled by the flags registered (and listed by ``nanobot-core tools``)."""
    _break(flag, value=value, escape=escape)
    outcomes = run(flaky.run(_calls("steady", "flaky", "steady")))
    assert [outcome.result for outcome in outcomes] == ["steady ran", "flaky ran", "steady ran"]
    assert Flaky.ran == ["flaky"]


def test_a_call_reads_its_timeout_once_and_no_flag(flaky: Executor) -> None:
    """The timeout of a call is one reading of it; its repeat check and batching use the
    flags registered, which it does not read again."""
    reads: list[str] = []
    breaks = Flaky.breaks

    class Counting(_Breaks):
        def read(self, flag: str, default: Any) -> Any:
            reads.append(flag)
            return breaks.read(flag, default)

    Flaky.breaks = Counting()
    from nanobot_core.tools._repeats import RepeatedCalls

    (outcome,) = run(flaky.run(_calls("flaky"), repeats=RepeatedCalls(2)))
    assert outcome.result == "flaky ran"
    assert reads == ["timeout"]


def test_a_real_ctrl_c_while_reading_a_flag_stops_the_run(flaky: Executor) -> None:
    """Containment is not for the user's Ctrl-C: raised by the SIGINT handler, it goes on."""
    from nanobot_core._containment import _on_sigint

    class CtrlC(_Breaks):
        def read(self, flag: str, default: Any) -> Any:
            _on_sigint(2, None)
            return default

    Flaky.breaks = CtrlC()
    with pytest.raises(KeyboardInterrupt):
        run(flaky.run(_calls("flaky")))


_ODD_TIMEOUTS = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.booleans(),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
)


def test_any_timeout_a_plugin_returns_runs_the_call_or_refuses_it(
    flaky: Executor,
) -> None:
    """Whatever a timeout property returns, the call runs (usable) or is refused naming it."""

    @settings(max_examples=150, deadline=None, derandomize=True)
    @given(timeout=_ODD_TIMEOUTS)
    def check(timeout: Any) -> None:
        _break("timeout", value=timeout)
        (outcome,) = run(flaky.run(_calls("flaky")))
        usable = timeout is None or (
            type(timeout) in (int, float) and timeout == timeout and timeout > 0
        )
        if usable:
            assert outcome.result == "flaky ran"
        else:
            assert outcome.result.startswith(
                f'Error: tool "flaky" of {PLUGIN} cannot be run: its timeout is '
            )

    check()


def test_a_name_property_that_fails_after_registration_changes_nothing(flaky: Executor) -> None:
    """Calls find a tool by the name it registered with; its name property is not read again."""
    _break("name", escape=SystemExit(4))
    outcomes = run(flaky.run(_calls("flaky", "nosuch")))
    assert outcomes[0].result == "flaky ran"
    assert outcomes[1].result.startswith('Error: unknown tool "nosuch".')
    assert "flaky" in outcomes[1].result


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("fails", "failed: ValueError: bad input"),
        ("slow", "timed out after 0.05s and was stopped."),
        ("garbage", "returned an object, which cannot be turned into text"),
    ],
    ids=["raises", "times-out", "bad-result"],
)
def test_runtime_errors_name_the_plugin_and_its_version(
    flaky: Executor, name: str, said: str
) -> None:
    """Raising, timing out and returning garbage are errors naming the tool, plugin and version."""
    (outcome,) = run(flaky.run(_calls(name)))
    assert outcome.result.startswith(f'Error: tool "{name}" of {PLUGIN} {said}')


class _Unprintable(RuntimeError):
    """An exception whose message cannot be read: its ``__str__`` raises."""

    def __str__(self) -> str:
        raise _Escape("no text")


async def _raises_unprintable() -> str:
    raise _Unprintable


def test_an_exception_whose_message_raises_is_still_an_error_result() -> None:
    """A tool's exception whose text cannot be read is reported by its type; the batch goes on."""

    async def fine() -> str:
        return "fine"

    executor = _executor(FakeTool("t", _raises_unprintable), FakeTool("ok", fine))
    broken, ok = run(executor.run(_calls("t", "ok")))
    assert broken.result.startswith(
        'Error: tool "t" failed: _Unprintable (its message could not be read: _Escape)'
    )
    assert ok.result == "fine"


class _SyncExecute(Tool):
    """A Tool subclass whose execute is a plain def, so it returns its value, not a coroutine."""

    name = "sync"
    description = "not async"
    parameters: dict[str, Any] = {"type": "object"}

    def execute(self, **kwargs: Any) -> Any:  # type: ignore[override]
        return "done"


def test_an_execute_that_is_not_async_is_said_so() -> None:
    """An execute returning a non-awaitable is an error saying execute must be an async def."""
    (outcome,) = run(_executor(_SyncExecute()).run(_calls("sync")))
    assert outcome.result.startswith(
        'Error: tool "sync" cannot be run: its execute returned a str, not an awaitable '
        "(execute must be an async def)"
    )


class _NoTruth:
    """A value whose truth cannot be read."""

    def __bool__(self) -> bool:
        raise _Escape("no truth")


def _result_with(**attributes: Any) -> Body:
    async def body() -> ToolResult:
        result = ToolResult("text")
        for key, value in attributes.items():
            setattr(result, key, value)
        return result

    return body


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({"is_error": _NoTruth()}, ToolResult("text")),
        ({"is_error": "yes"}, ToolResult("text")),
        ({"is_error": True}, ToolResult("Error: text" + ERROR_HINT, is_error=True)),
        ({"blocks": 3}, None),
    ],
    ids=["flag-without-truth", "flag-text", "flag-true", "blocks-number"],
)
def test_a_tool_result_changed_after_it_was_built_is_read_again(
    attributes: dict[str, Any], expected: ToolResult | None
) -> None:
    """A ToolResult whose flag or blocks a tool set to something else is read as a new result."""

    async def fine() -> str:
        return "fine"

    executor = _executor(FakeTool("t", _result_with(**attributes)), FakeTool("ok", fine))
    changed, ok = run(executor.run(_calls("t", "ok")))
    assert ok.result == "fine"
    if expected is None:
        assert changed.result.startswith('Error: tool "t" returned a ToolResult that could not')
    else:
        assert (changed.result, changed.is_error) == (expected, expected.is_error)
        assert type(changed.result.is_error) is bool


class _NoCopy:
    """An object a tool's own check puts in the arguments; it cannot be copied."""

    def __deepcopy__(self, memo: Any) -> Any:
        raise SystemExit(6)


class _HandsBackObjects(FakeTool):
    def validate_arguments(self, arguments: dict[str, Any]) -> Any:
        return {"thing": _NoCopy()}, []


def test_arguments_a_tool_check_made_uncopyable_refuse_the_call() -> None:
    """Arguments whose copy for the hooks fails refuse that call, naming the tool; others run."""
    ran: list[str] = []

    async def body(**kwargs: Any) -> str:
        ran.append("ran")
        return "ran"

    async def fine() -> str:
        return "fine"

    executor = _executor(_HandsBackObjects("t", body), FakeTool("ok", fine))
    broken, ok = run(executor.run(_calls("t", "ok")))
    assert broken.result.startswith(
        'Error: tool "t" cannot be run: its arguments could not be copied for the tool and the '
        "tool-call hooks: SystemExit(6)"
    )
    assert ok.result == "fine" and ran == []


def test_a_tool_that_changes_its_arguments_changes_neither_the_outcome_nor_the_hooks() -> None:
    """What a tool does to its argument values stays its own: the outcome and the after-hook
    keep the arguments it was called with."""
    kept: list[dict[str, Any]] = []

    async def changes(**kwargs: Any) -> str:
        kwargs["items"].append(object())  # not JSON: `call --json` printed a traceback
        kwargs["options"]["depth"] = 99
        kept.append(kwargs)
        return "done"

    hooks = RecordingHooks()
    executor = _executor(FakeTool("t", changes), hooks=hooks)
    sent = '{"items": [1, 2], "options": {"depth": 1}}'
    (outcome,) = run(executor.run([ToolCallRequest("id-0", "t", sent)]))
    assert outcome.result == "done"
    assert outcome.arguments == {"items": [1, 2], "options": {"depth": 1}}
    ((after, _),) = hooks.after_events
    assert after.arguments == {"items": [1, 2], "options": {"depth": 1}}
    assert kept[0]["options"] == {"depth": 99}  # the tool's own copy did change


def test_a_tool_that_changes_arguments_given_as_an_object_leaves_the_object_alone() -> None:
    """Arguments a provider hands over decoded stay as they came, whatever the tool does."""

    async def changes(**kwargs: Any) -> str:
        kwargs["items"].clear()
        return "done"

    sent: dict[str, Any] = {"items": [1, 2]}
    (outcome,) = run(_executor(FakeTool("t", changes)).run([ToolCallRequest("id-0", "t", sent)]))
    assert outcome.result == "done"
    assert outcome.arguments == sent == {"items": [1, 2]}


class _Truthy:
    """A value whose truth is its own code: reading it as a flag must not run that code."""

    def __bool__(self) -> bool:
        raise SystemExit(4)


@pytest.mark.parametrize("odd", ["yes", _Truthy()], ids=["text", "truthy-object"])
def test_an_exclusive_turned_odd_after_registration_changes_nothing(odd: object) -> None:
    """An exclusive holding no flag after registration is not read: the call runs, as
    registered, its value's own code never run."""
    ran: list[str] = []

    async def body() -> str:
        ran.append("ran")
        return "ran"

    writer = FakeTool("writer", body, read_only=False)
    executor = _executor(writer)
    writer.exclusive = odd  # type: ignore[assignment]  # after registration, as a plugin may
    (outcome,) = run(executor.run(_calls("writer")))
    assert (outcome.result, ran) == ("ran", ["ran"])


class _CountedReadOnly(Tool):
    """A tool whose read_only is a property counting its reads; concurrency_safe is the default."""

    name = "counted"
    description = "counts reads of read_only"
    parameters: dict[str, Any] = {"type": "object"}

    def __init__(self) -> None:
        self.reads = 0

    @property
    def read_only(self) -> bool:  # type: ignore[override]
        self.reads += 1
        return True

    async def execute(self, **kwargs: Any) -> str:
        return "counted ran"


def test_read_only_is_read_once_at_registration_and_never_by_a_call() -> None:
    """The default concurrency_safe comes from the one reading of read_only at registration;
    a call reads neither again."""
    counted = _CountedReadOnly()
    executor = _executor(counted)
    assert counted.reads == 1
    (outcome,) = run(executor.run(_calls("counted")))
    assert outcome.result == "counted ran"
    assert counted.reads == 1


def test_a_tool_class_made_on_the_fly_is_not_kept_alive_by_a_call() -> None:
    """The executor's per-class note on a tool's flags does not keep that class alive."""
    import gc
    import weakref

    class Passing(Tool):
        name = "passing"
        description = "Runs once."
        parameters = {"type": "object", "properties": {}}
        read_only = True

        async def execute(self) -> str:
            return "ran"

    registry = ToolRegistry()
    registry.add(Passing())
    executor = Executor(registry, default_timeout=5)
    outcome = run(executor.run([ToolCallRequest("c1", "passing", "{}")]))
    assert str(outcome[0].result) == "ran"
    alive = weakref.ref(Passing)
    del Passing, registry, executor, outcome
    gc.collect()
    assert alive() is None


# -- bytes returned --------------------------------------------------------------------------


class _ReturnsBytes(Tool):
    """A plugin tool that returns whatever the test gives it (bytes, a bytearray, ...)."""

    name = "raw"
    description = "returns bytes"
    parameters: dict[str, Any] = {"type": "object"}
    value: Any = b""

    async def execute(self, **kwargs: Any) -> Any:
        return self.value


@pytest.fixture
def raw(nanobot_manager: PluginManager, nanobot_register: Any) -> Executor:
    """An executor over the tool `raw` of plugin 'flags' 2.1.0."""

    class Plugin:
        @hookimpl
        def nanobot_tools(self, ctx: Any) -> list[Any]:
            return [_ReturnsBytes]

    record = nanobot_register(Plugin(), "flags", distribution="flags-dist", version="2.1.0")
    assert record.status == "loaded"
    return Executor(nanobot_manager.tool_registry(), default_timeout=5)


def _returning(executor: Executor, value: Any) -> ToolCallOutcome:
    _ReturnsBytes.value = value
    (outcome,) = run(executor.run(_calls("raw")))
    return outcome


@pytest.mark.parametrize(
    "value",
    [b"caf\xc3\xa9 ok", bytearray(b"caf\xc3\xa9 ok"), memoryview(b"caf\xc3\xa9 ok")],
    ids=["bytes", "bytearray", "memoryview"],
)
def test_bytes_of_utf8_text_are_read_as_that_text(raw: Executor, value: Any) -> None:
    """Bytes, a bytearray or a memoryview of UTF-8 text reach the model as the text."""
    outcome = _returning(raw, value)
    assert not outcome.is_error
    assert outcome.result == "café ok"


def test_bytes_reading_error_are_an_error_as_their_text_would_be(raw: Executor) -> None:
    """UTF-8 bytes beginning with "Error" are an error result, as the str they hold is."""
    outcome = _returning(raw, bytearray(b"Error: the service refused"))
    assert outcome.is_error
    assert outcome.result.startswith("Error: the service refused")


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (b"\xff\xfeh\x00i\x00", "returned 6 bytes that are not UTF-8 text: byte 0 is 0xff."),
        (bytearray(b"ok \x80"), "returned 4 bytes (a bytearray) that are not UTF-8 text: byte 3 "),
        (memoryview(b"caf\xe9"), "returned 4 bytes (a memoryview) that are not UTF-8 text: byte "),
    ],
    ids=["bytes", "bytearray", "memoryview"],
)
def test_bytes_that_are_not_utf8_are_an_error_naming_the_tool_plugin_and_first_bad_byte(
    raw: Executor, value: Any, said: str
) -> None:
    """Bytes not UTF-8 are refused naming the tool, its plugin and version, and where they break."""
    outcome = _returning(raw, value)
    assert outcome.is_error
    assert outcome.result.startswith(f'Error: tool "raw" of {PLUGIN} {said}')
    assert "decodes bytes of another encoding itself" in outcome.result


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=64), kind=st.sampled_from([bytes, bytearray, memoryview]))
def test_any_bytes_are_their_text_or_refused_at_the_first_byte_that_is_not_utf8(
    data: bytes, kind: Callable[[bytes], Any]
) -> None:
    """Whatever bytes a tool returns, the result is their UTF-8 text or names where it breaks."""
    result = ToolResult.of(kind(data))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        assert result.is_error
        assert f": byte {exc.start:,} is 0x{data[exc.start]:02x}." in result
    else:
        assert result == text
        assert result.is_error is text.startswith("Error")


def _ctrl_c_while_the_loop_closes(
    handler: Callable[[int, Any], object] | signal.Handlers,
) -> tuple[str | None, list[bool]]:
    """What `run_calls` returns (None if it raised KeyboardInterrupt) for a turn whose kept
    connection presses Ctrl-C as the loop's shutdown closes it, with SIGINT's handler `handler`;
    and whether the connection closed."""
    from nanobot_core.tools.executor import run_calls

    closed: list[bool] = []
    kept: list[Any] = []

    async def connection() -> Any:
        try:
            yield 1
        finally:
            os.kill(os.getpid(), signal.SIGINT)  # pressed while it closes
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            closed.append(True)

    async def turn() -> str:
        kept.append(connection())
        await kept[-1].__anext__()  # left open: the loop's shutdown closes it
        return "done"

    # Set here, not inherited: a suite started as a shell's background job ignores SIGINT.
    previous = signal.signal(signal.SIGINT, handler)
    try:
        return run_calls(turn()), closed
    except KeyboardInterrupt:
        return None, closed
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_while_the_loop_closes_is_raised_once_it_is_closed(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Ctrl-C while an async generator is closed lets it close, then interrupts, no traceback."""
    assert _ctrl_c_while_the_loop_closes(signal.default_int_handler) == (None, [True])
    assert "Task exception was never retrieved" not in capfd.readouterr().err


def test_a_ctrl_c_while_the_loop_closes_stays_ignored_where_sigint_is(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """In a process that ignores SIGINT, a Ctrl-C while the loop closes is ignored after it too."""
    assert _ctrl_c_while_the_loop_closes(signal.SIG_IGN) == ("done", [True])
    assert "Task exception was never retrieved" not in capfd.readouterr().err


class _CountedCopies:
    """A value a tool's own check puts in the arguments: it counts how often it is copied."""

    copies = 0

    def __deepcopy__(self, memo: Any) -> _CountedCopies:
        _CountedCopies.copies += 1
        return _CountedCopies()


class _HandsBackCounted(FakeTool):
    def validate_arguments(self, arguments: dict[str, Any]) -> Any:
        return {"thing": _CountedCopies(), "items": [1, 2]}, []


class _Observer:
    """Tool-call hooks that say whether they observe, and record the arguments they see."""

    def __init__(self, observes: Any) -> None:
        self.answer = observes
        self.seen: list[dict[str, Any]] = []

    def observes(self) -> Any:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def before(self, call: ToolCallEvent) -> str | None:
        self.seen.append(call.arguments)
        call.arguments["items"].append("from the hook")  # an observer that meddles
        return None

    def after(self, call: ToolCallEvent, result: ToolResult) -> None:
        self.seen.append(call.arguments)


def _copies_for_one_call(hooks: Any) -> tuple[int, ToolCallOutcome, list[dict[str, Any]]]:
    given: list[dict[str, Any]] = []

    async def changes(**kwargs: Any) -> str:
        kwargs["items"].append("from the tool")
        given.append(kwargs)
        return "done"

    _CountedCopies.copies = 0
    executor = _executor(_HandsBackCounted("t", changes), hooks=hooks)
    (outcome,) = run(executor.run(_calls("t")))
    assert outcome.result == "done"
    assert outcome.arguments["items"] == [1, 2]  # neither the tool nor a hook changed them
    assert given[0]["items"] == [1, 2, "from the tool"]  # no hook changed the tool's
    return _CountedCopies.copies, outcome, given


def test_a_call_no_hook_observes_copies_its_arguments_once() -> None:
    """With no hooks, or hooks that say they observe nothing, the tool's copy is the only one."""
    for hooks in (None, _Observer(observes=False)):
        copies, _, _ = _copies_for_one_call(hooks)
        assert copies == 1
    assert _Observer(observes=False).seen == []


@pytest.mark.parametrize("answer", [True, None, 1, RuntimeError("observes broke")])
def test_observing_hooks_get_a_copy_of_their_own(answer: Any) -> None:
    """Hooks that observe (or cannot say) get a second copy, which the tool does not change."""
    hooks = _Observer(observes=answer)
    copies, _, _ = _copies_for_one_call(hooks)
    assert copies == 2
    before, after = hooks.seen
    assert before is after and after["items"] == [1, 2, "from the hook"]


def test_the_managers_hooks_observe_only_when_a_plugin_implements_one(
    nanobot_manager: PluginManager, nanobot_register: Any
) -> None:
    """The plugin manager's hooks copy nothing for a call until a plugin implements a
    tool-call hook; then that hook sees the call."""
    copies, _, _ = _copies_for_one_call(nanobot_manager.tool_call_hooks())
    assert copies == 1
    seen: list[str] = []

    class Watcher:
        @hookimpl
        def nanobot_after_tool_call(self, call: ToolCallEvent, result: Any) -> None:
            seen.append(call.tool)

    nanobot_register(Watcher(), "watcher")
    copies, _, _ = _copies_for_one_call(nanobot_manager.tool_call_hooks())
    assert (copies, seen) == (2, ["t"])


class _Tally(Tool):
    """A plugin tool whose every part that is plugin code counts how often it runs."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts

    def _count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    @property
    def name(self) -> str:
        self._count("name")
        return "tally"

    @property
    def description(self) -> str:
        self._count("description")
        return "Counts what runs."

    @property
    def parameters(self) -> dict[str, Any]:
        self._count("parameters")
        return {"type": "object", "properties": {"n": {"type": "integer"}}}

    @property
    def read_only(self) -> bool:  # type: ignore[override]
        self._count("read_only")
        return True

    @property
    def timeout(self) -> float | None:  # type: ignore[override]
        self._count("timeout")
        return None

    def validate_arguments(self, arguments: dict[str, Any]) -> Any:
        self._count("validate_arguments")
        return None  # the schema decides

    async def execute(self, n: int) -> str:
        self._count("execute")
        return f"{n} counted"


def test_one_call_through_the_plugin_manager_runs_each_part_once(
    nanobot_manager: PluginManager, nanobot_register: Any
) -> None:
    """From `Executor.run` to its outcome, one call runs the tool's check, its timeout, its
    code and each tool-call hook once, and reads nothing of the tool again (its name,
    description, schema and flags were read when it was registered)."""
    counts: dict[str, int] = {}

    class Counter:
        @hookimpl
        def nanobot_tools(self, ctx: Any) -> list[Any]:
            return [_Tally(counts)]

        @hookimpl
        def nanobot_before_tool_call(self, call: ToolCallEvent) -> None:
            counts["before"] = counts.get("before", 0) + 1

        @hookimpl
        def nanobot_after_tool_call(self, call: ToolCallEvent, result: Any) -> None:
            counts["after"] = counts.get("after", 0) + 1

    nanobot_register(Counter(), "counter")
    executor = Executor(
        nanobot_manager.tool_registry(),
        default_timeout=5.0,
        hooks=nanobot_manager.tool_call_hooks(),
    )
    counts.clear()
    (outcome,) = run(executor.run([ToolCallRequest("c", "tally", '{"n": "7"}')]))
    assert (outcome.result, outcome.repairs) == ("7 counted", ['cast $.n: "7" -> 7'])
    assert counts == {
        "validate_arguments": 1,
        "timeout": 1,
        "before": 1,
        "execute": 1,
        "after": 1,
    }
