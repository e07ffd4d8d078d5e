"""Moving sessions between stores: ``sessions export`` and ``sessions import``.

An export is a JSON-lines file: a header line ``{"nanobot_sessions_export": 1}``,
then one line per session line, ``{"session": NAME, "line": TEXT}``, where
TEXT is the line's JSON exactly as the store holds it. Sessions follow each
other, each one's lines in order. A session with no line to export (an
empty one, or one whose every line was left out as torn or invalid) is the
one line ``{"session": NAME}``, so that it is imported too, not lost.
Importing appends every session's lines as they are, so export, import,
export gives the same bytes, and a JSON-lines session imported into another
workspace is byte-identical to the original.

A UTF-8 byte-order mark at the very start of an export file (an editor on
Windows writes one) is read past; anywhere else it is what it is in JSON.
Import checks the whole file first (header, names, that every line is a JSON
object, that no line gives a key twice) and refuses a session that already
exists in the target store, so nothing is overwritten or merged; each session
is then written as one atomic batch under its lease, an empty session as an
empty batch, which makes it exist (a store that still does not list it, keeping
no session without a line, is warned about, naming the session).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs

from nanobot_core._json_boundary import JSONBoundaryError, loads
from nanobot_core._jsonl import without_bom
from nanobot_core._logging import get_logger
from nanobot_core.errors import SessionError
from nanobot_core.sessions import (
    LoadProblem,
    SessionStore,
    check_line,
    close_beneath,
    validate_session_name,
)

__all__ = ["EXPORT_HEADER", "ExportedSession", "export_sessions", "import_sessions", "read_export"]

log = get_logger("nanobot_core.sessions")

EXPORT_HEADER: dict[str, Any] = {"nanobot_sessions_export": 1}


@attrs.frozen
class ExportedSession:
    """One session of an export: its name and the exact text of its lines.

    `location` is where the store keeps it (its file), for a warning naming one of its
    lines; None for a session read from an export file. It is not part of its value.
    """

    name: str
    lines: list[str]
    location: str | None = attrs.field(default=None, eq=False, kw_only=True)


def collect_sessions(
    store: SessionStore, names: Sequence[str]
) -> tuple[list[ExportedSession], list[tuple[str, LoadProblem]]]:
    """The sessions `names` of `store` (all of them when empty), and the lines left out."""
    wanted = list(names) or [info.name for info in store.list_sessions()]
    sessions: list[ExportedSession] = []
    problems: list[tuple[str, LoadProblem]] = []
    for name in dict.fromkeys(wanted):
        loaded = store.load(validate_session_name(name))
        sessions.append(ExportedSession(name, list(loaded.lines), location=loaded.location))
        problems.extend((name, problem) for problem in loaded.problems)
    return sessions, problems


def export_lines(sessions: Iterable[ExportedSession]) -> list[dict[str, Any]]:
    """The values of an export file, header first."""
    values: list[dict[str, Any]] = [dict(EXPORT_HEADER)]
    for session in sessions:
        values.extend({"session": session.name, "line": line} for line in session.lines)
        if not session.lines:  # named all the same: the session is moved, not dropped
            values.append({"session": session.name})
    return values


def export_sessions(
    store: SessionStore, names: Sequence[str], output: Path
) -> tuple[list[ExportedSession], list[tuple[str, LoadProblem]]]:
    """Write the sessions `names` (all when empty) of `store` to `output`, atomically.

    Returns what was written and the lines left out (torn or invalid in the store);
    raises SessionError when `output` cannot be written.
    """
    from nanobot_core.governance.history_file import write_jsonl_atomic

    sessions, problems = collect_sessions(store, names)
    try:
        write_jsonl_atomic(output, export_lines(sessions))
    except OSError as exc:
        raise SessionError(f"cannot write {output}: {exc.strerror or exc}") from None
    return sessions, problems


def read_export(data: bytes, source: str) -> list[ExportedSession]:
    """Parse an export file; SessionError naming the line for anything that is not one."""
    raw_lines = without_bom(data).split(b"\n")  # a mark an editor put first is no line's
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()
    if not raw_lines:
        raise SessionError(f"{source}: empty file, not a sessions export")
    sessions: dict[str, list[str]] = {}
    for number, raw in enumerate(raw_lines, start=1):
        where = f"{source}:{number}"
        try:
            decoded = loads(raw)
        except JSONBoundaryError as exc:
            raise SessionError(f"{where}: not a JSON line ({exc})") from None
        if decoded.replaced:  # a line is imported exactly as it is, or not at all
            raise SessionError(f"{where}: not a line as stored ({', '.join(decoded.replaced)})")
        value = decoded.value
        if number == 1:
            if value != EXPORT_HEADER:
                raise SessionError(
                    f"{where}: not a sessions export (the first line must be "
                    f"{json.dumps(EXPORT_HEADER)})"
                )
            continue
        if (
            not isinstance(value, dict)
            or set(value) not in ({"session", "line"}, {"session"})
            or not isinstance(value["session"], str)
            or not isinstance(value.get("line", ""), str)
        ):
            raise SessionError(
                f'{where}: expected {{"session": NAME, "line": TEXT}} or {{"session": NAME}}'
            )
        repeated = _repeated_key(raw)
        if repeated is not None:  # the decoder keeps the last: a line or a name would be lost
            raise SessionError(f"{where}: the key {repeated!r} is given twice")
        try:
            name = validate_session_name(value["session"])
        except SessionError as exc:
            raise SessionError(f"{where}: {exc}") from None
        if "line" in value:  # its errors, and a warning of what was replaced, name the line
            check_line(value["line"], f"{where}: session {name!r}")
        lines = sessions.setdefault(name, [])
        if "line" in value:
            lines.append(value["line"])
    return [ExportedSession(name, lines) for name, lines in sessions.items()]


# Internal: raised within `_repeated_key` and caught there, never seen outside.
class _RepeatedKeyError(Exception):
    """A key an object of an export line gives twice."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _keys_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _RepeatedKeyError(key)
        seen.add(key)
    return dict(pairs)


def _repeated_key(raw: bytes) -> str | None:
    """A key the object of export line `raw` (already read within the limits) gives twice."""
    try:
        json.loads(raw, object_pairs_hook=_keys_once)
    except _RepeatedKeyError as exc:
        return exc.key
    return None


def import_sessions(
    store: SessionStore, sessions: Sequence[ExportedSession], *, wait: float = 0.0
) -> list[ExportedSession]:
    """Write every session of an export into `store`; refuse any that already exists there."""
    existing = {info.name for info in store.list_sessions()}
    clashes = [s.name for s in sessions if s.name in existing]
    if clashes:
        raise SessionError(
            f"{store.name} store already has session(s) {', '.join(map(repr, clashes))}; "
            "nothing was imported (remove them or import elsewhere)"
        )
    done: list[ExportedSession] = []
    for session in sessions:
        lease = store.lease(session.name, wait=wait)
        try:
            loaded = lease.load()
            if loaded.seq:
                raise SessionError(
                    f"session {session.name!r} appeared in the {store.name} store during the "
                    f"import; imported before it: {', '.join(s.name for s in done) or 'none'}"
                )
            # No line at all is appended too: an empty batch makes the session exist, empty.
            lease.append(session.lines, expected_seq=0)
        except BaseException:
            close_beneath(lease.release, f"the lease on session {session.name!r}")
            raise
        lease.release()
        done.append(session)
    return _kept(store, done)


def _kept(store: SessionStore, done: list[ExportedSession]) -> list[ExportedSession]:
    """`done` without the empty sessions `store` does not list after their import, each named
    in a warning: a store that keeps no empty session would lose them from the next export."""
    empty = [session.name for session in done if not session.lines]
    if not empty:
        return done
    listed = {info.name for info in store.list_sessions()}
    lost = [name for name in empty if name not in listed]
    for name in lost:
        log.warning(
            "empty session not imported: the store keeps no session without a line",
            session=name,
            store=store.name,
        )
    return [session for session in done if session.name not in lost]
