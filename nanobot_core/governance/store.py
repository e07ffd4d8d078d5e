"""The offload cache: huge tool results saved as files the model can read back.

Files are named by the SHA-256 of their content, never by a tool-call id or a
session key (ids come from the model and from old session files; a name built
from them could point anywhere). The same content always lands in the same
file, two different contents never share one, and the cache can be deleted and
rebuilt from the session at any time.

What is on disk is not trusted: the model can write files in the workspace.
A file found under the right name is served only when it holds exactly the
content (else it is replaced), the folders on the way to the cache are opened
one by one without following symbolic links (a linked folder is refused, so
nothing is ever written outside), and writes are atomic (a temporary file in
the same folder, then a rename relative to the folder's descriptor).

The cache is bounded (``[governance.store]``): entries unused for
``max_age_days`` are removed, and when the entries together exceed
``max_bytes`` the least recently used go first. Every use of an entry renews
it, entries used by this process are never removed, and neither are entries
used in the last `RECENT_SECONDS`, so nothing the current history refers to is
pruned. Pruning runs once per store, before its first write.
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import NamedTuple, Protocol, runtime_checkable

import attrs

from nanobot_core._regular_file import open_regular_file
from nanobot_core.config import StoreConfig

__all__ = [
    "CACHE_DIR",
    "RECENT_SECONDS",
    "DirectoryResultStore",
    "PruneReport",
    "ResultStore",
    "default_store",
]

#: Where the default store keeps results, relative to the workspace.
CACHE_DIR = Path(".nanobot") / "cache" / "tool-results"

#: Entries used this recently are never pruned, whatever the limits say.
RECENT_SECONDS = 3_600

_DAY = 86_400
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_START_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
# How often a use renews an entry's time: renewing on every use would cost a write per call.
_RENEW_SECONDS = 600


@runtime_checkable
class ResultStore(Protocol):
    """What the `nanobot_result_store` hook returns."""

    def put(self, content: str) -> str:
        """Save `content`; return the path to give ``read_file`` (may raise ``OSError``)."""
        ...


@attrs.frozen
class PruneReport:
    """What one pruning pass removed."""

    removed: int = 0
    freed_bytes: int = 0
    kept: int = 0


# What the store remembers of a text it wrote: the text, the file's name, the file's
# identity (device, inode, size) and the path `put` returns for it.
_Written = tuple[str, str, tuple[int, int, int], str]


class _Layout(NamedTuple):
    """A store's folders and the prefixes of its paths, for one `root` and `relative_to`."""

    root: Path
    relative_to: Path | None
    base: Path  # the trusted start of the walk: the workspace itself
    parts: tuple[str, ...]  # the folders from there down to the cache
    on_disk: str  # a file's path is this and its name
    shown: str  # the path `put` returns is this and the file's name


class DirectoryResultStore:
    """Content-addressed text files in one directory.

    `put` returns the path relative to `relative_to` (the workspace) when the
    directory is inside it, else the absolute path. The folders from
    `relative_to` (or from the directory's parent) down are never followed as
    symbolic links. Files already written in this process are remembered, so
    governing the same history again costs a comparison of the text with the
    one remembered and an ``lstat``, not a hash.
    """

    def __init__(
        self,
        root: Path | str,
        *,
        relative_to: Path | str | None = None,
        limits: StoreConfig | None = None,
    ) -> None:
        self.root = Path(root)
        self.relative_to = Path(relative_to) if relative_to is not None else None
        self.limits = limits if limits is not None else StoreConfig()
        # (length, head, tail) -> what was written. Keyed by a sample rather than by the
        # text: a fresh copy of a long text (a history decoded again) would have to be
        # hashed whole, where comparing it is cheaper.
        self._written: OrderedDict[tuple[int, str, str], _Written] = OrderedDict()
        self._remember = 1024
        self._used: set[str] = set()
        self._pruned = False
        self.last_prune: PruneReport | None = None
        # Where the folders are walked from and how a path is shown, worked out once for
        # the `root` and `relative_to` they were worked out for: pathlib costs more than
        # the system calls of a `put`.
        self._layout: _Layout | None = None

    def __repr__(self) -> str:
        return f"DirectoryResultStore({str(self.root)!r})"

    def put(self, content: str) -> str:
        """Save `content` (UTF-8) under its SHA-256 name and return the path to read it back.

        Raises ``OSError`` when a folder on the way is a symbolic link or the
        file cannot be written.
        """
        key = (len(content), content[:64], content[-64:])
        known = self._written.get(key)
        fresh = known is not None and _identity(self._paths().on_disk + known[1]) == known[2]
        if known is not None and fresh and known[0] == content:
            self._written.move_to_end(key)
            return known[3]
        data = content.encode("utf-8", "replace")
        name = f"{hashlib.sha256(data).hexdigest()}.txt"
        with self._directory() as fd:
            self._used.add(name)
            if not self._pruned:
                self._pruned = True
                self.last_prune = _prune(fd, self.limits, self._used)
            identity = _verified(fd, name, data)
            if identity is None:
                identity = _write(fd, name, data)
        shown = self._paths().shown + name
        self._written[key] = (content, name, identity, shown)
        self._written.move_to_end(key)
        if len(self._written) > self._remember:
            self._written.popitem(last=False)
        return shown

    def prune(self) -> PruneReport:
        """Remove entries by age and total size now (entries used by this store are kept)."""
        with self._directory() as fd:
            self._pruned = True
            self.last_prune = _prune(fd, self.limits, self._used)
        return self.last_prune

    def _paths(self) -> _Layout:
        """Where the folders are walked from and how paths are written, for the current
        `root` and `relative_to`."""
        layout = self._layout
        if (
            layout is None
            or layout.root is not self.root
            or layout.relative_to is not self.relative_to
        ):
            base, parts = self._walk()
            # A file's name is a hash and ".txt": joined like any plain name.
            placeholder = "x"
            layout = self._layout = _Layout(
                self.root,
                self.relative_to,
                base,
                parts,
                str(self.root / placeholder)[: -len(placeholder)],
                self._display(self.root / placeholder)[: -len(placeholder)],
            )
        return layout

    @contextmanager
    def _directory(self) -> Iterator[int]:
        """A descriptor of the cache folder, reached without following any link."""
        layout = self._paths()
        base, parts = layout.base, layout.parts
        try:
            fd = os.open(base, _START_FLAGS)  # the trusted start: the workspace itself
        except FileNotFoundError:
            base.mkdir(parents=True, exist_ok=True)
            fd = os.open(base, _START_FLAGS)
        try:
            for index, part in enumerate(parts):
                parent = fd
                try:
                    fd = _enter(parent, part, base, parts[: index + 1])
                finally:
                    if fd != parent:
                        os.close(parent)
            yield fd
        finally:
            os.close(fd)

    def _walk(self) -> tuple[Path, tuple[str, ...]]:
        if self.relative_to is not None:
            try:
                inside = self.root.relative_to(self.relative_to)
            except ValueError:
                pass
            else:
                if ".." not in inside.parts:
                    return self.relative_to, inside.parts
        return self.root.parent, (self.root.name,)

    def _display(self, target: Path) -> str:
        if self.relative_to is not None:
            try:
                return target.relative_to(self.relative_to).as_posix()
            except ValueError:
                pass
        return str(target)


def _enter(parent: int, name: str, base: Path, parts: tuple[str, ...]) -> int:
    """The descriptor of folder `name` in `parent` (created if missing); `base` joined with
    `parts` is that folder, shown in the error (only then: pathlib costs more than the call)."""
    try:
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            with suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=parent)
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            shown = base.joinpath(*parts)
            raise OSError(
                exc.errno, f"{shown} is a symbolic link or not a folder: the store refuses it"
            ) from None
        raise


def _identity(path: str | Path) -> tuple[int, int, int] | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino, info.st_size


def _verified(fd: int, name: str, data: bytes) -> tuple[int, int, int] | None:
    """The identity of entry `name` when it is a plain file holding exactly `data`, else None.

    A link is not followed, and a named pipe planted there is not waited on
    (`open_regular_file`): either is no entry, and is replaced.
    """
    try:
        handle = open_regular_file(name, follow_links=False, dir_fd=fd)
    except OSError:
        return None
    try:
        info = os.fstat(handle)
        if info.st_size != len(data):
            return None
        if _read_at_most(handle, len(data) + 1) != data:
            return None
        if time.time() - info.st_mtime > _RENEW_SECONDS:
            os.utime(handle)  # a use renews the entry for pruning by age
    finally:
        os.close(handle)
    return info.st_dev, info.st_ino, info.st_size


def _read_at_most(handle: int, size: int) -> bytes:
    """Up to `size` bytes from `handle`, fewer only at the end of the file."""
    chunks = []
    while size > 0:
        chunk = os.read(handle, size)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _write(fd: int, name: str, data: bytes) -> tuple[int, int, int]:
    temporary = f".tmp-{secrets.token_hex(8)}.txt"
    handle = os.open(temporary, _CREATE_FLAGS, 0o644, dir_fd=fd)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
            info = os.fstat(stream.fileno())
        # Replaces whatever held the name (a planted file, a link) without following it.
        os.replace(temporary, name, src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException:
        with suppress(OSError):
            os.unlink(temporary, dir_fd=fd)
        raise
    return info.st_dev, info.st_ino, info.st_size


def _prune(fd: int, limits: StoreConfig, used: set[str]) -> PruneReport:
    """Remove entries unused for too long, then the least recently used over the size limit."""
    now = time.time()
    entries: list[tuple[float, int, str]] = []
    for entry in os.scandir(fd):
        if not entry.name.endswith(".txt"):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if entry.name.startswith(".tmp-"):
            if now - info.st_mtime > _DAY:
                _remove(fd, entry.name)  # left behind by a process killed mid-write
            continue
        entries.append((info.st_mtime, info.st_size, entry.name))
    entries.sort(reverse=True)  # most recently used first
    total = 0
    removed = 0
    freed = 0
    for mtime, size, name in entries:
        age = now - mtime
        protected = name in used or age < RECENT_SECONDS
        too_old = age > limits.max_age_days * _DAY
        too_big = total + size > limits.max_bytes
        if not protected and (too_old or too_big) and _remove(fd, name):
            removed += 1
            freed += size
            continue
        total += size
    return PruneReport(removed=removed, freed_bytes=freed, kept=len(entries) - removed)


def _remove(fd: int, name: str) -> bool:
    try:
        os.unlink(name, dir_fd=fd)
    except OSError:
        return False
    return True


def default_store(workspace: Path, limits: StoreConfig | None = None) -> DirectoryResultStore:
    """The built-in store: ``<workspace>/.nanobot/cache/tool-results/``."""
    return DirectoryResultStore(workspace / CACHE_DIR, relative_to=workspace, limits=limits)
