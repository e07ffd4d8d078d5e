"""The ``postgres`` session store: sessions, their lines and their leases in PostgreSQL.

A line is one row of ``nanobot_session_lines`` holding its JSON text exactly
as written; ``(session, seq)`` is the primary key and rows are never updated
(a trigger refuses it). An append is one statement: it moves the session's
line count from the count the writer expects to the new one and inserts the
rows, or does nothing at all when the count differs. A batch larger than one
statement carries (the server's 1 GiB message limit) is several, in one
transaction. A session without lines
is its ``nanobot_sessions`` row alone: what an empty batch at count 0 makes
(``sessions import`` of a session exported empty), so that it is listed and
exported again.

The lease on a session is a session-level advisory lock held by one pooled
connection for the whole turn (and the turn's appends go through it). When
the worker dies, however it dies, the server ends that connection and the
lock with it, so another worker takes the session over at once. The error
for a busy session names the holder from ``pg_stat_activity``: every
connection says which host and process it serves in ``application_name``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from nanobot_core import source_prefix
from nanobot_core.errors import (
    ConfigError,
    SessionConflictError,
    SessionError,
    SessionLockedError,
    SessionNotFoundError,
)
from nanobot_core.sessions import (
    LoadProblem,
    SessionInfo,
    SessionLog,
    check_line,
    is_meta_record,
    parse_line,
    validate_session_name,
)

from nanobot_postgres.dsn import (
    describe_dsn,
    host_fault,
    one_printable_line,
    parse_fault,
    port_fault,
)
from nanobot_postgres.migrations import apply_migrations

if TYPE_CHECKING:
    from nanobot_core import Config
    from psycopg import sql

__all__ = ["Keepalives", "PostgresLease", "PostgresSessionStore", "application_name", "keepalives"]

# The lines go as one text[] parameter in binary form (``%(lines)b``): each element its
# length and its bytes. In the text form psycopg put a backslash before every ``"`` and
# ``\\`` of every line through a regular expression, some 180 bytes of memory and 3
# microseconds each: a JSON line is full of them, and a 2 MB line of escaped backslashes
# took 360 MB and 7 seconds to send.
_APPEND_FIRST = """
WITH s AS (
    INSERT INTO nanobot_sessions AS x (name, lines, messages, bytes)
    VALUES (%(name)s, %(n)s, %(messages)s, %(bytes)s)
    ON CONFLICT (name) DO UPDATE
        SET lines = x.lines + %(n)s, messages = x.messages + %(messages)s,
            bytes = x.bytes + %(bytes)s, updated_at = now()
        WHERE x.lines = 0
    RETURNING x.name
)
INSERT INTO nanobot_session_lines (session, seq, line)
SELECT s.name, t.ord - 1, t.line FROM s, unnest(%(lines)b::text[]) WITH ORDINALITY AS t(line, ord)
"""

_APPEND_MORE = """
WITH s AS (
    UPDATE nanobot_sessions
        SET lines = lines + %(n)s, messages = messages + %(messages)s,
            bytes = bytes + %(bytes)s, updated_at = now()
        WHERE name = %(name)s AND lines = %(expected)s
    RETURNING name
)
INSERT INTO nanobot_session_lines (session, seq, line)
SELECT s.name, %(expected)s + t.ord - 1, t.line
FROM s, unnest(%(lines)b::text[]) WITH ORDINALITY AS t(line, ord)
"""

# The most one append's lines may take as the server receives them: PostgreSQL refuses a
# message over 1 GiB less two bytes (its allocation limit) by closing the connection
# ("invalid message length" in its log, "server closed the connection unexpectedly" here),
# and cannot build an array value over 1 GiB. Kept 64 KiB short for the statement's text
# and its other parameters.
_MAX_APPEND_BYTES = 0x3FFF_FFFE - 0x1_0000


# The lines array's own header, as sent: its dimensions, flags, element type and bounds.
_ARRAY_HEADER = 64


def _sent_size(line: str) -> int:
    """The bytes `line` takes in the lines array, as sent (its length, then its bytes) or
    as the server holds it (a 4-byte header, up to 3 bytes of padding): 8 more than its own.
    """
    # An ASCII line's length is its size, known without a copy of what may be a gigabyte.
    return (len(line) if line.isascii() else len(line.encode("utf-8", "surrogatepass"))) + 8


# A session's line count and its lines, read by one statement so that both come from one
# snapshot: read apart, a worker appending between the two made the count disagree with the
# lines. A session without lines is one row whose seq is NULL; no session, no row.
_READ = """
SELECT s.lines, l.seq, l.line
FROM nanobot_sessions s LEFT JOIN nanobot_session_lines l ON l.session = s.name
WHERE s.name = %s
ORDER BY l.seq
"""

_HOLDER = """
SELECT a.pid, a.application_name, host(a.client_addr), a.backend_start
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.classid::bigint = %s AND l.objid::bigint = %s
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


# The name of this plugin's pools, as psycopg_pool's own records name them.
POOL_NAME = "nanobot-sessions"


class _PoolRecordsAtDebug(logging.Filter):
    """psycopg_pool's warnings about this plugin's pools, demoted to debug.

    While the server is down the pool warns once per connect it retries, and on
    each broken or closed connection it drops; nothing configures the stdlib
    ``logging`` in the CLI, so Python's last-resort handler printed each one as a
    raw line on stderr. A call that fails for it raises the store's own error
    instead, naming the server and why (the pool's timeout, `_connection`). A
    record is this plugin's when it names its pool or one of its connections;
    those of an application's own pools are left as they are, and so are the
    pool's other warnings (a connection handed back inside a transaction or
    during a query says the store has a bug). A demoted record is handled only
    where psycopg_pool's logger takes debug records, as if it had been logged at
    debug: a handler of level NOTSET (``logging.basicConfig``) would print it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            logging.DEBUG < record.levelno <= logging.WARNING
            and record.msg in _RETRY_MESSAGES
            and _ours(record.args)
        ):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


# psycopg_pool's warnings (as it words them) while the server cannot be reached: a connect
# that failed and is retried, the retries given up, a connection found broken or closed.
_RETRY_MESSAGES = frozenset(
    {
        "error connecting in %r: %s",
        "reconnection attempt in pool %r failed after %s sec",
        "discarding broken connection: %s",
        "discarding closed connection: %s",
    }
)


def _ours(args: Any) -> bool:
    values = args if isinstance(args, tuple) else (args,)
    return any(
        value == POOL_NAME or getattr(type(value), "_nanobot_store", False) for value in values
    )


def _quiet_pool_records() -> None:
    """Install `_PoolRecordsAtDebug` on psycopg_pool's logger, once per process."""
    logger = logging.getLogger("psycopg.pool")
    if not any(isinstance(f, _PoolRecordsAtDebug) for f in logger.filters):
        logger.addFilter(_PoolRecordsAtDebug())


# The longest lock_timeout PostgreSQL takes (an int of milliseconds, about 24.8 days).
_MAX_WAIT = (2**31 - 1) / 1000

# How often a backend waiting for a lease checks that its worker is still there. A
# backend notices a vanished client only when it next talks to it, and a waiting one
# says nothing until it has the lock: without the check, a worker killed while it
# waits leaves its backend in the queue, holding a connection slot, to be granted the
# lock of a session nobody serves. The check is a poll() of the socket, nearly free.
CLIENT_CHECK_INTERVAL = "1s"

# The setting that asks for that check (PostgreSQL 14 and later).
_CLIENT_CHECK = "client_connection_check_interval"


def _wait_settings(timeout_ms: int) -> sql.Composed:
    """The statement that sets up a lease wait of `timeout_ms`, in the transaction only.

    lock_timeout bounds the wait; statement_timeout is off so that a server's
    shorter one does not cut it; and the server checks every `CLIENT_CHECK_INTERVAL`
    that the worker is still connected. A server without the check refuses the
    setting: before PostgreSQL 14 it is unknown, a platform that cannot check
    refuses the value, a managed server may keep it read-only. Whatever the
    refusal, the block leaves the check out and the wait is as it was.
    """
    from psycopg import sql

    return sql.SQL(
        """DO $$
BEGIN
    PERFORM set_config('lock_timeout', {timeout}, true),
        set_config('statement_timeout', '0', true);
    BEGIN
        PERFORM set_config({check}, {interval}, true);
    EXCEPTION WHEN OTHERS THEN
        NULL;
    END;
END
$$"""
    ).format(
        timeout=sql.Literal(f"{timeout_ms}ms"),
        check=sql.Literal(_CLIENT_CHECK),
        interval=sql.Literal(CLIENT_CHECK_INTERVAL),
    )


@dataclasses.dataclass(frozen=True)
class Keepalives:
    """How soon the server gives up on a worker that stopped answering, freeing its lease.

    A lease is an advisory lock held by a connection, so it lasts until the server ends
    that connection. On a cut network the server hears nothing, and its backend, idle
    between a turn's statements, waits for the worker's next one: with the operating
    system's keepalives (Linux: the first probe after two hours) it held the lease that
    long, and an answer it had sent into the cut was sent again for about fifteen minutes.
    With these the server ends the connection `bound` seconds after it last heard from the
    worker: probes from `idle` seconds of silence, `interval` apart, `count` unanswered
    ones. ``tcp_user_timeout`` (Linux) ends it as well when data it sent waits as long
    for an acknowledgement, which keepalives do not probe for.
    """

    idle: int
    interval: int
    count: int
    user_timeout_ms: int

    @property
    def bound(self) -> int:
        """Seconds from the last word of the peer to the connection's end, at the most."""
        return self.idle + self.interval * self.count


# What the kernels take (Linux: TCP_KEEPIDLE and TCP_KEEPINTVL up to 32767 seconds,
# TCP_KEEPCNT up to 127; tcp_user_timeout is an int of milliseconds in PostgreSQL).
_MAX_KEEPALIVE_SECONDS = 32767
_MAX_KEEPALIVE_COUNT = 127
_MAX_USER_TIMEOUT_MS = 2**31 - 1


def keepalives(query_timeout: float) -> Keepalives:
    """The server's keepalives for a worker whose statements wait `query_timeout` at most.

    The worker gives up on a statement the server does not answer after `query_timeout`
    (`_Deadlines`), so the server gives up on a worker that does not answer after as long
    (2 seconds at the least: probes count whole seconds): half of it in silence before the
    first probe, then probes a tenth of it apart.
    """
    idle = min(_MAX_KEEPALIVE_SECONDS, max(1, int(query_timeout / 2)))
    interval = min(_MAX_KEEPALIVE_SECONDS, max(1, int(query_timeout / 10)))
    count = min(_MAX_KEEPALIVE_COUNT, max(1, int((query_timeout - idle) / interval)))
    # Half a second short of the bound: Linux checks it as each probe falls due, so the
    # connection ends at the last one, not an interval later.
    user_timeout_ms = min(_MAX_USER_TIMEOUT_MS, (idle + interval * count) * 1000 - 500)
    return Keepalives(idle, interval, count, user_timeout_ms)


def _server_keepalive_settings(wanted: Keepalives) -> sql.Composed:
    """The statement that sets the server's end of a connection to `wanted`, for the session.

    A shorter value already in effect (the server's configuration, the role's, the DSN's
    ``options``) is kept. A setting the server refuses is left as it is (before
    PostgreSQL 12 ``tcp_user_timeout`` is unknown; a managed server may fix them): the
    connection works as it did, its lease freed as late as before.
    """
    from psycopg import sql

    values = sql.SQL(", ").join(
        sql.SQL("({}, {})").format(sql.Literal(name), sql.Literal(value))
        for name, value in (
            ("tcp_keepalives_idle", wanted.idle),
            ("tcp_keepalives_interval", wanted.interval),
            ("tcp_keepalives_count", wanted.count),
            ("tcp_user_timeout", wanted.user_timeout_ms),
        )
    )
    return sql.SQL(
        """DO $$
DECLARE
    wanted record;
    current_value bigint;
BEGIN
    FOR wanted IN SELECT * FROM (VALUES {values}) AS w(name, value) LOOP
        BEGIN
            -- 0 is the operating system's default (or, for tcp_user_timeout, none).
            current_value := coalesce(
                substring(current_setting(wanted.name, true) FROM '^[0-9]+$')::bigint, 0);
            IF current_value = 0 OR current_value > wanted.value THEN
                PERFORM set_config(wanted.name, wanted.value::text, false);
            END IF;
        EXCEPTION WHEN OTHERS THEN
            NULL;
        END;
    END LOOP;
END
$$"""
    ).format(values=values)


class _Deadlines:
    """One thread per process that cuts the socket of a wait for the server past its deadline.

    Neither libpq nor psycopg's public API bounds a wait for an answer: on a cut network
    (packets dropped, no reset) a statement waits until TCP gives up, for minutes, and the
    server's statement_timeout cannot help, its answer being what is lost. libpq's
    ``tcp_user_timeout`` and keepalives bound only some cuts (unacknowledged data, an idle
    socket), on some platforms. A shutdown of the socket ends any wait at once, as the
    server closing it would: psycopg finds the connection lost and the pool drops it.
    """

    def __init__(self) -> None:
        self._start()
        os.register_at_fork(after_in_child=self._start)  # a child has no thread, nor its lock

    def _start(self) -> None:
        self._changed = threading.Condition()
        self._armed: dict[int, tuple[float, int]] = {}  # token: (deadline, socket)
        self._cut: set[int] = set()
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, fileno: int, seconds: float) -> int:
        """Cut socket `fileno` in `seconds` unless disarmed first; the token to disarm it."""
        with self._changed:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="nanobot-postgres-deadlines", daemon=True
                )
                self._thread.start()
            token = next(self._tokens)
            self._armed[token] = (time.monotonic() + seconds, fileno)
            self._changed.notify()
            return token

    def disarm(self, token: int) -> bool:
        """Forget `token`; whether its deadline had passed and its socket was cut."""
        with self._changed:
            self._armed.pop(token, None)
            if token in self._cut:
                self._cut.discard(token)
                return True
            return False

    def _watch(self) -> None:
        changed = self._changed
        with changed:
            # Under the lock, so that a socket is cut only while its wait is still armed:
            # disarmed, its connection may be closed and the number reused.
            while changed is self._changed:
                now = time.monotonic()
                for token, (deadline, fileno) in list(self._armed.items()):
                    if deadline <= now:
                        del self._armed[token]
                        self._cut.add(token)
                        _shut(fileno)
                soonest = min((deadline for deadline, _ in self._armed.values()), default=None)
                changed.wait(None if soonest is None else min(soonest - now, _LONGEST_SLEEP))


# The longest the deadline thread sleeps at once (threading refuses more than TIMEOUT_MAX).
_LONGEST_SLEEP = 3600.0


def _shut(fileno: int) -> None:
    """Shut socket `fileno` down both ways, through a copy: the connection closes its own."""
    try:
        copy = os.dup(fileno)
    except OSError:
        return
    try:
        sock = socket.socket(fileno=copy)
    except OSError:  # no socket now (its connection closed, the number reused): nothing to cut
        os.close(copy)
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already shut or reset: its wait has ended or is ending
    finally:
        sock.close()


_DEADLINES = _Deadlines()


def application_name() -> str:
    """What every connection of this process calls itself: host and pid (at most 63 bytes)."""
    return f"nanobot-core {socket.gethostname()[:32]} pid {os.getpid()}"


def lease_key(session: str) -> int:
    """The advisory-lock key of a session: 64 bits of the SHA-256 of its name, signed."""
    value = int.from_bytes(hashlib.sha256(session.encode()).digest()[:8], "big")
    return value - (1 << 64) if value >= 1 << 63 else value


class PostgresSessionStore:
    """Sessions in the database `dsn` points at; connects (and migrates) on first use.

    `config` is the configuration the settings come from, when they do: a refusal of one
    of them then begins with where it was set (`source_prefix`).
    """

    name = "postgres"

    def __init__(
        self,
        dsn: str | None,
        *,
        pool_size: int = 4,
        connect_timeout: float = 10.0,
        query_timeout: float = 30.0,
        results: bool = False,
        config: Config | None = None,
    ) -> None:
        self._dsn = dsn
        self._config = config
        self.pool_size = max(1, pool_size)
        self.connect_timeout = connect_timeout
        #: Seconds to wait for the server's answer to one statement (a lease wait: beyond
        #: its wait) before the connection is cut (``[sessions.postgres] query_timeout``).
        self.query_timeout = query_timeout
        #: Whether offloaded results go through this pool too (``[sessions.postgres] results``).
        self.results = results
        self._pool: Any = None
        self._pid = 0
        self._guard = threading.Lock()
        self._leased: Counter[str] = Counter()  # the live leases of this process, by session
        self._connect_error: BaseException | None = None  # why the pool's last connect failed

    def __repr__(self) -> str:
        return f"PostgresSessionStore({self.describe()!r})"

    def describe(self) -> str:
        """The server and database, without the password."""
        return describe_dsn(self._dsn)

    def error(self, what: str, exc: BaseException, *, connecting: bool = False) -> SessionError:
        """A SessionError about `exc` on one printable line, that never carries the password.

        `connecting`: `exc` is why a connection could not be made, which the DSN's settings
        may cause (an ``sslmode``, a ``service``, a socket folder, a password): the error
        then ends naming the config key of the DSN and where it was set.
        """
        detail = one_printable_line(str(exc), self._dsn)
        return SessionError(f"{what} ({self.describe()}): {detail}{self._set_by(connecting)}")

    def _set_by(self, connecting: bool) -> str:
        """``; as sessions.postgres.dsn sets it (environment variable NANOBOT_POSTGRES_DSN)``:
        where to change the connection, for a connection that failed of a configured store."""
        if not connecting or self._config is None:
            return ""
        where = source_prefix(config=self._config, keys=["sessions.postgres.dsn"])
        return "; the connection is as sessions.postgres.dsn sets it" + (
            f" ({where.removesuffix(': ')})" if where else ""
        )

    # -- connections ---------------------------------------------------------------------------

    def pool(self) -> Any:
        """The connection pool, opened (and the schema migrated) on first use."""
        with self._guard:
            if self._pool is not None and self._pid == os.getpid():
                return self._pool
            if not self._dsn:
                # Set empty (NANOBOT_POSTGRES_DSN=), it is named by where that was done.
                where = source_prefix(config=self._config, keys=["sessions.postgres.dsn"])
                raise ConfigError(
                    f"{where}sessions.postgres.dsn: {'empty' if self._dsn == '' else 'not set'} "
                    "(set it in [sessions.postgres], or NANOBOT_POSTGRES_DSN)"
                )
            if self.results and self.pool_size < 2:
                # A turn's lease holds the pool's one connection for the whole turn, so
                # each offload would wait connect_timeout for a second one, then be cut.
                where = source_prefix(
                    config=self._config,
                    keys=["sessions.postgres.pool_size", "sessions.postgres.results"],
                )
                raise ConfigError(
                    f"{where}sessions.postgres.pool_size: {self.pool_size} leaves no "
                    "connection for offloaded results (sessions.postgres.results = true): a "
                    "turn's lease holds the only one, so each offload would wait "
                    "connect_timeout and the result be truncated; set pool_size to 2 or more, "
                    "or results = false"
                )
            fault = parse_fault(self._dsn)
            if fault is not None:  # no server could tell more: a config error, not a retry
                where = source_prefix(config=self._config, keys=["sessions.postgres.dsn"])
                raise ConfigError(
                    f"{where}sessions.postgres.dsn: not a connection string or URL libpq can "
                    f"read ({fault}; the dsn itself is not shown)"
                )
            fault = host_fault(self._dsn) or port_fault(self._dsn)
            if fault is not None:  # libpq reads it, and refuses it only when connecting
                where = source_prefix(config=self._config, keys=["sessions.postgres.dsn"])
                raise ConfigError(
                    f"{where}sessions.postgres.dsn: {fault} (the dsn itself is not shown)"
                )
            import psycopg
            from psycopg_pool import ConnectionPool

            settings: dict[str, Any] = {
                "autocommit": True,
                "application_name": application_name(),
            }
            connection_class = self._recording_connection_class(psycopg.Connection)
            connected = False
            try:
                # Of the pool's class: the migration's waits for the server end within
                # query_timeout too, or a first call on a cut network waited for TCP.
                with connection_class.connect(
                    self._dsn, connect_timeout=max(1, round(self.connect_timeout)), **settings
                ) as conn:
                    connected = True
                    apply_migrations(conn)
            except (psycopg.Error, RuntimeError) as exc:
                raise self.error(
                    "cannot use the session database", exc, connecting=not connected
                ) from None
            self._connect_error = None
            _quiet_pool_records()
            server_keepalives = _server_keepalive_settings(keepalives(self.query_timeout))

            def configure(conn: Any) -> None:
                # The server gives up on a silent worker within query_timeout, as the worker
                # gives up on a silent server: so a cut worker's lease is freed that soon.
                conn.execute(server_keepalives)

            self._pool = ConnectionPool(
                self._dsn,
                connection_class=connection_class,
                min_size=1,
                max_size=self.pool_size,
                # The pool's own connects are bounded as the first one is: with psycopg's
                # default (130s) a worker connecting into a cut network kept trying that long.
                kwargs={**settings, "connect_timeout": max(1, round(self.connect_timeout))},
                configure=configure,
                timeout=self.connect_timeout,
                name=POOL_NAME,
                # An idle connection the server dropped (a restart, a failover, an idle
                # timeout) is replaced when handed out, not given to a turn to fail on.
                check=ConnectionPool.check_connection,
                open=True,
            )
            self._pid = os.getpid()
            self._leased.clear()  # a forked child holds none of its parent's leases
            return self._pool

    def _recording_connection_class(self, base: Any) -> Any:
        """`base` whose connects record why the last one failed, for the pool's timeout error,
        and whose every wait for the server ends within `query_timeout` (`_DEADLINES`)."""
        store = self
        import psycopg

        class Recorded(base):  # type: ignore[misc]
            _nanobot_store = True  # how `_PoolRecordsAtDebug` knows this plugin's connections
            #: Seconds a wait may take beyond `query_timeout`: a lease wait's own.
            nanobot_grace = 0.0

            def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
                # Every statement, BEGIN and COMMIT of a connection, the pool's check
                # included, waits for the server here (psycopg's loop, which has no
                # deadline a user can set). The deadline cuts the socket, which ends the
                # wait at once as if the server had closed it.
                limit = store.query_timeout + self.nanobot_grace
                try:
                    token = _DEADLINES.arm(self.pgconn.socket, limit)
                except psycopg.Error:  # no socket: the wait fails at once without one
                    return super().wait(gen, *args, **kwargs)
                try:
                    result = super().wait(gen, *args, **kwargs)
                except psycopg.Error:
                    if _DEADLINES.disarm(token):
                        raise psycopg.OperationalError(store._no_answer(limit)) from None
                    raise
                except BaseException:
                    _DEADLINES.disarm(token)
                    raise
                # An answer that came as the deadline passed is kept: it was received
                # whole. The connection is cut all the same, which its next use finds.
                _DEADLINES.disarm(token)
                return result

            @classmethod
            def connect(cls, *args: Any, **kwargs: Any) -> Any:
                try:
                    conn = super().connect(*args, **kwargs)
                except Exception as exc:
                    store._connect_error = exc
                    raise
                store._connect_error = None
                return conn

        return Recorded

    def _no_answer(self, seconds: float) -> str:
        """Why a wait was cut: no answer within `seconds`, naming the setting that bounds it."""
        where = source_prefix(config=self._config, keys=["sessions.postgres.query_timeout"])
        return (
            f"no answer from the server within {seconds:g}s "
            f"({where}sessions.postgres.query_timeout {self.query_timeout:g}); the connection "
            "was closed (a cut network, or a server that stopped answering)"
        )

    def _connection(self, session: str | None = None) -> Any:
        pool = self.pool()
        try:
            return pool.getconn(timeout=self.connect_timeout)
        except Exception as exc:
            with self._guard:
                leased = Counter(self._leased)
            if leased.total() >= self.pool_size:
                # Not the server: this process's own leases hold every connection.
                busy = (
                    f"this process's leases on {', '.join(map(repr, sorted(leased)))} hold "
                    f"every connection of the pool (pool_size {self.pool_size}) and none "
                    f"was released within {self.connect_timeout:g}s ({self.describe()})"
                )
                if session in leased:
                    raise SessionLockedError(
                        f"session {session!r} is in use by another lease of this process: "
                        f"{busy}; release that lease first"
                    ) from None
                raise SessionError(
                    f"no free database connection: {busy}; release a lease first or raise "
                    "[sessions.postgres] pool_size"
                ) from None
            # The pool says only that it timed out; why its last connect failed (the
            # server down, refusing, unknown) is what the user can act on.
            cause = self._connect_error or exc
            raise self.error(
                f"no database connection within {self.connect_timeout:g}s "
                f"(pool_size {self.pool_size})",
                cause,
                connecting=self._connect_error is not None,
            ) from None

    def _put(self, conn: Any) -> None:
        pool = self._pool
        if pool is None:
            conn.close()
            return
        try:
            pool.putconn(conn)
        except Exception:
            conn.close()

    def _unleased(self, session: str) -> None:
        with self._guard:
            self._leased[session] -= 1
            if self._leased[session] <= 0:
                del self._leased[session]

    def run(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement on a pooled connection and return its rows."""
        import psycopg

        conn = self._connection()
        try:
            cursor = conn.execute(sql, params)
            return list(cursor.fetchall()) if cursor.description else []
        except psycopg.Error as exc:
            raise self.error("database error", exc) from None
        finally:
            self._put(conn)

    # -- the protocol --------------------------------------------------------------------------

    def list_sessions(self) -> list[SessionInfo]:
        """Every session, by name, with its message count (records left out) and size."""
        # By code point, as every store sorts, whatever the database's collation.
        rows = self.run(
            "SELECT name, messages, bytes, updated_at FROM nanobot_sessions "
            'ORDER BY name COLLATE "C"'
        )
        # A row whose name no session can have (written by hand: empty, a control character,
        # a '/') is left out, as the file store leaves out a file of such a name: listed, it
        # went to the terminal as it was, and `sessions export` of all failed on it.
        return [
            SessionInfo(name, self._location(name), int(messages), int(size), _utc(updated))
            for name, messages, size, updated in rows
            if _is_session_name(name)
        ]

    def load(self, session: str) -> SessionLog:
        """Read session `session` without a lease."""
        validate_session_name(session)
        conn = self._connection()
        try:
            loaded = self._read(conn, session)
        finally:
            self._put(conn)
        if loaded is None:
            raise SessionNotFoundError(f"no session named {session!r} in {self.describe()}")
        return loaded

    def lease(self, session: str, *, wait: float = 0.0) -> PostgresLease:
        """Take the advisory lock of `session` on a connection of its own, for the turn.

        A `wait` over PostgreSQL's longest ``lock_timeout`` (about 24.8 days) waits that
        long. The wait ends only when the lock is free or the time is up (a server
        ``statement_timeout`` does not cut it short): SessionLockedError names the holder.
        """
        import psycopg

        validate_session_name(session)
        key = lease_key(session)
        conn = self._connection(session)
        try:
            if not wait > 0:
                got = bool(conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0])
            else:
                timeout = max(1, round(min(wait, _MAX_WAIT) * 1000))
                try:
                    # The lock's own wait is no answer lost: the deadline waits it out too.
                    conn.nanobot_grace = min(wait, _MAX_WAIT)
                    # Settings local to the transaction: the connection goes back to the
                    # pool with the ones it came with. The lock outlives the transaction.
                    # They are set by the statement before the wait: the server arms its
                    # statement and client-check timers as a statement starts.
                    with conn.transaction():
                        conn.execute(_wait_settings(timeout))
                        conn.execute("SELECT pg_advisory_lock(%s)", (key,))
                    got = True
                except psycopg.errors.LockNotAvailable:
                    got = False
                finally:
                    conn.nanobot_grace = 0.0
            if not got:
                waited = f" after waiting {wait:g}s" if wait > 0 else ""
                raise SessionLockedError(
                    f"session {session!r} is in use by {self._holder(conn, key)}{waited} "
                    f"({self.describe()}); wait for it to finish, set [sessions] lease_wait, "
                    "or choose another --session"
                )
        except psycopg.Error as exc:
            self._put(conn)
            raise self.error("cannot take the session lease", exc) from None
        except BaseException:
            self._put(conn)
            raise
        with self._guard:
            self._leased[session] += 1
        return PostgresLease(self, session, conn, key)

    def close(self) -> None:
        """Close the pool (it opens again on next use)."""
        with self._guard:
            pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.close()

    # -- helpers -------------------------------------------------------------------------------

    def _location(self, session: str) -> str:
        return f"{self.describe()}#{session}"

    def _read(self, conn: Any, session: str) -> SessionLog | None:
        import psycopg

        try:
            rows = conn.execute(_READ, (session,)).fetchall()
        except psycopg.Error as exc:
            raise self.error(f"cannot read session {session!r}", exc) from None
        if not rows:
            return None
        records: list[dict[str, Any]] = []
        texts: list[str] = []
        problems: list[LoadProblem] = []
        numbers: list[int] = []
        for _, seq, text in rows:
            if seq is None:  # the one row of a session without lines
                continue
            # Where the line is, for the warning when a value in it had to be replaced
            # (a lone surrogate, NaN), as the file store names its file and line.
            record, error = parse_line(text, location=self._location(session), line=int(seq) + 1)
            if record is None:  # only if someone wrote the table by hand
                problems.append(LoadProblem(int(seq) + 1, "invalid", error))
                continue
            records.append(record)
            texts.append(text)
            numbers.append(int(seq) + 1)
        return SessionLog(
            session,
            self._location(session),
            records,
            texts,
            problems,
            int(rows[0][0]),
            numbers=numbers,
        )

    def _holder(self, conn: Any, key: int) -> str:
        unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
        row = conn.execute(_HOLDER, (unsigned >> 32, unsigned & 0xFFFF_FFFF)).fetchone()
        if row is None:
            return "another worker"
        pid, app, address, started = row
        client = f", client {address}" if address else ""
        return (
            f"another worker ({app or 'unnamed connection'}, server pid {pid}{client}, "
            f"connected {_utc(started).isoformat(timespec='seconds')})"
        )


class PostgresLease:
    """The advisory lock on one session and the connection that holds it."""

    def __init__(self, store: PostgresSessionStore, session: str, conn: Any, key: int) -> None:
        self.store = store
        self.session = session
        self._conn: Any = conn
        self._key = key

    def __repr__(self) -> str:
        return f"PostgresLease({self.session!r})"

    def _live(self) -> Any:
        if self._conn is None:
            raise SessionError(f"the lease on session {self.session!r} was released")
        return self._conn

    def load(self) -> SessionLog:
        """The session as stored; empty with seq 0 when it has no lines yet."""
        loaded = self.store._read(self._live(), self.session)
        if loaded is None:
            return SessionLog(self.session, self.store._location(self.session), [], [], [], 0)
        return loaded

    def append(self, lines: Sequence[str], *, expected_seq: int) -> int:
        """Append `lines` whole, only if the session holds `expected_seq` lines: in one
        statement, or in one transaction of several when they do not fit in one.

        SessionError, appending nothing, names the first line that is not one JSON
        object on one line encodable as UTF-8 (the core's rule, `check_line`).
        """
        import psycopg

        conn = self._live()
        if not lines:
            if expected_seq == 0:
                self._create_empty(conn)
            return expected_seq
        # A batch is stored whole or not at all: every line is checked before any is sent.
        chunks = self._chunks(lines, expected_seq)
        parsed = [
            check_line(line, f"session {self.session!r}, line {expected_seq + number}")
            for number, line in enumerate(lines, 1)
        ]
        try:
            if len(chunks) == 1:
                self._append_chunk(conn, lines, parsed, expected_seq, expected_seq)
            else:
                # More than one statement carries: they go in one transaction, so that the
                # batch is still stored whole or not at all, and a conflict found by the
                # first leaves nothing.
                with conn.transaction():
                    for start, end in chunks:
                        self._append_chunk(
                            conn,
                            lines[start:end],
                            parsed[start:end],
                            expected_seq + start,
                            expected_seq,
                        )
        except psycopg.Error as exc:
            error = self.store.error(f"cannot append to session {self.session!r}", exc)
            if conn.broken or conn.closed:
                # The connection went with the statement sent, or being sent: the server may
                # have run and committed it (a server that stopped answering does when it
                # resumes), so "cannot append" alone told the user it was not stored.
                which = "the line was" if len(lines) == 1 else f"the {len(lines)} lines were"
                error = SessionError(
                    f"{error}; whether {which} stored is unknown (a batch is stored whole or "
                    f"not at all): `nanobot-core sessions show {self.session}` tells"
                )
            raise error from None
        return expected_seq + len(lines)

    def _create_empty(self, conn: Any) -> None:
        """Make the session exist without lines (its row only), as the protocol has an empty
        batch at seq 0 do: a session imported empty is listed and exported, not lost.

        SessionConflictError when it holds lines already.
        """
        import psycopg

        try:
            conn.execute(
                "INSERT INTO nanobot_sessions (name) VALUES (%s) ON CONFLICT (name) DO NOTHING",
                (self.session,),
            )
            row = conn.execute(
                "SELECT lines FROM nanobot_sessions WHERE name = %s", (self.session,)
            ).fetchone()
        except psycopg.Error as exc:
            raise self.store.error(f"cannot create session {self.session!r}", exc) from None
        if row is not None and row[0] != 0:
            raise SessionConflictError(
                f"session {self.session!r} holds {row[0]} lines, the writer expected 0; "
                "nothing was appended"
            )

    def _append_chunk(
        self,
        conn: Any,
        lines: Sequence[str],
        parsed: Sequence[dict[str, Any]],
        seq: int,
        expected_seq: int,
    ) -> None:
        """Append `lines` (the checked `parsed`) in one statement where the session holds `seq`
        lines; SessionConflictError when it does not (`expected_seq`: the batch's, to name)."""
        params = {
            "name": self.session,
            "n": len(lines),
            "messages": sum(1 for r in parsed if not is_meta_record(r)),
            "bytes": sum(len(line.encode("utf-8")) + 1 for line in lines),
            "lines": list(lines),
            "expected": seq,
        }
        cursor = conn.execute(_APPEND_FIRST if seq == 0 else _APPEND_MORE, params)
        if cursor.rowcount != len(lines):
            row = conn.execute(
                "SELECT lines FROM nanobot_sessions WHERE name = %s", (self.session,)
            ).fetchone()
            raise SessionConflictError(
                f"session {self.session!r} holds {row[0] if row else 0} lines, the writer "
                f"expected {expected_seq}; nothing was appended"
            )

    def _chunks(self, lines: Sequence[str], expected_seq: int) -> list[tuple[int, int]]:
        """`lines` cut into runs of one statement each, as ``(start, end)``: each as many lines
        as fit in what the server takes in one message (`_MAX_APPEND_BYTES`).

        SessionError, sending nothing, names a line that does not fit alone: sent, the server
        closed the connection at it, which lost the lease and said only that the server had
        terminated abnormally. A batch of lines that fit alone but not together (a session
        import of over a gigabyte) was refused whole before: it goes in several statements.
        """
        limit = _MAX_APPEND_BYTES
        chunks: list[tuple[int, int]] = []
        start, total = 0, _ARRAY_HEADER
        for index, line in enumerate(lines):
            size = _sent_size(line)
            if size + _ARRAY_HEADER > limit:
                raise SessionError(
                    f"session {self.session!r}, line {expected_seq + index + 1}: "
                    f"{size + _ARRAY_HEADER:,} bytes, more than the {limit:,} PostgreSQL takes "
                    f"in one statement ({self.store.describe()}); nothing was appended"
                )
            if total + size > limit:
                chunks.append((start, index))
                start, total = index, _ARRAY_HEADER
            total += size
        chunks.append((start, len(lines)))
        return chunks

    def check_held(self) -> None:
        """SessionError when the connection holding the lock is gone: the lock went with it.

        The lock lives exactly as long as its connection (only this connection could
        unlock it), so a connection psycopg already knows is closed or broken answers
        without the server; any other is asked one ``SELECT 1``, which a server that
        stopped, restarted or ended the connection fails. What the runner asks before
        each model request, so that no reply is paid for that could not be stored.
        """
        import psycopg

        conn = self._live()
        lost = f"the lease on session {self.session!r} was lost"
        if conn.closed or conn.broken:
            raise SessionError(
                f"{lost} ({self.store.describe()}): its connection to the server is closed"
            )
        try:
            conn.execute("SELECT 1")
        except psycopg.Error as exc:
            raise self.store.error(lost, exc) from None

    def release(self) -> None:
        """Unlock and hand the connection back (idempotent); a broken one is dropped."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        self.store._unleased(self.session)
        try:
            conn.execute("SELECT pg_advisory_unlock(%s)", (self._key,))
        except Exception:
            conn.close()  # closing the connection frees the lock as well
        self.store._put(conn)


def _is_session_name(name: str) -> bool:
    try:
        validate_session_name(name)
    except SessionError:
        return False
    return True


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC)
