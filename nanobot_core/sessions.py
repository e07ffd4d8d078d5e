"""Sessions: the `SessionStore` protocol every store implements, and an open session over any store.

A session is a sequence of lines, each one JSON object: a message in OpenAI's
shape, with its bookkeeping (time, usage, timings) under the ``_meta`` key,
or a record that is not a message at all (``{"_meta": {"kind": ...}}``).
Every store keeps every line exactly as written, ``_meta`` lines included;
``_meta`` is stripped only when a message goes anywhere else.

A store is picked by ``[sessions] store`` among the stores the
``nanobot_session_stores`` hook returns (the built-in ``jsonl`` store keeps a
file per session in the workspace; ``nanobot-postgres`` adds ``postgres``).
It promises, whatever the backend:

- nothing appended is lost, and a torn write is never seen;
- one writer per session at a time: a writer holds a :class:`Lease` for its
  turn; a second one fails at once with
  :class:`~nanobot_core.errors.SessionLockedError` naming the holder (or waits
  up to ``[sessions] lease_wait`` seconds);
- a batch of lines is appended atomically, and only when the session still
  holds the number of lines the writer expects
  (:class:`~nanobot_core.errors.SessionConflictError` otherwise), so a writer
  that lost the session cannot append;
- reading (``sessions``, ``sessions show``, ``sessions export``) takes no
  lease and changes nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, runtime_checkable

import attrs

from nanobot_core._containment import describe, plugin_code
from nanobot_core._jsonl import split_lines
from nanobot_core._logging import get_logger
from nanobot_core._session_names import validate_session_name
from nanobot_core.errors import ConfigError, NanobotError, PluginEscapeError, SessionError

if TYPE_CHECKING:
    from nanobot_core.kernel.manager import PluginManager

__all__ = [
    "DEFAULT_SESSION",
    "DEFAULT_STORE",
    "META_KEY",
    "ContainedStore",
    "Lease",
    "LoadProblem",
    "Session",
    "SessionInfo",
    "SessionLog",
    "SessionStore",
    "check_line",
    "encode_record",
    "is_meta_record",
    "open_session",
    "parse_line",
    "parse_session_lines",
    "record_text",
    "select_session_store",
    "strip_meta",
    "validate_session_name",
]

log = get_logger("nanobot_core.sessions")

DEFAULT_SESSION = "default"
DEFAULT_STORE = "jsonl"
META_KEY = "_meta"

_T = TypeVar("_T")


class _Closable(Protocol):
    def close(self) -> None: ...


_Store = TypeVar("_Store", bound=_Closable)


def strip_meta(record: Mapping[str, Any]) -> dict[str, Any]:
    """The message of a session line, without the bookkeeping (a deep copy)."""
    return {k: copy.deepcopy(v) for k, v in record.items() if k != META_KEY}


def is_meta_record(record: Mapping[str, Any]) -> bool:
    """Whether a session line is a record and not a message: nothing but a ``_meta`` object.

    Such lines (``{"_meta": {"kind": "usage", ...}}``) are kept with the
    messages but never reach governance or the model.
    """
    return len(record) == 1 and META_KEY in record


@attrs.frozen
class LoadProblem:
    """A line of a session that was not loaded, and why."""

    line: int
    kind: Literal["torn", "invalid"]
    detail: str

    def to_json(self) -> dict[str, Any]:
        """``{"line", "kind", "detail"}``."""
        return {"line": self.line, "kind": self.kind, "detail": self.detail}


@attrs.frozen
class SessionLog:
    """What a store holds of one session: its lines, parsed and as stored.

    `lines` are the exact JSON texts of `records` (what an export copies);
    `seq` is the number of lines stored, the sequence number the next append
    must expect; `location` says where the session lives (a file path, or a
    store and name; never a password). `numbers` is the line number of each
    record, as `problems` number lines (from 1), for a warning that names one;
    left empty, the records are taken to be lines 1, 2, 3... in order.
    """

    name: str
    location: str
    records: list[dict[str, Any]]
    lines: list[str]
    problems: list[LoadProblem]
    seq: int
    numbers: list[int] = attrs.field(factory=list, kw_only=True)

    def messages(self) -> list[dict[str, Any]]:
        """The messages, without ``_meta`` (lines that are only ``_meta`` left out)."""
        return [strip_meta(r) for r in self.records if not is_meta_record(r)]


@attrs.frozen
class SessionInfo:
    """One line of ``nanobot-core sessions``."""

    name: str
    location: str
    messages: int
    size: int
    modified: datetime

    def to_json(self) -> dict[str, Any]:
        """``{"name", "path", "messages", "size", "modified"}`` (size in bytes, time in UTC)."""
        return {
            "name": self.name,
            "path": self.location,
            "messages": self.messages,
            "size": self.size,
            "modified": self.modified.isoformat(timespec="seconds"),
        }


def parse_line(
    raw: bytes | str, *, location: str | None = None, line: int | None = None
) -> tuple[dict[str, Any] | None, str]:
    """One session line as a JSON object, or None and why it is not one.

    `location` (the session's file, or which session) and `line` (its number) say
    where the line is in the warning given when something in it had to be replaced.
    """
    from nanobot_core._json_boundary import JSONBoundaryError, loads

    try:
        decoded = loads(raw)
    except JSONBoundaryError as exc:
        return None, str(exc)
    value = decoded.value
    if decoded.replaced:
        where = {"location": location, "line": line}
        log.warning(
            "session line decoded with replacements",
            **{key: value for key, value in where.items() if value is not None},
            replaced=list(decoded.replaced),
        )
    if not isinstance(value, dict):
        return None, f"a JSON {type(value).__name__}, not an object"
    return value, ""


def parse_session_lines(data: bytes) -> tuple[list[dict[str, Any]], list[LoadProblem]]:
    """Parse the complete lines of a session file; report, never raise, on bad ones.

    A last line without its newline is torn: it is reported and not loaded,
    unless it is a whole JSON object (only the newline was lost).
    """
    records, _, problems = split_session_lines(data)
    return records, problems


def split_session_lines(
    data: bytes, location: str | None = None
) -> tuple[list[dict[str, Any]], list[str], list[LoadProblem]]:
    """Like :func:`parse_session_lines`, also giving the exact text of each loaded line.

    `location` (where `data` was read from) names the file in a warning about a line.
    """
    records, texts, problems, _ = numbered_session_lines(data, location)
    return records, texts, problems


def numbered_session_lines(
    data: bytes, location: str | None = None
) -> tuple[list[dict[str, Any]], list[str], list[LoadProblem], list[int]]:
    """Like :func:`split_session_lines`, also giving the line number of each loaded line."""
    records: list[dict[str, Any]] = []
    texts: list[str] = []
    problems: list[LoadProblem] = []
    numbers: list[int] = []
    lines, tail = split_lines(data)
    for number, raw in lines:
        record, error = parse_line(raw, location=location, line=number)
        if record is None:
            problems.append(LoadProblem(number, "invalid", error))
        else:
            records.append(record)
            texts.append(raw.decode("utf-8"))
            numbers.append(number)
    if tail is not None:
        number, raw = tail
        record, error = parse_line(raw, location=location, line=number)
        if record is None:
            problems.append(LoadProblem(number, "torn", f"{len(raw)} bytes: {error}"))
        else:
            records.append(record)
            texts.append(raw.decode("utf-8"))
            numbers.append(number)
    return records, texts, problems, numbers


def encode_record(record: Mapping[str, Any]) -> bytes:
    """One session line: strict compact JSON and a newline (see `nanobot_core._json_boundary`).

    Lone surrogates and non-finite numbers are replaced and logged, never stored raw;
    raises SessionError for a value that is not JSON at all.
    """
    return _encoded(record)[0]


def _encoded(record: Mapping[str, Any]) -> tuple[bytes, tuple[str, ...]]:
    from nanobot_core._json_boundary import check_depth, dumps

    replaced: list[str] = []
    try:
        check_depth(record)  # what could not be read back must not be stored
        text = dumps(record, separators=(",", ":"), on_replace=replaced.extend)
    except (TypeError, ValueError) as exc:
        raise SessionError(f"message cannot be stored as JSON: {exc}") from exc
    if replaced:
        log.warning("session line stored with replacements", replaced=replaced)
    return (text + "\n").encode("utf-8"), tuple(replaced)


def record_text(record: Mapping[str, Any]) -> str:
    """A session line as stores keep it: :func:`encode_record` without the newline."""
    return encode_record(record)[:-1].decode("utf-8")


def check_line(text: str, where: str) -> dict[str, Any]:
    """The record of `text`; SessionError unless it is one JSON object on one line, in UTF-8.

    The rule for a line a store is given to keep (`where` begins the error: which session
    and line). Lines end at ``\n`` only (`nanobot_core._jsonl`): a ``\r`` is JSON
    whitespace, as in the lines of a file written with CRLF endings, which are kept as
    they are.
    """
    if "\n" in text:
        raise SessionError(f"{where}: a session line must not contain a line break")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SessionError(f"{where}: not encodable as UTF-8 ({exc.reason})") from None
    record, error = parse_line(text, location=where)
    if record is None:
        raise SessionError(f"{where}: {error}")
    return record


# -- the protocol ------------------------------------------------------------------------------


@runtime_checkable
class Lease(Protocol):
    """One writer's hold on one session, for one turn: load, append, release.

    Only the holder of a lease appends to its session. Releasing is idempotent;
    a store must also free the lease when the holding process dies.

    A lease may also have ``check_held() -> None``, which raises SessionError
    (saying where and why) when the lease no longer holds its session: the
    runner asks it before each model request, so that a request whose reply
    could not be stored is never sent (and paid for). It is optional, and left
    out of the protocol so that a lease without it still is one; it must be
    cheap, as it runs once per model call: at most one round trip to a server,
    none when the store already knows (the ``jsonl`` lease answers from memory,
    its lock being held by a descriptor that only the process's end frees).
    """

    session: str

    def load(self) -> SessionLog:
        """The session as stored (empty, with seq 0, when it does not exist yet)."""
        ...

    def append(self, lines: Sequence[str], *, expected_seq: int) -> int:
        """Append `lines` (JSON texts, without newlines) atomically; return the new seq.

        Raises SessionConflictError, appending nothing, when the session does
        not hold exactly `expected_seq` lines. No line at `expected_seq` 0 makes
        the session exist, empty (listed, loaded, exported): how ``sessions
        import`` brings in a session exported without lines.
        """
        ...

    def release(self) -> None:
        """Give the session up (idempotent)."""
        ...


@runtime_checkable
class SessionStore(Protocol):
    """What the ``nanobot_session_stores`` hook returns: a named place for sessions."""

    name: str

    def describe(self) -> str:
        """Where the sessions live, for messages (never a password)."""
        ...

    def list_sessions(self) -> list[SessionInfo]:
        """Every session, sorted by name (by code point, as Python sorts strings)."""
        ...

    def load(self, session: str) -> SessionLog:
        """Read session `session` without a lease.

        Raises SessionNotFoundError if there is none, SessionError if the store failed.
        """
        ...

    def lease(self, session: str, *, wait: float = 0.0) -> Lease:
        """Take the lease on `session`, waiting up to `wait` seconds.

        Raises SessionLockedError, naming the holder, when it is still held.
        """
        ...

    def close(self) -> None:
        """Release what the store holds (connections, descriptors); idempotent.

        A plugin manager builds each store once and hands the same object to
        every command or runner that selects it, so a store may be used again
        after `close`: it opens again what it needs (the ``jsonl`` store holds
        nothing open; the PostgreSQL store connects again).
        """
        ...


# -- an open session, over any store -------------------------------------------------------------


class Session:
    """An open session, leased for this process: read its history, append messages.

    Use it as a context manager (or call :meth:`close`) to release the lease.
    """

    def __init__(self, lease: Lease, log_: SessionLog) -> None:
        self.name = lease.session
        self.location = log_.location
        self.problems = log_.problems
        self._lease: Lease | None = lease
        self._records = list(log_.records)
        # The messages `shared_history` gives out: made once per line, here and on each
        # append, so that a model call costs what was appended, not a copy of the session.
        self._shared = _shared_messages(self._records)
        self._seq = log_.seq
        # What numbers a line for a warning: as loaded (the store's numbers, or 1, 2, 3...),
        # and each line appended since one past the lines loaded. Only read when one is named.
        self._numbers = log_.numbers
        self._loaded = (len(self._records), log_.seq)

    def __repr__(self) -> str:
        return f"Session({self.name!r}, {len(self._records)} lines)"

    @property
    def seq(self) -> int:
        """The number of lines the session holds."""
        return self._seq

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every loaded line, ``_meta`` included (copies)."""
        return copy.deepcopy(self._records)

    def newest_record(self, match: Callable[[Mapping[str, Any]], bool]) -> dict[str, Any] | None:
        """A copy of the newest line `match` accepts, ``_meta`` included; None when none does.

        The lines are looked at newest first, as they are (`match` must not change
        them), and only the one found is copied: what the runner restores the
        governance record with, where `records` would copy the whole session.
        """
        return next((record for _, record in self.newest_lines(match)), None)

    def newest_lines(
        self, match: Callable[[Mapping[str, Any]], bool]
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """The lines `match` accepts, newest first, each a copy with its line number.

        As `newest_record`, but going on past the first: what the runner reads the
        governance records with, newest first until one is valid, naming the line of
        each damaged one it passes (as the store numbers its lines, from 1).
        """
        for index in range(len(self._records) - 1, -1, -1):
            record = self._records[index]
            if match(record):
                yield self._line_number(index), copy.deepcopy(record)

    def _line_number(self, index: int) -> int:
        loaded, seq = self._loaded
        if index >= loaded:
            return seq + index - loaded + 1
        return self._numbers[index] if len(self._numbers) == loaded else index + 1

    def history(self) -> list[dict[str, Any]]:
        """The messages in order, without ``_meta``: what governance and the model may see.

        Copies, which the caller may change freely (see `shared_history` for a reader).
        """
        return [strip_meta(r) for r in self._records if not is_meta_record(r)]

    def shared_history(self) -> list[Mapping[str, Any]]:
        """The messages of `history`, as the same objects on every call: read-only.

        Each message is made once, when its line is loaded or appended, and given
        out again on every later call (the list is new each time). What the runner
        governs before each model call: a governor remembers what it learned of a
        message by the object, so handing it the same ones again is what keeps a
        call on a long session cheap. Changing one would change what governance
        and the model see from then on (never the lines stored, nor `history` or
        `records`, which are kept apart): copy what you mean to change.
        """
        return list(self._shared)

    def append(self, message: Mapping[str, Any], meta: Mapping[str, Any] | None = None) -> None:
        """Persist one message (and its bookkeeping) before returning."""
        self.append_many([(message, meta)])

    def append_many(
        self, items: Sequence[tuple[Mapping[str, Any], Mapping[str, Any] | None]]
    ) -> None:
        """Persist messages (each with its bookkeeping) as one atomic batch."""
        if self._lease is None:
            raise SessionError(f"session {self.name!r} is closed")
        from nanobot_core._json_boundary import JSONLimitError, check_depth

        records: list[dict[str, Any]] = []
        for message, meta in items:
            try:
                check_depth(message)  # before the copy, which would recurse as deep
            except JSONLimitError as exc:
                raise SessionError(f"message cannot be stored as JSON: {exc}") from None
            record = strip_meta(message)
            if meta:
                record[META_KEY] = dict(meta)
            records.append(record)
        self.append_records(records)

    def append_records(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Persist whole lines (``_meta`` records included) as one atomic batch."""
        if self._lease is None:
            raise SessionError(f"session {self.name!r} is closed")
        if not records:
            return
        texts: list[str] = []
        kept: list[dict[str, Any]] = []
        for record in records:
            data, replaced = _encoded(record)
            texts.append(data[:-1].decode("utf-8"))
            if replaced:  # what is kept in memory is what the store holds
                from nanobot_core._json_boundary import loads

                kept.append(loads(data).value)
            else:
                kept.append(copy.deepcopy(dict(record)))
        self._seq = self._lease.append(texts, expected_seq=self._seq)
        self._records.extend(kept)
        self._shared += _shared_messages(kept)

    def check_held(self) -> None:
        """Raise SessionError when the lease no longer holds the session (see `Lease`).

        A lease without ``check_held`` is taken to hold it: nothing is asked.
        """
        if self._lease is None:
            raise SessionError(f"session {self.name!r} is closed")
        check = getattr(self._lease, "check_held", None)
        if check is not None:
            check()

    def close(self) -> None:
        """Release the lease (idempotent)."""
        if self._lease is not None:
            lease, self._lease = self._lease, None
            lease.release()

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
        else:
            close_beneath(self.close, f"session {self.name!r}")


def _shared_messages(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The messages of `records` for `Session.shared_history`: without ``_meta``, apart.

    Every dict and list is their own (strings, which cannot change, are shared), so a
    reader that breaks the read-only rule cannot reach the lines `history` copies.
    """
    from nanobot_core.governance.messages import container_copy

    return [
        container_copy({k: v for k, v in record.items() if k != META_KEY})
        for record in records
        if not is_meta_record(record)
    ]


def close_beneath(close: Callable[[], object], what: str) -> None:
    """Call `close` while another error is on its way out: a failure of its own is logged.

    Raised, it would replace that error (a provider's, say) with one about
    closing, and the user would be told the wrong thing went wrong.
    """
    try:
        close()
    except Exception as exc:
        log.warning("could not close after an error", what=what, error=describe(exc))


@contextmanager
def closing_store(store: _Store) -> Iterator[_Store]:
    """`store` for the block, closed after it (`close_beneath` when the block raised)."""
    try:
        yield store
    except BaseException:
        close_beneath(store.close, f"the {getattr(store, 'name', 'session')} store")
        raise
    store.close()


def open_session(store: SessionStore, name: str = DEFAULT_SESSION, *, wait: float = 0.0) -> Session:
    """Lease session `name` of `store` and load it; raises SessionLockedError when busy."""
    validate_session_name(name)
    lease = store.lease(name, wait=wait)
    try:
        loaded = lease.load()
    except BaseException:
        close_beneath(lease.release, f"the lease on session {name!r}")
        raise
    for problem in loaded.problems:
        log.warning(
            "session line skipped",
            session=name,
            location=loaded.location,
            line=problem.line,
            problem=problem.detail,
        )
    return Session(lease, loaded)


# -- choosing the store --------------------------------------------------------------------------


def session_stores(pm: PluginManager) -> dict[str, ContainedStore]:
    """The stores the ``nanobot_session_stores`` hook returns, by name.

    They are the plugin manager's ``store`` contributions, so a name two plugins
    give goes by the kernel's one clash rule (`PluginManager.contributions`): the
    built-in ``jsonl`` is kept unless ``[plugins] overrides`` hands it to a plugin,
    the first plugin by distribution then entry-point name wins, and the loser is
    warned about and listed as shadowed. An item that is not a store with a name is
    left out alone, as one of its plugin's problems. Each store is returned
    contained (`ContainedStore`): its methods run as its plugin's code, the
    built-in ``jsonl`` store's too.
    """
    return {
        c.name: ContainedStore(c.item, c.name, c.plugin.describe())
        for c in pm.contributions("store")
    }


def select_session_store(pm: PluginManager) -> ContainedStore:
    """The store named by ``[sessions] store``; ConfigError naming the known ones otherwise.

    It is returned contained (a `ContainedStore`); the plugin's own object is its ``store``.
    """
    from nanobot_core.config import source_prefix  # here: a store is used without any config

    wanted = pm.config.sessions.store
    stores = session_stores(pm)
    if wanted not in stores:
        known = ", ".join(sorted(stores)) or "none"
        raise ConfigError(
            f"{source_prefix(wanted)}sessions.store: no session store named {wanted!r} "
            f"(known: {known})"
        )
    return stores[wanted]


# -- a plugin's store, called as plugin code -----------------------------------------------------


def _store_call(store: ContainedStore, method: str, call: Callable[[], _T], kind: type[_T]) -> _T:
    """`call` (`store`'s `method`) run as its plugin's code; what it returns must be a `kind`.

    Prints go to the log. The store's own NanobotError (SessionLockedError,
    SessionNotFoundError, SessionError...) goes on as it is; anything else it raises
    (``SystemExit``, a ``RuntimeError``) or a value of another type is a SessionError
    naming the store and its plugin, so the CLI reports it in one line and exits 1.
    """
    try:
        with plugin_code(store.owner):
            value = call()
    except NanobotError as exc:
        if not isinstance(exc, PluginEscapeError):
            raise
        raise SessionError(f"{store.label}: {method} {exc}") from None
    except Exception as exc:
        raise SessionError(f"{store.label}: {method} raised {describe(exc)}") from exc
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SessionError(
            f"{store.label}: {method} returned {type(value).__name__}, not {kind.__name__}"
        )
    return value


class ContainedStore:
    """A store of the ``nanobot_session_stores`` hook whose every call runs as its plugin's code.

    What `select_session_store` returns: the methods of `SessionStore`, and those
    of the leases it gives, go through `_store_call`. The store itself is ``store``.
    """

    def __init__(self, store: SessionStore, name: str, owner: str) -> None:
        self.store = store
        self.name = name
        #: The plugin that returned the store, with its distribution and version.
        self.owner = owner
        self.label = f"session store {name!r} of {owner}"

    def __repr__(self) -> str:
        return f"ContainedStore({self.store!r})"

    def describe(self) -> str:
        """The store's own `describe`, contained."""
        return _store_call(self, "describe", self.store.describe, str)

    def list_sessions(self) -> list[SessionInfo]:
        """The store's own `list_sessions`, contained; every item must be a SessionInfo."""
        infos = _store_call(self, "list_sessions", self.store.list_sessions, list)
        for info in infos:
            if not isinstance(info, SessionInfo):
                raise SessionError(
                    f"{self.label}: list_sessions returned a {type(info).__name__}, "
                    "not a SessionInfo"
                )
        return infos

    def load(self, session: str) -> SessionLog:
        """The store's own `load`, contained."""
        return _store_call(self, "load", lambda: self.store.load(session), SessionLog)

    def lease(self, session: str, *, wait: float = 0.0) -> Lease:
        """The store's own `lease`, contained, and the lease it gives contained too."""
        lease = _store_call(self, "lease", lambda: self.store.lease(session, wait=wait), object)
        if not isinstance(lease, Lease):
            raise SessionError(f"{self.label}: lease returned {type(lease).__name__}, not a Lease")
        return _ContainedLease(self, lease, session)

    def close(self) -> None:
        """The store's own `close`, contained."""
        _store_call(self, "close", self.store.close, object)


class _ContainedLease:
    """A lease of a `ContainedStore`: its methods run as the store's plugin's code."""

    def __init__(self, store: ContainedStore, lease: Lease, session: str) -> None:
        self.session = session
        self._store = store
        self._lease = lease
        # Looked up once: a lease without it costs the runner next to nothing per model call.
        self._check: Callable[[], object] | None = getattr(lease, "check_held", None)

    def __repr__(self) -> str:
        return f"_ContainedLease({self._lease!r})"

    def load(self) -> SessionLog:
        return _store_call(self._store, "load", self._lease.load, SessionLog)

    def append(self, lines: Sequence[str], *, expected_seq: int) -> int:
        def call() -> int:
            return self._lease.append(lines, expected_seq=expected_seq)

        return _store_call(self._store, "append", call, int)

    def check_held(self) -> None:
        if self._check is not None:
            _store_call(self._store, "check_held", self._check, object)

    def release(self) -> None:
        _store_call(self._store, "release", self._lease.release, object)
