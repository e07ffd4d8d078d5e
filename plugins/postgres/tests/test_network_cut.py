"""A network cut between a worker and the server: every wait for an answer ends within
``query_timeout``, with one error naming the store, nothing stored is lost or doubled, and
the server frees the cut worker's lease within ``query_timeout`` too.

The cut is made by a TCP proxy on 127.0.0.1 that forwards to the test server and then
stops forwarding, keeping every connection open and dropping what comes, as a cut network
does (no reset, no close: TCP alone would wait for minutes, here for ever). Its
`CuttableProxy.blackhole` has the proxy's kernel drop every packet as well, so that
neither end's TCP hears back, as neither would across a cut.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import math
import os
import re
import socket
import struct
import sys
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from nanobot_core.errors import SessionError, SessionLockedError
from nanobot_core.testing import run_cli

from nanobot_postgres.chatserver import ScriptedChatServer
from nanobot_postgres.migrations import _MIGRATION_LOCK, _signed
from nanobot_postgres.store import (
    Keepalives,
    PostgresSessionStore,
    _server_keepalive_settings,
    _shut,
    keepalives,
)
from nanobot_postgres.testserver import TemporaryPostgres

QUERY_TIMEOUT = 1.5
CONNECT_TIMEOUT = 2.0
# How long a cut run may take past the cut: the statement's deadline, a connect that gets no
# answer either, and the start and end of a Python process on a busy machine.
BOUND = QUERY_TIMEOUT + CONNECT_TIMEOUT + 10.0


class CuttableProxy:
    """``127.0.0.1:port`` forwarded to `target` until `cut`, then a black hole."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._cut = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._sockets: list[socket.socket] = [self._listener]
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        """Stop forwarding either way; connections stay open, new ones are taken and ignored."""
        self._cut.set()

    def blackhole(self) -> None:
        """Cut, and have the proxy's own kernel drop whatever reaches it, answering nothing.

        On 127.0.0.1 each end's peer is the proxy's socket, whose kernel acknowledges data
        and answers TCP keepalives even when the proxy reads nothing: neither end would
        notice a cut. A socket filter that drops every packet, attached to each socket
        (the listener's SYNs included), makes each end's packets go unanswered, as on a
        cut network; no socket is closed, so no FIN or reset tells either end. Each is
        filtered once what the proxy sent on it was acknowledged: else its kernel would
        send it again and again, and each end would take each copy as a word from its peer.
        """
        self._cut.set()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            give_up = time.monotonic() + 5
            while _unacknowledged(sock) and time.monotonic() < give_up:
                time.sleep(0.01)
            _drop_everything(sock)

    def _keep(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            self._keep(client)
            if self._cut.is_set():
                threading.Thread(target=self._pump, args=(client, None), daemon=True).start()
                continue
            upstream = socket.create_connection(self.target)
            self._keep(upstream)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket | None) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                if sink is not None and not self._cut.is_set():
                    sink.shutdown(socket.SHUT_WR)
                return
            if sink is not None and not self._cut.is_set():
                try:
                    sink.sendall(data)
                except OSError:
                    return

    def close(self) -> None:
        """Close every socket: the server then ends the proxied sessions (and their locks)."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            # Shut first: a close alone leaves a socket another thread reads from open.
            with contextlib.suppress(OSError):  # a listener, or a socket already shut
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def __enter__(self) -> CuttableProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# A classic BPF program of one instruction, ``ret #0``: keep no byte of any packet.
_SO_ATTACH_FILTER = 26
_DROP_ALL = struct.pack("HBBI", 0x06, 0, 0, 0)


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def _unacknowledged(sock: socket.socket) -> int:
    """The bytes `sock` sent that its peer has not acknowledged yet (Linux's SIOCOUTQ)."""
    try:
        said = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4)
    except (OSError, ValueError):  # a listener, or a closed socket: nothing to send again
        return 0
    return int(struct.unpack("i", said)[0])


def _drop_everything(sock: socket.socket) -> None:
    """Make the kernel drop every packet that reaches `sock` before TCP sees it (Linux)."""
    program = ctypes.create_string_buffer(_DROP_ALL)
    fprog = _SockFprog(1, ctypes.addressof(program))
    sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, bytes(fprog))


@pytest.fixture
def proxy(dsn: str) -> Iterator[tuple[CuttableProxy, str]]:
    """A proxy to the test database's server, and the DSN that goes through it."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    with CuttableProxy((str(info["host"]), int(str(info["port"])))) as through:
        yield through, psycopg.conninfo.make_conninfo(dsn, port=str(through.port))


def _store(dsn: str) -> PostgresSessionStore:
    return PostgresSessionStore(
        dsn, pool_size=3, connect_timeout=CONNECT_TIMEOUT, query_timeout=QUERY_TIMEOUT
    )


def test_a_lease_check_on_a_cut_network_fails_within_query_timeout(
    proxy: tuple[CuttableProxy, str],
) -> None:
    """`check_held`, `append` and `load` each end within query_timeout on a cut network, each
    with the store's error naming the setting, where each waited without end before."""
    through, dsn = proxy
    store = _store(dsn)
    line = '{"role":"user","content":"hi"}'
    try:
        checked, appended = store.lease("checked"), store.lease("appended")
        for lease in (checked, appended):
            assert lease.append([line], expected_seq=0) == 1
            lease.check_held()
        through.cut()
        for call in (
            checked.check_held,
            lambda: appended.append([line], expected_seq=1),
            lambda: store.load("checked"),
        ):
            started = time.monotonic()
            with pytest.raises(SessionError) as failed:
                call()
            took = time.monotonic() - started
            said = str(failed.value)
            assert f"({store.describe()})" in said and len(said.splitlines()) == 1
            assert (
                f"no answer from the server within {QUERY_TIMEOUT:g}s "
                f"(sessions.postgres.query_timeout {QUERY_TIMEOUT:g})"
                in said
                # the load: its pooled connection was cut, then no new one answered
                or f"no database connection within {CONNECT_TIMEOUT:g}s" in said
            ), said
            assert took < QUERY_TIMEOUT + 2 * CONNECT_TIMEOUT + 2, took
        # A lease whose connection was cut knows it at once.
        with pytest.raises(SessionError, match="its connection to the server is closed"):
            appended.check_held()
        for lease in (checked, appended):
            lease.release()
    finally:
        store.close()


def test_a_migration_on_a_cut_network_fails_within_query_timeout(
    proxy: tuple[CuttableProxy, str], dsn: str
) -> None:
    """The first call of a process, whose migration waits for the server when the network is
    cut, ends within query_timeout with the store's error, where it waited without end before."""
    through, cut_dsn = proxy
    store = _store(cut_dsn)
    failed: list[BaseException] = []

    def first_call() -> None:
        try:
            store.list_sessions()
        except BaseException as exc:  # handed to the test's thread
            failed.append(exc)

    # Another worker's migration holds the migrations' lock, so this one waits in the
    # server's lock queue when the network is cut under it.
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (_signed(_MIGRATION_LOCK),))
        worker = threading.Thread(target=first_call, daemon=True)
        worker.start()
        waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        with psycopg.connect(dsn, autocommit=True) as watcher:
            deadline = time.monotonic() + BOUND
            while watcher.execute(waiting).fetchone() != (1,):
                assert time.monotonic() < deadline, "the migration never waited for the lock"
                time.sleep(0.02)
        through.cut()
        started = time.monotonic()
    # The lock is free now; the answer that the migration may go on is lost in the cut.
    worker.join(BOUND)
    try:
        assert not worker.is_alive(), "the migration still waits for the server"
        assert time.monotonic() - started < QUERY_TIMEOUT + 2
        (error,) = failed
        assert isinstance(error, SessionError)
        said = str(error)
        assert said.startswith(f"cannot use the session database ({store.describe()}): ")
        assert f"no answer from the server within {QUERY_TIMEOUT:g}s" in said
    finally:
        through.close()  # ends a wait that was not cut, which holds the store's guard
        worker.join(BOUND)
        store.close()


def test_a_statement_the_server_does_not_answer_in_time_is_cut_and_its_connection_dropped(
    dsn: str,
) -> None:
    """A statement still running at query_timeout fails then, naming the setting, and the
    pool hands out a working connection next."""
    store = PostgresSessionStore(dsn, query_timeout=0.5)
    try:
        started = time.monotonic()
        with pytest.raises(SessionError, match=r"no answer from the server within 0\.5s"):
            store.run("SELECT pg_sleep(5)")
        assert time.monotonic() - started < 3
        assert store.run("SELECT 1") == [(1,)]
    finally:
        store.close()


def test_a_lease_wait_longer_than_query_timeout_is_not_cut(dsn: str) -> None:
    """A lease waits its whole lease_wait for a busy session, past query_timeout: the wait is
    the lock's, not a lost answer."""
    holder, waiter = _store(dsn), PostgresSessionStore(dsn, query_timeout=0.5)
    try:
        held = holder.lease("busy")
        started = time.monotonic()
        with pytest.raises(SessionLockedError, match=r"after waiting 2s"):
            waiter.lease("busy", wait=2.0)
        assert time.monotonic() - started >= 1.9
        held.release()
        waiter.lease("busy", wait=2.0).release()
    finally:
        holder.close()
        waiter.close()


def _lease_holders(dsn: str) -> list[int]:
    """The server pids of the connections holding an advisory lock in `dsn`'s database."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchall()
    return [int(pid) for (pid,) in rows]


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the blackhole is a Linux socket filter"
)
@pytest.mark.parametrize("answer_lost", [False, True], ids=["idle", "answer-lost"])
def test_the_lease_of_a_worker_cut_off_while_it_holds_it_is_freed_by_the_server_in_the_bound(
    proxy: tuple[CuttableProxy, str],
    dsn: str,
    postgres_server: TemporaryPostgres,
    answer_lost: bool,
) -> None:
    """A worker whose network goes silent while it holds a lease, idle or waiting for an
    answer the server then sends into the cut, loses it within query_timeout (the
    keepalives' bound): the server's probes, or its answer, go unacknowledged, it ends the
    connection, and a second worker takes the session, where the server held it for the
    operating system's two hours (or fifteen minutes of resending the answer)."""
    through, cut_dsn = proxy
    bound = keepalives(QUERY_TIMEOUT).bound
    line = '{"role":"user","content":"hi"}'
    cut_worker, other = _store(cut_dsn), _store(dsn)
    try:
        held = cut_worker.lease("held")
        held.append([line], expected_seq=0)
        (backend,) = _lease_holders(dsn)
        appending: threading.Thread | None = None
        failed: list[SessionError] = []
        with psycopg.connect(dsn) as blocker:
            if answer_lost:
                # The session's row locked, the next append waits on the server, which
                # answers it only once the network is cut.
                blocker.execute("SELECT 1 FROM nanobot_sessions WHERE name = 'held' FOR UPDATE")

                def append() -> None:
                    try:
                        held.append([line], expected_seq=1)
                    except SessionError as exc:
                        failed.append(exc)

                appending = threading.Thread(target=append)
                appending.start()
                time.sleep(0.3)
            through.blackhole()
            cut_at = time.monotonic()
        # Long enough that a lease still held at the end is a failure, not a slow machine.
        taken = other.lease("held", wait=bound + 10)
        took = time.monotonic() - cut_at
        assert took < bound + 1.5, took
        assert _lease_holders(dsn) != [backend]
        # The server ended it on its own: the proxy closed nothing, and the backend found
        # its worker's end timed out (no reset, no end of file).
        assert all(sock.fileno() != -1 for sock in through._sockets)
        log = (postgres_server.root or Path()) / "server.log"
        said = re.findall(
            rf"\[{backend}\] LOG:  could not (?:receive|send) data (?:from|to) client: (.*)",
            log.read_text(),
        )
        assert said == ["Connection timed out"], said
        # The append the server answered into the cut was stored, once.
        assert taken.load().seq == (2 if answer_lost else 1)
        taken.release()
        if appending is not None:
            appending.join()
            (error,) = failed
            assert f"no answer from the server within {QUERY_TIMEOUT:g}s" in str(error)
        # The cut worker learns it at its next statement, within query_timeout (at once
        # when that append's deadline cut the connection).
        lost = "its connection to the server is closed" if answer_lost else "query_timeout 1.5"
        with pytest.raises(SessionError, match=re.escape(lost)):
            held.check_held()
        held.release()
    finally:
        cut_worker.close()
        other.close()


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=1e-3, max_value=1e9, allow_nan=False))
@example(30.0)
@example(1.5)
@example(2.0)
@example(65535.0)
def test_the_keepalive_bound_follows_query_timeout(query_timeout: float) -> None:
    """For any query_timeout, the server ends a silent connection within it (2 seconds at
    the least), with values the kernels take, and tcp_user_timeout falls in the last probe's
    interval so that Linux ends it at the last probe."""
    wanted = keepalives(query_timeout)
    assert 1 <= wanted.idle <= 32767 and 1 <= wanted.interval <= 32767
    assert 1 <= wanted.count <= 127
    assert wanted.bound <= max(query_timeout, 2)
    # Linux ends it at the first probe due once tcp_user_timeout has passed: the last one.
    due = wanted.idle + wanted.interval * max(
        1, math.ceil((wanted.user_timeout_ms / 1000 - wanted.idle) / wanted.interval)
    )
    assert due == wanted.bound or (wanted.user_timeout_ms == 2**31 - 1 and due <= wanted.bound)
    if query_timeout < 65534:  # beyond, the kernels' limits cut it shorter
        assert wanted.bound > query_timeout - max(1, query_timeout / 10) - 1


def _server_settings(store: PostgresSessionStore) -> dict[str, int]:
    names = ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count")
    rows = store.run(
        "SELECT name, setting::int FROM pg_settings WHERE name = ANY(%s)",
        ([*names, "tcp_user_timeout"],),
    )
    return {str(name): int(value) for name, value in rows}


def test_every_pooled_connection_has_the_servers_keepalives_and_a_shorter_one_stays(
    dsn: str,
) -> None:
    """A pooled connection's server end probes a silent worker after query_timeout / 2 and
    gives up within query_timeout, where the operating system waited two hours; a shorter
    value set for the connection (the DSN's options) is kept, not lengthened."""
    store = PostgresSessionStore(dsn, query_timeout=30)
    shorter = PostgresSessionStore(
        psycopg.conninfo.make_conninfo(dsn, options="-c tcp_keepalives_idle=4"), query_timeout=30
    )
    try:
        wanted = keepalives(30)
        assert (wanted.idle, wanted.interval, wanted.count, wanted.user_timeout_ms) == (
            15,
            3,
            5,
            29500,
        )
        assert _server_settings(store) == {
            "tcp_keepalives_idle": 15,
            "tcp_keepalives_interval": 3,
            "tcp_keepalives_count": 5,
            "tcp_user_timeout": 29500,
        }
        assert _server_settings(shorter)["tcp_keepalives_idle"] == 4
        assert _server_settings(shorter)["tcp_keepalives_count"] == 5
    finally:
        store.close()
        shorter.close()


def test_a_keepalive_setting_the_server_refuses_leaves_the_others_set(dsn: str) -> None:
    """A value the server refuses (as PostgreSQL 11 refuses tcp_user_timeout, unknown to it)
    is left as the server has it, the others are set, and the connection works on."""
    store = PostgresSessionStore(dsn, query_timeout=30, pool_size=1)  # one connection to ask
    try:
        before = _server_settings(store)
        refused = Keepalives(idle=6, interval=2, count=-1, user_timeout_ms=11500)
        store.run(_server_keepalive_settings(refused).as_string())
        after = _server_settings(store)
        assert after["tcp_keepalives_count"] == before["tcp_keepalives_count"] == 5
        assert (after["tcp_keepalives_idle"], after["tcp_keepalives_interval"]) == (6, 2)
        assert after["tcp_user_timeout"] == 11500
    finally:
        store.close()


class _CutAtFirstRequest(ScriptedChatServer):
    """The scripted model, which cuts the database's network as it answers its first request."""

    def __init__(self, proxy: CuttableProxy) -> None:
        super().__init__()
        self.proxy = proxy
        self.cut_at: float | None = None

    def _respond(self, request: Any) -> Any:
        if self.cut_at is None:
            self.proxy.cut()
            self.cut_at = time.monotonic()
        return super()._respond(request)


def _stored(dsn: str, session: str) -> tuple[int, list[tuple[int, str]]]:
    with psycopg.connect(dsn) as conn:
        head = conn.execute("SELECT lines FROM nanobot_sessions WHERE name = %s", (session,))
        row = head.fetchone()
        lines = conn.execute(
            "SELECT seq, line FROM nanobot_session_lines WHERE session = %s ORDER BY seq",
            (session,),
        ).fetchall()
    return (int(row[0]) if row else 0), [(int(seq), str(line)) for seq, line in lines]


def test_a_turn_on_a_cut_network_ends_within_the_bound_with_one_error_line(
    proxy: tuple[CuttableProxy, str], dsn: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A `run` whose database network is cut while the model answers exits 1 within the bound
    with one `Error:` line naming the store; what it stored before stays, once, and the next
    turn on a working network goes on from it."""
    through, cut_dsn = proxy
    env = {
        **cli_env,
        "NANOBOT_POSTGRES_DSN": cut_dsn,
        "NANOBOT_SESSIONS__POSTGRES__QUERY_TIMEOUT": str(QUERY_TIMEOUT),
        "NANOBOT_SESSIONS__POSTGRES__CONNECT_TIMEOUT": str(CONNECT_TIMEOUT),
    }
    cutting = _CutAtFirstRequest(through)
    with cutting:
        env["NANOBOT_BASE_URL"] = cutting.base_url
        done = run_cli("run", "session cut turn 1", "--session", "cut", cwd=tmp_path, env=env)
        ended = time.monotonic()
        assert cutting.cut_at is not None and ended - cutting.cut_at < BOUND, done.stderr
        assert len(cutting.requests) == 1
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    (error,) = done.stderr.splitlines()
    assert error.startswith("Error: ") and "postgresql://nanobot@127.0.0.1:" in error
    assert f"no answer from the server within {QUERY_TIMEOUT:g}s" in error
    assert "environment variable NANOBOT_SESSIONS__POSTGRES__QUERY_TIMEOUT" in error
    through.close()  # the server ends the cut connections, and frees the session's lease
    count, lines = _stored(dsn, "cut")
    # The user's message went in before the cut; the reply, sent into it, never arrived.
    assert count == len(lines) == 1 and [seq for seq, _ in lines] == [0]
    assert json.loads(lines[0][1])["role"] == "user"
    with ScriptedChatServer() as server:
        # The server notices the closed connections as its backends next read: a moment.
        env = {**cli_env, "NANOBOT_BASE_URL": server.base_url, "NANOBOT_SESSIONS__LEASE_WAIT": "10"}
        again = run_cli("run", "session cut turn 2", "--session", "cut", cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr
    count, lines = _stored(dsn, "cut")
    assert count == len(lines) and [seq for seq, _ in lines] == list(range(count))
    records = [json.loads(text) for _, text in lines]
    messages = [record for record in records if set(record) != {"_meta"}]  # records left out
    assert [m.get("role") for m in messages] == [
        "user",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    assert messages[-1]["content"].startswith("done cut-")


def test_a_cut_aimed_at_a_descriptor_no_longer_a_socket_leaves_no_copy_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A deadline past for a descriptor since reused (here a pipe) closes the copy it made."""
    copies: list[int] = []
    dup = os.dup

    def recording_dup(fd: int) -> int:
        copies.append(dup(fd))
        return copies[-1]

    monkeypatch.setattr(os, "dup", recording_dup)  # as the store calls it: os.dup
    read, write = os.pipe()
    try:
        pipe = os.fstat(read)
        _shut(read)
        (copy,) = copies
        try:
            still = os.fstat(copy)
        except OSError:
            return  # closed, and not reused since
        # Reused by another thread meanwhile is no leak; still the pipe is one.
        assert (still.st_dev, still.st_ino) != (pipe.st_dev, pipe.st_ino), "the copy is open"
    finally:
        os.close(read)
        os.close(write)
