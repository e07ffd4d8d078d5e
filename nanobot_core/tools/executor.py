"""The executor: runs a batch of tool calls, concurrently where that is safe, and never raises.

Consecutive concurrency-safe calls run together; every other call runs on
its own, in order; exclusive tools always run alone. Whatever a tool does
(raise, overrun its timeout, get cancelled, return something that is not
text), the caller gets an "Error..." result naming the tool and its plugin
(name and version), ending with a hint for the model.

A tool's flags (``read_only``, ``concurrency_safe``, ``exclusive``) are those
the registry read once when the tool was registered (`ToolRegistry.flags_of`),
which ``nanobot-core tools`` lists: a flag property answering otherwise later
schedules no call otherwise than shown. Its ``timeout`` is read once per call,
before the batch is formed, contained like the rest of the tool's code: one
that raises or holds something else than a positive number or None refuses
that call with an error, and the others run. Where it is a plain value, or
the core's own property over one, no plugin code can run and the read costs
no containment.

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
import inspect
import time
import weakref
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar

import attrs

from nanobot_core._clip import a_type, clip
from nanobot_core._containment import (
    PluginEscapeError,
    contained,
    default_sigint,
    describe,
    plugin_code,
    sigint_deferred,
)
from nanobot_core._logging import get_logger
from nanobot_core.kernel.context import ToolCallEvent
from nanobot_core.tools._repeats import RepeatedCalls
from nanobot_core.tools._threads import CALL, ToolCall, WorkerThreads, running_threads
from nanobot_core.tools.base import (
    Tool,
    ToolResult,
    read_result,
    shown,
    timeout_problem,
    usable_timeout,
)
from nanobot_core.tools.registry import PreparedCall, ToolRegistry, tool_label

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
    plugin: str  # as logs name it (`PluginInfo.describe`), empty when not known
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
    """What one call produced; ``duration`` is the wall time of the awaited execution.

    ``invalid`` is true when the call itself was refused as the registry prepared it (an
    unknown tool, arguments that are no object or that its schema or its own check
    refused: `PreparedCall.error`), so that no tool code but that check ran.
    """

    call_id: str
    name: str
    arguments: dict[str, Any]
    result: ToolResult
    duration: float = 0.0
    repairs: list[str] = attrs.field(factory=list)
    invalid: bool = False

    @property
    def is_error(self) -> bool:
        """Whether the call failed."""
        return self.result.is_error


class ToolCallHooks(Protocol):
    """Observers around each executed call (the plugin manager adapts the plugin hooks to this).

    An implementation may also have an ``observes()`` method: when it returns False for a
    call, the executor calls neither hook for it and makes no copy of its arguments for
    them (the plugin manager's says whether any loaded plugin implements either hook).
    """

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
        if default_timeout is None or not usable_timeout(default_timeout):
            # Checked here: else the first call without a timeout of its own fails inside asyncio.
            raise ValueError(
                f"Executor: default_timeout is {shown(default_timeout)}, expected a positive "
                "number of seconds (math.inf: no limit)"
            )
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
        calls = list(calls)  # read twice below: a generator must not come empty the second time
        for index, call in enumerate(calls):
            if not isinstance(call, ToolCallRequest):
                raise TypeError(
                    f"Executor.run: calls[{index}] is a {type(call).__name__}, not a "
                    "ToolCallRequest(id, name, arguments) (the arguments as the model sent "
                    "them: the executor prepares each call itself)"
                )
        planned = [self._plan(call) for call in calls]
        if repeats is not None:
            planned = [_unless_repeated(p, repeats) for p in planned]
        outcomes: list[ToolCallOutcome] = []
        for batch in _batches(planned):
            outcomes.extend(await asyncio.gather(*(self._run_one(p) for p in batch)))
        return outcomes

    def _plan(self, call: ToolCallRequest) -> _Planned:
        """The call prepared, with its tool's flags read once (a call they refuse runs nothing)."""
        prepared = self.registry.prepare_call(call.name, call.arguments)
        tool = prepared.tool
        if prepared.error is not None or tool is None:
            return _Planned(call, prepared, None, invalid=True)
        # Scheduled by the flags registered (and listed), not by another reading of them.
        registered = self.registry.flags_of(prepared.name)
        flags = _flags_of(tool, registered, lambda: self._label(prepared.name))
        if isinstance(flags, str):
            return _Planned(call, attrs.evolve(prepared, error=flags), None)
        return _Planned(call, prepared, flags)

    def _label(self, name: str) -> str:
        return tool_label(name, self.registry.owner_of(name))

    async def _run_one(self, planned: _Planned) -> ToolCallOutcome:
        call, prepared = planned.call, planned.prepared

        def outcome(result: ToolResult, duration: float = 0.0) -> ToolCallOutcome:
            return ToolCallOutcome(
                call.id,
                prepared.name,
                prepared.arguments,
                _with_hint(result),
                duration,
                list(prepared.repairs),
                planned.invalid,
            )

        flags, tool = planned.flags, prepared.tool
        if prepared.error is not None or tool is None or flags is None:
            return outcome(ToolResult.error(prepared.error or f'unknown tool "{clip(call.name)}"'))
        # The registered name: the tool's own ``name`` is plugin code, not read again.
        name = prepared.name
        observed = self._observed(name)
        try:
            # Arguments a tool's own check returned may hold its objects, copied by their code.
            # The tool gets a copy of its own: what it does to its values (appends an object
            # no JSON holds, keeps them to change later) must not rewrite the arguments the
            # outcome reports (`call --json`, a turn's tool calls) or the hooks were shown.
            own = copy.deepcopy(prepared.arguments)
            # The hooks get another, so that no observer changes what the tool runs with or
            # what the outcome reports; with no hook to see it, none is made.
            shown = copy.deepcopy(prepared.arguments) if observed else None
        except BaseException as exc:
            said = contained(exc)
            return outcome(
                ToolResult.error(
                    f"{self._label(name)} cannot be run: its arguments could "
                    f"not be copied for the tool and the tool-call hooks: {said}"
                )
            )
        event = (
            None
            if shown is None
            else ToolCallEvent(
                tool=name, arguments=shown, call_id=call.id, plugin=self.registry.plugin_of(name)
            )
        )
        denial = None if event is None else self._before(event)
        if event is not None and denial is not None:
            event.duration = 0.0
            result = _with_hint(ToolResult.error(f'call to tool "{name}" denied: {denial}'))
            self._after(event, result)
            return outcome(result)
        started = time.perf_counter()
        result = await self._execute(tool, name, own, flags)
        duration = time.perf_counter() - started
        result = _with_hint(result)
        if event is not None:
            event.duration = duration
            self._after(event, result)
        log.debug(
            "tool call finished",
            tool=name,
            call_id=call.id,
            duration=duration,
            error=result.is_error,
        )
        return outcome(result, duration)

    async def _execute(
        self, tool: Tool, name: str, arguments: dict[str, Any], flags: _Flags
    ) -> ToolResult:
        timeout = flags.timeout if flags.timeout is not None else self.default_timeout
        _warn_if_abandoned_alongside(name, flags.alone)
        plugin = self.registry.owner_of(name)  # its logs name the plugin with its version
        owner = ToolCall(name, plugin)
        label = tool_label(name, plugin)
        task = asyncio.create_task(
            _call(tool, arguments, owner, label), name=f"nanobot-tool-{name}"
        )
        abandoned = _Abandoned(name, plugin, flags.alone)
        try:
            await asyncio.wait((task,), timeout=timeout)
        except asyncio.CancelledError:  # our caller is being cancelled: stop the tool, go on
            if await _stop(task, abandoned, "its caller was cancelled"):
                _left_threads(owner, "its caller was cancelled")
            raise
        if task.done():
            return _result_of(task, name, label, plugin)
        said = f"{label} timed out after {timeout:g}s"
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

    def _observed(self, name: str) -> bool:
        """Whether a hook will see the call of the tool `name` (`ToolCallHooks`' ``observes``).

        An ``observes`` that raises, or answers something else than a bool, is taken as a
        yes: the hooks are then called as if it were not there.
        """
        if self.hooks is None:
            return False
        observes = getattr(self.hooks, "observes", None)
        if observes is None:
            return True
        try:
            answer = observes()
        except Exception as exc:  # a broken observer never blocks a call
            log.error(
                "tool-call hooks' observes raised; hooks called", tool=name, error=describe(exc)
            )
            return True
        return answer is not False

    def _before(self, event: ToolCallEvent) -> str | None:
        if self.hooks is None:
            return None
        try:
            return self.hooks.before(event)
        except Exception as exc:  # a broken observer never blocks a call
            log.error(
                "before-tool-call hook raised; call allowed",
                tool=event.tool,
                plugin=self.registry.owner_of(event.tool),
                error=describe(exc),
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
                plugin=self.registry.owner_of(event.tool),
                error=describe(exc),
            )


async def _call(tool: Tool, arguments: dict[str, Any], owner: ToolCall, label: str) -> ToolResult:
    """The task of one call: the tool's own code, contained, and its value made a result.

    `label` names the tool and its plugin (`tool_label`) in what goes wrong.
    """
    CALL.set(owner)  # the task's own context: the threads it starts are counted under it
    # What the tool prints goes to the log, not into --json output.
    with plugin_code(label):
        pending = tool.execute(**arguments)
        if not inspect.isawaitable(pending):  # a plain ``def execute``: said so, not "await"
            return ToolResult.error(
                f"{label} cannot be run: its execute returned {a_type(pending)}, "
                "not an awaitable (execute must be an async def)"
            )
        value = await pending
        if inspect.iscoroutine(value):  # ``return self.helper()``, its await forgotten
            value.close()  # never started: nothing of it runs, nor is it warned of at exit
            return ToolResult.error(
                f"{label} returned a coroutine instead of its result: its execute must "
                "await it (return await ...)"
            )
        # Still the tool's code: reading what it returned may run its own methods.
        try:
            read = read_result(value)
        except Exception as exc:
            return ToolResult.error(
                f"{label} returned {a_type(value)} that could not be read "
                f"as a result: {contained(exc)}"
            )
        return read if isinstance(read, ToolResult) else ToolResult.error(f"{label} {read}")


def _result_of(task: asyncio.Task[ToolResult], name: str, label: str, plugin: str) -> ToolResult:
    """The result of a finished call task; a failure becomes an error result naming the tool."""
    try:
        return task.result()
    except asyncio.CancelledError:
        return ToolResult.error(f"{label} was cancelled before it finished.")
    except Exception as exc:  # a tool never breaks the caller (plugin_code made it an Exception)
        said = contained(exc)  # its message is its own code too
        log.info("tool raised", tool=name, plugin=plugin, error=said)
        return ToolResult.error(f"{label} failed: {said}")


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
        plugin=call.plugin if call else "",
        error=None if error is None else describe(error),  # its message is the tool's code
    )


class _Flags(NamedTuple):  # a tuple: built once per call, cheaper than an attrs class
    """A tool's flags for one call (the timeout read for it): its repeat check, batch and
    timeout use these."""

    read_only: bool
    alone: bool  # not concurrency-safe, or exclusive: nothing may run alongside it
    timeout: float | None


@attrs.frozen
class _Planned:
    """One call as the executor runs it; ``flags`` is None when the call is refused."""

    call: ToolCallRequest
    prepared: PreparedCall
    flags: _Flags | None
    #: Refused by the registry as it prepared the call (`ToolCallOutcome.invalid`), not
    #: later by the tool's flags or the repeat check.
    invalid: bool = False


class _UnusableFlag(ValueError):
    """A tool's timeout that raised when read, or holds what no timeout may."""


# Weak keys: a class made on the fly (one per test, one per configured server) is not kept
# alive by having been asked about. The value: whether reading ``timeout`` runs no plugin
# code (a plain value, or the core's own property over one), so needs no `plugin_code`
# (about 5 µs).
_PLAIN_TIMEOUT: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()


def _plain_timeout(cls: type) -> bool:
    known = _PLAIN_TIMEOUT.get(cls)
    if known is None:
        known = _PLAIN_TIMEOUT[cls] = _work_out_plain_timeout(cls)
    return known


def _work_out_plain_timeout(cls: type) -> bool:
    if vars(object)["__getattribute__"] is not cls.__getattribute__:  # an own attribute lookup
        return False
    owner = next((o for o in cls.__mro__ if "timeout" in vars(o)), None)
    if owner is None:
        return True
    found = vars(owner)["timeout"]
    return not hasattr(type(found), "__get__") or owner.__module__.startswith("nanobot_core.")


def _flags_of(tool: Tool, registered: Mapping[str, bool], label: Callable[[], str]) -> _Flags | str:
    """The tool's flags for one call: the `registered` ones, and its timeout read now; or why
    the timeout refuses the call (naming the tool by `label`)."""
    read_only = registered["read_only"]
    alone = not registered["concurrency_safe"] or registered["exclusive"]
    try:
        if _plain_timeout(type(tool)):
            timeout = _read_timeout(tool)
        else:
            with plugin_code(label()):
                timeout = _read_timeout(tool)
    except (_UnusableFlag, PluginEscapeError) as exc:
        return f"{label()} cannot be run: {exc}"
    except BaseException as exc:  # a real Ctrl-C goes on (`contained`)
        return f"{label()} cannot be run: reading its timeout raised {contained(exc)}"
    return _Flags(read_only, alone, timeout)


def _read_timeout(tool: Tool) -> float | None:
    """The tool's timeout, checked; raises `_UnusableFlag` saying what is wrong with it."""
    try:
        timeout = tool.timeout
    except BaseException as exc:
        raise _UnusableFlag(f"reading its timeout raised {contained(exc)}") from None
    if not usable_timeout(timeout):
        raise _UnusableFlag(timeout_problem(timeout))
    return None if timeout is None else float(timeout)


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
    Ctrl-C behaves as under ``asyncio.run``, but one pressed while the loop closes is
    raised once it is closed (`sigint_deferred`).

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
        # A Ctrl-C here is raised once the loop is closed: in the middle, it would fail
        # the task closing an async generator (a provider's kept connection), with a
        # traceback, and leave the others open.
        with sigint_deferred():
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


def _unless_repeated(planned: _Planned, repeats: RepeatedCalls) -> _Planned:
    prepared = planned.prepared
    if planned.flags is None or not planned.flags.read_only:
        return planned
    refusal = repeats.refusal(prepared.name, prepared.arguments)
    if refusal is None:
        return planned
    return _Planned(planned.call, attrs.evolve(prepared, error=refusal), None)


def _runs_with_others(planned: _Planned) -> bool:
    # A refused call runs nothing, so it never needs to wait for anyone.
    return planned.flags is None or not planned.flags.alone


def _batches(planned: Sequence[_Planned]) -> list[list[_Planned]]:
    """Group consecutive concurrency-safe calls; every other call is a batch of its own."""
    batches: list[list[_Planned]] = []
    open_batch = False
    for item in planned:
        if _runs_with_others(item):
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
