"""``Path.glob`` of Python 3.11, reading each folder an entry at a time, by descriptors.

pathlib's glob reads a folder whole (``list(os.scandir(folder))``) before it
yields the first path in it, so a search that stops after its first thousand
matches still read, and held, every entry of a folder of millions of files.
`glob` yields the same paths in the same order (pathlib's selectors, step for
step, errors included) but reads a folder as it goes: a search that stops has
read only the entries before its last match, and holds one entry at a time.

pathlib opens every folder by its path, so a folder swapped for a symbolic
link between being listed in its parent and being read is read through the
link, wherever it leads. Here every folder is opened relative to its parent's
descriptor with ``O_NOFOLLOW`` (or, its parent closed, from the search's root
down, each folder likewise): a folder that has turned into a link is not
entered. A link the pattern goes through on purpose (``link/*``; ``**`` never
enters one) is resolved once, and the folder it leads to opened from the root
down the same way (or by its path, when it leads out of the root). Each path
found comes with where it really is (`Found.real`), so a caller confining the
search needs to resolve only the links among them.

Each folder being read keeps two descriptors open (its own, which its
entries are opened and looked at relative to, and the one `os.scandir` reads
it with), and a name the pattern gives one; past `MAX_OPEN_SCANS` descriptors
at once (the root's included), a folder's entries that matter (its matches,
or its subfolders for ``**``) are read whole and its descriptors closed, so a
deep tree cannot use up the process's files.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import stat
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path, PurePath

__all__ = ["MAX_OPEN_SCANS", "Found", "find", "glob"]

#: Descriptors a search keeps open at once between the paths it yields; a folder deeper in
#: the search is read whole.
MAX_OPEN_SCANS = 32

# The errors pathlib takes for "not there" (its _IGNORED_ERRNOS); any other one is raised.
_NOT_THERE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP})

# A folder only passed through or looked in by name needs no right to read it (O_PATH, where
# there is one), as pathlib's path lookups need none; one that is listed is opened to read.
_PASS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Found:
    """A path the search found: as pathlib gives it, and where it really is."""

    path: str  # as Path.glob gives it (through the links the pattern goes through)
    real: str  # its folder's real location joined with its name (a link's own location)
    link: bool  # whether it is a symbolic link: then `real` is the link, not where it leads
    is_dir: bool  # whether it is a folder or a link to one
    # Whether it is a regular file or a link to one: neither this nor a folder, it is a named
    # pipe, a socket, a device, or a link to nothing (known from the folder's listing where
    # the system gives each entry's kind, so it costs no call for most matches).
    is_file: bool


@dataclass(frozen=True, slots=True)
class _At:
    """Where a path found so far is, to open it."""

    real: str  # its folder's real location joined with its name
    parent: int | None  # its folder's descriptor, open while the path is worked on; or None
    name: str  # its name in that folder
    link: bool  # a link when listed: it is gone through (resolved), never a folder that became one
    is_dir: bool
    is_file: bool


#: A path found so far, how many steps of the pattern it has matched, and where it is.
_Partial = tuple[str, int, _At]
_Paths = Generator[_Partial, None, None]


@dataclass(frozen=True, slots=True)
class _Step:
    """One component of the pattern: a name, a wildcard or ``**``."""

    part: str
    dironly: bool  # more steps follow (or the pattern ends with '/'): only folders go on
    match: Callable[[str], object] | None  # a wildcard's matcher; None for a name or '**'


class _Search:
    """The search's root, opened once, the descriptors the search holds, and who hears of
    each folder the system refused to read, or failed to."""

    def __init__(
        self,
        root: str,
        refused: Callable[[str], None] | None = None,
        failed: Callable[[str, OSError], None] | None = None,
    ) -> None:
        self.root = root
        self.below = root.rstrip(os.sep) + os.sep
        self.fd = os.open(root, _PASS)
        self.held = 1
        self.refused = refused
        self.failed = failed

    def skip(self, at: _At) -> None:
        """Tell of the folder `at` names, which the system refused to open, read or look in."""
        if self.refused is not None:
            self.refused(os.path.realpath(at.real) if at.link else at.real)

    def fail(self, real: str, exc: OSError) -> None:
        """Tell of the path found at `real` that could not be opened, read or looked at.

        With no one to tell (pathlib's behaviour), `exc` is raised; else the search goes on.
        """
        if self.failed is None:
            raise exc
        self.failed(real, exc)

    def close(self, fd: int) -> None:
        os.close(fd)
        self.held -= 1

    def enter(self, at: _At, flags: int) -> tuple[int, str] | None:
        """A descriptor of the folder `at` names and its real location; None if it is not one.

        A folder that was one when listed is opened relative to its folder with
        ``O_NOFOLLOW``: if it has become a link since, it is not entered. A link
        that was listed is gone through: resolved, and its folder opened.
        PermissionError is raised, as pathlib's scandir raises it; another error
        is given to `fail` (raised, when no one is told).

        A folder not there (removed, or replaced by a file or a link, since it was
        found: every path entered was found a folder) is passed over, as pathlib
        passes it over, and told of as a failure when someone is told.
        """
        real = os.path.realpath(at.real) if at.link else at.real
        try:
            if at.parent is not None and not at.link:
                fd = os.open(at.name, flags | os.O_NOFOLLOW, dir_fd=at.parent)
            else:
                fd = self._open_real(real, flags)
        except PermissionError:
            raise
        except OSError as exc:
            if exc.errno not in _NOT_THERE or self.failed is not None:
                self.fail(real, exc)
            return None
        self.held += 1
        return fd, real

    def _open_real(self, real: str, flags: int) -> int:
        """The folder at the resolved path `real`: from the root down, with ``O_NOFOLLOW``."""
        if real == self.root:
            return os.open(".", flags, dir_fd=self.fd)
        if not real.startswith(self.below):
            return os.open(real, flags)  # out of the root, where only a link led: by its path
        parts = real[len(self.below) :].split(os.sep)
        fd = self.fd
        try:
            for part in parts[:-1]:
                inner = os.open(part, _PASS | os.O_NOFOLLOW, dir_fd=fd)
                if fd != self.fd:
                    os.close(fd)
                fd = inner
            return os.open(parts[-1], flags | os.O_NOFOLLOW, dir_fd=fd)
        finally:
            if fd != self.fd:
                os.close(fd)


def glob(base: Path, pattern: str) -> Iterator[Path]:
    """What ``base.glob(pattern)`` yields on Python 3.11, in its order, read as needed.

    Closing the iterator (or dropping it) closes every folder it has open.
    """
    with closing(find(base, pattern)) as found:
        for each in found:
            yield Path(each.path)


def find(
    base: Path,
    pattern: str,
    *,
    root: Path | None = None,
    refused: Callable[[str], None] | None = None,
    failed: Callable[[str, OSError], None] | None = None,
) -> Generator[Found, None, None]:
    """What `glob` yields, each path with where it really is.

    `root` (resolved; `base` resolved, inside it) is where every folder is
    opened from, down; without it, `base` resolved. A folder the system refuses
    to read or look in (``PermissionError``) is skipped, as pathlib skips it,
    and its real location given to `refused` (once each time it is met), so that
    a caller can say what was not searched. With `failed`, a folder that fails
    otherwise (an I/O error while it is opened or listed; removed, or replaced by
    a file or a link, since it was found) is skipped too, and its real location
    and the error given to `failed`, where pathlib raises the error (or passes
    over one not there). Closing the iterator (or dropping it) closes every
    folder it has open.
    """
    if not pattern:
        raise ValueError(f"Unacceptable pattern: {pattern!r}")
    pure = PurePath(pattern)
    if pure.drive or pure.root:
        # pathlib's glob raises NotImplementedError here; nothing is missing: a pattern is
        # relative to `base` by definition (find_files refuses any other before asking).
        raise ValueError(f"a pattern must be relative, got {pattern!r}")
    parts = list(pure.parts)
    if pattern[-1] in (os.sep, os.altsep):
        parts.append("")  # only folders match the last component
    steps = _steps(parts)
    if root is None:
        if not Path(base).is_dir():
            return
        start = os.path.realpath(base)
        try:
            search = _Search(start, refused, failed)
        except OSError as exc:
            if exc.errno not in _NOT_THERE:
                raise
            return
    else:
        start = str(base)
        search = _Search(str(root), refused, failed)
    first = _At(real=start, parent=None, name="", link=False, is_dir=True, is_file=False)
    # pathlib drops a path a '**' finds twice; with one '**' no path can be found twice
    # (every path after it has the same number of components past its starting folder).
    seen: set[str] | None = set() if sum(step.part == "**" for step in steps) > 1 else None
    stack: list[_Paths] = [_listed(iter([(str(base), 0, first)]))]
    try:
        while stack:
            partial = next(stack[-1], None)
            if partial is None:
                stack.pop().close()
                continue
            path, done, at = partial
            if done < len(steps):
                stream = search.held + 2 <= MAX_OPEN_SCANS
                stack.append(_next_step(search, partial, steps[done], stream))
            elif seen is None or path not in seen:
                if seen is not None:
                    seen.add(path)
                yield Found(path, at.real, at.link, at.is_dir, at.is_file)
    finally:
        for level in reversed(stack):
            level.close()
        search.close(search.fd)


def _steps(parts: list[str]) -> list[_Step]:
    """The pattern's components as steps, as pathlib's _make_selector builds its selectors."""
    steps: list[_Step] = []
    for index, part in enumerate(parts):
        if not part:  # pathlib's _TerminatingSelector: the path found so far is the result
            break
        if part != "**" and "**" in part:
            raise ValueError("Invalid pattern: '**' can only be an entire path component")
        wildcard = part != "**" and any(char in part for char in "*?[")
        steps.append(
            _Step(
                part=part,
                dironly=index + 1 < len(parts),
                match=_compile(part) if wildcard else None,
            )
        )
    return steps


def _compile(part: str) -> Callable[[str], object]:
    """A wildcard's matcher, case-insensitive where pathlib's is (Windows)."""
    flags = re.IGNORECASE if os.name == "nt" else 0
    return re.compile(fnmatch.translate(part), flags).fullmatch


def _next_step(search: _Search, partial: _Partial, step: _Step, stream: bool) -> _Paths:
    """The paths one step further from `partial`, read as they are asked for if `stream`."""
    path, done, at = partial
    if step.part == "**":
        found = _into_folders(search, path, done, at)
    elif step.match is None:
        found = _named(search, path, done, at, step)
    else:
        found = _matching(search, path, done, at, step)
    return found if stream else _listed(found)


def _listed(found: Iterator[_Partial]) -> _Paths:
    """The paths of `found`, all read (and its folder closed) at the first one asked for."""
    for path, done, at in list(found):
        yield path, done, replace(at, parent=None)  # opened from the root down, then


def _entered(search: _Search, at: _At, flags: int) -> tuple[int, str] | None:
    """`_Search.enter`, a folder the system refuses to open skipped (and told of) as pathlib
    skips it: its descriptor and real location, or None."""
    try:
        return search.enter(at, flags)
    except PermissionError:
        search.skip(at)
        return None


def _named(search: _Search, path: str, done: int, at: _At, step: _Step) -> _Paths:
    """pathlib's _PreciseSelector: the child of that name, if there (a folder if dironly)."""
    opened = _entered(search, at, _PASS)
    if opened is None:
        return
    fd, real = opened
    name = step.part
    try:
        try:
            mode = os.stat(name, dir_fd=fd).st_mode
            link = name not in (".", "..") and stat.S_ISLNK(
                os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
            )
        except PermissionError:
            raise
        except OSError as exc:  # pathlib's is_dir and exists: "not there" is False
            if exc.errno not in _NOT_THERE:
                search.fail(os.path.join(real, name), exc)
            return
        except ValueError:
            return
        is_dir = stat.S_ISDIR(mode)
        if step.dironly and not is_dir:
            return
        where = os.path.join(real, name)
        if name in (".", ".."):
            where = os.path.normpath(where)  # `real` is resolved: '..' is its folder's parent
        found = _At(where, fd, name, link, is_dir, stat.S_ISREG(mode))
        yield os.path.join(path, name), done + 1, found
    except PermissionError:
        search.skip(at)
        return
    finally:
        search.close(fd)


#: What a step makes of one entry of a folder (given the entry, the folder's descriptor and
#: real location): the path one step further, or None to pass the entry over.
_Child = Callable[[os.DirEntry[str], int, str], _Partial | None]


def _children(search: _Search, at: _At, child: _Child) -> _Paths:
    """What `child` makes of each entry of the folder `at` names, read an entry at a time.

    A folder that is not there has none. One the system refuses to open or read, or to
    look at an entry of, is skipped and told of from there on, as pathlib's scandir skips
    it (`child` runs inside, so that its refusals are the folder's).
    """
    opened = _entered(search, at, _READ)
    if opened is None:
        return
    fd, real = opened
    try:
        with os.scandir(fd) as entries:
            search.held += 1
            try:
                for entry in entries:
                    found = child(entry, fd, real)
                    if found is not None:
                        yield found
            finally:
                search.held -= 1
    except PermissionError:
        search.skip(at)
        return
    except OSError as exc:  # an I/O error while it is listed: its other entries are lost
        search.fail(real, exc)
        return
    finally:
        search.close(fd)


def _matching(search: _Search, path: str, done: int, at: _At, step: _Step) -> _Paths:
    """pathlib's _WildcardSelector: the children whose names match, an entry at a time."""
    match = step.match
    assert match is not None

    def matched(entry: os.DirEntry[str], fd: int, real: str) -> _Partial | None:
        if step.dironly:
            try:
                if not entry.is_dir():
                    return None
            except OSError as exc:
                if exc.errno not in _NOT_THERE:
                    raise
                return None
        if not match(entry.name):
            return None
        is_dir = step.dironly or _is_dir(entry)
        link = entry.is_symlink()
        is_file = not is_dir and _is_file(entry)
        where = _At(os.path.join(real, entry.name), fd, entry.name, link, is_dir, is_file)
        return os.path.join(path, entry.name), done + 1, where

    return _children(search, at, matched)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    """Whether a match is a folder or a link to one (costing a stat only for a link)."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _is_file(entry: os.DirEntry[str]) -> bool:
    """Whether a match is a regular file or a link to one (costing a stat only for a link)."""
    try:
        return entry.is_file()
    except OSError:
        return False


def _into_folders(search: _Search, path: str, done: int, at: _At) -> _Paths:
    """pathlib's _RecursiveWildcardSelector: `path` for the next step, then each subfolder.

    A subfolder goes back to this step, which gives it to the next step and then its own
    subfolders: the folders come parent first, as pathlib's _iterate_directories gives them.
    Links to folders are not entered (nor is a folder that has become one).
    """

    def subfolder(entry: os.DirEntry[str], fd: int, real: str) -> _Partial | None:
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError as exc:
            if exc.errno not in _NOT_THERE:
                raise
            return None
        if not is_dir:
            return None
        where = _At(os.path.join(real, entry.name), fd, entry.name, False, True, False)
        return os.path.join(path, entry.name), done, where

    yield path, done + 1, at
    yield from _children(search, at, subfolder)
