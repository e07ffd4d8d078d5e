"""Running plugin code so that it cannot corrupt the CLI's output or end the process.

Everything a plugin runs (its import, its hooks, its tools) goes through
`plugin_code`:

- what it prints goes to the log (one warning naming the plugin, when its
  code returns), never to stdout, where ``--json`` output must stay one JSON
  document. The switch is a context variable read by a stand-in for
  ``sys.stdout``, so the core's own output, other threads and other tasks are
  unaffected; it follows the code into worker threads started with a copied
  context (``asyncio.to_thread``). The print is only collected while the
  code runs: a print may come from inside a log call that holds its logger's
  lock (a plugin's structlog writing to stdout), where logging it at once
  would wait for that lock forever. Records of the core's own logger pass
  through (`EMITTING`): where they go is the logging set-up's choice.
- ``SystemExit``, ``KeyboardInterrupt`` and every other ``BaseException``
  that is not an ``Exception`` (``GeneratorExit``, a plugin's own) raised
  inside become a `PluginEscapeError` (a `PluginError`, so an ``Exception``),
  which the callers treat like any plugin failure: the plugin is reported by name, the process
  goes on. ``asyncio.CancelledError`` passes: it is how the caller stops an
  async tool, and the caller decides what it means. So does the
  ``KeyboardInterrupt`` of a real Ctrl-C, raised by a SIGINT handler (the
  CLI's, `interrupt_on_sigint`, or the one of ``asyncio.Runner``, which
  SIGTERM and SIGHUP are handed to as well: `nanobot_core._stop_signals`): a
  user stopping a hook that hangs stops the command, not just that plugin.
"""

from __future__ import annotations

import errno
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import CodeType, FrameType
from typing import Any

from nanobot_core._logging import EMITTING, get_logger
from nanobot_core._stop_signals import CTRL_C_MARK, ctrl_c_interrupt
from nanobot_core.errors import PluginEscapeError

__all__ = [
    "PluginEscapeError",
    "StdoutError",
    "contained",
    "default_sigint",
    "describe",
    "escape_error",
    "guard_stdout",
    "interrupt_on_sigint",
    "passes_through",
    "plugin_code",
    "sigint_deferred",
    "stdout_failed",
]

log = get_logger(__name__)

# Printed text kept per warning: enough to recognise it, not a flood.
_SHOWN_CHARS = 2_000


class _Printed:
    """What the plugin code of one `plugin_code` block printed, logged when the block ends.

    A thread the code started may print after that (an abandoned tool's): such a
    print is logged from a thread of its own, which waits for any lock its
    printer holds to be released rather than for itself.
    """

    __slots__ = ("_texts", "kept", "open", "owner")

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.open = True
        self.kept = 0  # characters kept in `_texts`
        self._texts: list[str] = []

    def add(self, text: str) -> None:
        if not self.open:
            if text.strip():  # a print's own line end is a write of its own
                late = threading.Thread(target=_log_print, args=(self.owner, text), daemon=True)
                late.start()
            return
        if self.kept < _SHOWN_CHARS:  # past that, the warning shows no more of it
            self._texts.append(text)
            self.kept += len(text)

    def close(self) -> None:
        """Log what was printed, once; later prints are logged one by one."""
        self.open = False
        text = "".join(self._texts)  # the spaces and line ends between prints kept
        if text.strip():
            _log_print(self.owner, text)


def _log_print(owner: str, text: str) -> None:
    log.warning("plugin wrote to stdout", plugin=owner, text=text.rstrip()[:_SHOWN_CHARS])


_OWNER: ContextVar[_Printed | None] = ContextVar("nanobot_plugin_code", default=None)


class StdoutError(OSError):
    """Writing to stdout failed (a full disk, an I/O error); a closed pipe is no such failure.

    An ``OSError`` with the errno of the failure, so the CLI tells it from any
    other ``OSError`` and says "cannot write to stdout".
    """


def stdout_failed(exc: OSError) -> OSError:
    """`exc`, from a write to stdout, as the CLI reports it: a `StdoutError`, or as it is."""
    if exc.errno == errno.EPIPE or isinstance(exc, StdoutError):
        return exc  # click ends a command whose reader went away quietly, exit 1
    return StdoutError(exc.errno, exc.strerror or str(exc))


class _Stdout:
    """Stands in for ``sys.stdout``: the core's writes pass through, plugin code's are logged.

    A write of the core's that fails raises `StdoutError`. Not an ``io``
    subclass: those define ``encoding``, ``fileno`` and ``isatty`` themselves,
    where the real stream's answers are wanted.
    """

    def __init__(self, real: Any) -> None:
        self._real = real

    def write(self, text: str) -> int:
        printed = _OWNER.get()
        if printed is None or EMITTING.get():
            try:
                written: int = self._real.write(text)
            except OSError as exc:
                raise stdout_failed(exc) from None
            return written
        printed.add(text)
        return len(text)

    def flush(self) -> None:
        try:
            self._real.flush()
        except OSError as exc:
            raise stdout_failed(exc) from None

    def __getattr__(self, name: str) -> Any:  # encoding, buffer, fileno, isatty...
        return getattr(self._real, name)


def _install() -> None:
    # No stdout (pythonw, a service, a process started with it closed): print writes
    # nothing, as it did; a stand-in for None would make every print of the host fail.
    if sys.stdout is not None and not isinstance(sys.stdout, _Stdout):
        sys.stdout = _Stdout(sys.stdout)


def guard_stdout(*, through: Callable[[Any], Any] | None = None) -> None:
    """Put the stand-in for stdout in place now (the CLI, before any output): see `_Stdout`.

    `through`, given the stream the stand-in writes to, returns the one it writes to
    from now on (the CLI's escaping for a terminal, `nanobot_core._terminal`): beneath
    the stand-in, so what plugin code prints reaches it only as the log line it becomes.
    """
    _install()
    if through is not None and isinstance(sys.stdout, _Stdout):
        sys.stdout._real = through(sys.stdout._real)


@contextmanager
def plugin_code(owner: str) -> Iterator[None]:
    """Run the block as code of plugin `owner` (a description naming it and its version)."""
    _install()
    printed = _Printed(owner)
    token = _OWNER.set(printed)
    try:
        yield
    except BaseException as exc:
        if isinstance(exc, Exception) or passes_through(exc):
            raise
        raise escape_error(exc) from None
    finally:
        _OWNER.reset(token)
        printed.close()


def passes_through(exc: BaseException) -> bool:
    """Whether `exc`, raised by plugin code, goes on to the caller rather than being contained.

    Cancellation (how a caller stops an async tool) and a real Ctrl-C do;
    every other ``BaseException`` is the plugin's failure (`escape_error`).
    Code that calls a plugin's function without `plugin_code` (a governance
    stage, called per message where a context manager would cost too much)
    asks this in its own ``except BaseException``.
    """
    return _is_cancellation(exc) or _is_ctrl_c(exc)


def escape_error(exc: BaseException) -> PluginEscapeError:
    """The `PluginEscapeError` that stands for `exc`, which plugin code raised.

    `plugin_code` uses it; so does a worker thread running plugin code, where
    such an exception must not end the thread unreported.
    """
    return PluginEscapeError(f"raised {describe(exc)}")


def _is_cancellation(exc: BaseException) -> bool:
    # Looked up, not imported: code that never loaded asyncio cannot be cancelled by it.
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and isinstance(exc, asyncio.CancelledError)


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C: a ``KeyboardInterrupt`` that `plugin_code` lets through.

    It is known by this frame at the end of its traceback, and by a mark: a
    driver may raise it on without its traceback (psycopg's ``execute`` does,
    ``raise ex.with_traceback(None)``, after it cancels the query), and a Ctrl-C
    while the postgres store waits for a busy session's lease was taken for the
    plugin's own ``KeyboardInterrupt``: exit 1, ``lease raised KeyboardInterrupt``.
    """
    raise ctrl_c_interrupt()


def interrupt_on_sigint() -> None:
    """Make SIGINT raise a ``KeyboardInterrupt`` that plugin code cannot contain (main thread)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


@contextmanager
def default_sigint() -> Iterator[None]:
    """Python's own SIGINT handler inside the block, where `interrupt_on_sigint` installed ours.

    ``asyncio.Runner`` replaces only that handler with its own (the first
    Ctrl-C cancels the main task; the next raises ``KeyboardInterrupt``).
    Off the main thread, where no handler can be set (and ``asyncio.Runner``
    sets none), nothing changes.
    """
    if (
        signal.getsignal(signal.SIGINT) is not _on_sigint
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, _on_sigint)


@contextmanager
def sigint_deferred() -> Iterator[list[bool]]:
    """Inside the block a Ctrl-C is only noted; raised by the handler before it once it ends.

    For cleanup that a ``KeyboardInterrupt`` would cut in two: raised in the
    middle of closing an event loop's async generators, it fails the task that
    was closing one (its traceback printed as "Task exception was never
    retrieved") and leaves the rest unclosed. Off the main thread, where no
    handler can be set, nothing changes.
    """
    pressed: list[bool] = []
    if threading.current_thread() is not threading.main_thread():
        yield pressed
        return

    def note(signum: int, frame: FrameType | None) -> None:
        pressed.append(True)

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        signal.raise_signal(signal.SIGINT)  # to the handler in place: as if pressed now


def _is_ctrl_c(exc: BaseException) -> bool:
    """Whether `exc` is a ``KeyboardInterrupt`` raised by a SIGINT handler that knows it."""
    if not isinstance(exc, KeyboardInterrupt):
        return False
    if getattr(exc, CTRL_C_MARK, False) is True:
        return True
    last = exc.__traceback__
    while last is not None and last.tb_next is not None:
        last = last.tb_next
    return last is not None and last.tb_frame.f_code in _handler_codes()


def _handler_codes() -> set[CodeType]:
    codes = {_on_sigint.__code__}
    runners = sys.modules.get("asyncio.runners")  # looked up: loaded with any event loop
    handler = getattr(getattr(runners, "Runner", None), "_on_sigint", None)
    code = getattr(handler, "__code__", None)
    if isinstance(code, CodeType):
        codes.add(code)
    return codes


def contained(exc: BaseException) -> str:
    """`describe` of `exc`, which plugin code raised, for a report; `exc` raised on if it passes.

    For code that calls a plugin's function without `plugin_code`, in its own
    ``except BaseException`` (a governance stage or prefilter, called per
    message, where a context manager would cost more than most stages).
    """
    if not isinstance(exc, Exception) and passes_through(exc):
        raise exc
    return describe(exc)


def describe(exc: BaseException) -> str:
    """``SystemExit(3)``, ``KeyboardInterrupt``, ``MyEscape: its message``; never raises.

    The one way the core words an exception plugin code raised. Its message
    is the plugin's code too (a ``__str__``, or the ``__repr__`` of a
    ``SystemExit`` code): one that raises (even ``SystemExit``) or returns no
    str gives ``RuntimeError (its message could not be read: SystemExit)``,
    so reporting a failure never becomes one. Only what `passes_through` (a
    real Ctrl-C while that code runs) goes on.
    """
    name = type(exc).__name__
    try:  # all of it: a str subclass returned may have a __format__ or __len__ of its own
        if isinstance(exc, SystemExit):
            return f"{name}({exc.code!r})"
        text = str(exc)
        return f"{name}: {text}" if text else name
    except BaseException as unreadable:
        if not isinstance(unreadable, Exception) and passes_through(unreadable):
            raise
        return f"{name} (its message could not be read: {type(unreadable).__name__})"
