"""The one atomic-write helper: a file is replaced whole or not at all.

The data goes to a temporary file in the target's directory (same file system),
is flushed and fsynced, then ``os.replace`` puts it in place; a reader sees the
old file or the new one, never a part. On any failure the temporary file is
removed and the target is left as it was.

A symbolic link stays a link, as with ``cp`` or a shell redirection: the file
it points to is the one replaced (a dangling link gets its file). A link that
cannot be followed (a loop) raises ``OSError`` (``ELOOP``): the link cannot be
written through and is never replaced by a file. A target that exists and is not a regular file
(a device such as ``/dev/stdout`` or ``/dev/null``, a named pipe) cannot be
replaced without putting a regular file where it was, so it is written into
directly, as a shell redirection would; such a write is not atomic.

The new file gets the mode the file it replaces had, or, for a new file, the
one ``open()`` gives (0o666 less the umask): a temporary file made by the
``tempfile`` module is 0o600, which would leave an output its owner asked for
unreadable to the group that could read the file before.

`create_new` makes a file that must not exist yet, whole or not at all: it never
replaces anything, a link to nothing included.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

__all__ = ["create_new", "write_atomic"]


def _chunks(data: bytes | Iterable[bytes]) -> Iterable[bytes]:
    return [data] if isinstance(data, bytes | bytearray) else data


def write_atomic(path: Path | str, data: bytes | Iterable[bytes]) -> None:
    """Replace `path` with `data` (bytes, or chunks of bytes) atomically and durably."""
    try:
        mode: int | None = os.stat(path).st_mode  # through links
    except (FileNotFoundError, ValueError):
        mode = None  # not there yet (or a dangling link): a new regular file
    # Any other OSError (a link loop above all) propagates: realpath would hand the
    # loop back unresolved and os.replace would put a file where the link was.
    if mode is not None and not stat.S_ISREG(mode):
        with open(path, "wb") as stream:  # a device or a pipe; a folder raises here
            for chunk in _chunks(data):
                stream.write(chunk)
        return
    target = Path(os.path.realpath(path))
    handle, temporary = _create_beside(target)
    try:
        with os.fdopen(handle, "wb") as stream:  # owns the descriptor from here on
            if mode is not None:
                os.fchmod(handle, stat.S_IMODE(mode))  # the mode of the file it replaces
            for chunk in _chunks(data):
                stream.write(chunk)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


#: Open flags of the temporary file: new, written, not inherited by child processes.
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def _create_beside(target: Path, *, dir_fd: int | None = None) -> tuple[int, str]:
    """A new, empty file beside `target` (in the folder `dir_fd` when given), made as
    ``open()`` makes one (0o666 less the umask)."""
    for _ in range(100):
        name = str(target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(name, _CREATE, 0o666, dir_fd=dir_fd), name
        except FileExistsError:  # a name already taken: another one
            continue
    raise FileExistsError(f"no free temporary name beside {target}")


#: What ``link`` fails with where the file system makes no hard link (FAT, some network
#: and FUSE file systems): the file is then created in place, exclusively.
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS})


def create_new(path: Path | str, data: bytes, *, dir_fd: int | None = None) -> None:
    """Create `path` holding `data` whole, or leave it absent; ``FileExistsError`` when
    anything is there already (a file, a folder, a link, even one to nothing).

    The data goes to a temporary file beside it, fsynced, which is then hard-linked as
    `path`: ``link`` replaces nothing, so a file that appears meanwhile is kept, and a
    failure part of the way (a full disk, a file size limit, Ctrl-C) leaves no part of a
    file that a later run would take for a whole one and keep. Where the file system
    makes no hard link, `path` is created exclusively and written, and removed again
    when the write fails. With `dir_fd`, `path` is a name in that open folder: the file
    goes in the folder its caller opened, whatever that folder's path leads to since.
    """
    target = Path(path)
    handle, temporary = _create_beside(target, dir_fd=dir_fd)
    try:
        with os.fdopen(handle, "wb") as stream:  # owns the descriptor from here on
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        try:
            if dir_fd is None:
                os.link(temporary, target)
            else:
                os.link(temporary, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except FileExistsError:
            raise
        except OSError as exc:
            if exc.errno not in _NO_HARD_LINKS:
                raise
            _create_in_place(target, data, dir_fd)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=dir_fd)


def _create_in_place(target: Path, data: bytes, dir_fd: int | None = None) -> None:
    """Create `target` exclusively and write `data` into it; removed again if that fails."""
    handle = os.open(target, _CREATE | getattr(os, "O_NOFOLLOW", 0), 0o666, dir_fd=dir_fd)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
    except BaseException:
        with contextlib.suppress(FileNotFoundError):  # made by this call: no one else's file
            os.unlink(target, dir_fd=dir_fd)
        raise
