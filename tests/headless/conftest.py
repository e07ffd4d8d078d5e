"""Fixtures of the headless tests: a scripted chat server and provider settings for it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nanobot_core.config import ProviderConfig
from tests.headless.fake_server import FakeChatServer
from tests.helpers import clean_env

API_KEY = "sk-test-Zq8VbN3kWm5Lr7Xy2PaS9TuE"


@pytest.fixture
def server() -> Iterator[FakeChatServer]:
    """A started fake chat-completions server with an empty script (tests add replies)."""
    with FakeChatServer() as running:
        yield running


def provider_config(base_url: str, **changes: object) -> ProviderConfig:
    """Provider settings aimed at `base_url`, with a key and very short retry waits."""
    settings: dict[str, object] = {
        "base_url": base_url,
        "model": "fake-model",
        "api_key": API_KEY,
        "timeout": 10.0,
        "max_retries": 2,
        "backoff_base": 0.001,
        "retry_after_cap": 0.01,
    }
    settings.update(changes)
    return ProviderConfig(**settings)  # type: ignore[arg-type]


def cli_env(server: FakeChatServer) -> dict[str, str]:
    """The environment of a CLI child aimed at `server`: its key, one retry, very short waits."""
    return clean_env(
        NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1",
        NANOBOT_BASE_URL=server.base_url,
        NANOBOT_MODEL="fake-model",
        NANOBOT_API_KEY=API_KEY,
        NANOBOT_PROVIDER__MAX_RETRIES="1",
        NANOBOT_PROVIDER__BACKOFF_BASE="0.001",
        NANOBOT_PROVIDER__RETRY_AFTER_CAP="0.01",
    )
