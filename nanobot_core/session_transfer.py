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
Windows writes one) is read past; anywhere else it is what it is in JSON. A
blank line (JSON's whitespace alone, `nanobot_core._jsonl.is_blank`, as in a
session file) is skipped, and counted in the line numbers errors give.
Import checks everything it can without writing first, for every session: the
whole file (header, names, that every line is a JSON object, that no line gives
a key twice, that each session's lines are together: a session's lines apart,
or a line after its ``{"session": NAME}``, is a session given twice), then the
sessions the target store already has, which are refused so that nothing is
overwritten or merged (with ``--resume``, one holding exactly
the export's lines is taken as imported already and one holding no line is
filled). Each session is then written as one atomic batch under its lease, an
empty session as an empty batch, which makes it exist (a store that still does
not list it, keeping no session without a line, is warned about, naming the
session). A write the store refuses half-way (a conflict, a lost connection, a
full disk) stops the import with an error naming the session that failed and
every session imported before it, which stay.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from nanobot_core._json_boundary import JSONBoundaryError, loads
from nanobot_core._jsonl import is_blank, without_bom
from nanobot_core._logging import get_logger
from nanobot_core.errors import (
    NanobotError,
    SessionConflictError,
    SessionError,
    SessionNotFoundError,
)
from nanobot_core.sessions import (
    LoadProblem,
    SessionStore,
    check_line,
    close_beneath,
    validate_session_name,
)

__all__ = [
    "EXPORT_HEADER",
    "ExportProblem",
    "ExportStream",
    "ExportedSession",
    "ImportResult",
    "export_sessions",
    "import_sessions",
    "read_export",
]

log = get_logger("nanobot_core.sessions")

EXPORT_HEADER: dict[str, Any] = {"nanobot_sessions_export": 1}
_VERSION_KEY = "nanobot_sessions_export"


@attrs.frozen
class ExportedSession:
    """One session of an export: its name and the exact text of its lines.

    `location` is where the store keeps it (its file), for a warning naming one of its
    lines; None for a session read from an export file. `checked`: `read_export` checked
    every line already, so that `import_sessions` does not parse it twice. Neither is part
    of its value.
    """

    name: str
    lines: list[str]
    location: str | None = attrs.field(default=None, eq=False, kw_only=True)
    checked: bool = attrs.field(default=False, eq=False, kw_only=True)


@attrs.frozen
class ExportProblem:
    """A line of session `session` (kept at `location`) left out of an export."""

    session: str
    location: str | None
    problem: LoadProblem


class ExportStream:
    """The values of an export of sessions `names` of `store` (all of them when empty),
    header first, each session read from the store only when its lines are due.

    So an export of thousands of sessions holds one session at a time, never all of
    them. Iterate once. Named sessions are checked to exist when it is made, before a
    line is written (a store's own error, SessionNotFoundError above all, as `load`
    raises it); one listed that is gone by its turn was removed since, and is passed
    over. After the iteration, `sessions` and `lines` count what was written and
    `problems` holds the lines left out (torn or invalid in the store).
    """

    def __init__(self, store: SessionStore, names: Sequence[str]) -> None:
        self._store = store
        self._named = bool(names)
        wanted = list(dict.fromkeys(names))
        for name in wanted:
            # Read once to be sure it is there: a missing one found while writing stdout
            # would leave a partial export behind an error.
            store.load(validate_session_name(name))
        self._names = wanted or [info.name for info in store.list_sessions()]
        self.sessions = 0
        self.lines = 0
        self.problems: list[ExportProblem] = []

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield dict(EXPORT_HEADER)
        for name in self._names:
            try:
                loaded = self._store.load(name)
            except SessionNotFoundError:
                if self._named:
                    raise
                continue  # listed, then removed before its turn: no session to export
            yield from export_lines([ExportedSession(name, list(loaded.lines))], header=False)
            self.sessions += 1
            self.lines += len(loaded.lines)
            self.problems.extend(
                ExportProblem(name, loaded.location, problem) for problem in loaded.problems
            )


def export_lines(
    sessions: Iterable[ExportedSession], *, header: bool = True
) -> Iterator[dict[str, Any]]:
    """The values of an export file, header first (unless `header` is False)."""
    if header:
        yield dict(EXPORT_HEADER)
    for session in sessions:
        yield from ({"session": session.name, "line": line} for line in session.lines)
        if not session.lines:  # named all the same: the session is moved, not dropped
            yield {"session": session.name}


def export_sessions(store: SessionStore, names: Sequence[str], output: Path) -> ExportStream:
    """Write the sessions `names` (all when empty) of `store` to `output`, atomically, one
    session in memory at a time.

    Returns the stream written (its counts, and the lines left out: torn or invalid in
    the store); raises SessionError when `output` cannot be written.
    """
    from nanobot_core.governance.history_file import write_jsonl_atomic

    stream = ExportStream(store, names)
    try:
        write_jsonl_atomic(output, stream)
    except OSError as exc:
        raise SessionError(f"cannot write {output}: {exc.strerror or exc}") from None
    return stream


def read_export(data: bytes, source: str) -> list[ExportedSession]:
    """Parse an export file; SessionError naming the line for anything that is not one."""
    raw_lines = without_bom(data).split(b"\n")  # a mark an editor put first is no line's
    # A blank line (JSON's whitespace alone: an edit, two exports joined by an empty line)
    # holds nothing, as in a session file; numbers still count it, as an editor does.
    numbered = [(n, raw) for n, raw in enumerate(raw_lines, start=1) if not is_blank(raw)]
    if not numbered:
        blank = "empty file" if not without_bom(data) else "a file of blank lines only"
        raise SessionError(f"{source}: {blank}, not a sessions export")
    sessions: dict[str, list[str]] = {}
    first_lines: dict[str, int] = {}  # the line each session's lines begin at
    open_session: str | None = None  # the session the next line may go on with
    for index, (number, raw) in enumerate(numbered):
        where = f"{source}:{number}"
        try:
            decoded = loads(raw)
        except JSONBoundaryError as exc:
            raise SessionError(f"{where}: not a JSON line ({exc})") from None
        if decoded.replaced:  # a line is imported exactly as it is, or not at all
            raise SessionError(f"{where}: not a line as stored ({', '.join(decoded.replaced)})")
        value = decoded.value
        if index == 0:
            version = value.get(_VERSION_KEY) if isinstance(value, dict) else None
            # `type`, not `==`: true and 1.0 equal 1 in Python, and are no format of JSON's.
            known = type(version) is int and version == EXPORT_HEADER[_VERSION_KEY]
            if version is not None and not known:  # made by another release, or by hand
                raise SessionError(
                    f"{where}: a sessions export of format {json.dumps(version)}; this "
                    f"nanobot-core reads format {EXPORT_HEADER[_VERSION_KEY]} "
                    f"({json.dumps(EXPORT_HEADER)})"
                )
            if value != EXPORT_HEADER:
                raise SessionError(
                    f"{where}: not a sessions export (the first line that is not blank "
                    f"must be {json.dumps(EXPORT_HEADER)})"
                )
            continue
        if value == EXPORT_HEADER:  # `cat` of two exports: a session in both would be merged
            raise SessionError(
                f"{where}: a second export header: exports joined into one file are not "
                "read as one; import each export file on its own"
            )
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
        if name in first_lines and not (name == open_session and "line" in value):
            # Lines apart (a hand edit, a cut and paste) or a session that said it has no
            # line: joining them would guess their order, as a session given twice would.
            raise SessionError(
                f"{where}: session {name!r} is given twice (its first lines are at line "
                f"{first_lines[name]}): an export holds each session's lines together, and "
                "joining the two would guess their order; put them together, or give one "
                "part another name"
            )
        if "line" in value:  # its errors, and a warning of what was replaced, name the line
            check_line(value["line"], f"{where}: session {name!r}")
        first_lines.setdefault(name, number)
        lines = sessions.setdefault(name, [])
        if "line" in value:
            lines.append(value["line"])
        # The line `{"session": NAME}` is the whole of an empty session: no line follows it.
        open_session = name if "line" in value else None
    return [ExportedSession(name, lines, checked=True) for name, lines in sessions.items()]


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


@attrs.frozen
class ImportResult:
    """What `import_sessions` did: the sessions it wrote, in order, and the names of those
    the store already held with the very lines of the export (`resume`), left as they are."""

    imported: list[ExportedSession]
    already: list[str] = attrs.field(factory=list)


def import_sessions(
    store: SessionStore,
    sessions: Sequence[ExportedSession],
    *,
    wait: float = 0.0,
    resume: bool = False,
) -> ImportResult:
    """Write every session of an export into `store`, each as one atomic batch.

    Everything that can be checked without writing is checked for every session
    first: names, lines (unless `read_export` checked them), and the sessions the
    store already has. One of those is refused, and nothing is written, unless
    `resume` is set and it holds exactly the export's lines (an import stopped
    half-way wrote it: it is left as it is) or no line at all (a failed write may
    leave a session so: it is filled). A write the store refuses half-way raises a
    SessionError naming the session that failed and every one imported before it.
    """
    _check_sessions(sessions)
    pending, already = _pending(store, sessions, resume=resume)
    done: list[ExportedSession] = []
    for index, session in enumerate(pending):
        try:
            _write_session(store, session, wait=wait)
        except NanobotError as exc:
            raise SessionError(_stopped(store, done, session, len(pending) - index, exc)) from None
        except BaseException:
            # Ctrl-C, say: the CLI says "Interrupted.", this names what is in the store already.
            log.warning(
                "import stopped; the sessions imported before it stay",
                store=store.name,
                session=session.name,
                imported=[s.name for s in done],
            )
            raise
        done.append(session)
    return ImportResult(_kept(store, done), already)


def _check_sessions(sessions: Sequence[ExportedSession]) -> None:
    """SessionError for the first session no store could take: a name no session can have,
    one given twice, a line that is no JSON object (lines `read_export` checked aside)."""
    seen: set[str] = set()
    for session in sessions:
        validate_session_name(session.name)
        if session.name in seen:
            raise SessionError(f"session {session.name!r} is given twice; nothing was imported")
        seen.add(session.name)
        if not session.checked:
            for number, line in enumerate(session.lines, start=1):
                check_line(line, f"session {session.name!r}, line {number}")


def _pending(
    store: SessionStore, sessions: Sequence[ExportedSession], *, resume: bool
) -> tuple[list[ExportedSession], list[str]]:
    """The sessions to write and the names of those already imported (`resume` only);
    SessionError naming every session the store already has otherwise, nothing written."""
    existing = {info.name for info in store.list_sessions()}
    clashes = [s for s in sessions if s.name in existing]
    if not clashes:
        return list(sessions), []
    if not resume:
        raise SessionError(
            f"{store.name} store already has session(s) "
            f"{', '.join(repr(s.name) for s in clashes)}; nothing was imported (remove them, "
            "import elsewhere, or, to finish an import of this file that stopped half-way, "
            "import it again with --resume)"
        )
    already: set[str] = set()
    refused: list[str] = []
    for session in clashes:
        held = store.load(session.name)
        if held.lines == session.lines and not held.problems:
            already.add(session.name)
        elif held.seq:  # a session with no line at all holds nothing the import could lose
            refused.append(f"{session.name!r} ({held.seq} line(s) other than the export's)")
    if refused:
        raise SessionError(
            f"{store.name} store already has session(s) {', '.join(refused)}; "
            "nothing was imported (remove them or import elsewhere)"
        )
    pending = [s for s in sessions if s.name not in already]
    return pending, [s.name for s in sessions if s.name in already]


def _write_session(store: SessionStore, session: ExportedSession, *, wait: float) -> None:
    """Append the lines of `session` as one batch to the session, which must hold no line."""
    lease = store.lease(session.name, wait=wait)
    try:
        loaded = lease.load()
        if loaded.seq:
            raise SessionConflictError(
                f"session {session.name!r} appeared in the {store.name} store during the "
                f"import, holding {loaded.seq} line(s)"
            )
        # No line at all is appended too: an empty batch makes the session exist, empty.
        lease.append(session.lines, expected_seq=0)
    except BaseException:
        close_beneath(lease.release, f"the lease on session {session.name!r}")
        raise
    lease.release()


def _stopped(
    store: SessionStore,
    done: Sequence[ExportedSession],
    failed: ExportedSession,
    left: int,
    exc: NanobotError,
) -> str:
    """What an import that `store` refused half-way says: what failed, what it holds already,
    and how to finish or undo it."""
    imported = ", ".join(repr(s.name) for s in done) or "none"
    after = f" and the {left - 1} after it" if left > 1 else ""
    return (
        f"importing session {failed.name!r} into the {store.name} store failed: {exc}. "
        f"Imported before it ({len(done)}): {imported}; not imported: {failed.name!r}{after}. "
        "Import the same file again with --resume once the cause is fixed to import the "
        "rest (the sessions imported are checked and left as they are), or remove the "
        "sessions imported to undo it"
    )


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
