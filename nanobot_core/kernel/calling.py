"""Calling: the one isolated way every hook implementation is called.

Every hook goes through `call_in_order`, which takes the implementations of the
plugins given (in the order given) once, up front, and calls each of them exactly
once through `call_once`. A failure is returned as an `Outcome`, never raised, so
the caller decides what it means (fail the plugin, or log and ignore) and the
remaining implementations are still called. `call_once` is the only place a
plugin's code runs, so containment of what a plugin may do while it runs belongs
there and nowhere else.

While an implementation runs, its plugin is the *calling plugin*: what it reports
with `report_problem` (a tool of an MCP server it cannot offer, say) is listed
under that plugin's ``problems``, named with its distribution and version, by the
same `note_problem` the core uses for the tools it leaves out itself.

pluggy's ordering and wrapping markers (``tryfirst``, ``trylast``, ``wrapper``,
``hookwrapper``) are refused at registration by `refused_markers`: the core's order
is canonical (built-ins first, then distribution name, then entry-point name) and
each implementation is called on its own, so a wrapper has nothing to wrap.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

import attrs
import pluggy

from nanobot_core._containment import describe, plugin_code
from nanobot_core._logging import get_logger
from nanobot_core.kernel.records import PluginRecord

__all__ = [
    "REFUSED_MARKERS",
    "Outcome",
    "call_in_order",
    "call_once",
    "note_problem",
    "refused_markers",
    "report_problem",
]

REFUSED_MARKERS = ("wrapper", "hookwrapper", "tryfirst", "trylast")

log = get_logger("nanobot_core.kernel")

# The plugin whose hook implementation is running (in this thread or task), if any.
_CALLING: ContextVar[PluginRecord | None] = ContextVar("nanobot_calling_plugin", default=None)


@attrs.frozen
class Outcome:
    """What one implementation did: the value it returned, or the exception it raised."""

    record: PluginRecord
    value: Any = None
    error: Exception | None = None

    @property
    def failed(self) -> bool:
        """Whether the implementation raised."""
        return self.error is not None

    def describe_error(self) -> str:
        """``Type: message`` of the exception (`describe`; empty when it did not fail)."""
        return "" if self.error is None else describe(self.error)


def call_once(record: PluginRecord, impl: pluggy.HookImpl, kwargs: Mapping[str, Any]) -> Outcome:
    """Call one implementation with the arguments it names; an exception becomes the outcome."""
    token = _CALLING.set(record)
    try:
        # Prints go to the log and SystemExit/KeyboardInterrupt become a failure of this plugin.
        with plugin_code(record.info.describe()):
            value = impl.function(*[kwargs[name] for name in impl.argnames])
    except Exception as exc:
        return Outcome(record, error=exc)
    finally:
        _CALLING.reset(token)
    return Outcome(record, value)


def note_problem(record: PluginRecord, problem: str) -> None:
    """List `problem` under `record`'s ``problems`` and log it once (the one path for both).

    The core's own problems (a tool it leaves out) and those a plugin reports with
    `report_problem` go through here, so they are listed and logged alike.
    """
    if record.add_problem(problem):
        log.warning("plugin problem", plugin=record.info.describe(), problem=problem)


def report_problem(problem: str) -> bool:
    """Report something the calling plugin leaves out; whether a plugin was calling.

    Called from a hook implementation (or code it runs in the same thread), the
    problem is listed under that plugin's ``problems`` in ``nanobot-core plugins``
    (and ``--json``), attributed to its name, distribution and version, and logged
    as a warning, exactly like a tool the core itself leaves out; the plugin stays
    loaded. A problem is listed once however often it is reported. Called
    outside any hook (a plugin's function used directly), it is only logged, and
    the answer is False. `problem` is one line: each run of white space (line breaks
    included) becomes one space.
    """
    if not isinstance(problem, str):
        raise TypeError(f"a problem is a str, not {type(problem).__name__}")
    line = " ".join(problem.split())
    if not line:
        raise ValueError("a problem must say what is wrong (it is empty)")
    record = _CALLING.get()
    if record is None:
        log.warning("plugin problem", plugin=None, problem=line)
        return False
    note_problem(record, line)
    return True


def call_in_order(
    pm: pluggy.PluginManager,
    hook_name: str,
    records: Sequence[PluginRecord],
    kwargs: Mapping[str, Any],
) -> Iterator[Outcome]:
    """Call each implementation of `hook_name` of `records` once, in the order of `records`.

    The implementations are taken before the first call, so a plugin failed (and
    unregistered) on the way neither restarts the loop nor hides the plugins after it;
    a record that is no longer loaded when its turn comes is skipped.
    """
    impls = implementations(pm, hook_name)
    planned = [(record, impl) for record in records for impl in impls.get(id(record.obj), [])]
    for record, impl in planned:
        if record.status != "loaded":
            continue
        yield call_once(record, impl, kwargs)


def implementations(pm: pluggy.PluginManager, hook_name: str) -> dict[int, list[pluggy.HookImpl]]:
    """The implementations of one hook, by the id of the plugin object that holds them."""
    by_plugin: dict[int, list[pluggy.HookImpl]] = {}
    for impl in getattr(pm.hook, hook_name).get_hookimpls():
        by_plugin.setdefault(id(impl.plugin), []).append(impl)
    return by_plugin


def refused_markers(pm: pluggy.PluginManager, plugin: object) -> list[str]:
    """``hook_name (marker)`` for each implementation of `plugin` that uses a refused marker."""
    found: list[str] = []
    for caller in pm.get_hookcallers(plugin) or []:
        for impl in caller.get_hookimpls():
            if impl.plugin is not plugin:
                continue
            used = [marker for marker in REFUSED_MARKERS if getattr(impl, marker, False)]
            if used:
                found.append(f"{caller.name} ({', '.join(used)})")
    return sorted(found)
