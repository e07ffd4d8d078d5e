"""Fixtures: a started Messages API server, and provider settings aimed at it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from messages_server import API_KEY, MessagesServer
from nanobot_core.config import ProviderConfig
from nanobot_core.providers import ProgressCallback, ProgressEvent, RetryNotice


@pytest.fixture(autouse=True)
def no_network(nanobot_no_network: None) -> None:
    """Fail any connection to anything but the loopback interface."""


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    """A running Messages API server with an empty script."""
    with MessagesServer() as running:
        yield running


def retry_sink(notices: list[RetryNotice] | None) -> ProgressCallback | None:
    """A progress callback keeping what the provider reports in `notices` (None: no callback),
    failing on anything but a retry notice, the only progress it reports."""
    if notices is None:
        return None

    def keep(event: ProgressEvent) -> None:
        assert isinstance(event, RetryNotice), f"the provider reported {event!r}, not a retry"
        notices.append(event)

    return keep


def config_for(server: MessagesServer, **changes: Any) -> ProviderConfig:
    """Settings for `server`, with the test key and very short retry waits."""
    settings = ProviderConfig(
        name="anthropic",
        base_url=server.base_url,
        model="claude-sonnet-4-5",
        api_key=API_KEY,
        timeout=10.0,
        max_retries=2,
        backoff_base=0.001,
        retry_after_cap=0.05,
    )
    # evolve builds it anew through __init__, so the changes are checked as given ones are.
    return attrs.evolve(settings, **changes)
