"""The executor: runs a batch of tool calls, concurrently where that is safe, and never raises.

Consecutive concurrency-safe calls run together; every other call runs on
its own, in order; exclusive tools always run alone. Whatever a tool does
(raise, overrun its timeout, get cancelled, return something that is not
text), the caller gets an "Error..." result ending with a hint for the model.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Sequence
from typing import Any, Protocol

import attrs

from nanobot_core._containment import plugin_code
from nanobot_core._logging import get_logger
from nanobot_core.kernel.context import ToolCallEvent
from nanobot_core.tools._repeats import RepeatedCalls
from nanobot_core.tools.base import Tool, ToolResult
from nanobot_core.tools.registry import PreparedCall, ToolRegistry

__all__ = ["ERROR_HINT", "Executor", "ToolCallHooks", "ToolCallOutcome", "ToolCallRequest"]

log = get_logger("nanobot_core.tools")

ERROR_HINT = "\n\n[Analyze the error above and try a different approach.]"


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
        result = await self._execute(tool, prepared.arguments)
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

    async def _execute(self, tool: Tool, arguments: dict[str, Any]) -> ToolResult:
        timeout = tool.timeout if tool.timeout is not None else self.default_timeout
        try:
            async with asyncio.timeout(timeout):
                # What the tool prints goes to the log, not into --json output.
                with plugin_code(f"tool {tool.name!r}"):
                    value = await tool.execute(**arguments)
        except TimeoutError:
            abandoned = (
                " Its worker thread was abandoned and may still finish in the background."
                if getattr(tool, "blocking", False)
                else ""
            )
            return ToolResult.error(
                f'tool "{tool.name}" timed out after {timeout:g}s and was stopped.{abandoned}'
            )
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # our caller is being cancelled: that is not the tool's business
            return ToolResult.error(f'tool "{tool.name}" was cancelled before it finished.')
        except (Exception, SystemExit) as exc:  # a tool never breaks the caller
            log.info("tool raised", tool=tool.name, error=f"{type(exc).__name__}: {exc}")
            return ToolResult.error(f'tool "{tool.name}" failed: {type(exc).__name__}: {exc}')
        return ToolResult.of(value)

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
    return bool(tool.concurrency_safe) and not bool(tool.exclusive)


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
