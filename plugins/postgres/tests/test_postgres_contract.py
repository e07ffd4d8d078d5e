"""The postgres store passes the same contract tests as the built-in JSONL store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from nanobot_core.testing_sessions import SessionStoreContract

from nanobot_postgres.store import PostgresSessionStore


class TestPostgresContract(SessionStoreContract):
    """Every promise of the SessionStore protocol, against a real server."""

    @pytest.fixture
    def store(self, dsn: str) -> Iterator[PostgresSessionStore]:
        """A store over a fresh database."""
        store = PostgresSessionStore(dsn)
        yield store
        store.close()

    @pytest.fixture
    def second_store(self, dsn: str) -> Iterator[PostgresSessionStore]:
        """Another store (its own pool) over the same database, as another worker has."""
        store = PostgresSessionStore(dsn)
        yield store
        store.close()
