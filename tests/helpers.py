"""Helpers shared by the test suite."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_data_dir() -> Path:
    """The folder of third-party test data: ``NANOBOT_SHARED_DATA``, else ``../shared/data``."""
    configured = os.environ.get("NANOBOT_SHARED_DATA")
    path = Path(configured) if configured else REPO_ROOT.parent / "shared" / "data"
    if not path.is_dir():
        raise RuntimeError(
            f"third-party test data not found at {path}; set NANOBOT_SHARED_DATA to its folder"
        )
    return path
