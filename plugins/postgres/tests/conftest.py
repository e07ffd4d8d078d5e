"""A real PostgreSQL server for the whole session, a fresh database for each test."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from nanobot_postgres.testserver import TemporaryPostgres

_numbers = itertools.count()


@pytest.fixture(autouse=True)
def no_network(nanobot_no_network: None) -> None:
    """Fail any connection to anything but the loopback interface."""


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[TemporaryPostgres]:
    """One temporary server (system binaries, else pgserver's), stopped at the end."""
    with TemporaryPostgres() as server:
        yield server


@pytest.fixture
def dsn(postgres_server: TemporaryPostgres) -> str:
    """The DSN of a new, empty database (password included)."""
    return postgres_server.create_database(f"test_{os.getpid()}_{next(_numbers)}")


@pytest.fixture
def cli_env(dsn: str, tmp_path: Path) -> dict[str, str]:
    """An environment for `nanobot-core` subprocesses that use the postgres store."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NANOBOT_", "OPENAI_"))}
    env.update(
        NANOBOT_SESSIONS__STORE="postgres",
        NANOBOT_POSTGRES_DSN=dsn,
        NANOBOT_API_KEY="test-key",
        NANOBOT_MODEL="scripted",
        NANOBOT_PROVIDER__MAX_RETRIES="1",
        NANOBOT_PROVIDER__BACKOFF_BASE="0.001",
    )
    return env
