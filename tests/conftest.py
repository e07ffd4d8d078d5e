"""Fixtures shared by the whole test suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import data_dir


@pytest.fixture(scope="session")
def data_folder() -> Path:
    """The folder of third-party test data."""
    return data_dir()


@pytest.fixture(autouse=True)
def _no_network(nanobot_no_network: None) -> None:
    """Every test in the suite fails if it reaches beyond the loopback interface."""
