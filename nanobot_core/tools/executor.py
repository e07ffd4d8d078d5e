"""The executor: runs a batch of tool calls, concurrently where that is safe, and never raises.

Consecutive concurrency-safe calls run together; every other call runs on
its own, in order; exclusive tools always run alone. Whatever a tool does
(raise, overrun its timeout, get cancelled, return something that is not
text), the caller gets an "Error..." result ending with a hint for the model.

Each call runs in a task of its own. At its timeout the task is cancelled and
gets `STOP_GRACE` seconds to stop; a tool that ignores the cancellation is
abandoned: the model is told at once, a warning names the tool and its plugin,
and the task is kept (so it is not garbage-collected while it runs) until it
ends. An abandoned tool may still be running when the next call starts; when
either of them must not run alongside others, a warning says so (the call
still runs: one stuck tool must not disable the others for good). `run_calls`
runs a coroutine on a new event loop like ``asyncio.run``, except that tools
still abandoned at its end are left unfinished instead of waited for.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import Coroutine, Sequence
from typing import Any, Protocol, TypeVar

import attrs

from nanobot_core._containment import default_sigint, plugin_code
from nanobot_core._logging import get_logger
from nanobot_core.kernel.context import ToolCallEvent
from nanobot_core.tools._repeats import RepeatedCalls
from nanobot_core.tools._threads import CALL, ToolCall, WorkerThreads, running_threads
from nanobot_core.tools.base import Tool, ToolResult
from nanobot_core.tools.registry import PreparedCall, ToolRegistry

__all__ = [
    "ERROR_HINT",
    "STOP_GRACE",
    "Executor",
    "ToolCallHooks",
    "ToolCallOutcome",
    "ToolCallRequest",
    "run_calls",
    "stop_task",
]

log = get_logger("nanobot_core.tools")

T = TypeVar("T")

ERROR_HINT = "\n\n[Analyze the error above and try a different approach.]"

#: Seconds a cancelled tool (timed out, or its caller cancelled) gets to stop before it is
#: abandoned: enough for a cleanup that kills a child process, not for ignoring the request.
STOP_GRACE = 1.0


@attrs.frozen
class _Abandoned:
    """A tool call that did not stop when cancelled."""

    tool: str
    plugin: str  # empty when not known
    alone: bool  # not concurrency-safe: nothing may run alongside it


# Kept here so that an abandoned task is not garbage-collected while it runs; each one
# leaves when it ends (see `_abandon`).
_ABANDONED: dict[asyncio.Task[Any], _Abandoned] = {}


@attrs.frozen
class ToolCallRequest:
    """One call as the model sent it: ``arguments`` is raw (object, JSON text, None, ...)."""

    id: str
    name: str
    arguments: Any = None


@attrs.frozen
class ToolCallOutcome:
    """What one call produced; ``duration`` is the wall time of the awaited execution."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    result: ToolResult
    duration: float = 0.0
    repairs: list[str] = attrs.field(factory=list)

    @property
    def is_error(self) -> bool:
        """Whether the call failed."""
        return self.result.is_error


class ToolCallHooks(Protocol):
    """Observers around each executed call (the plugin manager adapts the plugin hooks to this)."""

    def before(self, call: ToolCallEvent) -> str | None:
        """Return None to allow the call, or the reason (naming the plugin) to deny it."""

    def after(self, call: ToolCallEvent, result: ToolResult) -> None:
        """Observe the finished, failed or denied call; ``call.duration`` is set."""


class Executor:
    """Runs prepared tool calls from one model reply.

    ``default_timeout`` (seconds) applies to tools whose ``timeout`` is None.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        default_timeout: float,
        hooks: ToolCallHooks | None = None,
    ) -> None:
        self.registry = registry
        self.default_timeout = default_timeout
        self.hooks = hooks

    async def run(
        self, calls: Sequence[ToolCallRequest], *, repeats: RepeatedCalls | None = None
    ) -> list[ToolCallOutcome]:
        """Run the calls and return their outcomes in call order.

        With `repeats` (one per turn), a read-only call identical to more than
        its limit of earlier ones is answered with an error and not run.
        """
        prepared = [(call, self.registry.prepare_call(call.name, call.arguments)) for call in calls]
        if repeats is not None:
            prepared = [(call, _unless_repeated(p, repeats)) for call, p in prepared]
        outcomes: list[ToolCallOutcome] = []
        for batch in _batches(prepared):
            outcomes.extend(await asyncio.gather(*(self._run_one(c, p) for c, p in batch)))
        return outcomes

    async def _run_one(self, call: ToolCallRequest, prepared: PreparedCall) -> ToolCallOutcome:
        def outcome(result: ToolResult, duration: float = 0.0) -> ToolCallOutcome:
            return ToolCallOutcome(
                call.id,
                prepared.name,
                prepared.arguments,
                _with_hint(result),
                duration,
                list(prepared.repairs),
            )

        if prepared.error is not None or prepared.tool is None:
            return outcome(ToolResult.error(prepared.error or f'unknown tool "{call.name}"'))
        tool = prepared.tool
        event = ToolCallEvent(
            tool=tool.name,
            arguments=copy.deepcopy(prepared.arguments),
            call_id=call.id,
            plugin=self.registry.plugin_of(tool.name),
        )
        denial = self._before(event)
        if denial is not None:
            event.duration = 0.0
            result = _with_hint(ToolResult.error(f'call to tool "{tool.name}" denied: {denial}'))
            self._after(event, result)
            return outcome(result)
        started = time.perf_counter()
        result = await self._execute(tool, prepared.arguments, event.plugin)
        duration = time.perf_counter() - started
        event.duration = duration
        result = _with_hint(result)
        self._after(event, result)
        log.debug(
            "tool call finished",
            tool=tool.name,
            call_id=call.id,
            duration=duration,
            error=result.is_error,
        )
        return outcome(result, duration)

    async def _execute(self, tool: Tool, arguments: dict[str, Any], plugin: str) -> ToolResult:
        timeout = tool.timeout if tool.timeout is not None else self.default_timeout
        alone = not _may_run_alongside(tool)
        _warn_if_abandoned_alongside(tool.name, alone)
        owner = ToolCall(tool.name, plugin)
        task = asyncio.create_task(_call(tool, arguments, owner), name=f"nanobot-tool-{tool.name}")
        abandoned = _Abandoned(tool.name, plugin, alone)
        try:
            await asyncio.wait((task,), timeout=timeout)
        except asyncio.CancelledError:  # our caller is being cancelled: stop the tool, go on
            if await _stop(task, abandoned, "its caller was cancelled"):
                _left_threads(owner, "its caller was cancelled")
            raise
        if task.done():
            return _result_of(task, tool.name)
        said = f'tool "{tool.name}" timed out after {timeout:g}s'
        why = f"it timed out after {timeout:g}s"
        if not await _stop(task, abandoned, why):
            return ToolResult.error(
                f"{said} and did not stop when cancelled: it was abandoned and may still be "
                "running in the background."
            )
        thread = (
            " Its worker thread was abandoned and may still finish in the background."
            if _left_threads(owner, why)
            else ""
        )
        return ToolResult.error(f"{said} and was stopped.{thread}")

    def _before(self, event: ToolCallEvent) -> str | None:
        if self.hooks is None:
            return None
        try:
            return self.hooks.before(event)
        except Exception as exc:  # a broken observer never blocks a call
            log.error(
                "before-tool-call hook raised; call allowed",
                tool=event.tool,
                error=f"{type(exc).__name__}: {exc}",
            )
            return None

    def _after(self, event: ToolCallEvent, result: ToolResult) -> None:
        if self.hooks is None:
            return
        try:
            self.hooks.after(event, result)
        except Exception as exc:  # observers cannot change the outcome
            log.error(
                "after-tool-call hook raised; ignored",
                tool=event.tool,
                error=f"{type(exc).__name__}: {exc}",
            )


async def _call(tool: Tool, arguments: dict[str, Any], owner: ToolCall) -> ToolResult:
    """The task of one call: the tool's own code, contained, and its value made a result."""
    CALL.set(owner)  # the task's own context: the threads it starts are counted under it
    # What the tool prints goes to the log, not into --json output.
    with plugin_code(f"tool {tool.name!r}"):
        value = await tool.execute(**arguments)
        # Still the tool's code: reading what it returned may run its own methods.
        try:
            return ToolResult.of(value)
        except Exception as exc:
            return ToolResult.error(
                f'tool "{tool.name}" returned a {type(value).__name__} that could not be read '
                f"as a result: {type(exc).__name__}: {exc}"
            )


def _result_of(task: asyncio.Task[ToolResult], name: str) -> ToolResult:
    """The result of a finished call task; a failure becomes an error result naming the tool."""
    try:
        return task.result()
    except asyncio.CancelledError:
        return ToolResult.error(f'tool "{name}" was cancelled before it finished.')
    except Exception as exc:  # a tool never breaks the caller (plugin_code made it an Exception)
        log.info("tool raised", tool=name, error=f"{type(exc).__name__}: {exc}")
        return ToolResult.error(f'tool "{name}" failed: {type(exc).__name__}: {exc}')


async def _stop(task: asyncio.Task[Any], call: _Abandoned, why: str) -> bool:
    """Cancel the task and give it `STOP_GRACE` seconds to end; False when it is abandoned.

    What it returned or raised meanwhile is dropped: the call is reported as
    timed out (or its caller is cancelled) either way.
    """
    task.cancel()
    try:
        await asyncio.wait((task,), timeout=STOP_GRACE)
    finally:  # also when our caller is cancelled (again) meanwhile
        if not task.done():
            _abandon(task, call, why)
    if not task.done():
        return False
    if not task.cancelled():
        task.exception()  # retrieved, so that asyncio does not report it as lost
    return True


def _abandon(task: asyncio.Task[Any], call: _Abandoned, why: str) -> None:
    """Keep a task that ignored cancellation until it ends, and say so."""
    log.warning(
        "tool ignored cancellation and was abandoned; it may still be running",
        tool=call.tool,
        plugin=call.plugin,
        why=why,
    )
    _ABANDONED[task] = call
    task.add_done_callback(_forget)


async def stop_task(task: asyncio.Task[Any], name: str, plugin: str, why: str) -> bool:
    """Stop plugin code running in `task` as a tool is stopped; False when it is abandoned.

    The one stop sequence for every task that runs plugin code (a tool, a
    provider's call): cancelled, given `STOP_GRACE` seconds, then left running,
    warned and kept (`run_calls` gives it `STOP_GRACE` seconds more at its end)
    when it ignores the cancellation, also when our caller is cancelled meanwhile.
    What it returned or raised is dropped, never reported as lost.
    """
    return await _stop(task, _Abandoned(name, plugin, alone=False), why)


def _left_threads(owner: ToolCall, why: str) -> bool:
    """Whether a stopped call left threads working (a blocked ``asyncio.to_thread``); warn if so.

    Cancelling a task that awaits a thread ends the task at once, but not the
    thread: its work is abandoned, like a tool that ignores cancellation.
    """
    threads = running_threads(owner)
    if threads:
        log.warning(
            "tool was stopped but left work running in a thread; the thread was abandoned "
            "and may still be running",
            tool=owner.tool,
            plugin=owner.plugin,
            why=why,
            threads=threads,
        )
    return threads > 0


def _forget(task: asyncio.Task[Any]) -> None:
    """An abandoned task ended: let it go, and log how."""
    call = _ABANDONED.pop(task, None)
    error = None if task.cancelled() else task.exception()
    log.info(
        "abandoned tool ended",
        tool=call.tool if call else task.get_name(),
        error=None if error is None else f"{type(error).__name__}: {error}",
    )


def _may_run_alongside(tool: Tool) -> bool:
    return bool(tool.concurrency_safe) and not bool(tool.exclusive)


def _warn_if_abandoned_alongside(name: str, alone: bool) -> None:
    """Warn when a call starts next to an abandoned one and either of them must run alone."""
    loop = asyncio.get_running_loop()
    for task, call in list(_ABANDONED.items()):
        if task.get_loop() is loop and not task.done() and (alone or call.alone):
            log.warning(
                "tool starts while an abandoned tool may still be running, although one of "
                "them must run alone",
                tool=name,
                abandoned=call.tool,
                plugin=call.plugin,
            )


def run_calls(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` on a new event loop like ``asyncio.run``, but never wait for abandoned tools.

    ``asyncio.run`` cancels what is left running when `main` ends and waits for
    it without limit, so a tool that ignores cancellation would hang it. Here
    every task left is cancelled; abandoned tool tasks get `STOP_GRACE` seconds,
    then are left unfinished (their coroutines closed) when the loop closes.
    The loop's default executor (``asyncio.to_thread``,
    ``run_in_executor(None, ...)``) is a `WorkerThreads`, whose daemon threads
    get `STOP_GRACE` seconds too and are then left running, named in a
    warning, instead of being joined forever at loop shutdown and at exit.
    Ctrl-C behaves as under ``asyncio.run``.

    Raises RuntimeError, with `main` closed and nothing else touched, when an
    event loop is already running in this thread (a notebook, an async host):
    such a caller awaits the coroutine function instead.
    """
    if _loop_running():
        main.close()
        raise RuntimeError(
            "an event loop is already running in this thread, so a turn cannot run on a "
            "loop of its own here: await the async form instead (Runner.run_turn_async, "
            "Executor.run), or call this from another thread"
        )
    runner = asyncio.Runner()
    loop = runner.get_loop()
    workers = WorkerThreads()
    loop.set_default_executor(workers)
    try:
        with default_sigint():  # so that the Runner puts its own in place
            return runner.run(main)
    finally:
        stuck: list[asyncio.Task[Any]] = []
        try:
            stuck = _end_leftovers(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            _end_worker_threads(workers)
        finally:
            asyncio.set_event_loop(None)
            loop.close()
            _leave_unfinished(loop, stuck)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _end_leftovers(loop: asyncio.AbstractEventLoop) -> list[asyncio.Task[Any]]:
    """What ``asyncio.run`` does with the tasks left, with a time limit for abandoned tools.

    Returns the abandoned tool tasks that are still running.
    """
    leftovers = asyncio.all_tasks(loop)
    if not leftovers:
        return []
    for task in leftovers:
        task.cancel()
    abandoned = {task for task in leftovers if task in _ABANDONED}
    if abandoned:
        loop.run_until_complete(asyncio.wait(abandoned, timeout=STOP_GRACE))
    others = leftovers - abandoned
    if others:
        loop.run_until_complete(asyncio.gather(*others, return_exceptions=True))
    for task in others:
        if not task.cancelled() and task.exception() is not None:
            loop.call_exception_handler(
                {
                    "message": "unhandled exception during shutdown",
                    "exception": task.exception(),
                    "task": task,
                }
            )
    return [task for task in abandoned if not task.done()]


def _end_worker_threads(workers: WorkerThreads) -> None:
    """Take no more jobs; give those running `STOP_GRACE` seconds, then leave them, warning."""
    workers.shutdown(wait=False)
    for owner in workers.wait(STOP_GRACE):
        log.warning(
            "work in a thread still running when its event loop closed; left unfinished",
            tool=owner.tool if owner else "",
            plugin=owner.plugin if owner else "",
        )


def _leave_unfinished(loop: asyncio.AbstractEventLoop, stuck: list[asyncio.Task[Any]]) -> None:
    """Close the coroutines of abandoned tasks that outlived their (closed) loop, quietly."""
    if not stuck:
        return
    default = loop.get_exception_handler()

    def handler(owner: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("task") in stuck:  # "destroyed but it is pending": already warned
            return
        if default is None:
            owner.default_exception_handler(context)
        else:
            default(owner, context)

    loop.set_exception_handler(handler)
    for task in stuck:
        call = _ABANDONED.pop(task, None)
        log.warning(
            "abandoned tool still running when its event loop closed; left unfinished",
            tool=call.tool if call else task.get_name(),
            plugin=call.plugin if call else "",
        )
        # Runs what the tool has in `finally` (outside its task's context); whatever that
        # raises is the abandoned tool's and is dropped.
        with contextlib.suppress(Exception, asyncio.CancelledError):
            task.get_coro().close()


def _unless_repeated(prepared: PreparedCall, repeats: RepeatedCalls) -> PreparedCall:
    tool = prepared.tool
    if prepared.error is not None or tool is None or not tool.read_only:
        return prepared
    refusal = repeats.refusal(prepared.name, prepared.arguments)
    return prepared if refusal is None else attrs.evolve(prepared, error=refusal)


def _runs_with_others(prepared: PreparedCall) -> bool:
    # A refused call runs nothing, so it never needs to wait for anyone.
    tool = prepared.tool
    if prepared.error is not None or tool is None:
        return True
    return _may_run_alongside(tool)


def _batches(
    prepared: Sequence[tuple[ToolCallRequest, PreparedCall]],
) -> list[list[tuple[ToolCallRequest, PreparedCall]]]:
    """Group consecutive concurrency-safe calls; every other call is a batch of its own."""
    batches: list[list[tuple[ToolCallRequest, PreparedCall]]] = []
    open_batch = False
    for item in prepared:
        if _runs_with_others(item[1]):
            if not open_batch:
                batches.append([])
                open_batch = True
            batches[-1].append(item)
        else:
            batches.append([item])
            open_batch = False
    return batches


def _with_hint(result: ToolResult) -> ToolResult:
    """An error result as the model gets it: starting with "Error", ending with the hint."""
    if not result.is_error or result.endswith(ERROR_HINT):
        return result
    text = str(result) if result.startswith("Error") else f"Error: {result}"
    return ToolResult(text + ERROR_HINT, is_error=True, blocks=result.blocks)
