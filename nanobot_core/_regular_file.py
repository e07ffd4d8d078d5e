"""The one open of a file that must be a regular file, which never waits.

A plain ``open()`` of a named pipe waits until the other end opens it (to read,
for a writer; to write, for a reader), a terminal opened by a process with none
becomes its controlling terminal, and a device may give bytes without end. The
files the core and its plugins find in the workspace, where anything may have been
put in their place (the file tools' files, the prompt's files, sessions, locks,
the offload cache, nanobot-mcp's records and logs), are opened here, so the flags,
the checks and the words of the refusal exist once. A path the user names on the
command line (an input file, ``--output``) is opened as given instead: a pipe
there is meant as one.

What the open does:

- ``O_NONBLOCK``: opening a named pipe returns at once (to write with no reader:
  ``ENXIO``, as opening a socket does) instead of waiting; cleared once the file
  is known to be regular, so it is then read and written as usual.
- ``O_NOCTTY``: a terminal is never made the process's own.
- ``O_NOFOLLOW`` when links are not followed: a link in the path's last part is
  refused, never opened through.
- The kind is checked on the descriptor opened (``fstat``), not on the path
  before, so a file swapped for a pipe between a check and the open is refused too.

What is refused raises `NotRegularFileError`, naming the path and what is there.
Where a flag does not exist (Windows has neither ``O_NONBLOCK`` nor
``O_NOFOLLOW``), the check on the descriptor still refuses what is not a regular
file, and a link not to be followed is looked for before the open.
"""

from __future__ import annotations

import errno
import os
import stat

from nanobot_core.errors import NotRegularFileError

__all__ = ["kind_of", "open_regular_file"]

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_NOCTTY = getattr(os, "O_NOCTTY", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

#: What each kind of file that is not a regular file is called, in every refusal.
_KINDS = (
    (stat.S_ISDIR, "directory"),
    (stat.S_ISLNK, "symbolic link"),
    (stat.S_ISFIFO, "named pipe (FIFO)"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
)


def kind_of(mode: int) -> str | None:
    """What a file of `mode` (``st_mode``) is, or None for a regular file.

    "directory", "symbolic link", "named pipe (FIFO)", "socket", "character
    device", "block device" (or "special file").
    """
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "special file")


def open_regular_file(
    path: str | os.PathLike[str],
    flags: int = os.O_RDONLY,
    mode: int = 0o666,
    *,
    follow_links: bool = True,
    regular_only: bool = True,
    dir_fd: int | None = None,
    shown: str | None = None,
) -> int:
    """A descriptor of the regular file at `path`, opened without waiting; the caller closes it.

    `flags` are those of ``os.open`` (``os.O_RDONLY`` by default; ``O_WRONLY``,
    ``O_RDWR``, ``O_CREAT``, ``O_APPEND``, ``O_TRUNC`` as wanted) and `mode` the
    permissions a created file gets (less the umask). The open never waits on a
    named pipe and never takes a terminal, and what is at `path` is checked on
    the descriptor opened: a named pipe, a socket, a device or a directory raises
    `NotRegularFileError` (an ``OSError``) naming the path and what it is, and
    nothing is left open. With `follow_links` false a symbolic link as the last
    part of the path is refused the same way instead of followed. With
    `regular_only` false a device or a named pipe something reads from is opened
    too (a log that is a link to ``/dev/null``, say: written into as a shell
    redirection writes), and only a directory, or a pipe nothing reads from
    when writing, is refused. `dir_fd` opens `path` relative to that folder's
    descriptor, and `shown` is how the refusal names the path (else as given).
    The descriptor returned is blocking, not inherited by child processes. Any
    other failure of the open is the ``OSError`` ``os.open`` raises.
    """
    name = os.fspath(path) if shown is None else shown
    if not follow_links and not _NOFOLLOW and _is_link(path, dir_fd):
        raise _link(name)  # no O_NOFOLLOW here: looked for before the open
    extra = _NONBLOCK | _NOCTTY | _CLOEXEC | (0 if follow_links else _NOFOLLOW)
    try:
        fd = os.open(path, flags | extra, mode, dir_fd=dir_fd)
    except OSError as exc:
        refusal = _refusal(exc, path, dir_fd, name, follow_links, regular_only)
        if refusal is None:
            raise
        raise refusal from None
    try:
        kind = kind_of(os.fstat(fd).st_mode)
        if kind is not None and (regular_only or kind == "directory"):
            raise NotRegularFileError(name, kind)
        if _NONBLOCK:
            os.set_blocking(fd, True)  # read and written as any file from here on
    except BaseException:
        os.close(fd)
        raise
    return fd


def _refusal(
    exc: OSError,
    path: str | os.PathLike[str],
    dir_fd: int | None,
    name: str,
    follow_links: bool,
    regular_only: bool,
) -> NotRegularFileError | None:
    """The `NotRegularFileError` that the open's failure `exc` stands for, if any."""
    if exc.errno == errno.EISDIR:  # a directory opened to write
        return NotRegularFileError(name, "directory")
    # A link under O_NOFOLLOW: ELOOP (EMLINK on FreeBSD), as for a loop of links followed.
    if exc.errno in (errno.ELOOP, errno.EMLINK) and not follow_links and _is_link(path, dir_fd):
        return _link(name)
    if exc.errno == errno.ENXIO:  # a pipe nothing reads, opened to write; or a socket
        try:
            kind = kind_of(os.stat(path, dir_fd=dir_fd, follow_symlinks=follow_links).st_mode)
        except OSError:
            return None  # gone meanwhile: the open's own error says what happened
        if kind is None:
            return None
        if kind == "named pipe (FIFO)" and not regular_only:
            # A pipe is taken here when something reads it: the refusal says why this one is not.
            return NotRegularFileError(name, kind, "which nothing reads from")
        return NotRegularFileError(name, kind)
    return None


def _link(name: str) -> NotRegularFileError:
    """The refusal of the symbolic link `name`, opened without following links."""
    return NotRegularFileError(name, "symbolic link", "which is not followed")


def _is_link(path: str | os.PathLike[str], dir_fd: int | None) -> bool:
    """Whether `path` (relative to `dir_fd`) is a symbolic link now."""
    try:
        return stat.S_ISLNK(os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False
