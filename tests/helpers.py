"""Helpers shared by the test suite."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TEST_DATA = REPO_ROOT / "tests" / "data"


def data_dir() -> Path:
    """The repository's folder of third-party test data (see ``tests/data/README.md``)."""
    return TEST_DATA
