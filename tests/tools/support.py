"""Helpers for the tool tests."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

SECRET = "TOP-SECRET-OUTSIDE"


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on a fresh event loop."""
    return asyncio.run(coroutine)
