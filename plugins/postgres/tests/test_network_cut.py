"""A network cut between a worker and the server: every wait for an answer ends within
``query_timeout``, with one error naming the store, and nothing stored is lost or doubled.

The cut is made by a TCP proxy on 127.0.0.1 that forwards to the test server and then
stops forwarding, keeping every connection open and dropping what comes, as a cut network
does (no reset, no close: TCP alone would wait for minutes, here for ever).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
import pytest
from nanobot_core.errors import SessionError, SessionLockedError
from nanobot_core.testing import run_cli

from nanobot_postgres.chatserver import ScriptedChatServer
from nanobot_postgres.migrations import _MIGRATION_LOCK, _signed
from nanobot_postgres.store import PostgresSessionStore

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
