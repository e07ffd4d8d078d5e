"""The one atomic-write helper: a file is replaced whole or not at all.

The data goes to a temporary file in the target's directory (same file system),
is flushed and fsynced, then ``os.replace`` puts it in place; a reader sees the
old file or the new one, never a part. On any failure the temporary file is
removed and the target is left as it was.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

__all__ = ["write_atomic"]


def write_atomic(path: Path | str, data: bytes | Iterable[bytes]) -> None:
    """Replace `path` with `data` (bytes, or chunks of bytes) atomically and durably."""
    target = Path(path)
    handle, temporary = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(handle, "wb") as stream:
            for chunk in [data] if isinstance(data, bytes | bytearray) else data:
                stream.write(chunk)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
