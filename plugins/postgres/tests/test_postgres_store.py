"""The postgres store against a real server: schema, leases across processes, CLI, results."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from nanobot_core import PluginContext, PluginManager, ToolCallEvent
from nanobot_core.config import Config, GovernanceConfig, PostgresConfig, SessionsConfig
from nanobot_core.errors import ConfigError, SessionError, SessionLockedError
from nanobot_core.governance.store import CACHE_DIR
from nanobot_core.jsonl_store import JsonlSessionStore
from nanobot_core.sessions import check_line, open_session
from nanobot_core.testing import run_cli
from structlog.testing import capture_logs

import nanobot_postgres
import nanobot_postgres.migrations as migrations
import nanobot_postgres.store as store_module
from nanobot_postgres.chatserver import ScriptedChatServer
from nanobot_postgres.migrations import SCHEMA_VERSION, apply_migrations
from nanobot_postgres.results import PostgresResultStore, fetch_into_cache, reference_hash
from nanobot_postgres.store import CLIENT_CHECK_INTERVAL, PostgresSessionStore, lease_key


def _password(dsn: str) -> str:
    return dsn.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]


def test_migrations_are_recorded_and_run_once(dsn: str) -> None:
    """First use applies and records every migration; applying again does nothing."""
    store = PostgresSessionStore(dsn)
    assert store.list_sessions() == []
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT version, name FROM nanobot_schema_migrations").fetchall()
        assert [r[0] for r in rows] == list(range(1, SCHEMA_VERSION + 1))
        assert apply_migrations(conn) == []
    store.close()


def test_migrations_that_fail_leave_the_database_as_it_was(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pending migrations run in one transaction: a failing one undoes the ones before it."""
    failing = (SCHEMA_VERSION + 1, "fails", ["SELECT 1 / 0"])
    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, failing])
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            apply_migrations(conn, target=SCHEMA_VERSION + 1)
        tables = "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'nanobot%'"
        assert conn.execute(tables).fetchone() == (0,)


def test_newer_schema_is_refused(dsn: str) -> None:
    """A database migrated by a newer plugin is refused with a message, never downgraded."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        apply_migrations(conn)
        conn.execute("INSERT INTO nanobot_schema_migrations VALUES (999, 'future')")
    with pytest.raises(SessionError, match="version 999, newer than this nanobot-postgres"):
        PostgresSessionStore(dsn).list_sessions()


@pytest.mark.parametrize(
    ("setup", "refusal"),
    [
        (
            [
                "CREATE TABLE nanobot_sessions (id int, data text)",
                "INSERT INTO nanobot_sessions VALUES (1, 'kept')",
            ],
            r"holds nanobot_sessions but records no nanobot-postgres schema version",
        ),
        (
            ["CREATE FUNCTION nanobot_lines_append_only() RETURNS int LANGUAGE sql AS 'SELECT 1'"],
            r"holds nanobot_lines_append_only\(\) but records no nanobot-postgres schema",
        ),
        (
            [
                "CREATE TABLE nanobot_schema_migrations (id int, v text)",
                "INSERT INTO nanobot_schema_migrations VALUES (1, 'kept')",
            ],
            r"nanobot_schema_migrations is not nanobot-postgres's record of schema versions "
            r"\(its columns: id integer, v text; expected version integer, name text\)",
        ),
        (
            [
                "CREATE TABLE nanobot_schema_migrations (version text, name text)",
                "INSERT INTO nanobot_schema_migrations VALUES ('20240101', 'kept')",
            ],
            r"\(its columns: version text, name text; expected version integer, name text\)",
        ),
    ],
)
def test_tables_of_the_plugins_names_that_are_not_its_own_are_refused_and_kept(
    dsn: str, setup: list[str], refusal: str
) -> None:
    """Another application's tables under the plugin's names are refused by name, untouched."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in setup:
            conn.execute(statement)
        before = conn.execute(
            "SELECT relname FROM pg_class WHERE relname LIKE 'nanobot%' ORDER BY 1"
        ).fetchall()
    store = PostgresSessionStore(dsn)
    with pytest.raises(
        SessionError, match=rf"^cannot use the session database \(.*{refusal}"
    ) as refused:
        store.list_sessions()
    assert "nothing was changed" in str(refused.value)
    store.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        after = conn.execute(
            "SELECT relname FROM pg_class WHERE relname LIKE 'nanobot%' ORDER BY 1"
        ).fetchall()
        assert after == before
        if "INSERT" in setup[-1]:
            table = setup[-1].split()[2]
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (1,)


def test_lines_are_append_only(dsn: str) -> None:
    """A row of a session line cannot be updated, even by hand."""
    store = PostgresSessionStore(dsn)
    with open_session(store, "s") as session:
        session.append({"role": "user", "content": "kept"})
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        pytest.raises(psycopg.Error, match="append-only"),
    ):
        conn.execute("UPDATE nanobot_session_lines SET line = '{}'")
    assert store.load("s").lines == ['{"role":"user","content":"kept"}']
    store.close()


def test_password_never_shows(dsn: str) -> None:
    """Reprs, descriptions and connection errors name the server but never the password."""
    password = _password(dsn)
    store = PostgresSessionStore(dsn)
    assert password not in repr(store) and password not in store.describe()
    assert store.describe().startswith("postgresql://nanobot@127.0.0.1:")
    assert password not in repr(Config(sessions=SessionsConfig(postgres=PostgresConfig(dsn=dsn))))
    wrong = dsn.replace(password, password + "-wrong")
    with pytest.raises(SessionError) as caught:
        PostgresSessionStore(wrong, connect_timeout=5).list_sessions()
    assert "password authentication failed" in str(caught.value)
    assert password not in str(caught.value)


def test_missing_dsn_is_a_config_error() -> None:
    """Choosing the store without a DSN fails naming the key and the variable."""
    with pytest.raises(ConfigError, match=r"sessions\.postgres\.dsn.*NANOBOT_POSTGRES_DSN"):
        PostgresSessionStore(None).list_sessions()


def test_one_connection_with_results_in_the_database_is_a_config_error(dsn: str) -> None:
    """A pool of 1 that offloaded results share is refused before connecting, naming both keys."""
    refused = PostgresSessionStore(dsn, pool_size=1, results=True)
    with pytest.raises(
        ConfigError, match=r"^sessions\.postgres\.pool_size: 1 .*sessions\.postgres\.results"
    ):
        refused.lease("s")
    enough = PostgresSessionStore(dsn, pool_size=2, results=True)
    try:
        enough.lease("s").release()
    finally:
        enough.close()


_HOLDER_SCRIPT = """
import sys, time
from nanobot_postgres.store import PostgresSessionStore
lease = PostgresSessionStore(sys.argv[1]).lease("held")
print("leased", flush=True)
time.sleep(600)
"""


def test_kill_9_frees_the_lease_at_once(dsn: str) -> None:
    """A worker killed with SIGKILL while holding a lease frees it within a couple of seconds."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER_SCRIPT, dsn], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "leased"
        store = PostgresSessionStore(dsn)
        with pytest.raises(SessionLockedError, match=f"pid {holder.pid}"):
            store.lease("held")
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
        killed = time.monotonic()
        lease = store.lease("held", wait=5)
        assert time.monotonic() - killed < 3
        lease.release()
        store.close()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


_WAITER_SCRIPT = """
import sys
from nanobot_postgres.store import PostgresSessionStore
PostgresSessionStore(sys.argv[1]).lease("busy", wait=600)
"""

# A backend of the session's lease key, waiting for it or holding it.
_KEY_BACKENDS = (
    "SELECT a.application_name, l.granted FROM pg_locks l "
    "JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.objsubid = 1 "
    "AND l.classid::bigint = %s AND l.objid::bigint = %s"
)


def _key_backends(dsn: str, session: str) -> list[tuple[str, bool]]:
    unsigned = lease_key(session) & 0xFFFF_FFFF_FFFF_FFFF
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(_KEY_BACKENDS, (unsigned >> 32, unsigned & 0xFFFF_FFFF)).fetchall()
    return [(str(app), bool(granted)) for app, granted in rows]


def test_kill_9_while_waiting_ends_the_waiting_backend(dsn: str) -> None:
    """A worker killed while it waits for a busy session leaves no backend in the lock queue."""
    store = PostgresSessionStore(dsn)
    held = store.lease("busy")
    waiter = subprocess.Popen([sys.executable, "-c", _WAITER_SCRIPT, dsn])
    try:
        name = f"nanobot-core {socket.gethostname()[:32]} pid {waiter.pid}"
        deadline = time.monotonic() + 30
        while (name, False) not in _key_backends(dsn, "busy"):
            assert waiter.poll() is None and time.monotonic() < deadline, "never waited"
            time.sleep(0.05)
        os.kill(waiter.pid, signal.SIGKILL)
        waiter.wait(timeout=30)
        killed = time.monotonic()
        # The server checks a waiting backend's client every second (PostgreSQL 14+).
        while [b for b in _key_backends(dsn, "busy") if b[0] == name]:
            assert time.monotonic() - killed < 5, "the dead worker's backend still waits"
            time.sleep(0.05)
        with psycopg.connect(dsn, autocommit=True) as conn:
            gone = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
            assert conn.execute(gone, (name,)).fetchone() == (0,)
        # The lock goes to the next live worker, never to the dead one.
        held.release()
        assert [b for b in _key_backends(dsn, "busy") if b[0] == name] == []
        # The check is set for the wait only; the README says how often it runs.
        after = PostgresSessionStore(dsn, pool_size=1)
        try:
            after.lease("busy", wait=1.0).release()
            assert after.run("SHOW client_connection_check_interval") == [("0",)]
        finally:
            after.close()
        readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
        assert f"`client_connection_check_interval` to {CLIENT_CHECK_INTERVAL}," in readme
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
        store.close()


@pytest.mark.parametrize(
    ("setting", "value"),
    [("no_such_setting", "1s"), ("client_connection_check_interval", "-1")],
    ids=["server-before-14", "platform-refuses"],
)
def test_lease_wait_works_where_the_server_refuses_the_client_check(
    dsn: str, monkeypatch: pytest.MonkeyPatch, setting: str, value: str
) -> None:
    """A server that refuses the client check (unknown setting, refused value) still waits."""
    # The errors of a server before 14 and of a platform that cannot check, on this one.
    monkeypatch.setattr(store_module, "_CLIENT_CHECK", setting)
    monkeypatch.setattr(store_module, "CLIENT_CHECK_INTERVAL", value)
    holder, waiter = PostgresSessionStore(dsn), PostgresSessionStore(dsn, pool_size=1)
    try:
        held = holder.lease("busy")
        started = time.monotonic()
        with pytest.raises(SessionLockedError, match=r"after waiting 0.5s"):
            waiter.lease("busy", wait=0.5)
        assert time.monotonic() - started >= 0.4
        held.release()
        waiter.lease("busy", wait=1.0).release()
        assert waiter.run("SHOW client_connection_check_interval") == [("0",)]
    finally:
        holder.close()
        waiter.close()


def test_connections_the_server_dropped_are_replaced(dsn: str) -> None:
    """After the server ends the pool's idle connections, the next turns work at once."""
    store = PostgresSessionStore(dsn, pool_size=3)
    leases = [store.lease(f"s{index}") for index in range(3)]
    for lease in leases:
        lease.release()
    with psycopg.connect(dsn, autocommit=True) as conn:
        ended = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    assert len(ended) == 3
    for index in range(3):
        with open_session(store, f"s{index}") as session:
            session.append({"role": "user", "content": "after the restart"})
    assert [info.messages for info in store.list_sessions()] == [1, 1, 1]
    store.close()


def test_sessions_lists_as_the_file_store_does_with_the_documented_path(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`sessions --json` gives one session the same messages and size from the database as
    from the files, and the path the README shows: the server, ``#``, the name."""
    export = tmp_path / "export.jsonl"
    lines = [
        {"role": "user", "content": "h\u00e9"},
        {"_meta": {"kind": "x"}},
        {"role": "assistant"},
    ]
    export.write_text(
        "\n".join(
            json.dumps(value)
            for value in [{"nanobot_sessions_export": 1}]
            + [{"session": "t-1", "line": json.dumps(line)} for line in lines]
        )
        + "\n"
    )
    listings = []
    for store, folder in (("postgres", tmp_path / "db"), ("jsonl", tmp_path / "files")):
        folder.mkdir()
        env = {**cli_env, "NANOBOT_SESSIONS__STORE": store}
        assert run_cli("sessions", "import", str(export), cwd=folder, env=env).returncode == 0
        listed = run_cli("sessions", "--json", cwd=folder, env=env)
        assert listed.returncode == 0, listed.stderr
        (info,) = json.loads(listed.stdout)
        listings.append(info)
    database, files = listings
    assert (
        (database["messages"], database["size"])
        == (files["messages"], files["size"])
        == (
            2,
            (tmp_path / "files" / ".nanobot" / "sessions" / "t-1.jsonl").stat().st_size,
        )
    )
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    assert "a session's `path` is `postgresql://user@host:port/db#NAME`" in readme
    server = PostgresSessionStore(cli_env["NANOBOT_POSTGRES_DSN"]).describe()
    assert re.fullmatch(r"postgresql://nanobot@127\.0\.0\.1:\d+/test_\w+", server)
    assert database["path"] == f"{server}#t-1"


def test_cli_run_sessions_show_and_busy(cli_env: dict[str, str], tmp_path: Path, dsn: str) -> None:
    """`run` twice on the postgres store, list and show it; a held session exits 1 naming it."""
    password = _password(dsn)
    with ScriptedChatServer() as server:
        env = {**cli_env, "NANOBOT_BASE_URL": server.base_url, "NANOBOT_TOOLS__DISABLED": "[]"}
        for turn in (1, 2):
            result = run_cli(
                "run", f"session chat turn {turn}", "--session", "chat", cwd=tmp_path, env=env
            )
            assert result.returncode == 0, result.stderr
            assert result.stdout.strip() == f"done chat-{turn}"
            assert password not in result.stdout + result.stderr
        listed = run_cli("sessions", "--json", cwd=tmp_path, env=env)
        assert listed.returncode == 0, listed.stderr
        (info,) = json.loads(listed.stdout)
        assert info["name"] == "chat" and info["messages"] >= 8
        assert (
            info["path"].startswith("postgresql://nanobot@127.0.0.1:")
            and password not in info["path"]
        )
        shown = json.loads(
            run_cli("sessions", "show", "chat", "--json", cwd=tmp_path, env=env).stdout
        )
        roles = [m.get("role") for m in shown["messages"]]
        assert roles[:2] == ["user", "assistant"] and roles.count("user") == 2
        assert shown["messages"][0]["_meta"]["time"]
        store = PostgresSessionStore(dsn)
        with open_session(store, "chat"):
            busy = run_cli("run", "session chat turn 3", "--session", "chat", cwd=tmp_path, env=env)
        store.close()
        assert busy.returncode == 1
        assert f"pid {os.getpid()}" in busy.stderr and "Traceback" not in busy.stderr
        assert password not in busy.stderr
        (tmp_path / "other").mkdir()
        wrong = {**env, "NANOBOT_POSTGRES_DSN": dsn.replace(password, "nope")}
        failed = run_cli("sessions", cwd=tmp_path / "other", env=wrong)
        assert failed.returncode == 1 and "password authentication failed" in failed.stderr
        assert "nope" not in failed.stderr and "Traceback" not in failed.stderr


def test_cli_database_failure_is_exit_1_not_an_unknown_session(
    cli_env: dict[str, str], tmp_path: Path, dsn: str
) -> None:
    """`sessions show` and `export` exit 1 when the database refuses them, 2 for no such session."""
    password = _password(dsn)
    out = str(tmp_path / "out.jsonl")
    missing = run_cli("sessions", "show", "ghost", cwd=tmp_path, env=cli_env)
    assert missing.returncode == 2 and "no session named 'ghost'" in missing.stderr
    wrong = {**cli_env, "NANOBOT_POSTGRES_DSN": dsn.replace(password, "nope")}
    for args in (("show", "ghost"), ("export", "ghost", "-o", out), ("export", "-o", out)):
        failed = run_cli("sessions", *args, cwd=tmp_path, env=wrong)
        assert failed.returncode == 1, (args, failed.stderr)
        assert "password authentication failed" in failed.stderr
        assert "Traceback" not in failed.stderr and "nope" not in failed.stderr


def test_export_to_jsonl_and_back_is_byte_identical(
    cli_env: dict[str, str], tmp_path: Path, dsn: str
) -> None:
    """Postgres -> export -> JSONL workspace -> export -> another database: the same bytes."""
    awkward = [
        '{"role":"user","content":"caf\u00e9 \\u00e9 \U0001f600"}',
        '{"_meta":{"kind":"governance","cut":3}}',
        '{ "role" : "assistant" , "content" : "spaced" }',
    ]
    store = PostgresSessionStore(dsn)
    lease = store.lease("one")
    lease.append(awkward, expected_seq=0)
    lease.release()
    store.close()
    first = tmp_path / "first.jsonl"
    assert (
        run_cli("sessions", "export", "--output", str(first), cwd=tmp_path, env=cli_env).returncode
        == 0
    )
    files = tmp_path / "files"
    files.mkdir()
    jsonl_env = {k: v for k, v in cli_env.items() if k != "NANOBOT_SESSIONS__STORE"}
    imported = run_cli("sessions", "import", str(first), cwd=files, env=jsonl_env)
    assert imported.returncode == 0, imported.stderr
    assert (
        JsonlSessionStore(files).path("one").read_bytes()
        == "".join(line + "\n" for line in awkward).encode()
    )
    second = tmp_path / "second.jsonl"
    assert (
        run_cli("sessions", "export", "-o", str(second), cwd=files, env=jsonl_env).returncode == 0
    )
    assert second.read_bytes() == first.read_bytes()
    other = dsn.rsplit("/", 1)[0] + "/" + dsn.rsplit("/", 1)[1] + "_copy"
    with psycopg.connect(dsn.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{other.rsplit("/", 1)[1]}"')
    copy_env = {**cli_env, "NANOBOT_POSTGRES_DSN": other}
    assert run_cli("sessions", "import", str(second), cwd=tmp_path, env=copy_env).returncode == 0
    copied = PostgresSessionStore(other)
    assert copied.load("one").lines == awkward
    copied.close()


def test_an_empty_session_goes_from_jsonl_to_postgres_and_back_out(
    cli_env: dict[str, str], tmp_path: Path, dsn: str
) -> None:
    """JSONL -> export -> import into PostgreSQL -> export: every session comes back, the
    empty one too, and the second export is the first byte for byte."""
    files = JsonlSessionStore(tmp_path / "files")
    files.directory.mkdir(parents=True)
    files.path("empty").write_bytes(b"")
    files.path("full").write_bytes(b'{"role":"user","content":"x"}\n')
    jsonl_env = {k: v for k, v in cli_env.items() if k != "NANOBOT_SESSIONS__STORE"}
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    exported = run_cli("sessions", "export", "-o", str(first), cwd=files.workspace, env=jsonl_env)
    assert exported.returncode == 0, exported.stderr
    imported = run_cli("sessions", "import", str(first), cwd=tmp_path, env=cli_env)
    assert imported.returncode == 0, imported.stderr
    assert "imported 2 session(s), 1 line(s) into the postgres store" in imported.stderr
    again = run_cli("sessions", "export", "-o", str(second), cwd=tmp_path, env=cli_env)
    assert again.returncode == 0, again.stderr
    assert second.read_bytes() == first.read_bytes()
    assert {"session": "empty"} in [json.loads(line) for line in second.read_bytes().splitlines()]
    store = PostgresSessionStore(dsn)
    assert [(i.name, i.messages, i.size) for i in store.list_sessions()] == [
        ("empty", 0, 0),
        ("full", 1, 30),
    ]
    with open_session(store, "empty") as session:  # written to as any other session
        session.append({"role": "user", "content": "now"})
    assert store.load("empty").seq == 1
    store.close()
    refused = run_cli("sessions", "import", str(first), cwd=tmp_path, env=cli_env)
    assert refused.returncode == 1
    assert "'empty'" in refused.stderr and "Traceback" not in refused.stderr


def test_an_import_the_server_refuses_half_way_is_finished_by_resume_nothing_lost_or_doubled(
    cli_env: dict[str, str], tmp_path: Path, dsn: str
) -> None:
    """`sessions import` whose third session the server refuses (a full disk, here a trigger
    raising as one does): exit 1 naming the two imported, which stay; once the server takes
    writes again, `--resume` imports the rest, and every session then holds its lines once,
    in order, as the export of the database shows byte for byte."""
    sessions = {
        "s0": ['{"role":"user","content":"a"}', '{"role":"assistant","content":"b"}'],
        "s1": ['{"role":"user","content":"c"}'],
        "s2": ['{"role":"user","content":"d"}', '{"_meta":{"kind":"usage"}}'],
        "s3": [],
    }
    rows = [{"nanobot_sessions_export": 1}]
    for name, lines in sessions.items():
        rows.extend({"session": name, "line": line} for line in lines)
        if not lines:
            rows.append({"session": name})
    export = tmp_path / "export.jsonl"
    export.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    migrated = PostgresSessionStore(dsn)
    assert migrated.list_sessions() == []  # the schema, migrated before the trigger is added
    migrated.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            """CREATE FUNCTION test_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    RAISE EXCEPTION 'could not extend file: No space left on device'
                        USING ERRCODE = 'disk_full';
                END
            $$"""
        )
        conn.execute(
            """CREATE TRIGGER test_disk_full BEFORE INSERT ON nanobot_session_lines
                FOR EACH ROW WHEN (NEW.session = 's2') EXECUTE FUNCTION test_disk_full()"""
        )
    stopped = run_cli("sessions", "import", str(export), cwd=tmp_path, env=cli_env)
    assert stopped.returncode == 1, stopped.stderr
    assert "Error: importing session 's2' into the postgres store failed: " in stopped.stderr
    assert "No space left on device" in stopped.stderr and "Traceback" not in stopped.stderr
    assert "Imported before it (2): 's0', 's1'; not imported: 's2' and the 1 after it." in (
        stopped.stderr
    )

    def stored() -> dict[str, list[tuple[int, str]]]:
        """Every session's rows, (seq, line) in order, read from the tables themselves."""
        with psycopg.connect(dsn, autocommit=True) as conn:
            names = conn.execute("SELECT name FROM nanobot_sessions ORDER BY name").fetchall()
            found: dict[str, list[tuple[int, str]]] = {name: [] for (name,) in names}
            query = "SELECT session, seq, line FROM nanobot_session_lines ORDER BY session, seq"
            for session, seq, line in conn.execute(query).fetchall():
                found[session].append((seq, line))
        return found

    half = stored()
    assert {name: half[name] for name in ("s0", "s1")} == {
        name: list(enumerate(sessions[name])) for name in ("s0", "s1")
    }
    assert not half.get("s2") and "s3" not in half  # the refused write left no line
    with psycopg.connect(dsn, autocommit=True) as conn:  # the disk has room again
        conn.execute("DROP TRIGGER test_disk_full ON nanobot_session_lines")
    again = run_cli("sessions", "import", str(export), cwd=tmp_path, env=cli_env)
    assert again.returncode == 1 and "import it again with --resume)" in again.stderr
    assert stored() == half  # refused without --resume: nothing written
    resumed = run_cli("sessions", "import", str(export), "--resume", cwd=tmp_path, env=cli_env)
    assert resumed.returncode == 0, resumed.stderr
    assert (
        "imported 2 session(s), 2 line(s) into the postgres store; 2 already there, "
        "left as they are"
    ) in resumed.stderr
    assert stored() == {name: list(enumerate(lines)) for name, lines in sessions.items()}
    twice = run_cli("sessions", "import", str(export), "--resume", cwd=tmp_path, env=cli_env)
    assert twice.returncode == 0 and "imported 0 session(s), 0 line(s)" in twice.stderr
    out = tmp_path / "out.jsonl"
    exported = run_cli("sessions", "export", "-o", str(out), cwd=tmp_path, env=cli_env)
    assert exported.returncode == 0, exported.stderr
    assert out.read_bytes() == export.read_bytes()


def test_a_session_numbers_its_lines_by_their_seq(dsn: str) -> None:
    """A session loaded from PostgreSQL numbers each line by its row (seq + 1), past a row
    that is no line, as a warning about a damaged governance record names it, lines
    appended since included."""
    store = PostgresSessionStore(dsn)
    with open_session(store, "s") as session:
        session.append_records([{"n": 1}, {"n": 2}, {"n": 3}])
    with psycopg.connect(dsn, autocommit=True) as conn:  # a row damaged by hand: line 2
        conn.execute("DELETE FROM nanobot_session_lines WHERE seq = 1")
        conn.execute("INSERT INTO nanobot_session_lines (session, seq, line) VALUES ('s', 1, '[')")
    with open_session(store, "s") as session:
        assert [problem.line for problem in session.problems] == [2]
        session.append_records([{"n": 4}])
        assert [n for n, _ in session.newest_lines(lambda record: "n" in record)] == [4, 3, 1]
    store.close()


def test_rows_whose_name_no_session_can_have_are_left_out_of_listing_and_export(
    cli_env: dict[str, str], tmp_path: Path, dsn: str
) -> None:
    """Sessions written by hand under names no session can have (empty, a terminal escape,
    a path) are left out of the listing, as the file store leaves such files out, and the
    export of all sessions holds the others."""
    store = PostgresSessionStore(dsn)
    lease = store.lease("ok")
    lease.append(['{"role":"user","content":"kept"}'], expected_seq=0)
    lease.release()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in ["", "red\x1b[31m", "../evil", "a%b", "x" * 201]:
            conn.execute(
                "INSERT INTO nanobot_sessions (name, lines, messages, bytes) VALUES (%s, 1, 1, 8)",
                (name,),
            )
            conn.execute(
                "INSERT INTO nanobot_session_lines (session, seq, line) VALUES (%s, 0, '{}')",
                (name,),
            )
    assert [info.name for info in store.list_sessions()] == ["ok"]
    store.close()
    listed = run_cli("sessions", cwd=tmp_path, env=cli_env)
    assert listed.returncode == 0 and "\x1b" not in listed.stdout and "evil" not in listed.stdout
    exported = tmp_path / "all.jsonl"
    done = run_cli("sessions", "export", "--output", str(exported), cwd=tmp_path, env=cli_env)
    assert done.returncode == 0, done.stderr
    assert "kept" in exported.read_text(encoding="utf-8")
    assert "evil" not in exported.read_text(encoding="utf-8")


def test_listing_ignores_the_database_collation(dsn: str, tmp_path: Path) -> None:
    """In a database collated for English, sessions list (and export) in the JSONL store's order."""
    english = dsn.rsplit("/", 1)[1] + "_en"
    # Debian's PostgreSQL, which the tests start, is built with ICU: a server without it
    # fails here, naming what it lacks, rather than leaving the order untested.
    with psycopg.connect(dsn.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(
            f"CREATE DATABASE \"{english}\" LOCALE_PROVIDER icu ICU_LOCALE 'en-US' "
            "TEMPLATE template0"
        )
    names = ["b", "a-b", "B", "a", "a.b", "ab"]
    files = JsonlSessionStore(tmp_path)
    store = PostgresSessionStore(dsn.rsplit("/", 1)[0] + "/" + english)
    for each in (files, store):
        for name in names:
            with open_session(each, name) as session:
                session.append({"role": "user", "content": name})
    assert [i.name for i in store.list_sessions()] == sorted(names)
    assert [i.name for i in store.list_sessions()] == [i.name for i in files.list_sessions()]
    store.close()


def test_offloaded_result_resolves_on_another_worker(dsn: str, tmp_path: Path) -> None:
    """A result offloaded on one machine is fetched by hash into another's cache for read_file."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    config = Config(sessions=SessionsConfig(store="postgres", postgres=PostgresConfig(dsn=dsn)))
    content = "huge result " * 1000
    shown = nanobot_postgres.nanobot_result_store(PluginContext(first, config)).put(content)
    digest = hashlib.sha256(content.encode()).hexdigest()
    assert reference_hash(shown) == digest
    assert (first / shown).read_text() == content
    assert not (second / CACHE_DIR / f"{digest}.txt").exists()
    call = ToolCallEvent(tool="read_file", arguments={"path": shown})
    assert nanobot_postgres.nanobot_before_tool_call(PluginContext(second, config), call) is None
    assert (second / CACHE_DIR / f"{digest}.txt").read_text() == content
    nanobot_postgres.store_for(PluginContext(first, config)).close()


def test_result_with_a_lone_surrogate_resolves_on_another_worker(dsn: str, tmp_path: Path) -> None:
    """A result holding a lone surrogate is offloaded as the workspace cache writes it."""
    store = PostgresSessionStore(dsn)
    content = "half a pair: \ud800 " * 500
    shown = PostgresResultStore(store, tmp_path / "a").put(content)
    assert (tmp_path / "a" / shown).read_text() == content.replace("\ud800", "?")
    other = PostgresResultStore(store, tmp_path / "b")
    assert fetch_into_cache(other, tmp_path / "b", shown)
    assert (tmp_path / "b" / shown).read_bytes() == (tmp_path / "a" / shown).read_bytes()
    store.close()


def test_result_with_nul_resolves_on_another_worker_byte_for_byte(dsn: str, tmp_path: Path) -> None:
    """A result holding U+0000 (a text column refuses it) is stored and read back exactly."""
    store = PostgresSessionStore(dsn)
    content = "before\x00after \ud800 caf\u00e9 \x00\x00 \U0001f600 " * 300
    shown = PostgresResultStore(store, tmp_path / "a").put(content)
    local = (tmp_path / "a" / shown).read_bytes()
    assert local == content.encode("utf-8", "replace") and b"\x00" in local
    digest = reference_hash(shown)
    assert digest is not None
    rows = store.run(
        "SELECT data, content, bytes FROM nanobot_results WHERE sha256 = %s", (digest,)
    )
    assert rows == [(local, None, len(local))]
    other = PostgresResultStore(store, tmp_path / "b")
    assert fetch_into_cache(other, tmp_path / "b", shown)
    assert (tmp_path / "b" / shown).read_bytes() == local
    store.close()


def test_governance_offloads_a_result_with_nul_instead_of_truncating(
    dsn: str, tmp_path: Path
) -> None:
    """Through the plugin's result store, a huge result with U+0000 becomes a reference."""
    config = Config(
        sessions=SessionsConfig(store="postgres", postgres=PostgresConfig(dsn=dsn)),
        governance=GovernanceConfig(max_tool_result_chars=1_000),
    )
    (tmp_path / "a").mkdir()
    manager = PluginManager(config, workspace=tmp_path / "a", autoload=False)
    manager.register(nanobot_postgres, "postgres", distribution="nanobot-postgres")
    content = "row\x00" * 5_000
    call = {"id": "c1", "type": "function", "function": {"name": "dump", "arguments": "{}"}}
    history = [
        {"role": "user", "content": "dump it"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": content},
    ]
    notice = manager.governor().govern(history).messages[2]["content"]
    shown = f".nanobot/cache/tool-results/{hashlib.sha256(content.encode()).hexdigest()}.txt"
    assert shown in notice and len(notice) <= 1_000
    store = nanobot_postgres.store_for(manager.context)
    assert fetch_into_cache(PostgresResultStore(store, tmp_path / "b"), tmp_path / "b", shown)
    assert (tmp_path / "b" / shown).read_text(encoding="utf-8") == content
    store.close()


# Characters that stress the store: U+0000, lone surrogates, the highest code point,
# then anything at all (surrogates included).
_AWKWARD = st.sampled_from(["\x00", "\ud800", "\udfff", "\U0010ffff", "\u00e9"])
_ANY = st.characters(codec=None, exclude_categories=())


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(content=st.text(_AWKWARD | _ANY, min_size=1, max_size=200))
@example(content="\x00")
@example(content="a\x00\ud800b\udfff\x00")
def test_every_result_round_trips_byte_for_byte(
    dsn: str, tmp_path_factory: pytest.TempPathFactory, content: str
) -> None:
    """Whatever the text, the worker without the file gets exactly the bytes of the one with it."""
    store = PostgresSessionStore(dsn)
    try:
        first, second = tmp_path_factory.mktemp("first"), tmp_path_factory.mktemp("second")
        shown = PostgresResultStore(store, first).put(content)
        digest = reference_hash(shown)
        assert digest is not None
        expected = content.encode("utf-8", "replace")
        assert PostgresResultStore(store, second).get(digest) == expected.decode("utf-8")
        assert fetch_into_cache(PostgresResultStore(store, second), second, shown)
        assert (second / shown).read_bytes() == (first / shown).read_bytes() == expected
    finally:
        store.close()


def test_results_stored_as_text_before_the_upgrade_are_still_served(
    dsn: str, tmp_path: Path
) -> None:
    """Rows of schema version 1, and rows a not yet upgraded worker writes, stay readable."""
    old = "stored by version 1 \u00e9"
    older = hashlib.sha256(old.encode()).hexdigest()
    insert = "INSERT INTO nanobot_results (sha256, content, bytes) VALUES (%s, %s, %s)"
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert apply_migrations(conn, target=1) == [1]
        conn.execute(insert, (older, old, len(old.encode())))
    store = PostgresSessionStore(dsn)
    results = PostgresResultStore(store, tmp_path / "a")
    assert results.get(older) == old  # the first use migrated the database to version 2
    late = "written by a worker of version 1 during the upgrade"
    later = hashlib.sha256(late.encode()).hexdigest()
    store.run(insert, (later, late, len(late)))
    assert results.get(later) == late
    with pytest.raises(SessionError, match="nanobot_results_one_body"):
        store.run("UPDATE nanobot_results SET data = 'x'::bytea WHERE sha256 = %s", (older,))
    fresh = reference_hash(results.put("\x00 new"))
    assert fresh == hashlib.sha256(b"\x00 new").hexdigest()
    assert results.get(fresh) == "\x00 new"
    store.close()


def test_tampered_result_is_not_served(dsn: str, tmp_path: Path) -> None:
    """A stored text that no longer matches its hash is not written into any cache."""
    store = PostgresSessionStore(dsn)
    results = PostgresResultStore(store, tmp_path / "a")
    shown = results.put("original text")
    digest = reference_hash(shown)
    assert digest is not None
    store.run("UPDATE nanobot_results SET data = 'forged'::bytea WHERE sha256 = %s", (digest,))
    assert results.get(digest) is None
    assert not fetch_into_cache(results, tmp_path / "b", f"{CACHE_DIR}/{digest}.txt")
    store.close()


def test_session_lines_keep_an_escaped_nul_and_refuse_a_raw_one(dsn: str) -> None:
    """U+0000 in a message is stored as JSON's escape and read back; a raw NUL line is refused."""
    store = PostgresSessionStore(dsn)
    with open_session(store, "nul") as session:
        session.append({"role": "user", "content": "a\x00b"})
    loaded = store.load("nul")
    (line,) = [line for line in loaded.lines if "\\u0000" in line]
    assert "\x00" not in line
    assert [r["content"] for r in loaded.records if "content" in r] == ["a\x00b"]
    lease = store.lease("nul")
    try:
        with pytest.raises(SessionError, match="not JSON"):
            lease.append(['{"a": "x\x00y"}'], expected_seq=lease.load().seq)
    finally:
        lease.release()
        store.close()


def test_a_line_loaded_with_replacements_is_named_by_session_and_number(dsn: str) -> None:
    """The warning that a stored line held what had to be replaced (a lone surrogate, NaN)
    names the session where it lives and the line's number, as the file store does."""
    store = PostgresSessionStore(dsn)
    lease = store.lease("odd")
    try:
        lease.append(['{"role":"user","content":"a"}', '{"a":"\\ud800","n":NaN}'], expected_seq=0)
    finally:
        lease.release()
    with capture_logs() as logs:
        store.load("odd")
    store.close()
    warned = [e for e in logs if e["event"] == "session line decoded with replacements"]
    assert [(e.get("location"), e.get("line")) for e in warned] == [(f"{store.describe()}#odd", 2)]


def test_results_stay_in_the_workspace_without_the_postgres_store(tmp_path: Path) -> None:
    """With the JSONL store the plugin offers no result store and leaves read_file alone."""
    ctx = PluginContext(tmp_path, Config())
    assert nanobot_postgres.nanobot_result_store(ctx) is None
    event = ToolCallEvent(tool="read_file", arguments={"path": ".nanobot/cache/tool-results/x.txt"})
    assert nanobot_postgres.nanobot_before_tool_call(ctx, event) is None


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "not an object"),
        ('{"a": 1}\n{"b": 2}', "must not contain a line break"),
        ('{"a": "\ud800"}', "not encodable as UTF-8"),
    ],
)
def test_append_refuses_a_line_the_store_could_not_keep(dsn: str, line: str, reason: str) -> None:
    """A bad line in a batch fails with SessionError naming it, and nothing is stored."""
    store = PostgresSessionStore(dsn)
    lease = store.lease("s")
    try:
        assert lease.append(['{"kept": 1}'], expected_seq=0) == 1
        with pytest.raises(SessionError, match=rf"session 's', line 3: .*{reason}"):
            lease.append(['{"good": 2}', line], expected_seq=1)
        assert lease.load().lines == ['{"kept": 1}']
        assert lease.append(['{"next": 3}'], expected_seq=1) == 2
        assert [info.messages for info in store.list_sessions()] == [2]
    finally:
        lease.release()
        store.close()


def test_a_line_more_than_one_statement_carries_is_refused_before_it_is_sent(dsn: str) -> None:
    """A line of a gigabyte is refused naming the session and line before any byte is sent,
    and the lease is kept for the next append: sent, the server closed the connection at it,
    which said only that the server had terminated abnormally. (Lines that fit alone but not
    together go in several statements: tests/test_large_batches.py.)"""
    store = PostgresSessionStore(dsn)
    lease = store.lease("big")
    content = "x" * store_module._MAX_APPEND_BYTES
    try:
        assert lease.append(['{"role":"user","content":"kept"}'], expected_seq=0) == 1
        with pytest.raises(
            SessionError,
            match=r"^session 'big', line 2: [0-9,]+ bytes, more than the 1,073,676,286 "
            r"PostgreSQL takes in one statement \(postgresql://[^)]+\); nothing was appended$",
        ):
            lease.append(['{"c":"' + content + '"}'], expected_seq=1)
        del content
        lease.check_held()
        assert lease.append(['{"role":"user","content":"next"}'], expected_seq=1) == 2
        assert [json.loads(line)["content"] for line in lease.load().lines] == ["kept", "next"]
    finally:
        lease.release()
        store.close()


def test_an_append_whose_answer_is_lost_says_it_may_have_been_stored(dsn: str) -> None:
    """An append cut at query_timeout while the server is stopped says its lines may be
    stored, and how to look: resumed, the server does store them."""
    store = PostgresSessionStore(dsn, query_timeout=2)
    lease = store.lease("paused")
    backend = lease._conn.info.backend_pid
    os.kill(backend, signal.SIGSTOP)
    try:
        with pytest.raises(SessionError) as cut:
            lease.append(['{"role":"user","content":"sent"}', '{"n":2}'], expected_seq=0)
    finally:
        os.kill(backend, signal.SIGCONT)
        lease.release()
    assert str(cut.value).startswith("cannot append to session 'paused' (postgresql://")
    assert str(cut.value).endswith(
        "; whether the 2 lines were stored is unknown (a batch is stored whole or not at "
        "all): `nanobot-core sessions show paused` tells"
    )
    deadline = time.monotonic() + 10
    while not store.list_sessions() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.load("paused").lines == ['{"role":"user","content":"sent"}', '{"n":2}']
    store.close()


def test_a_line_full_of_escapes_is_sent_without_an_escape_each(dsn: str) -> None:
    """A 4 MB line of escaped backslashes and quotes is appended in under
    a second: sent in text form, each of its four million escapes cost psycopg a regex match."""
    store = PostgresSessionStore(dsn)
    lease = store.lease("escapes")
    line = '{"content":"' + '\\\\\\"' * 1_000_000 + '"}'
    try:
        started = time.monotonic()
        assert lease.append([line], expected_seq=0) == 1
        elapsed = time.monotonic() - started
        assert lease.load().lines == [line]
    finally:
        lease.release()
        store.close()
    assert elapsed < 1.0, elapsed


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    text=st.text(max_size=20)
    | st.builds(json.dumps, st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2))
)
def test_append_keeps_exactly_the_lines_the_core_accepts(dsn: str, text: str) -> None:
    """Any text is either stored byte for byte or refused storing nothing, as `check_line` rules."""
    try:
        check_line(text, "line")
        accepted = True
    except SessionError:
        accepted = False
    store = PostgresSessionStore(dsn)
    lease = store.lease("prop")
    try:
        before = lease.load()
        if accepted:
            assert lease.append([text], expected_seq=before.seq) == before.seq + 1
            assert lease.load().lines == [*before.lines, text]
        else:
            with pytest.raises(SessionError):
                lease.append([text], expected_seq=before.seq)
            assert lease.load().lines == before.lines
    finally:
        lease.release()
        store.close()


# JSON text as anything may write it: numbers PostgreSQL's jsonb would respell or refuse,
# strings with U+0000, lone surrogates and control characters (escaped, or raw where JSON
# forbids them), duplicate keys, any key order, whitespace around every token.
_NUMBERS = st.sampled_from(
    ["1e400", "-1e400", "-0.0", "-0", "0.1e-400", "1E+2", "3.10", "1.0", "NaN", "-Infinity"]
) | st.builds(str, st.integers(min_value=-(10**80), max_value=10**80) | st.floats())
_STRINGS = st.builds(
    json.dumps, st.text(st.characters(codec=None), max_size=12), ensure_ascii=st.booleans()
) | st.sampled_from(['"\\u0000"', '"a\x00b"', '"\\ud800"', '"\\udc00\\ud800"', '"\t"'])
_SPACE = st.sampled_from(["", " ", "\t", "\r", "  \r\t"])


def _json_texts() -> st.SearchStrategy[str]:
    def array(items: list[str]) -> str:
        return "[" + ",".join(items) + "]"

    def obj(pairs: list[tuple[str, str, str]]) -> str:
        return "{" + ",".join(f"{space}{key}{space}:{value}" for key, value, space in pairs) + "}"

    leaves = _NUMBERS | _STRINGS | st.sampled_from(["true", "false", "null"])
    values = st.recursive(
        leaves,
        lambda inner: (
            st.builds(array, st.lists(inner, max_size=3))
            | st.builds(obj, st.lists(st.tuples(_STRINGS, inner, _SPACE), max_size=3))
        ),
        max_leaves=8,
    )
    pairs = st.lists(st.tuples(_STRINGS | st.just('"k"'), values, _SPACE), max_size=4)
    return st.builds(lambda before, body, after: before + obj(body) + after, _SPACE, pairs, _SPACE)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=st.lists(_json_texts(), min_size=1, max_size=4))
@example(
    batch=['{"a":-0.0,"a":1e400,"b":' + "9" * 300 + ',"c":"\\u0000"}', ' { "z" : 1 , "a" : 2 }\r']
)
@example(batch=['{"a":"\\ud800"}', '{"a":"x\x00y"}'])
def test_any_written_line_comes_back_as_written_or_is_refused_whole(
    dsn: str, batch: list[str]
) -> None:
    """A batch of lines as anything may write them comes back byte for byte and value for
    value, or, when the core's rule refuses one, fails naming it with nothing stored."""
    refused = []
    for number, text in enumerate(batch, 1):
        try:
            check_line(text, "line")
        except SessionError:
            refused.append(number)
    store = PostgresSessionStore(dsn)
    lease = store.lease("written")
    try:
        if lease.load().seq == 0:  # appends after a first line, as a turn's do
            lease.append(['{"first":1}'], expected_seq=0)
        before = lease.load()
        if refused:
            with pytest.raises(
                SessionError, match=rf"^session 'written', line {before.seq + refused[0]}: "
            ):
                lease.append(batch, expected_seq=before.seq)
            assert lease.load().lines == before.lines
        else:
            assert lease.append(batch, expected_seq=before.seq) == before.seq + len(batch)
            loaded = lease.load()
            assert loaded.lines == [*before.lines, *batch]
            assert loaded.records[before.seq :] == [check_line(text, "line") for text in batch]
    finally:
        lease.release()
        store.close()


@pytest.mark.parametrize("wait", [30 * 86400.0, 1e300, float("inf")])
def test_lease_wait_longer_than_lock_timeout_takes_a_free_session(dsn: str, wait: float) -> None:
    """A lease_wait past PostgreSQL's longest lock_timeout still leases a free session."""
    store = PostgresSessionStore(dsn)
    try:
        lease = store.lease("long", wait=wait)
        assert lease.append(['{"role":"user","content":"hi"}'], expected_seq=0) == 1
        lease.release()
    finally:
        store.close()


def test_server_statement_timeout_does_not_cut_the_lease_wait(dsn: str) -> None:
    """A busy session waits out lease_wait despite a short statement_timeout, naming the holder."""
    database = dsn.rsplit("/", 1)[1]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {database} SET statement_timeout = '200ms'")
        conn.execute(f"ALTER DATABASE {database} SET lock_timeout = '7s'")
    holder, waiter = PostgresSessionStore(dsn), PostgresSessionStore(dsn, pool_size=1)
    try:
        held = holder.lease("busy")
        started = time.monotonic()
        with pytest.raises(
            SessionLockedError, match=r"in use by another worker \(.*after waiting 1s"
        ):
            waiter.lease("busy", wait=1.0)
        assert time.monotonic() - started >= 0.9
        # The connection went back to the pool with the server's settings.
        assert waiter.run("SHOW statement_timeout") == [("200ms",)]
        assert waiter.run("SHOW lock_timeout") == [("7s",)]
        held.release()
        waiter.lease("busy", wait=1.0).release()
        assert waiter.run("SHOW lock_timeout") == [("7s",)]
    finally:
        holder.close()
        waiter.close()


class _WriterAfterEachStatement:
    """A pooled connection after each of whose statements another worker appends a line."""

    def __init__(self, conn: psycopg.Connection[Any], append: Any) -> None:
        self.conn = conn
        self._append = append

    def execute(self, *args: Any, **kwargs: Any) -> psycopg.Cursor[Any]:
        cursor = self.conn.execute(*args, **kwargs)  # its rows are all fetched by now
        self._append()
        return cursor


def test_a_session_read_while_another_worker_appends_is_one_consistent_read(dsn: str) -> None:
    """`load` sees the line count and the lines of one moment, however many statements it
    takes: a worker appending between any two of them cannot make the count disagree."""
    reader, writer = PostgresSessionStore(dsn), PostgresSessionStore(dsn)
    line = '{"role":"user","content":"hi"}'
    lease = writer.lease("busy")
    stored = lease.append([line, line], expected_seq=0)

    def append() -> None:
        nonlocal stored
        stored = lease.append([line], expected_seq=stored)

    original_connection, original_put = reader._connection, reader._put
    reader._connection = lambda session=None: _WriterAfterEachStatement(  # type: ignore[method-assign]
        original_connection(session), append
    )
    reader._put = lambda conn: original_put(conn.conn)  # type: ignore[method-assign]
    try:
        loaded = reader.load("busy")
        assert loaded.seq == len(loaded.lines) == len(loaded.records)
        assert loaded.seq in range(2, stored)  # read before the last append, after the first
        assert loaded.lines == [line] * loaded.seq and loaded.problems == []
    finally:
        lease.release()
        reader.close()
        writer.close()


def test_pool_held_by_this_process_leases_is_named_not_the_database(dsn: str) -> None:
    """With every pooled connection leased, a lease says so, not that the database is gone."""
    store = PostgresSessionStore(dsn, pool_size=1, connect_timeout=1.0)
    try:
        held = store.lease("a")
        with pytest.raises(SessionLockedError, match=r"session 'a' is in use by another lease of"):
            store.lease("a")
        with pytest.raises(
            SessionError, match=r"leases on 'a' hold every connection .*pool_size 1"
        ):
            store.lease("b")
        held.release()
        held.release()
        store.lease("b").release()
    finally:
        store.close()


_CLOSED = (
    "consuming input failed: server closed the connection unexpectedly\n"
    "\tThis probably means the server terminated abnormally\n"
    "\tbefore or while processing the request.\n"
)


def test_a_server_that_dies_mid_turn_is_one_error_line() -> None:
    """libpq's message over three lines (a server crashed) is one line of the store's error."""
    store = PostgresSessionStore("postgresql://nanobot@127.0.0.1:5432/db")
    error = store.error("cannot append to session 's'", psycopg.OperationalError(_CLOSED))
    assert str(error) == (
        "cannot append to session 's' (postgresql://nanobot@127.0.0.1:5432/db): consuming "
        "input failed: server closed the connection unexpectedly. This probably means the "
        "server terminated abnormally before or while processing the request."
    )


# Characters no line shown may hold raw: C0, DEL, C1, the line and paragraph separators,
# Unicode's bidirectional formatting characters and lone surrogates.
_UNSHOWN = frozenset(
    chr(c)
    for c in (
        *range(0x20),
        *range(0x7F, 0xA0),
        0x061C,
        0x200E,
        0x200F,
        0x2028,
        0x2029,
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
        *range(0xD800, 0xE000),
    )
)
# Line breaks as libpq's lines are split (blanks at a line's ends are dropped).
_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"


@given(st.text(st.characters(exclude_characters=_UNSHOWN - set(_BREAKS))))
@example(_CLOSED)
@example("refused\r\n\tIs the server running?\x85\u2028x")
def test_any_driver_message_is_one_line_with_every_word(text: str) -> None:
    """Whatever the driver says over lines, the error is one line holding its words in order."""
    store = PostgresSessionStore("postgresql://nanobot@127.0.0.1:5432/db")
    error = str(store.error("what", RuntimeError(text)))
    assert len(error.splitlines()) == 1
    detail = error.split("): ", 1)[1].split()
    said = text.split()
    assert len(detail) == len(said)
    # A full stop is all that is added, where a line that begins a sentence followed.
    assert all(shown in (word, word + ".") for shown, word in zip(detail, said, strict=True))


@given(st.text())
@example("a\x1b]52;c;Zm9v\x07\u202eb\r\nc\td\x00e\udc80")
def test_any_driver_message_is_one_printable_line(text: str) -> None:
    """Whatever characters the driver's words hold, the error holds none that is not shown:
    a control, bidirectional or line-breaking character is escaped or joins two lines."""
    store = PostgresSessionStore("postgresql://nanobot@127.0.0.1:5432/db")
    error = str(store.error("what", RuntimeError(text)))
    assert not _UNSHOWN & set(error)
    assert error.startswith("what (postgresql://nanobot@127.0.0.1:5432/db): ")


def test_a_driver_message_shows_a_control_character_escaped_once() -> None:
    """An escape, a bell and a right-to-left override in the driver's words show as Python
    writes them in a string, and a backslash written by the server is left as it is."""
    store = PostgresSessionStore("postgresql://nanobot@127.0.0.1:5432/db")
    error = store.error("what", RuntimeError('role "x\x1b[2J\x07\u202ey\\n" does not exist'))
    assert str(error) == (
        "what (postgresql://nanobot@127.0.0.1:5432/db): role "
        '"x\\x1b[2J\\x07\\u202ey\\n" does not exist'
    )
