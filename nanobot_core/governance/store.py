"""The offload cache: huge tool results saved as files the model can read back.

Files are named by the SHA-256 of their content, never by a tool-call id or a
session key (ids come from the model and from old session files; a name built
from them could point anywhere). The same content always lands in the same
file, two different contents never share one, and the cache can be deleted and
rebuilt from the session at any time. Writes are atomic: a temporary file in
the same directory, then ``os.replace``.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = ["CACHE_DIR", "DirectoryResultStore", "ResultStore", "default_store"]

#: Where the default store keeps results, relative to the workspace.
CACHE_DIR = Path(".nanobot") / "cache" / "tool-results"


@runtime_checkable
class ResultStore(Protocol):
    """What the `nanobot_result_store` hook returns."""

    def put(self, content: str) -> str:
        """Save `content`; return the path to give ``read_file`` (may raise ``OSError``)."""
        ...


# What the store remembers of a text it wrote: the text, its file, its size in bytes, and the
# path `put` returns for it.
_Written = tuple[str, str, int, str]


class DirectoryResultStore:
    """Content-addressed text files in one directory.

    `put` returns the path relative to `relative_to` (the workspace) when the
    directory is inside it, else the absolute path. Files already written in
    this process are remembered, so governing the same history again costs a
    comparison of the text with the one remembered and a ``stat``, not a hash.
    """

    def __init__(self, root: Path | str, *, relative_to: Path | str | None = None) -> None:
        self.root = Path(root)
        self.relative_to = Path(relative_to) if relative_to is not None else None
        # (length, head, tail) -> (the text, its file, its size in bytes, the path to show).
        # Keyed by a sample rather than by the text: a fresh copy of a long text (a history
        # decoded again) would have to be hashed whole, where comparing it is cheaper.
        self._written: OrderedDict[tuple[int, str, str], _Written] = OrderedDict()
        self._remember = 1024

    def __repr__(self) -> str:
        return f"DirectoryResultStore({str(self.root)!r})"

    def put(self, content: str) -> str:
        """Save `content` (UTF-8) under its SHA-256 name and return the path to read it back."""
        key = (len(content), content[:64], content[-64:])
        known = self._written.get(key)
        if known is not None and known[0] == content and _has_size(known[1], known[2]):
            self._written.move_to_end(key)
            return known[3]
        data = content.encode("utf-8")
        target = self.root / f"{hashlib.sha256(data).hexdigest()}.txt"
        if not _has_size(str(target), len(data)):
            self._write(target, data)
        shown = self._display(target)
        self._written[key] = (content, str(target), len(data), shown)
        self._written.move_to_end(key)
        if len(self._written) > self._remember:
            self._written.popitem(last=False)
        return shown

    def _write(self, target: Path, data: bytes) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=self.root, prefix=".tmp-", suffix=".txt")
        try:
            with os.fdopen(handle, "wb") as stream:
                stream.write(data)
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def _display(self, target: Path) -> str:
        if self.relative_to is not None:
            try:
                return target.relative_to(self.relative_to).as_posix()
            except ValueError:
                pass
        return str(target)


def _has_size(path: str, size: int) -> bool:
    try:
        return os.stat(path).st_size == size
    except OSError:
        return False


def default_store(workspace: Path) -> DirectoryResultStore:
    """The built-in store: ``<workspace>/.nanobot/cache/tool-results/``."""
    return DirectoryResultStore(workspace / CACHE_DIR, relative_to=workspace)
