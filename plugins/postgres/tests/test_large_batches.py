"""A batch larger than one statement carries (a big session imported) goes in several, atomically.

The server takes at most 1 GiB in one message; the tests lower the store's limit instead of
sending a gigabyte.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nanobot_core import SessionError
from nanobot_core.errors import SessionConflictError

import nanobot_postgres.store as store_module
from nanobot_postgres.store import PostgresLease, PostgresSessionStore

_LIMIT = 1_000
_names = itertools.count()


def _line(content: str) -> str:
    return json.dumps({"role": "user", "content": content}, separators=(",", ":"))


def _statement_size(lines: list[str]) -> int:
    """What a statement's lines take as sent: the array's header, then each line."""
    return 64 + sum(len(line.encode()) + 8 for line in lines)


@pytest.fixture
def lowered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The most one statement carries, lowered to `_LIMIT` bytes."""
    monkeypatch.setattr(store_module, "_MAX_APPEND_BYTES", _LIMIT)


@pytest.fixture
def store(dsn: str, lowered: None) -> Iterator[PostgresSessionStore]:
    """A store on a fresh database, closed at the end."""
    store = PostgresSessionStore(dsn)
    yield store
    store.close()


@contextlib.contextmanager
def _sent(lease: PostgresLease) -> Iterator[list[list[str]]]:
    """The lines of each statement `lease` sends meanwhile, as the server receives them."""
    sent: list[list[str]] = []
    conn: Any = lease._conn
    execute = conn.execute

    def recording(query: Any, params: Any = None, **kwargs: Any) -> Any:
        if isinstance(params, dict) and "lines" in params:
            sent.append(list(params["lines"]))
        return execute(query, params, **kwargs)

    conn.execute = recording
    try:
        yield sent
    finally:
        del conn.execute  # the pooled connection goes back as it came


def test_a_session_larger_than_one_statement_is_stored_whole_in_several(
    store: PostgresSessionStore,
) -> None:
    """A batch of lines that each fit, but not together (as `sessions import` of a session
    over a gigabyte appends), is stored whole and in order, no statement over the limit; it
    was refused whole before, naming lines 1 to N."""
    lines = [_line(f"{n:03d}" + "x" * 300) for n in range(10)]
    lease = store.lease("big")
    try:
        with _sent(lease) as sent:
            assert lease.append(lines, expected_seq=0) == 10
        assert lease.load().lines == lines
    finally:
        lease.release()
    assert len(sent) > 1 and [line for batch in sent for line in batch] == lines
    assert max(_statement_size(batch) for batch in sent) <= _LIMIT
    [info] = store.list_sessions()
    assert (info.name, info.messages, info.size) == ("big", 10, sum(len(x) + 1 for x in lines))


def test_a_line_larger_than_one_statement_is_refused_naming_session_and_line(
    store: PostgresSessionStore,
) -> None:
    """A line that does not fit in a statement alone is refused before anything is sent,
    naming the session and the line; the lines before it in the batch are not stored."""
    huge = _line("b" * _LIMIT)
    lease = store.lease("big")
    try:
        with _sent(lease) as sent, pytest.raises(SessionError) as refused:
            lease.append([_line("a"), huge, _line("c")], expected_seq=0)
        assert sent == []
        assert lease.load().lines == []
    finally:
        lease.release()
    assert str(refused.value).startswith(
        f"session 'big', line 2: {_statement_size([huge]):,} bytes, more than the {_LIMIT:,} "
        "PostgreSQL takes in one statement (postgresql://"
    )
    assert str(refused.value).endswith("; nothing was appended")


def test_a_conflict_in_a_batch_of_several_statements_stores_nothing(
    store: PostgresSessionStore,
) -> None:
    """A batch of several statements whose writer expected another line count appends none."""
    kept = _line("kept")
    lease = store.lease("s")
    try:
        lease.append([kept], expected_seq=0)
        with pytest.raises(SessionConflictError, match="holds 1 lines, the writer expected 0"):
            lease.append([_line("x" * 400)] * 4, expected_seq=0)
        assert lease.load().lines == [kept]
    finally:
        lease.release()


def test_a_statement_failing_after_others_of_its_batch_undoes_them(
    store: PostgresSessionStore, dsn: str
) -> None:
    """When the server refuses the third statement of a batch, the two before are undone:
    the session holds what it held, and its counts say so."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            """CREATE FUNCTION refuse_seq_5() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.seq = 5 THEN RAISE EXCEPTION 'line 6 refused'; END IF;
                RETURN NEW;
            END $$"""
        )
    store.list_sessions()  # the tables, before the trigger goes on one
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON nanobot_session_lines "
            "FOR EACH ROW EXECUTE FUNCTION refuse_seq_5()"
        )
    lease = store.lease("s")
    try:
        with pytest.raises(SessionError, match="line 6 refused"):
            lease.append([_line(str(n) + "x" * 300) for n in range(8)], expected_seq=0)
        assert lease.load().lines == []
        lease.check_held()
    finally:
        lease.release()
    assert store.list_sessions() == []


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=_LIMIT), min_size=1, max_size=12),
    before=st.integers(min_value=0, max_value=2),
)
def test_any_batch_is_stored_whole_within_the_limit_or_refused_whole(
    store: PostgresSessionStore, sizes: list[int], before: int
) -> None:
    """Lines of any sizes are stored in order, by statements none of which passes the
    limit, or, when one line alone passes it, refused naming that line, storing nothing."""
    name = f"s{next(_names)}"
    first = [_line(f"before {n}") for n in range(before)]
    lines = [_line(f"{n}:" + "é" * (size // 2)) for n, size in enumerate(sizes)]
    lease = store.lease(name)
    try:
        if first:
            lease.append(first, expected_seq=0)
        too_big = [n for n, line in enumerate(lines) if _statement_size([line]) > _LIMIT]
        if too_big:
            refusal = rf"^session '{name}', line {before + too_big[0] + 1}: "
            with _sent(lease) as sent, pytest.raises(SessionError, match=refusal):
                lease.append(lines, expected_seq=before)
            assert sent == [] and lease.load().lines == first
        else:
            with _sent(lease) as sent:
                assert lease.append(lines, expected_seq=before) == before + len(lines)
            assert lease.load().lines == first + lines
            assert [line for batch in sent for line in batch] == lines
            assert max(_statement_size(batch) for batch in sent) <= _LIMIT
    finally:
        lease.release()
