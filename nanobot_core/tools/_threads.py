"""Worker threads that never hold up the end of an event loop or of the process.

The default executor of an asyncio loop is a ``ThreadPoolExecutor``: its threads
are joined when the loop shuts down and again when the interpreter exits, so one
``asyncio.to_thread`` (or ``loop.run_in_executor(None, ...)``) whose function
blocks forever keeps the process alive for good, long after the tool that
started it timed out. `WorkerThreads` is the default executor `run_calls` gives
its loop instead: each job runs in a daemon thread of its own that ends with the
job, so nothing idles after work that finished, and nothing still blocked is
waited for at exit.

Every job, and every `run_in_daemon_thread` call, is counted under the tool call
whose task started it (`CALL`, set in the task of each call), so that the
executor can tell when a tool stopped on cancellation but left work running in
a thread, and say which tool and plugin it was.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["CALL", "ToolCall", "WorkerThreads", "counted", "counted_in", "running_threads"]

T = TypeVar("T")


class ToolCall:
    """One tool call, as the owner of the threads it starts (compared by identity)."""

    __slots__ = ("plugin", "tool")

    def __init__(self, tool: str, plugin: str) -> None:
        self.tool = tool
        self.plugin = plugin  # as logs name it (`PluginInfo.describe`), empty when not known


#: The tool call whose task is running (None outside tool calls).
CALL: contextvars.ContextVar[ToolCall | None] = contextvars.ContextVar(
    "nanobot_tool_call", default=None
)

_lock = threading.Lock()
_running: dict[ToolCall, int] = {}


def _begin(call: ToolCall | None) -> None:
    if call is not None:
        with _lock:
            _running[call] = _running.get(call, 0) + 1


def _end(call: ToolCall | None) -> None:
    if call is not None:
        with _lock:
            left = _running.get(call, 0) - 1
            if left > 0:
                _running[call] = left
            else:
                _running.pop(call, None)


def running_threads(call: ToolCall) -> int:
    """How many threads started by `call` are still working."""
    with _lock:
        return _running.get(call, 0)


def counted(work: Callable[[], None]) -> Callable[[], None]:
    """`work` counted under the current tool call from now until it ends (in any thread)."""
    return counted_in(CALL.get(), work)


def counted_in(call: ToolCall | None, work: Callable[[], None]) -> Callable[[], None]:
    """`work` counted under `call` from now until it ends."""
    _begin(call)

    def run() -> None:
        try:
            work()
        finally:
            _end(call)

    return run


class WorkerThreads(concurrent.futures.ThreadPoolExecutor):
    """A default executor for an event loop whose threads are daemons, one per job.

    It is a ``ThreadPoolExecutor`` only because ``loop.set_default_executor``
    takes nothing else; none of the pool's own threads or queue is used. There
    is no cap on the number of threads: a job never waits behind jobs that are
    stuck (a cap would let a few stuck tools starve the name lookups of the
    provider's connections, which also run here).
    """

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self._jobs_lock = threading.Condition()
        self._jobs: dict[concurrent.futures.Future[Any], ToolCall | None] = {}
        self._closed = False
        self._numbers = itertools.count(1)

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        """Start `fn` in a new daemon thread; its future settles when it returns or raises."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        call = CALL.get()
        with self._jobs_lock:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._jobs[future] = call

        def work() -> None:
            try:
                if not future.set_running_or_notify_cancel():
                    return
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # as ThreadPoolExecutor: the awaiting code gets it
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            finally:
                with self._jobs_lock:
                    self._jobs.pop(future, None)
                    self._jobs_lock.notify_all()

        name = f"nanobot-worker-{next(self._numbers)}"
        if call is not None:
            name += f"-{call.tool}"
        threading.Thread(target=counted_in(call, work), name=name, daemon=True).start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Take no more jobs; with `wait`, wait for those running (as ``asyncio.run`` does)."""
        with self._jobs_lock:
            self._closed = True
        if wait:
            self.wait(None)

    def wait(self, timeout: float | None) -> list[ToolCall | None]:
        """Wait up to `timeout` seconds for the running jobs; the owners of those left."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._jobs_lock:
            while self._jobs:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._jobs_lock.wait(left)
            return list(self._jobs.values())
