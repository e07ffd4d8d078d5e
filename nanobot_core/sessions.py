"""The session store: one append-only JSON-lines file per conversation.

``<workspace>/.nanobot/sessions/<name>.jsonl`` holds one message per line, in
OpenAI's shape. Bookkeeping (time, usage, timings) sits under the ``_meta``
key of its line and is stripped before a message goes anywhere else.

The file is the truth and is only ever appended to: each line is written,
flushed and fsynced as its message is appended, so a process killed at any
moment leaves at most one torn last line. Opening a session for writing heals
that: the torn bytes are appended to ``<name>.jsonl.torn`` (never
overwritten) and the file is cut back to its last complete line. A complete
line that is not a JSON object stays in the file and is skipped with a
warning naming its line number. Nothing is dropped silently.

A writer holds an exclusive, non-blocking lock on ``<name>.lock``; a second
writer fails at once with :class:`~nanobot_core.errors.SessionLockedError`.
Readers (``sessions``, ``sessions show``) take no lock and change nothing.
"""

from __future__ import annotations

import copy
import os
import re
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import attrs

from nanobot_core._logging import get_logger
from nanobot_core.errors import SessionError, SessionLockedError

__all__ = [
    "DEFAULT_SESSION",
    "META_KEY",
    "LoadProblem",
    "Session",
    "SessionInfo",
    "SessionLog",
    "SessionStore",
    "parse_session_lines",
    "sessions_dir",
    "strip_meta",
    "validate_session_name",
]

log = get_logger("nanobot_core.sessions")

DEFAULT_SESSION = "default"
META_KEY = "_meta"
SUFFIX = ".jsonl"
TORN_SUFFIX = ".jsonl.torn"
LOCK_SUFFIX = ".lock"

_NAME = re.compile(r"[A-Za-z0-9._-]+")
# Leaves room for the longest suffix within the usual 255-byte file-name limit.
_MAX_NAME_LENGTH = 200


def validate_session_name(name: str) -> str:
    """Return `name` if it can name a session file, else raise SessionError saying why."""
    if not isinstance(name, str) or not name:
        raise SessionError("a session name must not be empty")
    if name in (".", ".."):
        raise SessionError(f"invalid session name {name!r}: '.' and '..' are not allowed")
    if not _NAME.fullmatch(name):
        bad = sorted({c for c in name if not _NAME.fullmatch(c)})
        raise SessionError(
            f"invalid session name {name!r}: only letters, digits, '.', '_' and '-' are allowed "
            f"(found {', '.join(repr(c) for c in bad)})"
        )
    if len(name) > _MAX_NAME_LENGTH:
        raise SessionError(f"invalid session name: longer than {_MAX_NAME_LENGTH} characters")
    return name


def sessions_dir(workspace: Path) -> Path:
    """Where the sessions of `workspace` live."""
    return Path(workspace) / ".nanobot" / "sessions"


def strip_meta(record: Mapping[str, Any]) -> dict[str, Any]:
    """The message of a session line, without the bookkeeping (a deep copy)."""
    return {k: copy.deepcopy(v) for k, v in record.items() if k != META_KEY}


@attrs.frozen
class LoadProblem:
    """A line of a session file that was not loaded, and why."""

    line: int
    kind: Literal["torn", "invalid"]
    detail: str

    def to_json(self) -> dict[str, Any]:
        """``{"line", "kind", "detail"}``."""
        return {"line": self.line, "kind": self.kind, "detail": self.detail}


@attrs.frozen
class SessionLog:
    """The readable content of a session file: its records and the lines that were skipped."""

    name: str
    path: Path
    records: list[dict[str, Any]]
    problems: list[LoadProblem]

    def messages(self) -> list[dict[str, Any]]:
        """The messages, without ``_meta``."""
        return [strip_meta(r) for r in self.records]


@attrs.frozen
class SessionInfo:
    """One line of ``nanobot-core sessions``."""

    name: str
    path: Path
    messages: int
    size: int
    modified: datetime

    def to_json(self) -> dict[str, Any]:
        """``{"name", "path", "messages", "size", "modified"}`` (size in bytes, time in UTC)."""
        return {
            "name": self.name,
            "path": str(self.path),
            "messages": self.messages,
            "size": self.size,
            "modified": self.modified.isoformat(timespec="seconds"),
        }


def parse_session_lines(data: bytes) -> tuple[list[dict[str, Any]], list[LoadProblem]]:
    """Parse the complete lines of a session file; report, never raise, on bad ones.

    A last line without its newline is torn: it is reported and not loaded,
    unless it is a whole JSON object (only the newline was lost).
    """
    records: list[dict[str, Any]] = []
    problems: list[LoadProblem] = []
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        record, error = _parse_line(raw)
        if record is None:
            problems.append(LoadProblem(number, "invalid", error))
        else:
            records.append(record)
    if tail.strip():
        record, error = _parse_line(tail)
        if record is None:
            problems.append(LoadProblem(len(lines) + 1, "torn", f"{len(tail)} bytes: {error}"))
        else:
            records.append(record)
    return records, problems


def _parse_line(raw: bytes) -> tuple[dict[str, Any] | None, str]:
    from nanobot_core._json_boundary import JSONBoundaryError, loads

    try:
        decoded = loads(raw)
    except JSONBoundaryError as exc:
        return None, str(exc)
    value = decoded.value
    if decoded.replaced:
        log.warning("session line decoded with replacements", replaced=list(decoded.replaced))
    if not isinstance(value, dict):
        return None, f"a JSON {type(value).__name__}, not an object"
    return value, ""


def encode_record(record: Mapping[str, Any]) -> bytes:
    """One session line: strict compact JSON and a newline (see `nanobot_core._json_boundary`).

    Lone surrogates and non-finite numbers are replaced and logged, never stored raw;
    raises SessionError for a value that is not JSON at all.
    """
    return _encoded(record)[0]


def _encoded(record: Mapping[str, Any]) -> tuple[bytes, tuple[str, ...]]:
    from nanobot_core._json_boundary import dumps

    replaced: list[str] = []
    try:
        text = dumps(record, separators=(",", ":"), on_replace=replaced.extend)
    except (TypeError, ValueError) as exc:
        raise SessionError(f"message cannot be stored as JSON: {exc}") from exc
    if replaced:
        log.warning("session line stored with replacements", replaced=replaced)
    return (text + "\n").encode("utf-8"), tuple(replaced)


class SessionStore:
    """The sessions of one workspace."""

    def __init__(self, workspace: Path | str) -> None:
        self.workspace = Path(workspace)
        self.directory = sessions_dir(self.workspace)

    def path(self, name: str) -> Path:
        """The file of session `name` (the name is validated)."""
        return self.directory / f"{validate_session_name(name)}{SUFFIX}"

    def open(self, name: str = DEFAULT_SESSION) -> Session:
        """Open session `name` for writing: lock it, heal a torn tail, load it.

        Raises SessionError for a bad name and SessionLockedError when another
        process holds the session.
        """
        path = self.path(name)
        self.directory.mkdir(parents=True, exist_ok=True)
        lock_fd = _acquire_lock(self.directory / f"{name}{LOCK_SUFFIX}", name)
        try:
            _heal_torn_tail(path, self.directory / f"{name}{TORN_SUFFIX}")
            records, problems = parse_session_lines(path.read_bytes() if path.exists() else b"")
            for problem in problems:
                log.warning(
                    "session line skipped",
                    session=name,
                    path=str(path),
                    line=problem.line,
                    problem=problem.detail,
                )
            created = not path.exists()
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            if created:
                _fsync_directory(self.directory)
        except BaseException:
            os.close(lock_fd)
            raise
        return Session(name, path, fd, lock_fd, records, problems)

    def read(self, name: str) -> SessionLog:
        """Read session `name` without locking or changing it."""
        path = self.path(name)
        if not path.is_file():
            raise SessionError(f"no session named {name!r} in {self.directory}")
        records, problems = parse_session_lines(path.read_bytes())
        return SessionLog(name, path, records, problems)

    def list_sessions(self) -> list[SessionInfo]:
        """Every session of the workspace, by name."""
        if not self.directory.is_dir():
            return []
        infos: list[SessionInfo] = []
        for path in sorted(self.directory.glob(f"*{SUFFIX}")):
            name = path.name[: -len(SUFFIX)]
            if not _NAME.fullmatch(name) or name in (".", ".."):
                continue
            stat = path.stat()
            records, _ = parse_session_lines(path.read_bytes())
            modified = datetime.fromtimestamp(stat.st_mtime, tz=UTC)
            infos.append(SessionInfo(name, path, len(records), stat.st_size, modified))
        return infos


class Session:
    """An open session, locked for this process: read its history, append messages.

    Use it as a context manager (or call :meth:`close`) to release the lock.
    """

    def __init__(
        self,
        name: str,
        path: Path,
        fd: int,
        lock_fd: int,
        records: list[dict[str, Any]],
        problems: list[LoadProblem],
    ) -> None:
        self.name = name
        self.path = path
        self.problems = problems
        self._fd: int | None = fd
        self._lock_fd: int | None = lock_fd
        self._records = records

    def __repr__(self) -> str:
        return f"Session({self.name!r}, {len(self._records)} messages)"

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every loaded line, ``_meta`` included (copies)."""
        return copy.deepcopy(self._records)

    def history(self) -> list[dict[str, Any]]:
        """The messages in order, without ``_meta``: what governance and the model may see."""
        return [strip_meta(r) for r in self._records]

    def append(self, message: Mapping[str, Any], meta: Mapping[str, Any] | None = None) -> None:
        """Persist one message (and its bookkeeping) before returning: written and fsynced."""
        if self._fd is None:
            raise SessionError(f"session {self.name!r} is closed")
        record = strip_meta(message)
        if meta:
            record[META_KEY] = dict(meta)
        data, replaced = _encoded(record)
        if replaced:  # what is kept in memory is what the file holds
            from nanobot_core._json_boundary import loads

            record = loads(data).value
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        os.fsync(self._fd)
        self._records.append(record)

    def close(self) -> None:
        """Close the file and release the lock (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the lock
            self._lock_fd = None

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _acquire_lock(lock_path: Path, name: str) -> int:
    """Lock `lock_path` exclusively without waiting; return its descriptor."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    if not _try_lock(fd):
        holder = _read_holder(fd)
        os.close(fd)
        raise SessionLockedError(
            f"session {name!r} is in use by another process{holder} (lock file {lock_path}); "
            "wait for it to finish or choose another --session"
        )
    # Who holds the lock, for the message another process will print.
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
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
        pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""


def _heal_torn_tail(path: Path, torn_path: Path) -> None:
    """Move a torn last line to `torn_path` and cut `path` back to its last complete line."""
    if not path.exists():
        return
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    tail = data[cut:]
    record, _ = _parse_line(tail)
    if record is not None:
        # The whole object is there and only the newline was lost: complete the line.
        with path.open("ab") as handle:
            handle.write(b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        log.warning("session line was missing its newline; completed", path=str(path))
        return
    with torn_path.open("ab") as handle:
        handle.write(tail + b"\n")
        handle.flush()
        os.fsync(handle.fileno())
    with path.open("r+b") as handle:
        handle.truncate(cut)
        handle.flush()
        os.fsync(handle.fileno())
    log.warning(
        "torn last line moved out of the session",
        path=str(path),
        bytes=len(tail),
        line=data.count(b"\n") + 1,
        moved_to=str(torn_path),
    )


def _fsync_directory(directory: Path) -> None:
    """Make a newly created file's directory entry durable (POSIX only)."""
    if sys.platform == "win32":  # pragma: no cover
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
