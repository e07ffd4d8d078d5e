"""Which of psycopg_pool's records about the store's pool are demoted to debug, and how."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from nanobot_postgres.store import POOL_NAME, PostgresSessionStore, _quiet_pool_records


class _Kept(logging.Handler):
    """A handler at level NOTSET, as ``logging.basicConfig`` installs: it keeps every record."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def pool_logger() -> Iterator[tuple[logging.Logger, _Kept]]:
    """psycopg_pool's logger at WARNING with a handler of its own, as it was after the test."""
    logger = logging.getLogger("psycopg.pool")
    kept = _Kept()
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    logger.addHandler(kept)
    _quiet_pool_records()
    try:
        yield logger, kept
    finally:
        logger.removeHandler(kept)
        logger.setLevel(level)
        logger.propagate = propagate


def test_a_demoted_retry_warning_is_not_handled_where_debug_is_off(
    pool_logger: tuple[logging.Logger, _Kept],
) -> None:
    """A retry warning about the store's pool is dropped by a handler of an app at WARNING."""
    logger, kept = pool_logger
    logger.warning("error connecting in %r: %s", POOL_NAME, "connection refused")
    logger.warning("error connecting in %r: %s", "application", "connection refused")
    assert [(r.levelname, r.getMessage()) for r in kept.records] == [
        ("WARNING", "error connecting in 'application': connection refused")
    ]


def test_a_demoted_retry_warning_is_kept_at_debug_where_debug_is_on(
    pool_logger: tuple[logging.Logger, _Kept],
) -> None:
    """With psycopg_pool's logger at DEBUG, the store's retry warning is kept, as debug."""
    logger, kept = pool_logger
    logger.setLevel(logging.DEBUG)
    logger.warning("error connecting in %r: %s", POOL_NAME, "connection refused")
    assert [(r.levelname, r.getMessage()) for r in kept.records] == [
        ("DEBUG", "error connecting in 'nanobot-sessions': connection refused")
    ]


def test_a_connection_returned_in_a_transaction_is_still_warned_about(
    dsn: str, pool_logger: tuple[logging.Logger, _Kept]
) -> None:
    """A connection handed back mid-transaction (a bug of the store's) stays a pool warning."""
    _, kept = pool_logger
    store = PostgresSessionStore(dsn, pool_size=2, connect_timeout=5)
    try:
        conn = store._connection()
        conn.autocommit = False
        conn.execute("SELECT 1")  # a transaction is open now
        store._put(conn)
    finally:
        store.close()
    rolled_back = [r for r in kept.records if r.getMessage().startswith("rolling back returned")]
    assert [r.levelname for r in rolled_back] == ["WARNING"]
