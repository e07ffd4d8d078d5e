"""Every test here runs offline: sockets that would leave the machine fail, and the tiktoken
cache directory is an empty temporary folder, so a tokenizer that tried to download its
encoding files (as plain tiktoken does on first use) would fail loudly.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def no_network(nanobot_no_network: None) -> None:
    """Fail any connection to, or name lookup of, anything but the loopback interface."""


@pytest.fixture(autouse=True)
def empty_tiktoken_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Point TIKTOKEN_CACHE_DIR at a fresh empty folder for the test."""
    cache = tmp_path_factory.mktemp("tiktoken-cache")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    return cache
