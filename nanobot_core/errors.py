"""The exception tree of nanobot-core: every error it raises derives from `NanobotError`."""

from __future__ import annotations

import errno
from typing import Any

from nanobot_core._clip import clip

__all__ = [
    "ConfigError",
    "NanobotError",
    "NotRegularFileError",
    "PluginError",
    "PluginEscapeError",
    "ProviderError",
    "SessionConflictError",
    "SessionError",
    "SessionLockedError",
    "SessionNotFoundError",
    "ToolError",
    "WorkspaceError",
    "WorkspaceEscapeError",
]


class NanobotError(Exception):
    """Base class of every error raised by nanobot-core."""


class ConfigError(NanobotError):
    """The configuration is malformed: the message names the key path and the expected type."""


class WorkspaceError(NanobotError, ValueError):
    """The workspace given is no folder the agent can work in (the message names it).

    A path no folder can be at (a file, a path through a file, a loop of
    symbolic links, a folder that cannot be searched) is refused when given,
    by `PluginManager`; a folder that is not there yet, when a `Runner` is
    built for it (a program may make it in between). Also a ``ValueError``:
    the argument was wrong.
    """


class PluginError(NanobotError):
    """A plugin failed to load or misbehaved (raised only in strict mode; otherwise reported)."""


class PluginEscapeError(PluginError):
    """Plugin code raised ``SystemExit``, ``KeyboardInterrupt`` or another ``BaseException``.

    Raised where the plugin's code ran (by `run_in_daemon_thread`, and inside
    the core, which reports it naming the plugin): its message says only what
    was raised, so a caller that lets it go on names the plugin itself.
    """


class ToolError(NanobotError):
    """Base class of errors about a tool call."""


class WorkspaceEscapeError(ToolError):
    """A path given to a workspace tool, or a file the prompt reads, leads out of the workspace."""


#: The errno of each kind of file refused that has one of its own.
_KIND_ERRNO = {"directory": errno.EISDIR, "symbolic link": errno.ELOOP}


class NotRegularFileError(ToolError, OSError):
    """A file that must be a regular file is something else: its message names the path and what.

    Raised by `nanobot_core.open_regular_file` (the file tools, the prompt's
    files, the session store and the plugins all open files through it) for a
    directory, a symbolic link not to be followed, a named pipe, a socket or a
    device: reading a named pipe waits for a writer (and then reads what it is
    sent, without end), writing one waits for a reader, a socket cannot be
    opened, and a device may give bytes without end; each is refused at once
    instead. Its message is ``PATH is a named pipe (FIFO), not a regular file``;
    `filename` is the path, `kind` what is there, and `strerror` the rest of
    the sentence (``a named pipe (FIFO), not a regular file``), for a message
    that names the path its own way. An `OSError` too, as the failures of
    opening a file are, with ``EISDIR`` for a directory, ``ELOOP`` for a link
    and ``EINVAL`` for the rest; a `ToolError`, as the file tools first raised it.
    """

    def __init__(self, path: str, kind: str, reason: str = "not a regular file") -> None:
        super().__init__(_KIND_ERRNO.get(kind, errno.EINVAL), f"a {kind}, {reason}", path)
        self.kind = kind
        self.reason = reason

    def __str__(self) -> str:
        return f"{clip(str(self.filename))} is {self.strerror}"

    def __reduce__(self) -> tuple[Any, ...]:
        # OSError's would call the class with its errno, strerror and filename.
        return type(self), (self.filename, self.kind, self.reason)


class SessionError(NanobotError):
    """A session file or name is invalid, or the session store failed."""


class SessionLockedError(SessionError):
    """Another process, or another turn of the same `Runner`, is writing this session.

    Also raised by `Governor.govern` (and `restore`) called while a call of the
    same governor runs: a governor keeps one session's state and runs one call at a time.
    """


class SessionNotFoundError(SessionError):
    """The store holds no session of that name (any other store failure is a SessionError)."""


class SessionConflictError(SessionError):
    """An append expected another number of lines: the writer no longer owns the session."""


class ProviderError(NanobotError):
    """The model provider failed (HTTP error, timeout, malformed reply)."""
