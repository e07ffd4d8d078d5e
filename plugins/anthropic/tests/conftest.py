"""Fixtures: a started Messages API server, and provider settings aimed at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from messages_server import API_KEY, MessagesServer
from nanobot_core.config import ProviderConfig


@pytest.fixture(autouse=True)
def no_network(nanobot_no_network: None) -> None:
    """Fail any connection to anything but the loopback interface."""


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    """A running Messages API server with an empty script."""
    with MessagesServer() as running:
        yield running


def config_for(server: MessagesServer, **changes: object) -> ProviderConfig:
    """Settings for `server`, with the test key and very short retry waits."""
    settings: dict[str, object] = {
        "name": "anthropic",
        "base_url": server.base_url,
        "model": "claude-sonnet-4-5",
        "api_key": API_KEY,
        "timeout": 10.0,
        "max_retries": 2,
        "backoff_base": 0.001,
        "retry_after_cap": 0.05,
    }
    settings.update(changes)
    return ProviderConfig(**settings)  # type: ignore[arg-type]
