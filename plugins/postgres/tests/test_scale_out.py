"""What docs/scale-out.md promises, against a real server: deaths, restarts, backups, admin SQL."""

from __future__ import annotations

import json
import logging
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import psycopg
import pytest
from nanobot_core import PluginContext, PluginManager, Runner, ToolCallEvent
from nanobot_core.config import Config, PostgresConfig, ProviderConfig, SessionsConfig
from nanobot_core.errors import SessionError, SessionLockedError
from nanobot_core.governance.store import CACHE_DIR
from nanobot_core.sessions import open_session, select_session_store
from nanobot_core.testing import run_cli
from nanobot_core.testing_sessions import (
    MOMENTS,
    ScriptedModel,
    ScriptedRun,
    check_appended,
    check_calls_once,
    restore_stop_signals,
)

import nanobot_postgres
from nanobot_postgres.chatserver import ScriptedChatServer
from nanobot_postgres.migrations import SCHEMA_VERSION
from nanobot_postgres.store import PostgresSessionStore
from nanobot_postgres.testserver import TemporaryPostgres, find_binaries

TIMEOUT = 120
DOC = Path(__file__).resolve().parents[3] / "docs" / "scale-out.md"


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _count(dsn: str, sql: str, *params: object) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(sql, params).fetchone()
    return int(row[0]) if row else 0


_APPENDER = """
import json, sys
from nanobot_postgres.store import PostgresSessionStore
lease = PostgresSessionStore(sys.argv[1]).lease("s")
lease.append([json.dumps({"n": n}) for n in range(3)], expected_seq=0)
print("ready", flush=True)
sys.stdin.readline()
lease.append([json.dumps({"n": n, "slow": n == 25}) for n in range(3, 53)], expected_seq=3)
print("appended", flush=True)
"""


def test_worker_killed_mid_append_leaves_the_session_whole(dsn: str) -> None:
    """A worker SIGKILLed inside an append leaves its batch whole or absent and its lease free."""
    store = PostgresSessionStore(dsn)
    store.list_sessions()  # the schema, before the slow trigger goes on it
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Row 25 of the batch sleeps in the server, so the kill lands inside the statement.
        conn.execute(
            """CREATE FUNCTION slow_line() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.line LIKE '%"slow": true%' THEN PERFORM pg_sleep(2); END IF;
                RETURN NEW;
            END $$"""
        )
        conn.execute(
            "CREATE TRIGGER slow BEFORE INSERT ON nanobot_session_lines "
            "FOR EACH ROW EXECUTE FUNCTION slow_line()"
        )
    worker = subprocess.Popen(
        [sys.executable, "-c", _APPENDER, dsn],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdin is not None and worker.stdout is not None
        assert worker.stdout.readline().strip() == "ready"
        worker.stdin.write("go\n")
        worker.stdin.flush()
        sleeping = (
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE wait_event = 'PgSleep' AND application_name LIKE %s"
        )
        _wait_for(lambda: _count(dsn, sleeping, f"% pid {worker.pid}") == 1, 30, "mid-append")
        os.kill(worker.pid, signal.SIGKILL)
        assert worker.wait(timeout=30) == -signal.SIGKILL
        killed = time.monotonic()
        lease = store.lease("s", wait=30)
        # The statement in flight ends (here it commits, whole) before the server drops the lock.
        assert time.monotonic() - killed < 10
        try:
            loaded = lease.load()
            numbers = [json.loads(line)["n"] for line in loaded.lines]
            assert numbers in (list(range(3)), list(range(53)))
            assert loaded.seq == len(loaded.lines) and loaded.problems == []
            counted = "SELECT lines FROM nanobot_sessions WHERE name = 's'"
            assert _count(dsn, counted) == loaded.seq
            assert lease.append(['{"next": 1}'], expected_seq=loaded.seq) == loaded.seq + 1
        finally:
            lease.release()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        store.close()


@pytest.fixture
def own_server() -> Iterator[TemporaryPostgres]:
    """A server of this test's own, which it may stop and start."""
    with TemporaryPostgres() as server:
        yield server


def test_server_restart_under_a_running_store(own_server: TemporaryPostgres) -> None:
    """While the server is down calls fail naming the store; once it is back the next call works."""
    dsn = own_server.create_database("restarted")
    store = PostgresSessionStore(dsn, pool_size=2, connect_timeout=2)
    try:
        with open_session(store, "kept") as session:
            session.append({"role": "user", "content": "before the restart"})
        held = store.lease("held")
        own_server.stop_server()
        started = time.monotonic()
        with pytest.raises(SessionError, match=re.escape(f"({store.describe()})")) as down:
            store.list_sessions()
        assert "Connection refused" in str(down.value)  # why, not only that the pool timed out
        assert time.monotonic() - started < 2 + 3
        # The lease's connection is gone, and its lock with it: its turn cannot write on.
        with pytest.raises(
            SessionError,
            match=rf"cannot append to session 'held' \({re.escape(store.describe())}\)",
        ):
            held.append(['{"role":"user","content":"lost"}'], expected_seq=0)
        held.release()
        own_server.start_server()
        with open_session(store, "kept") as session:
            session.append({"role": "user", "content": "after the restart"})
        assert [r["content"] for r in store.load("kept").records if "content" in r] == [
            "before the restart",
            "after the restart",
        ]
        with open_session(store, "held") as session:
            assert session.history() == []
    finally:
        store.close()


def test_server_down_at_cli_start_names_the_store_and_the_refusal(
    own_server: TemporaryPostgres, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """`nanobot-core run` against a stopped server exits 1 with the server and its refusal."""
    dsn = own_server.create_database("down")
    own_server.stop_server()
    env = {**cli_env, "NANOBOT_POSTGRES_DSN": dsn}
    result = run_cli("run", "hello", "--session", "s", cwd=tmp_path, env=env, timeout=TIMEOUT)
    assert result.returncode == 1
    assert f"postgresql://nanobot@127.0.0.1:{own_server.port}/down" in result.stderr
    assert "Connection refused" in result.stderr and "Traceback" not in result.stderr
    assert own_server.password not in result.stderr


def test_server_stopped_mid_turn_is_the_stores_one_error_without_pool_lines(
    own_server: TemporaryPostgres, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A server stopped mid-turn: stderr holds the store's one error, none of psycopg_pool's."""
    dsn = own_server.create_database("stopped")
    with ScriptedChatServer(delay=1) as chat:
        env = {
            **cli_env,
            "NANOBOT_POSTGRES_DSN": dsn,
            "NANOBOT_BASE_URL": chat.base_url,
            "NANOBOT_SESSIONS__POSTGRES__CONNECT_TIMEOUT": "2",
        }
        worker = subprocess.Popen(
            ["nanobot-core", "run", "session s turn 1", "--session", "s"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # The turn holds its lease (and the pool is open) once the model is asked.
            _wait_for(lambda: bool(chat.requests) or worker.poll() is not None, 60, "a request")
            own_server.stop_server()
            _, stderr = worker.communicate(timeout=TIMEOUT)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    assert worker.returncode == 1, stderr
    where = f"postgresql://nanobot@127.0.0.1:{own_server.port}/stopped"
    errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and where in errors[0], stderr
    assert "cannot append to session 's'" in errors[0]
    for raw in ("discarding", "error connecting", "psycopg.pool", "Traceback"):
        assert raw not in stderr, stderr
    assert own_server.password not in stderr


class _StopsTheServerBeforeRound:
    """A governor that, before governing round `round_`, stops the server as a crash would."""

    def __init__(self, governor: Any, server: TemporaryPostgres, round_: int) -> None:
        self._governor = governor
        self._server = server
        self._round = round_
        self.rounds = 0
        self.requests_when_stopped = -1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._governor, name)

    def govern(self, *args: Any, **kwargs: Any) -> Any:
        self.rounds += 1
        if self.rounds == self._round:
            self._server.stop_server(mode="immediate")
        return self._governor.govern(*args, **kwargs)


def test_server_stopped_between_two_model_requests_sends_no_second_request(
    own_server: TemporaryPostgres, tmp_path: Path
) -> None:
    """The server crashing after a turn stored its tool results: round 2's request is not sent."""
    dsn = own_server.create_database("between")
    with ScriptedChatServer() as chat:
        config = Config(
            provider=ProviderConfig(base_url=chat.base_url, api_key="test-key", max_retries=0),
            sessions=SessionsConfig(
                store="postgres", postgres=PostgresConfig(dsn=dsn, connect_timeout=2)
            ),
        )
        manager = PluginManager(config, workspace=tmp_path, autoload=False)
        manager.register(nanobot_postgres, name="postgres")
        manager.load()
        store = select_session_store(manager)
        try:
            with open_session(store, "s") as session:
                runner = Runner.from_plugins(manager, session=session)
                governor = _StopsTheServerBeforeRound(runner.governor, own_server, 2)
                runner.governor = governor
                with pytest.raises(SessionError) as caught:
                    runner.run_turn("session s turn 1")
                assert governor.rounds == 2
                assert len(chat.requests) == 1
        finally:
            store.close()
    message = str(caught.value)
    assert message.startswith(f"the lease on session 's' was lost ({store.describe()}): ")
    assert message.endswith("; the model request of round 2 was not sent")
    assert "\n" not in message and own_server.password not in message


def test_pool_retries_while_the_server_is_down_are_logged_at_debug(
    own_server: TemporaryPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    """psycopg_pool's warning per failed connect is debug for the store's pool, not for others."""
    from psycopg_pool import ConnectionPool

    dsn = own_server.create_database("retries")
    store = PostgresSessionStore(dsn, pool_size=2, connect_timeout=2)
    caplog.set_level(logging.DEBUG, logger="psycopg.pool")
    try:
        store.list_sessions()  # the pool is open
        own_server.stop_server()
        with pytest.raises(SessionError, match=re.escape(f"({store.describe()})")):
            store.list_sessions()
        with ConnectionPool(dsn, min_size=1, name="application", open=False) as other:
            other.open(wait=False)
            with pytest.raises(Exception, match="couldn't get a connection"):
                other.getconn(timeout=1)
    finally:
        store.close()
    pool_records = [r for r in caplog.records if r.name == "psycopg.pool"]
    ours = [r for r in pool_records if r.getMessage().startswith("error connecting in 'nanobot")]
    theirs = [r for r in pool_records if r.getMessage().startswith("error connecting in 'appl")]
    assert ours and {r.levelname for r in ours} == {"DEBUG"}
    assert theirs and {r.levelname for r in theirs} == {"WARNING"}
    assert not [r for r in pool_records if r.levelno >= logging.WARNING and r not in theirs]


def test_workers_starting_together_migrate_once(dsn: str) -> None:
    """Eight workers whose first use is at one moment all start, and each migration runs once."""
    stores = [PostgresSessionStore(dsn) for _ in range(8)]
    errors: list[BaseException] = []
    gate = threading.Barrier(len(stores))

    def first_use(store: PostgresSessionStore) -> None:
        gate.wait()
        try:
            store.list_sessions()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=first_use, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=TIMEOUT)
    for store in stores:
        store.close()
    assert errors == []
    with psycopg.connect(dsn, autocommit=True) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM nanobot_schema_migrations")]
    assert sorted(versions) == list(range(1, SCHEMA_VERSION + 1))


def _doc_block(language: str, containing: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    (block,) = [b for b in blocks if containing in b]
    return str(block)


def test_documented_holder_query_names_the_worker_and_session(dsn: str) -> None:
    """The doc's pg_locks query shows each held lease's session and its worker's host and pid."""
    query = _doc_block("sql", "pg_locks")
    store = PostgresSessionStore(dsn)
    try:
        with open_session(store, "ticket-4711") as session:
            session.append({"role": "user", "content": "held"})
            other = store.lease("not-stored-yet")
            try:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("SELECT pg_advisory_lock(42)")  # someone else's lock
                    cursor = conn.execute(query)
                    columns = [c.name for c in cursor.description or []]
                    rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
            finally:
                other.release()
        name = f"nanobot-core {socket.gethostname()[:32]} pid {os.getpid()}"
        mine = [r for r in rows if r["application_name"] == name]
        assert sorted(r["session"] or "" for r in mine) == ["", "ticket-4711"]
        assert {str(r["client_addr"]) for r in mine} == {"127.0.0.1"}
        assert len(rows) == 2  # someone else's advisory lock is not listed
    finally:
        store.close()


def test_documented_backup_restores_into_a_new_database(dsn: str, tmp_path: Path) -> None:
    """The doc's pg_dump and pg_restore copy every session, the append-only trigger included."""
    commands = _doc_block("bash", "pg_dump")
    store = PostgresSessionStore(dsn)
    with open_session(store, "backed-up") as session:
        session.append({"role": "user", "content": "keep me"})
    store.close()
    target = dsn + "_restored"
    with psycopg.connect(dsn.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{target.rsplit("/", 1)[1]}"')
    env = {
        **os.environ,
        "PATH": f"{find_binaries()}{os.pathsep}{os.environ.get('PATH', '')}",
        "NANOBOT_POSTGRES_DSN": dsn,
        "NEW_DSN": target,
    }
    ran = subprocess.run(
        ["bash", "-euc", commands],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    copy = PostgresSessionStore(target)
    try:
        assert [r["content"] for r in copy.load("backed-up").records if "content" in r] == [
            "keep me"
        ]
        with pytest.raises(SessionError, match="append-only"):
            copy.run("UPDATE nanobot_session_lines SET line = '{}'")
        with open_session(copy, "backed-up") as session:
            session.append({"role": "assistant", "content": "restored"})
    finally:
        copy.close()


def test_results_false_keeps_offloaded_results_local(dsn: str, tmp_path: Path) -> None:
    """With `[sessions.postgres] results = false` no result goes to or comes from the database."""
    on = Config(sessions=SessionsConfig(store="postgres", postgres=PostgresConfig(dsn=dsn)))
    off = Config(
        sessions=SessionsConfig(store="postgres", postgres=PostgresConfig(dsn=dsn, results=False))
    )
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert nanobot_postgres.nanobot_result_store(PluginContext(tmp_path / "a", off)) is None
    shown = nanobot_postgres.nanobot_result_store(PluginContext(tmp_path / "a", on)).put("x" * 999)
    call = ToolCallEvent(tool="read_file", arguments={"path": shown})
    nanobot_postgres.nanobot_before_tool_call(PluginContext(tmp_path / "b", off), call)
    assert not (tmp_path / "b" / shown).exists()
    nanobot_postgres.nanobot_before_tool_call(PluginContext(tmp_path / "b", on), call)
    assert (tmp_path / "b" / shown).read_text() == "x" * 999
    assert (tmp_path / "b" / CACHE_DIR).is_dir()
    nanobot_postgres.store_for(PluginContext(tmp_path, on)).close()


def test_cli_waits_lease_wait_for_a_busy_session(
    cli_env: dict[str, str], tmp_path: Path, dsn: str
) -> None:
    """NANOBOT_SESSIONS__LEASE_WAIT makes `run` wait for the holder, then take its turn."""
    store = PostgresSessionStore(dsn)
    with ScriptedChatServer() as server:
        env = {
            **cli_env,
            "NANOBOT_BASE_URL": server.base_url,
            "NANOBOT_SESSIONS__LEASE_WAIT": "60",
        }
        held = store.lease("chat")
        waiter = subprocess.Popen(
            ["nanobot-core", "run", "session chat turn 1", "--session", "chat"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            waiting = (
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND application_name LIKE %s"
            )
            _wait_for(lambda: _count(dsn, waiting, f"% pid {waiter.pid}") == 1, 60, "the wait")
            held.release()
            out, err = waiter.communicate(timeout=TIMEOUT)
        finally:
            if waiter.poll() is None:
                waiter.kill()
                waiter.wait()
    store.close()
    assert waiter.returncode == 0, err
    assert out.strip() == "done chat-1"


def test_ctrl_c_while_waiting_for_a_busy_session_is_an_interrupt(
    cli_env: dict[str, str], tmp_path: Path, dsn: str
) -> None:
    """Ctrl-C while `run` waits for the lease: exit 130, `Interrupted.`, its place in the queue
    given up; not the plugin's failure (psycopg raises the interrupt on without its traceback)."""
    store = PostgresSessionStore(dsn)
    with ScriptedChatServer() as server:
        env = {
            **cli_env,
            "NANOBOT_BASE_URL": server.base_url,
            "NANOBOT_SESSIONS__LEASE_WAIT": "60",
        }
        held = store.lease("chat")
        waiter = subprocess.Popen(
            ["nanobot-core", "run", "session chat turn 1", "--session", "chat"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=restore_stop_signals,
        )
        try:
            waiting = (
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND application_name LIKE %s"
            )
            _wait_for(lambda: _count(dsn, waiting, f"% pid {waiter.pid}") == 1, 60, "the wait")
            waiter.send_signal(signal.SIGINT)
            _, err = waiter.communicate(timeout=TIMEOUT)
        finally:
            if waiter.poll() is None:
                waiter.kill()
                waiter.wait()
        backends = "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s"
        _wait_for(lambda: _count(dsn, backends, f"% pid {waiter.pid}") == 0, 10, "its backend")
        held.release()
    store.close()
    assert waiter.returncode == 130, err
    assert "Interrupted." in err and "Error:" not in err and "Traceback" not in err, err
    assert server.requests == []


_LIST_DIR = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "list_dir", "arguments": json.dumps({"path": "."})},
}


def _session_records(dsn: str, session: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT line FROM nanobot_session_lines WHERE session = %s ORDER BY seq", (session,)
        ).fetchall()
    return [json.loads(line) for (line,) in rows]


@pytest.mark.parametrize("moment", MOMENTS)
@pytest.mark.parametrize(
    ("signum", "status", "words"),
    [(signal.SIGTERM, 143, "Terminated.\n"), (signal.SIGHUP, 129, "Hung up.\n")],
    ids=["SIGTERM", "SIGHUP"],
)
def test_a_worker_stopped_mid_turn_frees_its_lease_at_once_with_the_turn_stored_once(
    cli_env: dict[str, str],
    tmp_path: Path,
    dsn: str,
    moment: str,
    signum: int,
    status: int,
    words: str,
) -> None:
    """SIGTERM or SIGHUP (a service manager stopping a worker) at each moment of a turn: the
    worker exits with the signal's status and words, another worker gets the lease at once
    (wait 0), and the session holds what the turn stored, whole and once."""
    other = PostgresSessionStore(dsn)
    env = {k: v for k, v in cli_env.items() if k != "NANOBOT_BASE_URL"}
    rng = random.Random(f"{moment} {signum}")
    try:
        with ScriptedModel(lambda run: None, timeout=60) as model:
            script = [
                {"role": "assistant", "content": "looking", "tool_calls": [_LIST_DIR]},
                {"role": "assistant", "content": "done"},
            ]
            run: ScriptedRun[None] = ScriptedRun("chat", "turn 1", script, moment, 1, 0)
            child = model.start_run(run, cwd=tmp_path, env=env, stdout=tmp_path / "stdout")
            child.signal_at(moment, rng, window=(0.2, 1.5), signum=signum)
            ended = time.monotonic()
            lease = other.lease("chat")  # wait 0: a session still held fails at once
            try:
                freed = time.monotonic() - ended
                stored = [json.loads(line) for line in lease.load().lines]
            finally:
                lease.release()
            assert model.problems == []
    finally:
        other.close()
    if run.returncode != 0:  # at "random" the turn may have finished first
        assert (run.returncode, run.stdout) == (status, ""), run.stderr
        assert run.stderr.endswith(words) and "Traceback" not in run.stderr, run.stderr
    assert freed < 5, freed
    assert stored == _session_records(dsn, "chat")
    assert check_appended([], stored, [run.turn()]) == []
    assert check_calls_once(stored) == []


def test_busy_session_fails_at_once_naming_the_holder(dsn: str) -> None:
    """A second worker's lease fails at once naming the holder's host, pid, server pid, address."""
    holder, other = PostgresSessionStore(dsn), PostgresSessionStore(dsn)
    try:
        held = holder.lease("busy")
        (server_pid,) = held._live().execute("SELECT pg_backend_pid()").fetchone()
        started = time.monotonic()
        with pytest.raises(SessionLockedError) as caught:
            other.lease("busy")
        assert time.monotonic() - started < 2
        name = f"nanobot-core {socket.gethostname()[:32]} pid {os.getpid()}"
        assert f"({name}, server pid {server_pid}, client 127.0.0.1, connected " in str(
            caught.value
        )
        held.release()
        other.lease("busy").release()
    finally:
        holder.close()
        other.close()


def test_pool_size_1_with_results_in_the_database_is_refused_naming_both_keys(
    cli_env: dict[str, str], tmp_path: Path, dsn: str
) -> None:
    """`pool_size = 1` with `results = true` is a config error at once; with results off it runs."""
    with ScriptedChatServer() as server:
        env = {
            **cli_env,
            "NANOBOT_BASE_URL": server.base_url,
            "NANOBOT_SESSIONS__POSTGRES__POOL_SIZE": "1",
        }
        started = time.monotonic()
        refused = run_cli(
            "run", "session one turn 1", "--session", "one", cwd=tmp_path, env=env, timeout=TIMEOUT
        )
        assert time.monotonic() - started < 10  # not a connect_timeout per offload
        assert refused.returncode == 2, refused.stderr
        (line,) = [line for line in refused.stderr.splitlines() if line.startswith("Error:")]
        assert "sessions.postgres.pool_size: 1" in line
        assert "sessions.postgres.results = true" in line and "Traceback" not in refused.stderr
        assert server.requests == []  # refused before the model is asked
        plain = PostgresSessionStore(dsn)  # no result store: one connection is enough
        try:
            assert plain.list_sessions() == []
        finally:
            plain.close()
        off = {**env, "NANOBOT_SESSIONS__POSTGRES__RESULTS": "false"}
        ran = run_cli(
            "run", "session one turn 1", "--session", "one", cwd=tmp_path, env=off, timeout=TIMEOUT
        )
        assert ran.returncode == 0, ran.stderr
        assert "done one-1" in ran.stdout


def test_documented_systemd_unit_holds_no_comment_after_a_setting() -> None:
    """Each line of the page's unit is a section, a setting or a whole-line comment: systemd
    reads a ``#`` after a setting as part of its value (an EnvironmentFile path, say)."""
    unit = _doc_block("ini", "[Service]")
    for line in unit.splitlines():
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, equals, value = line.partition("=")
        assert equals and key.isidentifier(), line
        assert "#" not in value, line


def test_documented_container_installs_from_the_checkout_as_the_first_example() -> None:
    """The Dockerfile copies the checkout and installs the core and the plugin from it, the
    projects the page's first example installs."""
    dockerfile = _doc_block("dockerfile", "FROM ")
    (copy,) = [line.split() for line in dockerfile.splitlines() if line.startswith("COPY ")]
    assert copy[1] == "."
    (install,) = [line for line in dockerfile.splitlines() if "pip install" in line]
    paths = [word for word in install.split() if word.startswith(copy[2])]
    root = DOC.parents[1]
    projects = [root / Path(word).relative_to(copy[2]) for word in paths]
    assert projects == [root, root / "plugins" / "postgres"]
    assert all((project / "pyproject.toml").is_file() for project in projects)
    first = _doc_block("bash", "pip install")
    assert "pip install . ./plugins/postgres" in first


def _figures(text: str) -> set[str]:
    """The ratios (``7.2x``), latencies (``2.8 ms``) and rates (``36.5``) that `text` quotes."""
    return set(re.findall(r"\b\d+\.\d+(?:x| ms)?", text))


def test_measured_figures_are_those_bench_results_holds() -> None:
    """Every figure the page's "Measured" section quotes is in RESULTS.md's session stores
    section, which the section sends the reader to."""
    text = DOC.read_text(encoding="utf-8")
    measured = " ".join(text[text.index("## Measured") :].split())
    results = (DOC.parents[1] / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    section = results[results.index("<!-- sessions-bench:start -->") :]
    section = section[: section.index("<!-- sessions-bench:end -->")]
    quoted = _figures(measured)
    assert {"7.2x", "36.5", "5.0", "2.8 ms"} <= quoted
    held = {figure.replace(" ms", "") for figure in _figures(section)} | _figures(section)
    assert {figure.replace(" ms", "") for figure in quoted} <= held


def test_documented_newer_schema_error_is_the_one_a_worker_gives(dsn: str) -> None:
    """The page quotes, for a database one schema version ahead, the store's own words."""
    text = " ".join(DOC.read_text(encoding="utf-8").split())
    (quoted,) = re.findall(r"`(the database schema is at version [^`]+)`", text)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE nanobot_schema_migrations "
            "(version integer PRIMARY KEY, name text NOT NULL)"
        )
        conn.execute(
            "INSERT INTO nanobot_schema_migrations VALUES (%s, 'from a newer plugin')",
            (SCHEMA_VERSION + 1,),
        )
    store = PostgresSessionStore(dsn)
    with pytest.raises(SessionError) as refused:
        store.list_sessions()
    assert str(refused.value) == f"cannot use the session database ({store.describe()}): {quoted}"


def test_documented_errors_for_tables_not_the_plugins_own_are_the_ones_a_worker_gives(
    dsn: str, postgres_server: TemporaryPostgres
) -> None:
    """The page's quotes for tables not the plugin's own, or its own altered by hand, begin
    the store's own words."""
    text = " ".join(DOC.read_text(encoding="utf-8").split())
    quoted = re.findall(r"`(the (?:table|database already) [^`]+ (?:versions|version))", text)
    other = postgres_server.create_database(dsn.rsplit("/", 1)[1] + "_other")
    altered = postgres_server.create_database(dsn.rsplit("/", 1)[1] + "_altered")
    PostgresSessionStore(altered).list_sessions()  # the plugin's own tables, as it makes them
    setups = {
        dsn: "CREATE TABLE nanobot_schema_migrations (id int)",
        other: "CREATE TABLE nanobot_sessions (id int)",
        altered: "ALTER TABLE nanobot_sessions ALTER COLUMN lines TYPE integer",
    }
    errors = []
    for where, statement in setups.items():
        with psycopg.connect(where, autocommit=True) as conn:
            conn.execute(statement)
        store = PostgresSessionStore(where)
        with pytest.raises(SessionError) as refused:
            store.list_sessions()
        errors.append(str(refused.value).split("): ", 1)[1])
    assert len(quoted) == 3
    assert [any(error.startswith(q) for error in errors) for q in quoted] == [True, True, True]


class _Retry(Exception):
    """What the stand-in queue's `retry` raises, as Celery's does."""


class _Queue:
    """The part of a Celery app the page's job uses: ``@app.task(...)`` and ``self.retry``."""

    def task(self, **options: Any) -> Callable[[Callable[..., str]], Callable[..., str]]:
        def register(func: Callable[..., str]) -> Callable[..., str]:
            job = types.SimpleNamespace(retry=self.retry)
            return lambda *args: func(job, *args)

        return register

    @staticmethod
    def retry(exc: BaseException, countdown: float) -> NoReturn:
        raise _Retry(exc)


def test_documented_job_queue_example_runs_a_turn_and_retries_a_busy_session(
    cli_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's Celery job, run as it is written, answers a turn, and asks the queue to
    retry when another worker holds the session."""
    for name in [name for name in os.environ if name.startswith(("NANOBOT_", "OPENAI_"))]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    with ScriptedChatServer() as server:
        for name, value in {**cli_env, "NANOBOT_BASE_URL": server.base_url}.items():
            monkeypatch.setenv(name, value)
        example: dict[str, Any] = {"app": _Queue()}
        exec(compile(_doc_block("python", "@app.task"), str(DOC), "exec"), example)
        turn = example["turn"]
        assert turn("job", "session job turn 1\nhello") == "done job-1"
        with open_session(example["store"], "job"), pytest.raises(_Retry) as retried:
            turn("job", "session job turn 2\nhello")
    assert isinstance(retried.value.args[0], SessionLockedError)
    assert "session 'job' is in use by another worker" in str(retried.value.args[0])
    example["store"].close()
