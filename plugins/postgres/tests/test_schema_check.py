"""Tables altered by hand at the current schema version: refused at open, named, left alone."""

from __future__ import annotations

from typing import Any

import psycopg
import psycopg.conninfo
import pytest
from nanobot_core import SessionError
from nanobot_core.sessions import open_session

from nanobot_postgres.migrations import SCHEMA_VERSION, apply_migrations, check_tables
from nanobot_postgres.store import PostgresSessionStore

_LINES = "nanobot_session_lines"
_SESSIONS = "nanobot_sessions"
_RESULTS = "nanobot_results"
_TRIGGER = "nanobot_lines_append_only"
_TRIGGER_DOES = "BEFORE UPDATE FOR EACH ROW, refusing a rewrite of a row"
_FOREIGN_KEY = f"FOREIGN KEY (session) REFERENCES {_SESSIONS}(name)"


def _columns(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """Every column of the plugin's tables with its type, NOT NULL and default, and the keys;
    then every constraint, index and trigger of them, and the trigger function's body."""
    return (
        _table_columns(conn)
        + conn.execute(
            """SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid)
        FROM pg_constraint c WHERE c.conrelid::regclass::text LIKE 'nanobot%%'
        UNION ALL
        SELECT i.indrelid::regclass::text, i.indexrelid::regclass::text,
            pg_get_indexdef(i.indexrelid)
        FROM pg_index i WHERE i.indrelid::regclass::text LIKE 'nanobot%%'
        UNION ALL
        SELECT g.tgrelid::regclass::text, g.tgname, pg_get_triggerdef(g.oid) || g.tgenabled::text
        FROM pg_trigger g WHERE NOT g.tgisinternal
        UNION ALL
        SELECT p.proname, p.prosrc, '' FROM pg_proc p WHERE p.proname LIKE 'nanobot%%'
        ORDER BY 1, 2"""
        ).fetchall()
    )


def _table_columns(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """Every column of the plugin's tables with its type, NOT NULL and default, and the keys."""
    return conn.execute(
        """SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
            pg_get_expr(d.adbin, d.adrelid),
            (SELECT pg_get_constraintdef(k.oid) FROM pg_constraint k
             WHERE k.conrelid = c.oid AND k.contype = 'p')
        FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
        LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
        WHERE c.relname LIKE 'nanobot%%' AND c.relkind = 'r' AND a.attnum > 0
          AND NOT a.attisdropped
        ORDER BY 1, a.attnum"""
    ).fetchall()


@pytest.mark.parametrize(
    ("alteration", "said"),
    [
        (
            f"ALTER TABLE {_LINES} DROP COLUMN written_at",
            f"the table {_LINES} has no column written_at (timestamp with time zone)",
        ),
        (
            f"ALTER TABLE {_SESSIONS} RENAME COLUMN messages TO msgs",
            f"the table {_SESSIONS} has no column messages (bigint); has column msgs",
        ),
        (
            f'ALTER TABLE {_SESSIONS} RENAME COLUMN messages TO "m\x1b[2J\nsgs"',
            f"the table {_SESSIONS} has no column messages (bigint); has column 'm\\x1b[2J\\nsgs'",
        ),
        (
            f"ALTER TABLE {_SESSIONS} ALTER COLUMN lines TYPE integer",
            f"the table {_SESSIONS} has column lines of type integer, not bigint",
        ),
        (
            f"ALTER TABLE {_LINES} ALTER COLUMN line TYPE varchar(10)",
            f"the table {_LINES} has column line of type character varying(10), not text",
        ),
        (
            f"ALTER TABLE {_LINES} ALTER COLUMN line DROP NOT NULL",
            f"the table {_LINES} has column line nullable, not NOT NULL",
        ),
        (
            f"ALTER TABLE {_RESULTS} ALTER COLUMN data SET NOT NULL",
            f"the table {_RESULTS} has column data NOT NULL, not nullable",
        ),
        (
            f"ALTER TABLE {_SESSIONS} ALTER COLUMN lines SET DEFAULT 5",
            f"the table {_SESSIONS} has column lines of default 5, not default 0",
        ),
        (
            f"ALTER TABLE {_SESSIONS} ALTER COLUMN lines DROP DEFAULT",
            f"the table {_SESSIONS} has column lines without a default, not default 0",
        ),
        (
            f"ALTER TABLE {_LINES} DROP CONSTRAINT {_LINES}_pkey",
            f"the table {_LINES} has primary key none, not (session, seq)",
        ),
        (
            f"ALTER TABLE {_LINES} DROP CONSTRAINT {_LINES}_pkey, ADD PRIMARY KEY (seq, session)",
            f"the table {_LINES} has primary key (seq, session), not (session, seq)",
        ),
        (
            f"ALTER TABLE {_RESULTS} ADD COLUMN owner text NOT NULL",
            f"the table {_RESULTS} has a column owner NOT NULL without a default, which the "
            "store's inserts leave out",
        ),
        (f"DROP TABLE {_RESULTS}", f"the table {_RESULTS} is missing"),
        (
            f"DROP TRIGGER {_TRIGGER} ON {_LINES}",
            f"the table {_LINES} has no trigger {_TRIGGER} ({_TRIGGER_DOES})",
        ),
        (
            f"ALTER TABLE {_LINES} DISABLE TRIGGER {_TRIGGER}",
            f"the table {_LINES} has trigger {_TRIGGER} ({_TRIGGER_DOES}) disabled",
        ),
        (
            f"ALTER TABLE {_LINES} ENABLE REPLICA TRIGGER {_TRIGGER}",
            f"the table {_LINES} has trigger {_TRIGGER} ({_TRIGGER_DOES}) disabled",
        ),
        (
            f"DROP TRIGGER {_TRIGGER} ON {_LINES}; CREATE TRIGGER {_TRIGGER} AFTER UPDATE "
            f"ON {_LINES} FOR EACH STATEMENT EXECUTE FUNCTION {_TRIGGER}()",
            f"the table {_LINES} has trigger {_TRIGGER} ({_TRIGGER_DOES}) firing otherwise",
        ),
        (
            f"CREATE OR REPLACE FUNCTION {_TRIGGER}() RETURNS trigger LANGUAGE plpgsql "
            "AS $$ BEGIN RETURN NEW; END $$",
            f"the table {_LINES} has trigger {_TRIGGER} ({_TRIGGER_DOES}) running "
            f"{_TRIGGER}() of another body",
        ),
        (
            f"DROP FUNCTION {_TRIGGER}() CASCADE",
            f"the table {_LINES} has no trigger {_TRIGGER} ({_TRIGGER_DOES})",
        ),
        (
            f"ALTER TABLE {_LINES} DROP CONSTRAINT {_LINES}_session_fkey",
            f"the table {_LINES} has no foreign key {_FOREIGN_KEY}",
        ),
        (
            f"ALTER TABLE {_LINES} DROP CONSTRAINT {_LINES}_session_fkey, ADD FOREIGN KEY "
            f"(session) REFERENCES {_SESSIONS} (name) ON DELETE CASCADE",
            f"the table {_LINES} has no foreign key {_FOREIGN_KEY}; has foreign key "
            f"{_LINES}_session_fkey {_FOREIGN_KEY} ON DELETE CASCADE",
        ),
        (
            f"ALTER TABLE {_RESULTS} DROP CONSTRAINT {_RESULTS}_sha256_check",
            f"the table {_RESULTS} has no check constraint CHECK ((sha256 ~ "
            "'^[0-9a-f]{64}$'::text))",
        ),
        (
            f"ALTER TABLE {_RESULTS} DROP CONSTRAINT {_RESULTS}_one_body, ADD CONSTRAINT "
            f"{_RESULTS}_one_body CHECK (content IS NULL OR data IS NULL) NOT VALID",
            f"the table {_RESULTS} has no check constraint CHECK (((content IS NULL) <> "
            f"(data IS NULL))); has check constraint {_RESULTS}_one_body CHECK (((content IS "
            "NULL) OR (data IS NULL))) NOT VALID",
        ),
    ],
)
def test_a_table_altered_by_hand_is_refused_at_open_naming_what_differs(
    dsn: str, alteration: str, said: str
) -> None:
    """A table the current schema version made, altered since, is refused at the first call,
    naming the table and the difference, and nothing of the database is changed."""
    PostgresSessionStore(dsn).close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        apply_migrations(conn)
        conn.execute(alteration)
        before = _columns(conn)
    store = PostgresSessionStore(dsn)
    with pytest.raises(SessionError) as refused:
        store.list_sessions()
    store.close()
    assert str(refused.value).startswith("cannot use the session database (postgresql://")
    assert f"): {said} (schema version {SCHEMA_VERSION} as nanobot-postgres made it); " in str(
        refused.value
    )
    assert str(refused.value).endswith(
        "nothing was changed: restore the table as it was made, or give the plugin a new "
        "database and import the sessions into it"
    )
    assert "\n" not in str(refused.value) and "\x1b" not in str(refused.value)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert _columns(conn) == before


def test_every_difference_of_every_table_is_named_in_one_refusal(dsn: str) -> None:
    """Two tables altered are both named, each with all its differences."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        apply_migrations(conn)
        conn.execute(f"ALTER TABLE {_SESSIONS} DROP COLUMN bytes")
        conn.execute(f"ALTER TABLE {_SESSIONS} ALTER COLUMN updated_at TYPE timestamp")
        conn.execute(f"ALTER TABLE {_LINES} DROP CONSTRAINT {_LINES}_pkey")
        conn.execute(f"ALTER TABLE {_LINES} DROP CONSTRAINT {_LINES}_session_fkey")
        conn.execute(f"ALTER TABLE {_LINES} DISABLE TRIGGER {_TRIGGER}")
        with pytest.raises(RuntimeError) as refused:
            check_tables(conn)
    assert str(refused.value).startswith(
        f"the table {_SESSIONS} has no column bytes (bigint); has column updated_at of type "
        f"timestamp without time zone, not timestamp with time zone; the table {_LINES} has "
        f"primary key none, not (session, seq); has no foreign key {_FOREIGN_KEY}; has "
        f"trigger {_TRIGGER} ({_TRIGGER_DOES}) disabled (schema version"
    )


def test_an_upgrade_onto_an_altered_table_is_undone(dsn: str) -> None:
    """A database at version 1 whose lines table was altered is refused after the upgrade ran,
    in its transaction: it stays at version 1, the upgrade's column not added."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert apply_migrations(conn, target=1) == [1]
        conn.execute(f"ALTER TABLE {_LINES} ALTER COLUMN seq TYPE integer")
    with pytest.raises(SessionError, match="has column seq of type integer, not bigint"):
        PostgresSessionStore(dsn).list_sessions()
    with psycopg.connect(dsn, autocommit=True) as conn:
        versions = conn.execute("SELECT version FROM nanobot_schema_migrations").fetchall()
        assert versions == [(1,)]
        assert [c[1] for c in _table_columns(conn) if c[0] == _RESULTS] == [
            "sha256",
            "content",
            "bytes",
            "created_at",
        ]


def test_a_column_added_that_no_insert_minds_is_let_be(dsn: str) -> None:
    """A nullable column, or one with a default, added by hand leaves the store working."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        apply_migrations(conn)
        conn.execute(f"ALTER TABLE {_SESSIONS} ADD COLUMN team text")
        conn.execute(f"ALTER TABLE {_LINES} ADD COLUMN origin text NOT NULL DEFAULT 'here'")
    store = PostgresSessionStore(dsn)
    with open_session(store, "s") as session:
        session.append({"role": "user", "content": "kept"})
    assert store.load("s").lines == ['{"role":"user","content":"kept"}']
    store.close()


class _Counting:
    """A connection that counts the statements sent through it."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.statements = 0

    def execute(self, *args: Any) -> Any:
        self.statements += 1
        return self.conn.execute(*args)


def test_the_check_is_one_statement(dsn: str) -> None:
    """Checking the three tables takes one round trip to the server, whatever they hold:
    as made (an index added), and with a trigger and a constraint dropped, refused."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        apply_migrations(conn)
        conn.execute(f"CREATE INDEX ON {_RESULTS} (created_at)")
        counting = _Counting(conn)
        check_tables(counting)
        assert counting.statements == 1
        conn.execute(f"DROP TRIGGER {_TRIGGER} ON {_LINES}")
        conn.execute(f"ALTER TABLE {_RESULTS} DROP CONSTRAINT {_RESULTS}_one_body")
        counting = _Counting(conn)
        with pytest.raises(RuntimeError, match=f"has no trigger {_TRIGGER} .*; the table "):
            check_tables(counting)
        assert counting.statements == 1


def test_an_index_constraint_or_trigger_added_by_hand_is_let_be(dsn: str) -> None:
    """An index, a check constraint and a trigger added beside the plugin's leave the store
    working: only what the store relies on is checked."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        apply_migrations(conn)
        conn.execute(f"CREATE INDEX nanobot_lines_by_time ON {_LINES} (written_at)")
        conn.execute(f"ALTER TABLE {_SESSIONS} ADD CONSTRAINT short CHECK (length(name) < 999)")
        conn.execute(
            f"CREATE TRIGGER audit AFTER INSERT ON {_LINES} FOR EACH ROW "
            f"EXECUTE FUNCTION {_TRIGGER}()"
        )
        conn.execute(f"ALTER TABLE {_LINES} DISABLE TRIGGER audit")
    store = PostgresSessionStore(dsn)
    with open_session(store, "s") as session:
        session.append({"role": "user", "content": "kept"})
    assert store.load("s").lines == ['{"role":"user","content":"kept"}']
    store.close()


def test_with_the_trigger_as_made_a_line_cannot_be_rewritten(dsn: str) -> None:
    """The trigger the check asks for is what refuses an update of a line written."""
    store = PostgresSessionStore(dsn)
    with open_session(store, "s") as session:
        session.append({"role": "user", "content": "kept"})
    store.close()
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        pytest.raises(psycopg.errors.RaiseException, match="is append-only"),
    ):
        conn.execute(f"UPDATE {_LINES} SET line = '{{}}'")


_REPLICA_HARM = (
    f"session_replication_role is replica, set {{where}}: under it the append-only trigger of "
    f"{_LINES} and its foreign key do not fire, so a line rewritten or a line of no session "
    "would be stored without a word; nothing was changed: {undo}"
)


@pytest.mark.parametrize(
    ("setting", "where", "undo"),
    [
        (
            "ALTER DATABASE {database} SET session_replication_role = replica",
            "for the database {database} (ALTER DATABASE ... SET)",
            "ALTER DATABASE {database} RESET session_replication_role",
        ),
        (
            "ALTER ROLE nanobot IN DATABASE {database} SET session_replication_role = replica",
            "for the role nanobot in the database {database} (ALTER ROLE ... IN DATABASE ... SET)",
            "ALTER ROLE nanobot IN DATABASE {database} RESET session_replication_role",
        ),
        (
            "",
            "by the connection (the dsn's options, or PGOPTIONS)",
            "remove -c session_replication_role=replica there",
        ),
    ],
)
def test_a_replica_session_replication_role_is_refused_at_open_naming_where_it_was_set(
    dsn: str, setting: str, where: str, undo: str
) -> None:
    """With session_replication_role = replica set for the database, the role or the
    connection, the trigger and foreign key would not fire: the store refuses it at open,
    saying where it was set and how to undo it, and creates nothing."""
    database = str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])
    names = {"database": database}  # test_<pid>_<n>: quote_ident leaves it bare
    with psycopg.connect(dsn, autocommit=True) as conn:
        if setting:
            conn.execute(setting.format(**names))
        else:
            dsn = psycopg.conninfo.make_conninfo(dsn, options="-c session_replication_role=replica")
    store = PostgresSessionStore(dsn)
    with pytest.raises(SessionError) as refused:
        store.list_sessions()
    store.close()
    said = _REPLICA_HARM.format(where=where.format(**names), undo=undo.format(**names))
    assert str(refused.value).startswith("cannot use the session database (postgresql://")
    assert str(refused.value).endswith(f"): {said}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SHOW session_replication_role").fetchone() == ("replica",)
        assert conn.execute("SELECT to_regclass(%s)", (_LINES,)).fetchone() == (None,)


def test_a_replica_role_is_named_beside_an_altered_table(dsn: str) -> None:
    """A table altered and a replica setting are both named in one refusal."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        apply_migrations(conn)
        conn.execute(f"ALTER TABLE {_LINES} DISABLE TRIGGER {_TRIGGER}")
    replica = psycopg.conninfo.make_conninfo(dsn, options="-c session_replication_role=replica")
    with psycopg.connect(replica, autocommit=True) as conn, pytest.raises(RuntimeError) as refused:
        check_tables(conn)
    assert f"has trigger {_TRIGGER} ({_TRIGGER_DOES}) disabled (schema version" in str(
        refused.value
    )
    assert str(refused.value).endswith(
        "import the sessions into it; and session_replication_role is replica, set by the "
        "connection (the dsn's options, or PGOPTIONS): under it the append-only trigger of "
        f"{_LINES} and its foreign key do not fire, so a line rewritten or a line of no session "
        "would be stored without a word; nothing was changed: remove "
        "-c session_replication_role=replica there"
    )


@pytest.mark.parametrize("role", ["origin", "local"])
def test_origin_and_local_leave_the_store_working_and_the_trigger_firing(
    dsn: str, role: str
) -> None:
    """Under origin (the default) and local the trigger fires, so the store opens and a line
    written cannot be rewritten."""
    guarded = psycopg.conninfo.make_conninfo(dsn, options=f"-c session_replication_role={role}")
    store = PostgresSessionStore(guarded)
    with open_session(store, "s") as session:
        session.append({"role": "user", "content": "kept"})
    store.close()
    with (
        psycopg.connect(guarded, autocommit=True) as conn,
        pytest.raises(psycopg.errors.RaiseException, match="is append-only"),
    ):
        conn.execute(f"UPDATE {_LINES} SET line = '{{}}'")


def test_a_role_set_to_replica_is_refused_and_could_not_set_it_back_itself(dsn: str) -> None:
    """A store role (not a superuser) given replica by ALTER ROLE ... SET is refused, naming
    the role; that role may not set origin on its connections, which is why the store refuses
    rather than undoing the setting."""
    database = str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])
    role = f"{database}_store"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'store-pw'")
        conn.execute(f"GRANT ALL ON DATABASE {database} TO {role}")
        conn.execute(f"GRANT ALL ON SCHEMA public TO {role}")
        conn.execute(f"ALTER ROLE {role} SET session_replication_role = replica")
    as_role = psycopg.conninfo.make_conninfo(dsn, user=role, password="store-pw")
    store = PostgresSessionStore(as_role)
    with pytest.raises(SessionError) as refused:
        store.list_sessions()
    store.close()
    said = _REPLICA_HARM.format(
        where=f"for the role {role} (ALTER ROLE ... SET)",
        undo=f"ALTER ROLE {role} RESET session_replication_role",
    )
    assert str(refused.value).endswith(f"): {said}")
    with (
        psycopg.connect(as_role, autocommit=True) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("SET session_replication_role = origin")
