"""The built-in ``jsonl`` session store: one append-only JSON-lines file per session.

``<workspace>/.nanobot/sessions/<name>.jsonl`` holds one line per message or
record. The file is the truth and is only ever appended to: a batch of lines
is written with one ``write`` and fsynced before the append returns, so a
process killed at any moment leaves at most a torn last line (a write that
fails part way, on a full disk, is cut off again: a batch is stored whole or
not at all). Taking the lease heals that: the torn bytes are appended to
``<name>.jsonl.torn`` (never overwritten) and the file is cut back to its
last complete line. A last line of nothing but whitespace (an editor leaves
one) is no torn write: it is a blank line, passed over and counted as blank
lines are anywhere in the file, and is only given its newline. A complete
line that is not a JSON object stays in the file and is skipped with a
warning naming its line number. Nothing is
dropped silently. A UTF-8 byte-order mark at the very start of the file (an
editor on Windows writes one) is not part of line 1, which loads; one anywhere
else makes its line invalid, as JSON has it.

The lease is an exclusive lock on ``<name>.lock`` (``flock``), held by the
descriptor: it is freed when the process ends, however it ends. The lock file
names the holder (host and pid) for the message another writer prints.

The store opens only regular files of its own: a session, lock or torn file
that is a symbolic link is refused, never followed (the model can make files
in the workspace, and a link would have the store cut, append to or empty a
file elsewhere), and so is a named pipe, a device or a folder in its place (a
pipe would hold the command forever). Each is a SessionError naming the file;
a listing leaves such an entry out with a warning naming it.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from nanobot_core._jsonl import BOM, is_blank, without_bom
from nanobot_core._logging import get_logger
from nanobot_core._regular_file import open_regular_file
from nanobot_core._session_names import is_session_name
from nanobot_core.errors import (
    NotRegularFileError,
    SessionConflictError,
    SessionError,
    SessionLockedError,
    SessionNotFoundError,
)
from nanobot_core.sessions import (
    DEFAULT_SESSION,
    Session,
    SessionInfo,
    SessionLog,
    check_line,
    is_meta_record,
    numbered_session_lines,
    open_session,
    parse_line,
    split_session_lines,
    validate_session_name,
)

__all__ = ["JsonlLease", "JsonlSessionStore", "sessions_dir"]

log = get_logger("nanobot_core.sessions")

SUFFIX = ".jsonl"
TORN_SUFFIX = ".jsonl.torn"
LOCK_SUFFIX = ".lock"
# How often a waiting writer tries the lock again.
_POLL_SECONDS = 0.05


def sessions_dir(workspace: Path) -> Path:
    """Where the sessions of `workspace` live."""
    return Path(workspace) / ".nanobot" / "sessions"


class JsonlSessionStore:
    """The sessions of one workspace, as JSON-lines files."""

    name = "jsonl"

    def __init__(self, workspace: Path | str) -> None:
        self.workspace = Path(workspace)
        self.directory = sessions_dir(self.workspace)

    def __repr__(self) -> str:
        return f"JsonlSessionStore({str(self.directory)!r})"

    def describe(self) -> str:
        """The sessions directory."""
        return str(self.directory)

    def path(self, name: str) -> Path:
        """The file of session `name` (the name is validated)."""
        return self.directory / f"{validate_session_name(name)}{SUFFIX}"

    def lease(self, session: str, *, wait: float = 0.0) -> JsonlLease:
        """Lock session `session` for writing, waiting up to `wait` seconds for another writer."""
        path = self.path(session)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            lock_fd = _acquire_lock(self.directory / f"{session}{LOCK_SUFFIX}", session, wait)
        except OSError as exc:
            raise _file_error(f"cannot lease session {session!r}", exc) from None
        return JsonlLease(session, path, self.directory / f"{session}{TORN_SUFFIX}", lock_fd)

    def open(self, name: str = DEFAULT_SESSION, *, wait: float = 0.0) -> Session:
        """Lease session `name` and load it (see :func:`~nanobot_core.sessions.open_session`)."""
        return open_session(self, name, wait=wait)

    def load(self, session: str) -> SessionLog:
        """Read session `session` without locking or changing it."""
        path = self.path(session)
        try:
            data = _read_regular(path)
        except FileNotFoundError:
            raise SessionNotFoundError(
                f"no session named {session!r} in {self.directory}"
            ) from None
        except OSError as exc:
            raise _file_error(f"cannot read session {session!r}", exc) from None
        records, texts, problems, numbers = numbered_session_lines(data, str(path))
        return SessionLog(
            session, str(path), records, texts, problems, _count_lines(data), numbers=numbers
        )

    def list_sessions(self) -> list[SessionInfo]:
        """Every session of the workspace, by name."""
        if not self.directory.is_dir():
            return []
        infos: list[SessionInfo] = []
        for path in sorted(self.directory.glob(f"*{SUFFIX}")):
            name = path.name[: -len(SUFFIX)]
            if not is_session_name(name):
                continue
            try:
                fd = _open_regular(path, os.O_RDONLY)
            except NotRegularFileError as exc:  # not a session: said, so none is left unsaid
                log.warning("not a session file; left out", path=str(path), reason=exc.strerror)
                continue
            except FileNotFoundError:  # removed since the folder was read
                continue
            except OSError as exc:
                raise _file_error(f"cannot read session {name!r}", exc) from None
            try:
                status = os.fstat(fd)
                data = _read_all(fd)
            except OSError as exc:
                raise _file_error(f"cannot read session {name!r}", exc) from None
            finally:
                os.close(fd)
            records, _, _ = split_session_lines(data, str(path))
            modified = datetime.fromtimestamp(status.st_mtime, tz=UTC)
            count = sum(1 for r in records if not is_meta_record(r))
            infos.append(SessionInfo(name, str(path), count, len(data), modified))
        # By name, not by file name: "a-b.jsonl" sorts before "a.jsonl", session "a" before "a-b".
        return sorted(infos, key=lambda info: info.name)

    def close(self) -> None:
        """Nothing to release: leases hold their own descriptors."""


class JsonlLease:
    """The lock on one session file, and its append descriptor once loaded."""

    def __init__(self, session: str, path: Path, torn_path: Path, lock_fd: int) -> None:
        self.session = session
        self.path = path
        self.torn_path = torn_path
        self._lock_fd: int | None = lock_fd
        self._fd: int | None = None
        # The file's size and line count as this lease last saw them: an append
        # checks the size, and counts lines again only if someone else wrote.
        self._size = 0
        self._seq = 0

    def __repr__(self) -> str:
        return f"JsonlLease({self.session!r})"

    def load(self) -> SessionLog:
        """Heal a torn tail, open the file for appending (creating it), and read it."""
        if self._lock_fd is None:
            raise SessionError(f"the lease on session {self.session!r} was released")
        try:
            created = not os.path.lexists(self.path)
            if self._fd is None:
                # Read and written through this one descriptor, opened without following a
                # link: what is healed, read and appended to is the file the lease checked.
                flags = os.O_RDWR | os.O_APPEND | os.O_CREAT
                self._fd = _open_regular(self.path, flags)
            if created:
                _fsync_directory(self.path.parent)
            data = _heal_torn_tail(
                self._fd, _read_all(self._fd), self.session, self.path, self.torn_path
            )
        except OSError as exc:
            raise _file_error(f"cannot open session {self.session!r}", exc) from None
        records, texts, problems, numbers = numbered_session_lines(data, str(self.path))
        self._size, self._seq = len(data), _count_lines(data)
        return SessionLog(
            self.session, str(self.path), records, texts, problems, self._seq, numbers=numbers
        )

    def append(self, lines: Sequence[str], *, expected_seq: int) -> int:
        """Write `lines` with one write and fsync; SessionConflictError if the count is off."""
        if self._lock_fd is None or self._fd is None:
            raise SessionError(f"session {self.session!r} is not open for writing")
        try:
            if os.fstat(self._fd).st_size != self._size:
                data = _read_all(self._fd)
                self._size, self._seq = len(data), _count_lines(data)
        except OSError as exc:
            raise _file_error(f"cannot append to session {self.session!r}", exc) from None
        if self._seq != expected_seq:
            raise SessionConflictError(
                f"session {self.session!r} holds {self._seq} lines, the writer expected "
                f"{expected_seq}; nothing was appended"
            )
        # A batch is stored whole or not at all: every line is checked before any is written.
        for number, line in enumerate(lines, 1):
            check_line(line, f"session {self.session!r}, line {expected_seq + number}")
        data = "".join(f"{line}\n" for line in lines).encode("utf-8")
        try:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            os.fsync(self._fd)
        except OSError as exc:
            raise self._undo_append(self._fd, exc) from None
        self._size += len(data)
        self._seq += len(lines)
        return self._seq

    def _undo_append(self, fd: int, exc: OSError) -> SessionError:
        """Cut off what part of a failed batch reached the file; the error to raise."""
        try:  # a batch is stored whole or not at all: a disk that filled up took part of it
            os.ftruncate(fd, self._size)
            os.fsync(fd)
        except OSError as undo:
            return SessionError(
                f"cannot append to session {self.session!r} ({self.path}): {exc.strerror or exc}; "
                f"the part written could not be removed ({undo.strerror or undo})"
            )
        return SessionError(
            f"cannot append to session {self.session!r} ({self.path}): {exc.strerror or exc}; "
            "nothing was appended"
        )

    def check_held(self) -> None:
        """SessionError once released; otherwise the lock is held, by a descriptor only we close."""
        if self._lock_fd is None:
            raise SessionError(f"the lease on session {self.session!r} was released")

    def release(self) -> None:
        """Close the file and release the lock (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the lock
            self._lock_fd = None


def _file_error(what: str, exc: OSError) -> SessionError:
    """A SessionError saying what could not be done, to which file and why."""
    where = f" ({exc.filename})" if exc.filename else ""
    return SessionError(f"{what}: {exc.strerror or exc}{where}")


def _count_lines(data: bytes) -> int:
    """Lines stored: complete lines, plus a last line without its newline (a blank one too,
    which the lease completes: a blank line is counted wherever it is)."""
    data = without_bom(data)  # a file holding nothing but one holds no line
    count = data.count(b"\n")
    return count + (0 if data.endswith(b"\n") or not data else 1)


def _acquire_lock(lock_path: Path, name: str, wait: float) -> int:
    """Lock `lock_path` exclusively, trying for up to `wait` seconds; return its descriptor."""
    fd = _open_regular(lock_path, os.O_RDWR | os.O_CREAT)
    deadline = time.monotonic() + max(0.0, wait)
    while not _try_lock(fd):
        if time.monotonic() >= deadline:
            holder = _read_holder(fd)
            os.close(fd)
            waited = f" after waiting {wait:g}s" if wait > 0 else ""
            raise SessionLockedError(
                f"session {name!r} is in use by {holder}{waited} (lock file {lock_path}); "
                "wait for it to finish, set [sessions] lease_wait, or choose another --session"
            )
        time.sleep(_POLL_SECONDS)
    # Who holds the lock, for the message another process will print.
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{socket.gethostname()} {os.getpid()}\n".encode(), 0)
    return fd


def _try_lock(fd: int) -> bool:
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _read_holder(fd: int) -> str:
    try:
        words = os.pread(fd, 300, 0).decode("utf-8", "replace").split()
    except OSError:
        words = []
    if len(words) == 2 and words[1].isdigit():
        return f"another process (host {words[0]}, pid {words[1]})"
    if len(words) == 1 and words[0].isdigit():
        return f"another process (pid {words[0]})"
    return "another process"


def _heal_torn_tail(fd: int, data: bytes, session: str, path: Path, torn_path: Path) -> bytes:
    """Move a torn last line to `torn_path` and cut the file (`fd`) back to its last complete line.

    `data` is what the file holds; returns what it holds after. A warning names the
    session, its file (`location`) and the line, as every warning about a session line does.
    """
    number = data.count(b"\n") + 1  # the last line's number, as the file numbers it
    if not data or data.endswith(b"\n"):
        return data
    cut = data.rfind(b"\n") + 1
    tail = data[cut:]
    if cut == 0:  # the first line: a byte-order mark before it is the file's, not the line's
        if tail == BOM:
            return data  # nothing but the mark: no line to heal
        line = without_bom(tail)
    else:
        line = tail
    if is_blank(line):
        # Whitespace an editor left after the last line: a blank line, passed over like one
        # anywhere else, not a torn write. Its newline is added, so that the next append
        # starts a line of its own instead of following the blanks.
        os.write(fd, b"\n")
        os.fsync(fd)
        return data + b"\n"
    record, _ = parse_line(line)
    if record is not None:
        # The whole object is there and only the newline was lost: complete the line.
        os.write(fd, b"\n")
        os.fsync(fd)
        log.warning(
            "session line was missing its newline; completed",
            session=session,
            location=str(path),
            line=number,
        )
        return data + b"\n"
    torn_fd = _open_regular(torn_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        _write_all(torn_fd, tail + b"\n")
        os.fsync(torn_fd)
    finally:
        os.close(torn_fd)
    # Said before the cut, not after: a stop signal between the two would cut the line out
    # unsaid. Stopped before the cut, the next run finds the line torn still and moves it
    # again (the torn file then holds it twice: nothing is lost).
    log.warning(
        "torn last line moved out of the session",
        session=session,
        location=str(path),
        line=number,
        bytes=len(tail),
        moved_to=str(torn_path),
    )
    os.ftruncate(fd, cut)
    os.fsync(fd)
    return data[:cut]


def _open_regular(path: Path, flags: int) -> int:
    """Open `path`, a regular file of the store, with `flags`; `NotRegularFileError` for the rest.

    A link is never followed (the model can make files in the workspace: a link would
    have a run empty, cut back or append to a file elsewhere), and the open never
    waits (`open_regular_file`): a named pipe, a device or a folder is refused at once.
    """
    return open_regular_file(path, flags, 0o644, follow_links=False)


def _read_regular(path: Path) -> bytes:
    """All of the regular file `path` (see `_open_regular`)."""
    fd = _open_regular(path, os.O_RDONLY)
    try:
        return _read_all(fd)
    finally:
        os.close(fd)


def _read_all(fd: int) -> bytes:
    """All the file of `fd` holds, from its start (the descriptor's offset is not used)."""
    chunks: list[bytes] = []
    offset = 0
    while chunk := os.pread(fd, max(os.fstat(fd).st_size - offset, 1 << 16), offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_directory(directory: Path) -> None:
    """Make a newly created file's directory entry durable (POSIX only)."""
    if sys.platform == "win32":  # pragma: no cover
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
