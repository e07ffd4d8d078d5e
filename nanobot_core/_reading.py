"""The one bounded read: what a source gives up to a limit, never the limit itself.

Every bounded read of input (the CLI's stdin and input files, config and
workspace files) goes through `read_up_to`, so the chunk loop and the limit
check exist once; each caller only says what going past the limit means.
"""

from __future__ import annotations

import os
from typing import IO, AnyStr, BinaryIO

__all__ = ["READ_CHUNK", "read_at_most", "read_up_to"]

#: The most asked of a source in one read (bytes or characters).
READ_CHUNK = 1 << 20


def read_up_to(source: IO[AnyStr], limit: int, *, size: int | None = None) -> AnyStr:
    """What `source` gives from where it is, up to ``limit + 1`` bytes or characters.

    One past the limit tells a source of exactly `limit` from a longer one, and
    nothing after it is read: a source that never ends (/dev/zero, ``yes |``)
    costs no more than one just past the limit.

    Read a chunk at a time: a read of n sets aside room for n before it starts,
    so one read of the limit would reserve all of it for a line of input, and
    fail with a `MemoryError` where the address space is capped (``ulimit -v``).

    `size` is what a regular file is known to hold (its ``fstat`` size): it is
    read for that (one more, to see it grew), and a read that gives less than
    it asked is its end, so a small file costs one small read.
    """
    want = min(READ_CHUNK, limit + 1 if size is None else min(size, limit) + 1)
    chunks: list[AnyStr] = []
    total = 0
    while chunk := source.read(want):
        chunks.append(chunk)
        total += len(chunk)
        if total > limit or (size is not None and len(chunk) < want):
            break
        want = min(READ_CHUNK, limit + 1 - total)
    # `chunk` is empty or one that was read: either way of the source's type (bytes or str).
    return chunk[:0].join(chunks)


def read_at_most(handle: BinaryIO, limit: int) -> tuple[bytes, int]:
    """At most ``limit + 1`` bytes of the regular file `handle`, and its size by ``fstat``."""
    size = os.fstat(handle.fileno()).st_size
    return read_up_to(handle, limit, size=size), size
