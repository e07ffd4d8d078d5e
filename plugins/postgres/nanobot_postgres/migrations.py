"""The schema, as versioned migrations the store applies and records.

Each migration runs once. The ones a database lacks run in one transaction,
under a transaction-level advisory lock so that workers starting together do
not race: a failure leaves the database at the version it was. What ran is
recorded in ``nanobot_schema_migrations``. A database already at a newer
version than this plugin knows is refused, never downgraded; so is one whose
tables of these names are not the plugin's (a record table of other columns, or
the plugin's tables where no version is recorded), and nothing is changed. At
the current version the tables are checked against what it made (`check_tables`):
one altered by hand since is refused, naming the table and what differs, before
any statement relies on it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "apply_migrations", "check_tables"]

# Any fixed 64-bit number: the key of the lock migrations take.
_MIGRATION_LOCK = 0x6E62_6D69_6772_0001

# The body of the function behind the append-only trigger, as the server keeps it
# (`pg_proc.prosrc`, byte for byte): one that no longer refuses an update is found by it.
_APPEND_ONLY_BODY = """
                BEGIN
                    RAISE EXCEPTION 'nanobot_session_lines is append-only';
                END
            """

MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (
        1,
        "sessions, their lines, offloaded results",
        [
            """CREATE TABLE nanobot_sessions (
                name text PRIMARY KEY,
                lines bigint NOT NULL DEFAULT 0,
                messages bigint NOT NULL DEFAULT 0,
                bytes bigint NOT NULL DEFAULT 0,
                created_at timestamptz NOT NULL DEFAULT now(),
                updated_at timestamptz NOT NULL DEFAULT now()
            )""",
            # One row per line, holding the JSON text exactly as written (text, not jsonb,
            # which would reorder keys and respell numbers).
            """CREATE TABLE nanobot_session_lines (
                session text NOT NULL REFERENCES nanobot_sessions (name),
                seq bigint NOT NULL,
                line text NOT NULL,
                written_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (session, seq)
            )""",
            f"""CREATE FUNCTION nanobot_lines_append_only() RETURNS trigger
                LANGUAGE plpgsql AS $${_APPEND_ONLY_BODY}$$""",
            """CREATE TRIGGER nanobot_lines_append_only
                BEFORE UPDATE ON nanobot_session_lines
                FOR EACH ROW EXECUTE FUNCTION nanobot_lines_append_only()""",
            """CREATE TABLE nanobot_results (
                sha256 text PRIMARY KEY CHECK (sha256 ~ '^[0-9a-f]{64}$'),
                content text NOT NULL,
                bytes bigint NOT NULL,
                created_at timestamptz NOT NULL DEFAULT now()
            )""",
        ],
    ),
    (
        2,
        "offloaded results as bytes (a text column refuses U+0000)",
        [
            # New results are stored in `data`, the exact UTF-8 bytes the workspace cache
            # holds. Rows written before (and by workers of the previous version still
            # running) keep their text in `content`; readers take whichever is set. No row
            # is rewritten, so the migration costs no copy of the table.
            "ALTER TABLE nanobot_results ALTER COLUMN content DROP NOT NULL",
            "ALTER TABLE nanobot_results ADD COLUMN data bytea",
            """ALTER TABLE nanobot_results ADD CONSTRAINT nanobot_results_one_body
                CHECK ((content IS NULL) <> (data IS NULL))""",
        ],
    ),
]

SCHEMA_VERSION = MIGRATIONS[-1][0]

# What the first migration creates: a relation or function of one of these names already
# in the schema the tables go into makes it fail, so the database is someone else's.
_RELATIONS = ("nanobot_sessions", "nanobot_session_lines", "nanobot_results")
_FUNCTION = "nanobot_lines_append_only"

# The columns of the record of versions, as `format_type` names their types.
_RECORD_COLUMNS = {"version": "integer", "name": "text"}

_TIME = "timestamp with time zone"


@dataclasses.dataclass(frozen=True)
class _Column:
    """A column as :data:`SCHEMA_VERSION` has it: its type (as `format_type` names it),
    whether it is NOT NULL, and its default (as `pg_get_expr` writes it) when the store's
    statements leave the column to it."""

    type: str
    not_null: bool
    default: str | None = None


# Every table of :data:`SCHEMA_VERSION`: its columns, and its primary key in order. What the
# store's statements rely on: the types they read and write, the NOT NULLs and defaults an
# insert of some columns takes, the keys that ON CONFLICT and the one-row-per-line rule use.
_TABLES: dict[str, tuple[dict[str, _Column], tuple[str, ...]]] = {
    "nanobot_sessions": (
        {
            "name": _Column("text", True),
            "lines": _Column("bigint", True, "0"),
            "messages": _Column("bigint", True, "0"),
            "bytes": _Column("bigint", True, "0"),
            "created_at": _Column(_TIME, True, "now()"),
            "updated_at": _Column(_TIME, True, "now()"),
        },
        ("name",),
    ),
    "nanobot_session_lines": (
        {
            "session": _Column("text", True),
            "seq": _Column("bigint", True),
            "line": _Column("text", True),
            "written_at": _Column(_TIME, True, "now()"),
        },
        ("session", "seq"),
    ),
    "nanobot_results": (
        {
            "sha256": _Column("text", True),
            "content": _Column("text", False),
            "bytes": _Column("bigint", True),
            "created_at": _Column(_TIME, True, "now()"),
            "data": _Column("bytea", False),
        },
        ("sha256",),
    ),
}

# The foreign keys and check constraints of each table, as `pg_get_constraintdef` writes
# them (a referenced table unqualified: the one the search_path finds, which the store uses).
# What keeps bad rows out: a line of no session, a result of no body or a key not a SHA-256.
# One of these altered (NOT VALID, ON DELETE CASCADE, another expression) reads as missing.
_CONSTRAINTS: dict[str, tuple[str, ...]] = {
    "nanobot_sessions": (),
    "nanobot_session_lines": ("FOREIGN KEY (session) REFERENCES nanobot_sessions(name)",),
    "nanobot_results": (
        "CHECK ((sha256 ~ '^[0-9a-f]{64}$'::text))",
        "CHECK (((content IS NULL) <> (data IS NULL)))",
    ),
}

# The trigger that keeps a table append-only, by name (the name of the function it runs).
_TRIGGERS: dict[str, tuple[str, ...]] = {
    "nanobot_sessions": (),
    "nanobot_session_lines": (_FUNCTION,),
    "nanobot_results": (),
}
# `pg_trigger.tgtype` of BEFORE UPDATE FOR EACH ROW (bits ROW 1, BEFORE 2, UPDATE 16).
_BEFORE_UPDATE_EACH_ROW = 1 | 2 | 16
# `pg_trigger.tgenabled` of a trigger that fires in a session as the store opens it
# ('O', the default, or 'A', always): 'D' is disabled, 'R' fires only for replication.
_FIRES = ("O", "A")

# Everything of the plugin's tables the store relies on, found as the store's statements find
# the tables (the search_path), one row each: a column with its type, NOT NULL, default and
# place in the primary key; a foreign key or check constraint with its definition; a trigger
# with its timing and events, whether it fires, its function and that function's body. A
# table that is not there has no row. Indexes are not read: the store's reads use only
# those of the primary keys (checked above), and one added by hand is let be.
_CATALOG = """
SELECT t.name, 'column', a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull::text,
    pg_get_expr(d.adbin, d.adrelid), array_position(k.conkey, a.attnum)::text, a.attnum
FROM unnest(%(tables)s::text[]) AS t(name)
JOIN pg_attribute a ON a.attrelid = to_regclass(t.name) AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
LEFT JOIN pg_constraint k ON k.conrelid = a.attrelid AND k.contype = 'p'
UNION ALL
SELECT t.name, 'constraint', c.conname, c.contype::text, NULL, pg_get_constraintdef(c.oid),
    NULL, 0
FROM unnest(%(tables)s::text[]) AS t(name)
JOIN pg_constraint c ON c.conrelid = to_regclass(t.name) AND c.contype IN ('c', 'f')
UNION ALL
SELECT t.name, 'trigger', g.tgname, g.tgtype::text, g.tgenabled::text,
    g.tgfoid::regprocedure::text, p.prosrc, 0
FROM unnest(%(tables)s::text[]) AS t(name)
JOIN pg_trigger g ON g.tgrelid = to_regclass(t.name) AND NOT g.tgisinternal
JOIN pg_proc p ON p.oid = g.tgfoid
UNION ALL
SELECT '', 'setting', s.name, s.setting, s.source, quote_ident(current_user),
    quote_ident(current_database()), 0
FROM pg_settings s WHERE s.name = 'session_replication_role'
ORDER BY 1, 2, 8, 3
"""

# Under session_replication_role = replica a trigger enabled as made ('O') does not fire, nor
# do those of foreign keys: the append-only trigger and the lines' foreign key stop guarding
# without a change to a table. Where the value came from (pg_settings.source), said as the
# operator set it, and the statement that undoes it ({role} and {database} quoted as
# identifiers). The store refuses such a setting rather than setting it back to origin on
# each connection: a role that is not a superuser may not set it at all (it was set for it),
# and a setting undone in silence would hide from the operator that a replica's behaviour
# was asked of the store's role, database or server.
_REPLICA = "replica"
_LINES_TABLE = "nanobot_session_lines"
_SET_WHERE: dict[str, tuple[str, str]] = {
    "user": (
        "for the role {role} (ALTER ROLE ... SET)",
        "ALTER ROLE {role} RESET session_replication_role",
    ),
    "database": (
        "for the database {database} (ALTER DATABASE ... SET)",
        "ALTER DATABASE {database} RESET session_replication_role",
    ),
    "database user": (
        "for the role {role} in the database {database} (ALTER ROLE ... IN DATABASE ... SET)",
        "ALTER ROLE {role} IN DATABASE {database} RESET session_replication_role",
    ),
    "client": (
        "by the connection (the dsn's options, or PGOPTIONS)",
        "remove -c session_replication_role=replica there",
    ),
    "configuration file": (
        "in the server's configuration (postgresql.conf, or ALTER SYSTEM)",
        "remove it there and reload the server",
    ),
}


@dataclasses.dataclass
class _Found:
    """What the catalog holds of one table: its columns (type, NOT NULL, default), its
    primary key in order, its foreign key and check definitions (by name), its triggers
    (by name: type bits, enabled, function, function body)."""

    columns: dict[str, tuple[str, bool, str | None]] = dataclasses.field(default_factory=dict)
    key: list[str] = dataclasses.field(default_factory=list)
    constraints: dict[str, str] = dataclasses.field(default_factory=dict)
    triggers: dict[str, tuple[int, str, str, str]] = dataclasses.field(default_factory=dict)


def apply_migrations(conn: Any, *, target: int = SCHEMA_VERSION) -> list[int]:
    """Bring the database to `target` (:data:`SCHEMA_VERSION`); return the versions applied now.

    `conn` is a psycopg connection in autocommit mode. Raises RuntimeError when
    the database is newer than this plugin. A lower `target` stops at that
    version (to test an upgrade from it).
    """
    applied_now: list[int] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_signed(_MIGRATION_LOCK),))
        conn.execute(
            """CREATE TABLE IF NOT EXISTS nanobot_schema_migrations (
                version integer PRIMARY KEY,
                name text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )"""
        )
        _check_record_table(conn)
        done = {row[0] for row in conn.execute("SELECT version FROM nanobot_schema_migrations")}
        if not done and target >= 1:
            _check_unrecorded_tables(conn)
        if done and max(done) > SCHEMA_VERSION:
            raise RuntimeError(
                f"the database schema is at version {max(done)}, newer than this "
                f"nanobot-postgres knows ({SCHEMA_VERSION}); upgrade nanobot-postgres"
            )
        for version, name, statements in MIGRATIONS:
            if version in done or version > target:
                continue
            for statement in statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO nanobot_schema_migrations (version, name) VALUES (%s, %s)",
                (version, name),
            )
            applied_now.append(version)
        if target >= SCHEMA_VERSION:
            check_tables(conn)
    return applied_now


def check_tables(conn: Any) -> None:
    """RuntimeError when a table of the plugin is not as :data:`SCHEMA_VERSION` made it.

    A column dropped, renamed or of another type, a NOT NULL, a default or the primary
    key removed: the record of versions still says the current one, and the store used
    the table as if it were right, to fail mid-turn with the driver's words (``column
    "messages" does not exist``) or to store what it should not (two rows for one line).
    So with the foreign key, the check constraints and the append-only trigger: one
    dropped, disabled or altered let a line of no session, a result of no body, or an
    update rewriting a line already written in, silently. A column added by hand is let
    be unless an insert of the store's would fail on it (NOT NULL without a default); so
    are an index, a constraint or a trigger added. One query: the check costs one round
    trip per process.
    """
    rows = conn.execute(_CATALOG, {"tables": list(_TABLES)}).fetchall()
    found = {table: _Found() for table in _TABLES}
    keys: dict[str, list[tuple[int, str]]] = {table: [] for table in _TABLES}
    replica: str | None = None
    for table, kind, name, first, second, third, fourth, _ in rows:
        if kind == "setting":
            if first == _REPLICA:
                replica = _replica_fault(str(second), str(third), str(fourth))
        elif kind == "column":
            found[table].columns[name] = (str(first), second == "true", third)
            if fourth is not None:
                keys[table].append((int(fourth), name))
        elif kind == "constraint":
            found[table].constraints[name] = str(third)
        else:
            found[table].triggers[name] = (int(first), str(second), str(third), str(fourth))
    for table, places in keys.items():
        found[table].key = [column for _, column in sorted(places)]
    faults = [
        f"the table {table} {'; '.join(differences)}"
        for table in _TABLES
        if (differences := _differences(table, found[table]))
    ]
    if faults:
        raise RuntimeError(
            f"{'; '.join(faults)} (schema version {SCHEMA_VERSION} as nanobot-postgres "
            "made it); nothing was changed: restore the table as it was made, or give the "
            "plugin a new database and import the sessions into it"
            + (f"; and {replica}" if replica else "")
        )
    if replica:
        raise RuntimeError(replica)


def _replica_fault(source: str, role: str, database: str) -> str:
    """What is wrong with session_replication_role = replica, set from `source` (as
    pg_settings says), and how to undo it, for the store's `role` in its `database`."""
    where, undo = _SET_WHERE.get(
        source, (f"(pg_settings.source: {_shown(source)})", "set it back to origin there")
    )
    names = {"role": _shown(role), "database": _shown(database)}
    return (
        f"session_replication_role is {_REPLICA}, set {where.format(**names)}: under it the "
        f"append-only trigger of {_LINES_TABLE} and its foreign key do not fire, so a line "
        "rewritten or a line of no session would be stored without a word; nothing was "
        f"changed: {undo.format(**names)}"
    )


def _differences(table: str, found: _Found) -> list[str]:
    """How `table`, as `found`, differs from what it should be."""
    columns, key = found.columns, found.key
    if not columns:
        return ["is missing"]
    wanted, wanted_key = _TABLES[table]
    said: list[str] = []
    for name, column in wanted.items():
        if name not in columns:
            said.append(f"has no column {name} ({column.type})")
            continue
        kind, not_null, default = columns[name]
        if kind != column.type:
            said.append(f"has column {name} of type {_shown(kind)}, not {column.type}")
        if not_null != column.not_null:
            now = "NOT NULL, not nullable" if not_null else "nullable, not NOT NULL"
            said.append(f"has column {name} {now}")
        if column.default is not None and default != column.default:
            now = f"of default {_shown(default)}" if default is not None else "without a default"
            said.append(f"has column {name} {now}, not default {column.default}")
    for name, (_, not_null, default) in columns.items():
        if name not in wanted and not_null and default is None:
            said.append(
                f"has a column {_shown(name)} NOT NULL without a default, which the "
                "store's inserts leave out"
            )
    others = [_shown(name) for name in columns if name not in wanted]
    if others and any(name not in columns for name in wanted):  # renamed, most likely
        said.append(f"has column{'s' if len(others) > 1 else ''} {', '.join(others)}")
    if key != list(wanted_key):
        now = f"({', '.join(map(_shown, key))})" if key else "none"
        said.append(f"has primary key {now}, not ({', '.join(wanted_key)})")
    said += _constraint_differences(table, found.constraints)
    said += _trigger_differences(table, found.triggers)
    return said


def _constraint_differences(table: str, constraints: dict[str, str]) -> list[str]:
    """The foreign keys and check constraints `table` lacks, each with the ones of its
    kind it holds instead (most likely the same one altered: NOT VALID, say)."""
    held = set(constraints.values())
    said: list[str] = []
    for wanted in _CONSTRAINTS[table]:
        if wanted in held:
            continue
        kind = "FOREIGN KEY" if wanted.startswith("FOREIGN KEY") else "CHECK"
        noun = "foreign key" if kind == "FOREIGN KEY" else "check constraint"
        said.append(f"has no {noun} {wanted}")
        instead = sorted(
            f"{_shown(name)} {_shown(definition)}"
            for name, definition in constraints.items()
            if definition.startswith(kind) and definition not in _CONSTRAINTS[table]
        )
        if instead:
            said.append(f"has {noun}{'s' if len(instead) > 1 else ''} {', '.join(instead)}")
    return said


def _trigger_differences(table: str, triggers: dict[str, tuple[int, str, str, str]]) -> list[str]:
    """How the append-only trigger of `table` differs: missing, disabled, of other timing
    or events, or running another function or one whose body was replaced."""
    said: list[str] = []
    for name in _TRIGGERS[table]:
        what = f"trigger {name} (BEFORE UPDATE FOR EACH ROW, refusing a rewrite of a row)"
        if name not in triggers:
            said.append(f"has no {what}")
            continue
        kind, enabled, function, body = triggers[name]
        if enabled not in _FIRES:
            said.append(f"has {what} disabled")
        if kind != _BEFORE_UPDATE_EACH_ROW:
            said.append(f"has {what} firing otherwise")
        if function != f"{_FUNCTION}()":
            said.append(f"has {what} running {_shown(function)}, not {_FUNCTION}()")
        elif body != _APPEND_ONLY_BODY:
            said.append(f"has {what} running {_FUNCTION}() of another body")
    return said


def _shown(text: str) -> str:
    """A name or type read from the catalog as a message shows it: quoted when not printable."""
    return text if text.isprintable() and text.strip() == text and text else repr(text)


def _check_record_table(conn: Any) -> None:
    """RuntimeError when ``nanobot_schema_migrations`` is not this plugin's record of versions.

    Another tool's table of that name (other columns, or a version that is not an integer)
    made the read of the versions fail with a driver error or a Python TypeError, never
    saying which table was in the way.
    """
    rows = conn.execute(
        """SELECT a.attname, format_type(a.atttypid, a.atttypmod)
        FROM pg_attribute a
        WHERE a.attrelid = 'nanobot_schema_migrations'::regclass
          AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY a.attnum"""
    ).fetchall()
    columns = {str(name): str(kind) for name, kind in rows}
    if all(columns.get(name) == kind for name, kind in _RECORD_COLUMNS.items()):
        return
    found = ", ".join(f"{name} {kind}" for name, kind in columns.items()) or "none"
    wanted = ", ".join(f"{name} {kind}" for name, kind in _RECORD_COLUMNS.items())
    raise RuntimeError(
        "the table nanobot_schema_migrations is not nanobot-postgres's record of schema "
        f"versions (its columns: {found}; expected {wanted}), so the schema version is "
        f"unknown; nothing was changed: give the plugin a database (or a schema) of its own, "
        "or rename that table"
    )


def _check_unrecorded_tables(conn: Any) -> None:
    """RuntimeError when the plugin's tables or function exist but no version is recorded.

    The first migration would fail on them with ``relation ... already exists``: they are
    another application's, or the record of versions was lost. Either way they are left
    as they are, never dropped or altered.
    """
    rows = conn.execute(
        """SELECT c.relname FROM pg_class c
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY(%s)
        UNION ALL
        SELECT p.proname || '()' FROM pg_proc p
        WHERE p.pronamespace = current_schema()::regnamespace AND p.proname = %s
        ORDER BY 1""",
        (list(_RELATIONS), _FUNCTION),
    ).fetchall()
    if not rows:
        return
    names = ", ".join(str(row[0]) for row in rows)
    them = "them" if len(rows) > 1 else "it"
    raise RuntimeError(
        f"the database already holds {names} but records no nanobot-postgres schema version "
        f"(nanobot_schema_migrations is empty): not made by nanobot-postgres, or its record "
        f"of versions was lost; nothing was changed: give the plugin a database (or a "
        f"schema) of its own, or rename {them}"
    )


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value
