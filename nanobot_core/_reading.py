"""The one bounded read of an open file: what it holds up to a limit, never the limit itself."""

from __future__ import annotations

import os
from typing import BinaryIO

__all__ = ["read_at_most"]


def read_at_most(handle: BinaryIO, limit: int) -> tuple[bytes, int]:
    """At most ``limit + 1`` bytes of `handle` from where it is, and its size by ``fstat``.

    A read of n bytes sets n aside before it starts, so a small file is read for
    its size (one byte more, to see it grew), not for the limit. One byte past
    the limit tells a file of exactly `limit` bytes from a longer one.
    """
    size = os.fstat(handle.fileno()).st_size
    raw = handle.read(min(size, limit) + 1)
    if size < len(raw) <= limit:  # it grew since fstat: read on, to the limit
        raw += handle.read(limit + 1 - len(raw))
    return raw, size
