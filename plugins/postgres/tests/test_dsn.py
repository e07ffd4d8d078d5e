"""Connection strings in reprs and messages: the password never shows, however it is written."""

from __future__ import annotations

import json
import re
import string
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st
from nanobot_core import SessionError
from nanobot_core.testing import make_config, run_cli, run_cli_in_terminal
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from nanobot_postgres.dsn import describe_dsn, scrub
from nanobot_postgres.store import PostgresSessionStore
from nanobot_postgres.testserver import TemporaryPostgres

# What the descriptions and libpq's messages say whatever the password (a word of it found
# here proves nothing).
_FIXED = (
    "postgresql://nanobot@127.0.0.1:5432/nanobot (unparseable dsn, misread) "
    "percent-encode '@', '/', '?', '#' and '%' in its password *** "
    'failed to resolve host; missing "=" after; invalid connection option; '
    "unterminated quoted string in connection info string"
)


def _libpq_says(dsn: str) -> list[str]:
    """What libpq may echo of `dsn`: its parse error, else every value it read from it."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(dsn)
    except Exception as exc:
        return [str(exc)]
    return [f"failed to resolve host '{v}'" for k, v in parts.items() if k != "password"]


@given(st.text(alphabet=string.ascii_letters + string.digits + string.punctuation, min_size=6))
@example("X50%offQ")
@example('"000?%')
@example("Xpa@ssQ")
@example("Xpa/ssQ")
def test_a_password_written_raw_into_a_url_never_shows(password: str) -> None:
    """An unencoded URL password shows neither in the description nor in what libpq says."""
    assume(password not in _FIXED)
    dsn = f"postgresql://nanobot:{password}@127.0.0.1:5432/nanobot"
    assert password not in describe_dsn(dsn)
    for said in _libpq_says(dsn):
        assert password not in scrub(said, dsn)


@given(st.text(alphabet=string.ascii_letters + string.digits + " '=\\", min_size=6))
@example("Xmy secretQ")
def test_a_key_value_password_never_shows(password: str) -> None:
    """No word of a password in a key=value DSN, quoted or not, shows in libpq's words."""
    dsn = f"host=127.0.0.1 port=5432 user=nanobot password={password} dbname=nanobot"
    words = [w for w in re.split(r"[\s'=\\]+", password) if len(w) >= 4]
    assume(words and not any(w in _FIXED or w in dsn.replace(password, "") for w in words))
    shown = [describe_dsn(dsn)] + [scrub(said, dsn) for said in _libpq_says(dsn)]
    assert not [w for w in words if any(w in text for text in shown)]


def test_a_well_written_dsn_is_described_in_full() -> None:
    """A percent-encoded password is read as meant, and the description names the server."""
    dsn = "postgresql://nanobot:p%40ss%2Fw%3Frd@db.internal:6432/sessions"
    assert describe_dsn(dsn) == "postgresql://nanobot@db.internal:6432/sessions"
    assert scrub("auth failed for p@ss/w?rd", dsn) == "auth failed for ***"


# Names as a DSN may hold them: any character but NUL (which libpq cuts at) and a lone
# surrogate (not UTF-8: no DSN holding one parses).
_NAMES = st.text(
    st.characters(codec="utf-8", exclude_characters="\x00"),
    min_size=1,
    max_size=20,
)


@given(user=_NAMES, database=_NAMES)
@example("na bot'x\\", "my db'\"x")
@example("a\nb", "x\x1b[31my")
@example("a@b:c/d", "db?x#y%z")
@example("a\u202eb", "d\u2066b")
def test_the_description_names_any_user_and_database_on_one_printable_line(
    user: str, database: str
) -> None:
    """Whatever the user and database names hold, the description is one printable line, a
    URL that libpq reads back as those names: none is shown raw (a control character drove
    the terminal, a line break cut the error, an '@' or '/' made another name of it)."""
    password = "Xsecret-password-Q"
    assume(password not in user + database)
    dsn = make_conninfo(
        host="db.internal", port=6432, user=user, dbname=database, password=password
    )
    described = describe_dsn(dsn)
    assert described.isprintable()
    parts = conninfo_to_dict(described)
    assert (parts["user"], parts["dbname"], parts["host"], parts["port"]) == (
        user,
        database,
        "db.internal",
        "6432",
    )


@pytest.mark.parametrize(
    ("user", "database", "described"),
    [
        ("samepw", "samepw", "postgresql://***@db.internal:6432/***"),
        ("samepw", "sessions", "postgresql://***@db.internal:6432/sessions"),
        ("nanobot", "samepw", "postgresql://nanobot@db.internal:6432/***"),
        ("samepw-admin", "sessions", "postgresql://***-admin@db.internal:6432/sessions"),
    ],
)
def test_a_name_that_holds_the_password_is_masked_as_the_password_is(
    user: str, database: str, described: str
) -> None:
    """A user or database name holding the password is masked in the description as every
    message masks the password: shown, it was the password (and next to a message saying
    ``user "***"`` it said so)."""
    dsn = make_conninfo(
        host="db.internal", port=6432, user=user, dbname=database, password="samepw"
    )
    assert describe_dsn(dsn) == described


def _role(server: TemporaryPostgres, name: str, password: str) -> None:
    """A role that logs in with `password`, whatever its name."""
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(name), sql.Literal(password)
            )
        )


def test_a_user_and_database_named_with_spaces_and_quotes_work_and_are_named_right(
    postgres_server: TemporaryPostgres,
) -> None:
    """A real role and database whose names hold a space, quotes and a backslash serve
    sessions through a key=value DSN and a URL alike, and the description names them as a
    URL libpq reads back as the same names."""
    user, database, password = "na bot'x\\", "my db'\"x", "p w'd\\"
    _role(postgres_server, user, password)
    postgres_server.create_database(database, owner=user)
    port = postgres_server.port
    for dsn in (
        make_conninfo(host="127.0.0.1", port=port, user=user, dbname=database, password=password),
        f"postgresql://{quote(user, safe='')}:{quote(password, safe='')}@127.0.0.1:{port}/"
        f"{quote(database, safe='')}",
    ):
        store = PostgresSessionStore(dsn)
        assert store.describe() == f"postgresql://na%20bot'x%5C@127.0.0.1:{port}/my%20db'%22x"
        lease = store.lease("s")
        try:
            seq = lease.load().seq
            assert lease.append(['{"n":1}'], expected_seq=seq) == seq + 1
        finally:
            lease.release()
        store.close()
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT current_user, current_database()").fetchone() == (
                user,
                database,
            )
    assert PostgresSessionStore(dsn).load("s").lines == ['{"n":1}', '{"n":1}']


def test_an_error_naming_a_user_with_control_characters_keeps_them_escaped(
    postgres_server: TemporaryPostgres,
) -> None:
    """A connection error for a user and database whose names hold a line break and an escape
    is one line, the description naming them percent-encoded, not raw."""
    dsn = make_conninfo(
        host="127.0.0.1", port=postgres_server.port, user="a\nb", dbname="x\x1b[31my", password="pw"
    )
    store = PostgresSessionStore(dsn, connect_timeout=5)
    with pytest.raises(SessionError) as refused:
        store.list_sessions()
    said = str(refused.value)
    described = f"postgresql://a%0Ab@127.0.0.1:{postgres_server.port}/x%1B%5B31my"
    assert said == (
        f"cannot use the session database ({described}): connection failed: connection to "
        f'server at "127.0.0.1", port {postgres_server.port} failed: FATAL:  password '
        'authentication failed for user "a\\nb"'
    )


# A role and a database whose names hold what drives a terminal: a colour, an OSC 52
# clipboard write, a right-to-left override and isolate, a line break.
_ROLE = "ops\x1b[31m\u202eadmin"
_DATABASE = "db\x1b]52;c;Zm9v\x07\u2066\nsessions"
_DATABASE_SHOWN = "db\\x1b]52;c;Zm9v\\x07\\u2066\\nsessions"


def _escaped_role_and_database(server: TemporaryPostgres, suffix: str) -> str:
    """A real role and database of such names (`suffix` after each, the server being the
    tests' one), and the DSN of a database of that role's that does not exist (named as the
    real one with ``-gone``)."""
    _role(server, _ROLE + suffix, "right-password")
    server.create_database(_DATABASE + suffix, owner=_ROLE + suffix)
    return make_conninfo(
        host="127.0.0.1",
        port=server.port,
        user=_ROLE + suffix,
        dbname=f"{_DATABASE}{suffix}-gone",
        password="right-password",
    )


def test_a_server_error_naming_a_role_and_database_of_control_characters_is_one_printable_line(
    postgres_server: TemporaryPostgres,
) -> None:
    """A real role and database whose names hold control and bidirectional characters serve
    sessions; a database of theirs that does not exist is refused in one printable line,
    libpq's words naming it escaped as the plugin's messages write a name, the description
    percent-encoded."""
    gone = _escaped_role_and_database(postgres_server, "1")
    store = PostgresSessionStore(gone.replace("-gone", ""), connect_timeout=5)
    assert store.list_sessions() == []
    store.close()
    with pytest.raises(SessionError) as refused:
        PostgresSessionStore(gone, connect_timeout=5).list_sessions()
    said = str(refused.value)
    assert said.isprintable()
    assert said == (
        f"cannot use the session database (postgresql://ops%1B%5B31m%E2%80%AEadmin1@127.0.0.1:"
        f"{postgres_server.port}/db%1B%5D52;c;Zm9v%07%E2%81%A6%0Asessions1-gone): "
        f'connection failed: connection to server at "127.0.0.1", port {postgres_server.port} '
        f'failed: FATAL:  database "{_DATABASE_SHOWN}1-gone" does not exist'
    )


def test_the_cli_prints_such_an_error_escaped_once_on_a_terminal_and_a_pipe(
    postgres_server: TemporaryPostgres, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`sessions` refused that database prints the same one line to a pipe and to a
    terminal: the plugin's escapes are not the CLI's (``\\x{1b}``), so nothing is escaped
    twice, and no raw control reaches either."""
    env = {**cli_env, "NANOBOT_POSTGRES_DSN": _escaped_role_and_database(postgres_server, "2")}
    piped = run_cli("sessions", cwd=tmp_path, env=env)
    shown = run_cli_in_terminal("sessions", cwd=tmp_path, env=env)
    assert piped.returncode == shown.returncode == 1
    assert shown.stderr.decode("utf-8") == piped.stderr
    assert piped.stderr.count("\n") == 1 and piped.stderr.rstrip("\n").isprintable()
    assert piped.stderr.endswith(
        f'FATAL:  database "{_DATABASE_SHOWN}2-gone" does not exist; the connection is as '
        "sessions.postgres.dsn sets it (environment variable NANOBOT_POSTGRES_DSN)\n"
    )
    assert (
        "\\x{" not in piped.stderr and "(postgresql://ops%1B%5B31m%E2%80%AEadmin2@" in piped.stderr
    )


def test_a_user_named_as_the_password_shows_in_no_error(
    postgres_server: TemporaryPostgres,
) -> None:
    """A real role whose name is its password, refused a database that does not exist and a
    wrong password, is named in neither error: the description and libpq's words mask it."""
    _role(postgres_server, "samepw", "samepw")
    base = f"postgresql://samepw:samepw@127.0.0.1:{postgres_server.port}"
    with pytest.raises(SessionError) as missing:
        PostgresSessionStore(f"{base}/samepw", connect_timeout=5).list_sessions()
    assert str(missing.value).startswith(
        f"cannot use the session database (postgresql://***@127.0.0.1:{postgres_server.port}/***)"
    )
    assert 'database "***" does not exist' in str(missing.value)
    assert "samepw" not in str(missing.value)


# Passwords of one to three characters: any a DSN may hold (not NUL, not a lone surrogate).
_SHORT_PASSWORDS = st.text(
    st.characters(codec="utf-8", exclude_characters="\x00"),
    min_size=1,
    max_size=3,
)
# What libpq says of a connection refused, naming the server, user and database.
_REFUSED = (
    'connection to server at "db.internal" (10.0.0.7), port 6432 failed: FATAL:  password '
    'authentication failed for user "analyst"; database "sessions_a" does not exist'
)


@given(password=_SHORT_PASSWORDS)
@example("a")
@example("s")
@example("1")
@example(".")
@example("ss")
def test_a_short_password_leaves_the_description_and_libpq_words_readable(password: str) -> None:
    """A password of one to three characters that is no whole word of the description or of
    libpq's message leaves both as they are: it is not masked inside other words."""
    separators = r"""[\s"'=,;:@/?#&()\[\]<>]+"""
    words = re.split(separators, _REFUSED + " db.internal 6432")
    assume(password not in words)
    # A password of separators alone (``,``) stands whole wherever it stands between others.
    assume(re.fullmatch(separators, password) is None)
    dsn = make_conninfo(
        host="db.internal", port=6432, user="analyst", dbname="sessions_a", password=password
    )
    assert describe_dsn(dsn) == "postgresql://analyst@db.internal:6432/sessions_a"
    assert scrub(_REFUSED, dsn) == _REFUSED


@given(password=_SHORT_PASSWORDS, name=st.sampled_from(["user", "dbname"]))
@example("a", "user")
@example('"', "dbname")
@example("a b", "user")
def test_a_short_password_never_shows_as_a_value(password: str, name: str) -> None:
    """A short password is masked wherever it stands as a value: a user or database named as
    it is, in the description and quoted in libpq's words, and after ``password=``."""
    names = {"user": "analyst", "dbname": "sessions", name: password}
    dsn = make_conninfo(host="db.internal", port=6432, password=password, **names)
    described = describe_dsn(dsn)
    said = scrub(
        f'password authentication failed for user "{password}" or database "{password}" '
        f"(password={password} user='{password}')",
        dsn,
    )
    assert "***" in described
    assert conninfo_to_dict(described)[name] == "***"
    for shown in (f'"{password}"', f"={password} ", f"'{password}'"):
        assert shown not in said
    assert said.startswith("password authentication failed for user ")


def test_a_short_password_leaves_a_real_refusal_readable(
    postgres_server: TemporaryPostgres,
) -> None:
    """A real role of password ``a`` refused for a wrong one: the description and libpq's
    words are shown whole, not with every ``a`` masked."""
    _role(postgres_server, "analyst", "right")
    dsn = make_conninfo(
        host="127.0.0.1", port=postgres_server.port, user="analyst", dbname="x", password="a"
    )
    with pytest.raises(SessionError) as refused:
        PostgresSessionStore(dsn, connect_timeout=5).list_sessions()
    assert str(refused.value) == (
        f"cannot use the session database (postgresql://analyst@127.0.0.1:"
        f"{postgres_server.port}/x): connection failed: connection to server at "
        f'"127.0.0.1", port {postgres_server.port} failed: FATAL:  password authentication '
        'failed for user "analyst"'
    )


_HOSTS = st.one_of(
    st.sampled_from(["db.internal", "10.0.0.7", "::1", "fe80::1%eth0", "/var/run/postgresql"]),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00,"), min_size=1).map(
        lambda name: "/" + name
    ),
)


@given(
    hosts=st.lists(_HOSTS, min_size=1, max_size=3),
    ports=st.lists(st.integers(1, 65535), min_size=1, max_size=3),
    database=_NAMES,
)
@example(["/var/run/postgresql"], [5432], "sessions")
@example(["::1", "/tmp"], [5432, 5433], "sessions")
def test_the_description_names_any_hosts_and_ports_as_libpq_reads_them(
    hosts: list[str], ports: list[int], database: str
) -> None:
    """Socket folders, IPv6 addresses and names, each with its port (or one port for all),
    are described as a URL libpq reads back as the same hosts, ports and database: a socket
    folder's slashes or an address's port are not read as the database."""
    ports = ports[:1] if len(ports) != len(hosts) else ports
    dsn = make_conninfo(
        host=",".join(hosts),
        port=",".join(map(str, ports)),
        user="nanobot",
        dbname=database,
        password="Xsecret-password-Q",
    )
    described = describe_dsn(dsn)
    assert described.isprintable()
    parts = conninfo_to_dict(described)
    each = [str(port) for port in ports] * (len(hosts) if len(ports) == 1 else 1)
    assert (parts["host"], parts["port"], parts["dbname"]) == (
        ",".join(hosts),
        ",".join(each),
        database,
    )


def test_a_socket_folder_as_the_host_serves_and_is_named_as_libpq_reads_it(
    postgres_server: TemporaryPostgres,
) -> None:
    """The server's socket folder as the host serves sessions, described percent-encoded;
    a folder with no server in it is refused naming the socket libpq tried."""
    assert postgres_server.root is not None
    folder = str(postgres_server.root)
    port = postgres_server.port
    password = postgres_server.password
    dsn = make_conninfo(host=folder, port=port, user="nanobot", password=password)
    store = PostgresSessionStore(dsn, connect_timeout=5)
    assert store.list_sessions() == []
    assert store.describe() == f"postgresql://nanobot@{quote(folder, safe='')}:{port}/nanobot"
    store.close()
    missing = make_conninfo(host=folder + "/gone", port=port, user="nanobot", password=password)
    with pytest.raises(SessionError) as refused:
        PostgresSessionStore(missing, connect_timeout=5).list_sessions()
    assert str(refused.value).startswith(
        f"cannot use the session database (postgresql://nanobot@"
        f"{quote(folder + '/gone', safe='')}:{port}/nanobot): connection is bad: connection to "
        f'server on socket "{folder}/gone/.s.PGSQL.{port}" failed: No such file or directory'
    )


def test_a_service_of_pg_service_conf_serves_and_is_named_not_taken_for_localhost(
    postgres_server: TemporaryPostgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DSN naming a service of pg_service.conf serves sessions from the server the file
    names, and is described by that service, not as ``localhost:5432``; a service the file
    does not hold is refused naming it."""
    services = tmp_path / "pg_service.conf"
    services.write_text(
        f"[sessions]\nhost=127.0.0.1\nport={postgres_server.port}\ndbname=nanobot\n"
        f"user=nanobot\npassword={postgres_server.password}\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    store = PostgresSessionStore("service=sessions", connect_timeout=5)
    assert store.list_sessions() == []
    assert store.describe() == "postgresql:///?service=sessions"
    store.close()
    store = PostgresSessionStore("service=sessions dbname=other user=me", connect_timeout=5)
    assert store.describe() == "postgresql://me@/other?service=sessions"
    with pytest.raises(SessionError) as refused:
        PostgresSessionStore("service=nosuch", connect_timeout=5).list_sessions()
    assert str(refused.value) == (
        "cannot use the session database (postgresql:///?service=nosuch): connection is bad: "
        'definition of service "nosuch" not found'
    )


@pytest.mark.parametrize("where", ["environment variable NANOBOT_POSTGRES_DSN", "nanobot.toml"])
def test_a_connection_the_dsn_settings_refuse_names_the_key_and_where_it_was_set(
    dsn: str, cli_env: dict[str, str], tmp_path: Path, where: str
) -> None:
    """``sslmode=require`` of a server without TLS, set in the environment or the file: the
    CLI's one error line says libpq's reason and which config key, set where, to change."""
    refused = make_conninfo(dsn, sslmode="require")
    env = dict(cli_env)
    if where == "nanobot.toml":
        del env["NANOBOT_POSTGRES_DSN"]
        (tmp_path / where).write_text(
            f"[sessions.postgres]\ndsn = {json.dumps(refused)}\n", encoding="utf-8"
        )
        where = str(tmp_path / where)
    else:
        env["NANOBOT_POSTGRES_DSN"] = refused
    done = run_cli("sessions", cwd=tmp_path, env=env)
    assert done.returncode == 1
    assert done.stderr.startswith("Error: cannot use the session database (postgresql://")
    assert done.stderr.endswith(
        "failed: server does not support SSL, but SSL was required; the connection is as "
        f"sessions.postgres.dsn sets it ({where})\n"
    )


def test_only_a_failed_connection_of_a_configured_store_names_the_dsn_key(dsn: str) -> None:
    """A store made from a configuration names the DSN's key when it cannot connect, not when
    it connected and found the schema altered; a store made in code names no key."""
    config = make_config({"sessions": {"store": "postgres"}})
    no_tls = make_conninfo(dsn, sslmode="require")
    with pytest.raises(SessionError) as refused:
        PostgresSessionStore(no_tls, connect_timeout=5, config=config).list_sessions()
    assert str(refused.value).endswith(
        "server does not support SSL, but SSL was required; the connection is as "
        "sessions.postgres.dsn sets it"
    )
    with pytest.raises(SessionError) as refused:
        PostgresSessionStore(no_tls, connect_timeout=5).list_sessions()
    assert str(refused.value).endswith("server does not support SSL, but SSL was required")
    PostgresSessionStore(dsn).list_sessions()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE nanobot_sessions DROP COLUMN bytes")
    with pytest.raises(SessionError) as refused:
        PostgresSessionStore(dsn, config=config).list_sessions()
    assert str(refused.value).endswith("import the sessions into it")


_LIBPQ_VARIABLES = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGUSER", "PGDATABASE", "PGSERVICE")


def test_the_parts_a_dsn_leaves_out_are_described_as_libpq_takes_them_from_the_environment(
    postgres_server: TemporaryPostgres, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DSN with only a password connects through PGHOST, PGPORT, PGUSER and PGDATABASE, and
    is described by them, not as ``localhost:5432``; a host the DSN gives still wins."""
    assert postgres_server.root is not None
    folder, port = str(postgres_server.root), postgres_server.port
    database = str(conninfo_to_dict(dsn)["dbname"])
    for name in _LIBPQ_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PGHOST", folder)
    monkeypatch.setenv("PGPORT", str(port))
    monkeypatch.setenv("PGUSER", "nanobot")
    monkeypatch.setenv("PGDATABASE", database)
    only_password = make_conninfo(password=postgres_server.password)
    store = PostgresSessionStore(only_password, connect_timeout=5)
    assert store.list_sessions() == []
    with psycopg.connect(only_password) as conn:  # where libpq goes, as the server says
        assert conn.execute("SELECT current_database(), current_user").fetchone() == (
            database,
            "nanobot",
        )
        assert conn.info.host == folder
    assert store.describe() == f"postgresql://nanobot@{quote(folder, safe='')}:{port}/{database}"
    store.close()
    over_tcp = make_conninfo(only_password, host="127.0.0.1")
    assert describe_dsn(over_tcp) == f"postgresql://nanobot@127.0.0.1:{port}/{database}"


def test_a_dsn_with_no_host_anywhere_is_described_with_libpq_default_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no host in the DSN or the environment, the description leaves the host empty, as
    libpq's URLs say its default socket, and libpq reads it back as the same parts."""
    for name in _LIBPQ_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PGUSER", "analyst")
    described = describe_dsn("dbname=sessions password=secret-pw")
    assert described == "postgresql://analyst@:5432/sessions"
    assert conninfo_to_dict(described) == {"user": "analyst", "port": "5432", "dbname": "sessions"}
    monkeypatch.setenv("PGPORT", "6543")
    assert describe_dsn("password=secret-pw") == "postgresql://analyst@:6543/analyst"


_ENV_NAME = st.text(
    st.characters(codec="utf-8", exclude_characters="\x00"),
    min_size=1,
    max_size=20,
)


@given(user=_ENV_NAME, database=_ENV_NAME, host=_ENV_NAME.filter(lambda h: "," not in h))
def test_any_user_database_and_host_from_the_environment_read_back_as_libpq_takes_them(
    user: str, database: str, host: str
) -> None:
    """Whatever PGUSER, PGDATABASE and PGHOST hold, the description is one printable line
    that libpq reads back as those same names."""
    assume(not any("pw-0123456789" in name for name in (user, database, host)))
    with pytest.MonkeyPatch.context() as env:
        for name in _LIBPQ_VARIABLES:
            env.delenv(name, raising=False)
        env.setenv("PGUSER", user)
        env.setenv("PGDATABASE", database)
        env.setenv("PGHOST", host)
        described = describe_dsn("password=pw-0123456789")
    assert described.isprintable()
    parts = conninfo_to_dict(described)
    assert (parts["user"], parts["dbname"], parts["port"]) == (user, database, "5432")
    assert parts["host"] == host
