"""SIGTERM and SIGHUP end the command as Ctrl-C does, with their own exit status and words.

A service manager (systemd, supervisord), a container runtime (``docker
stop``, Kubernetes) and a closed terminal stop a process with SIGTERM or
SIGHUP, not SIGINT. Left to Python they ended it at once, by the signal:
nothing said, an MCP server busy with a call left running, a store's save
from an atexit callback or a thread lost; and as a container's first process
(``ENTRYPOINT ["nanobot-core"]``), where the kernel drops a signal nothing
handles, SIGTERM did nothing at all until the runtime's SIGKILL.

Here each is handed to the SIGINT handler in place at that moment, as if
Ctrl-C had been pressed: whatever the command does with a Ctrl-C then (stop
a turn, wait for a save, end at once on the second) it does with them. Only
the end differs, as shells report a process the signal ended: exit 143 and
``Terminated.`` for SIGTERM, 129 and ``Hung up.`` for SIGHUP (`interrupted`).

Loaded by the entry point before the CLI's modules, and importing only small
modules of the standard library (``signal``, ``atexit``), so that the handlers
are in place a millisecond or so after the entry point starts. Before that
(Python's own start and ``import nanobot_core``, some tens of milliseconds)
each signal still has its default action, as SIGINT has Python's.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
from types import FrameType

from nanobot_core._exit_codes import EXIT_HUNG_UP, EXIT_INTERRUPTED, EXIT_TERMINATED

__all__ = [
    "CTRL_C_MARK",
    "ctrl_c_interrupt",
    "ignore_stop_signals",
    "install",
    "interrupted",
    "say_interrupted",
]

#: The attribute a ``KeyboardInterrupt`` raised for a Ctrl-C (or a signal standing for one)
#: carries, so that plugin code cannot contain it (`nanobot_core._containment`).
CTRL_C_MARK = "_nanobot_ctrl_c"

#: What the process says and exits with when each signal stopped it.
_ENDINGS: dict[int, tuple[str, int]] = {
    signal.SIGTERM: ("Terminated.", EXIT_TERMINATED),
    signal.SIGHUP: ("Hung up.", EXIT_HUNG_UP),
}
_CTRL_C = ("Interrupted.", EXIT_INTERRUPTED)

# The stop signals received so far, in order; the last one is the one the end reports.
_received: list[int] = []
# Whether `_end_as_said` is registered (once per process).
_registered: list[bool] = []
# The status the process ends with at the very end, where Python would end it by SIGINT.
_end_status: list[int] = []
#: The file name of code that ``exec`` or ``eval`` ran from a string.
_STRING_CODE = "<string>"


def install() -> None:
    """Make SIGTERM and SIGHUP stop the command as Ctrl-C does (main thread; idempotent).

    Only a signal whose action is still the default is taken over: one the
    parent made ignored stays ignored (``nohup`` ignores SIGHUP so that a
    closed terminal does not stop the command).
    """
    if not _registered:
        # The first atexit callback registered is the last one run: after every save.
        atexit.register(_end_as_said)
        _registered.append(True)
    for signum in _ENDINGS:
        with contextlib.suppress(ValueError):  # off the main thread no handler can be set
            if signal.getsignal(signum) is signal.SIG_DFL:
                signal.signal(signum, _as_ctrl_c)


def ignore_stop_signals() -> None:
    """Ignore SIGTERM and SIGHUP from now on, where `install` took them over.

    For Python's last teardown, where SIGINT is ignored too: there is nothing
    left to stop, and Python then puts the default action back for a handler
    of its own, which would end the process by the signal, unsaid.
    """
    for signum in _ENDINGS:
        with contextlib.suppress(ValueError):
            if signal.getsignal(signum) is _as_ctrl_c:
                signal.signal(signum, signal.SIG_IGN)


def _as_ctrl_c(signum: int, frame: FrameType | None) -> None:
    """A SIGTERM or SIGHUP: noted, then handled by the SIGINT handler in place, as Ctrl-C is."""
    _received.append(signum)
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
        return
    # Ctrl-C ignored: a shell script starts a background job so (`nanobot-core run ... &`),
    # and the CLI then sets no handler for it. The signal must still stop the command: as
    # the Ctrl-C the command would have had, a KeyboardInterrupt plugin code lets through.
    raise ctrl_c_interrupt()


def ctrl_c_interrupt() -> KeyboardInterrupt:
    """A ``KeyboardInterrupt`` marked as a Ctrl-C's (`CTRL_C_MARK`), for a handler to raise."""
    interrupt = KeyboardInterrupt()
    setattr(interrupt, CTRL_C_MARK, True)
    return interrupt


def interrupted() -> tuple[str, int]:
    """What an interrupted command says on stderr and exits with: by the last stop signal.

    ``("Terminated.", 143)`` after a SIGTERM, ``("Hung up.", 129)`` after a SIGHUP,
    else Ctrl-C's ``("Interrupted.", 130)``.
    """
    return _ENDINGS[_received[-1]] if _received else _CTRL_C


def say_interrupted(interrupt: BaseException | None = None) -> int:
    """Say on stderr that the command was interrupted (`interrupted`); the exit status.

    `interrupt` is the ``KeyboardInterrupt`` that stopped it (or an exception raised
    while handling one): see `_end_as_said`. A stderr that cannot be written (the
    terminal that hung up) does not change the status: the process ends as the
    signal asked.
    """
    words, code = interrupted()
    if interrupt is not None and _left_string_code(interrupt):
        _end_status[:] = [code]
    with contextlib.suppress(Exception):
        sys.stderr.write(words + "\n")
        sys.stderr.flush()
    return code


def _left_string_code(exc: BaseException) -> bool:
    """Whether a ``KeyboardInterrupt`` in `exc` or its context left code run from a string.

    CPython notes such an interrupt as unhandled (its flag for one, which ends the
    process by SIGINT after the teardown of ``python -m``), caught or not: code that
    ``exec`` or ``eval`` runs from a string (the methods a dataclass or a named tuple
    is made with, as a module is imported) is run as a program's main code is.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, KeyboardInterrupt):
            trace = current.__traceback__
            while trace is not None:
                if trace.tb_frame.f_code.co_filename == _STRING_CODE:
                    return True
                trace = trace.tb_next
        current = current.__context__
    return False


def _end_as_said() -> None:
    """The last atexit callback: end with the status said where Python would not.

    After a stop whose ``KeyboardInterrupt`` left code run from a string
    (`_left_string_code`), Python would end the process by SIGINT once its
    teardown is done, whatever it said (exit -2 as a parent sees it, after
    ``Terminated.``). Every save and atexit callback has run by now; the
    process ends here with the status it said, its output flushed.
    """
    if not _end_status:
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # closed or gone: ending is what counts
            if stream is not None:
                stream.flush()
    os._exit(_end_status[0])
