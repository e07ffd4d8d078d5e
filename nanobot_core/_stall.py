"""Naming plugin code that blocks the main thread: a warning, since nothing can stop it.

Code a plugin runs on the thread the command runs on (a hook at load, a
prompt section, a governance stage, a provider that blocks without awaiting)
has no time limit: Python cannot stop a thread, and giving each such call a
thread of its own would cost every turn. Without a word, such a hang looks
like a slow model or a dead machine. `StallWatch` is one thread that looks at
the main thread's stack once in a while; when the same call into a plugin's
code has been on it for ``[plugins] stall_warning`` seconds, it logs a
warning naming the plugin (name, distribution, version) and the function it
is in, and a second one when that call has finished, with how long it took.

Looking costs the watched code nothing: no hook, stage or tool call is
wrapped, so the fast paths stay as they are. Code is a plugin's when its
module is in the top-level package of the plugin's module (the object it
registered, or its entry point's module, which is known before the import
ends); the core's own package is never a plugin's. Where no plugin's frame is
on the stack (the event loop waiting on a provider that awaits, the core's
own work), nothing is said.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any

import attrs

from nanobot_core._logging import get_logger

if TYPE_CHECKING:
    from nanobot_core.kernel.records import PluginRecord

__all__ = ["StallWatch", "StalledCall", "plugin_packages", "stalled_call", "watch_threads_left"]

log = get_logger(__name__)

#: Packages whose code is never a plugin's, whatever a plugin object says its module is.
_NEVER_PLUGINS = frozenset({"nanobot_core", "builtins", "__main__"})
#: Frames looked at per look, innermost first: a stack deeper than this is cut there.
_MAX_FRAMES = 500


@attrs.frozen
class StalledCall:
    """The call into a plugin's code found on a stack."""

    #: The plugin, as every message names one (`PluginInfo.describe`).
    plugin: str
    #: Where that plugin's code is now: ``module.function, line N`` (its innermost frame).
    where: str
    #: The frame where the call entered the plugin's code: the same object for as long as
    #: that call runs, so two looks that find it found one call.
    entry: FrameType


def _module_of(obj: Any) -> str | None:
    if isinstance(obj, ModuleType):
        return obj.__name__
    module = getattr(obj, "__module__", None)  # a class, a function, an instance's class
    return module if isinstance(module, str) else None


def plugin_packages(records: Iterable[PluginRecord]) -> dict[str, list[tuple[str, str]]]:
    """Top-level package -> (module, plugin description) of each plugin whose code lives there.

    A plugin's module is its object's, else its entry point's (an import in
    progress has no object yet). Built-in plugins are left out: their code is
    the core's.
    """
    packages: dict[str, list[tuple[str, str]]] = {}
    for record in records:
        if record.info.builtin:
            continue
        modules = {_module_of(record.obj)} if record.obj is not None else set()
        entry_point = record.info.entry_point
        if entry_point:
            modules.add(entry_point.partition(":")[0].strip())
        for module in filter(None, modules):
            top = module.partition(".")[0]
            if top not in _NEVER_PLUGINS:
                packages.setdefault(top, []).append((module, record.info.describe()))
    return packages


def _owner(module: str, owners: list[tuple[str, str]]) -> str:
    """Of the plugins of one package, the one whose module is the longest start of `module`."""
    best, best_length = owners[0][1], -1
    for candidate, plugin in owners:
        inside = module == candidate or module.startswith(candidate + ".")
        if inside and len(candidate) > best_length:
            best, best_length = plugin, len(candidate)
    return best


def stalled_call(
    frame: FrameType | None, packages: dict[str, list[tuple[str, str]]]
) -> StalledCall | None:
    """The innermost call into a plugin's code on the stack that ends at `frame`, or None."""
    found: tuple[str, FrameType] | None = None  # (plugin, its innermost frame)
    entry: FrameType | None = None
    for _ in range(_MAX_FRAMES):
        if frame is None:
            break
        module = frame.f_globals.get("__name__")
        top = module.partition(".")[0] if isinstance(module, str) else ""
        if found is not None and top == "nanobot_core":
            break  # the core called the plugin from here
        owners = packages.get(top)
        if owners and isinstance(module, str):
            plugin = _owner(module, owners)
            if found is None:
                found, entry = (plugin, frame), frame
            elif plugin == found[0]:
                entry = frame  # still its code, further out: the call began there or before
            else:
                break  # another plugin's code called it
        # A library's frame (the plugin's call into it, or its call back) is passed over.
        frame = frame.f_back
    if found is None or entry is None:
        return None
    plugin, inner = found
    code = inner.f_code
    where = f"{inner.f_globals.get('__name__')}.{code.co_qualname}, line {inner.f_lineno}"
    return StalledCall(plugin=plugin, where=where, entry=entry)


class StallWatch:
    """Warns when one call into plugin code has held the main thread for `after` seconds.

    With `limit` (seconds, 0: none) and `at_limit`, calls `at_limit(call, seconds)`
    from the watching thread once a call has held it that long (the CLI ends the
    process there: the thread cannot be stopped). Started with `start` (or as a
    context manager), ended with `stop`; the thread is a daemon, so a process
    that ends while it looks is not held. `records` gives the plugins known at
    the moment (called from the watching thread: it must only read).
    """

    def __init__(
        self,
        after: float,
        records: Callable[[], Iterable[PluginRecord]],
        *,
        limit: float = 0.0,
        at_limit: Callable[[StalledCall, float], object] | None = None,
        thread: threading.Thread | None = None,
        interval: float | None = None,
    ) -> None:
        self.after = after
        self.limit = limit if at_limit is not None else 0.0
        self._at_limit = at_limit
        self._records = records
        self._watched = thread or threading.main_thread()
        # Often enough that each comes at most a quarter late, never busily.
        shortest = min((t for t in (after, self.limit) if t > 0), default=1.0)
        self._interval = interval if interval is not None else min(1.0, max(0.05, shortest / 4))
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> StallWatch:
        """Start looking (once); with neither a warning nor a limit, nothing is started."""
        if self._thread is None and (self.after > 0 or self.limit > 0):
            self._thread = threading.Thread(
                target=self._watch, name="nanobot-stall-watch", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop looking; a stall warned about is then reported as finished.

        Also after a `start` that a Ctrl-C (or SIGTERM) cut short before its thread was
        running: such a thread sees the watch stopped as it starts, and is not waited for.
        """
        self._stopped.set()
        thread = self._thread
        # is_alive, not join alone: join refuses a thread not started yet (RuntimeError).
        if thread is not None and thread is not threading.current_thread() and thread.is_alive():
            thread.join(timeout=5)

    def __enter__(self) -> StallWatch:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _look(self) -> StalledCall | None:
        ident = self._watched.ident
        frame = sys._current_frames().get(ident) if ident is not None else None
        if frame is None:
            return None
        return stalled_call(frame, plugin_packages(tuple(self._records())))

    def _watch(self) -> None:
        current: StalledCall | None = None
        since = 0.0
        warned = limited = False
        while not self._stopped.wait(self._interval):
            try:
                found = self._look()
            except Exception as exc:  # a look that fails must not end the watch unsaid
                log.debug("stall watch could not read the main thread's stack", error=str(exc))
                found = None
            now = time.monotonic()
            if current is not None and (found is None or found.entry is not current.entry):
                if warned:
                    _returned(current, now - since)
                current, warned, limited = None, False, False
            if found is None:
                continue
            if current is None:
                current, since = found, now
                continue
            held = now - since
            if not warned and 0 < self.after <= held:
                warned = True
                log.warning(
                    "plugin code has not returned",
                    plugin=found.plugin,
                    at=found.where,
                    seconds=round(held, 1),
                    note=(
                        "plugin code that blocks the thread has no time limit unless "
                        "plugins.stall_timeout is set; Ctrl-C stops the command (during a "
                        "turn, a second Ctrl-C)"
                    ),
                )
            if not limited and 0 < self.limit <= held and self._at_limit is not None:
                limited = True  # once per call, whatever `at_limit` does
                self._at_limit(found, held)
        if current is not None and warned:
            # Stopped by the command that ran it, on the thread it held: the call is done.
            _returned(current, time.monotonic() - since)


def _returned(call: StalledCall, seconds: float) -> None:
    log.warning("plugin code finished", plugin=call.plugin, seconds=round(seconds, 1))


def watch_threads_left(after: float, records: Callable[[], Iterable[PluginRecord]]) -> None:
    """Once the command is done, name the threads its process still waits for, after `after` s.

    Python joins every thread that is not a daemon before the process exits, for as long as it
    runs (a plugin's store may be saving in one): a plugin's thread that never ends (a loop, a
    blocked socket) holds the process after its command is done, with nothing said. A daemon
    thread waits `after` seconds (``[plugins] stall_warning``; 0: never), then warns of each
    such thread still running, with the plugin whose code it runs (as `StallWatch` finds it
    on its stack, or by the function it was started with) and where that code is. The core's
    own threads are all daemons.
    """
    if after <= 0:
        return
    looking = threading.current_thread()

    def look() -> None:
        time.sleep(after)
        for thread in threading.enumerate():
            if thread.daemon or thread is looking or thread is threading.main_thread():
                continue
            try:
                plugin, where = _running(thread, plugin_packages(tuple(records())))
            except Exception as exc:  # a look that fails must not end unsaid
                plugin, where = "", f"(its stack could not be read: {exc})"
            log.warning(
                "command done; the process waits for a thread that is not a daemon",
                thread=thread.name,
                plugin=plugin,
                at=where,
                seconds=round(after, 1),
                note=(
                    "a thread plugin code started without daemon=True is waited for "
                    "before the process exits; Ctrl-C stops the wait"
                ),
            )

    threading.Thread(target=look, name="nanobot-exit-watch", daemon=True).start()


def _running(
    thread: threading.Thread, packages: dict[str, list[tuple[str, str]]]
) -> tuple[str, str]:
    """The plugin whose code `thread` runs ("" when none is known), and where it is."""
    ident = thread.ident
    frame = sys._current_frames().get(ident) if ident is not None else None
    found = stalled_call(frame, packages)
    if found is not None:
        return found.plugin, found.where
    # No plugin frame on its stack (it waits in a function of C, ``time.sleep``, called
    # from the thread's own ``run``): the function it was started with.
    target = getattr(thread, "_target", None)
    module = _module_of(target) if target is not None else None
    if module is None:
        return "", "unknown"
    name = getattr(target, "__qualname__", None)
    where = f"{module}.{name}" if isinstance(name, str) else module
    owners = packages.get(module.partition(".")[0])
    return (_owner(module, owners) if owners else ""), where
