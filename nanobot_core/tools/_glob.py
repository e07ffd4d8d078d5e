"""``Path.glob`` of Python 3.11, reading each folder an entry at a time.

pathlib's glob reads a folder whole (``list(os.scandir(folder))``) before it
yields the first path in it, so a search that stops after its first thousand
matches still read, and held, every entry of a folder of millions of files.
`glob` yields the same paths in the same order (pathlib's selectors, step for
step, errors included) but reads a folder as it goes: a search that stops has
read only the entries before its last match, and holds one entry at a time.

Each folder being read keeps a descriptor open, one for each step of the
pattern and each level of a ``**``; past `MAX_OPEN_SCANS` at once, a folder's
entries that matter (its matches, or its subfolders for ``**``) are read whole
and its descriptor closed, so a deep tree cannot use up the process's files.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import re
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePath

__all__ = ["MAX_OPEN_SCANS", "glob"]

#: Folders read an entry at a time at once; a folder deeper in the search is read whole.
MAX_OPEN_SCANS = 32

# The errors pathlib takes for "not there" (its _IGNORED_ERRNOS); any other one is raised.
_NOT_THERE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP})

#: A path found so far and how many steps of the pattern it has matched.
_Partial = tuple[str, int]
_Paths = Generator[_Partial, None, None]


@dataclass(frozen=True, slots=True)
class _Step:
    """One component of the pattern: a name, a wildcard or ``**``."""

    part: str
    dironly: bool  # more steps follow (or the pattern ends with '/'): only folders go on
    match: Callable[[str], object] | None  # a wildcard's matcher; None for a name or '**'


def glob(base: Path, pattern: str) -> Iterator[Path]:
    """What ``base.glob(pattern)`` yields on Python 3.11, in its order, read as needed.

    Closing the iterator (or dropping it) closes every folder it has open.
    """
    if not pattern:
        raise ValueError(f"Unacceptable pattern: {pattern!r}")
    pure = PurePath(pattern)
    if pure.drive or pure.root:
        raise NotImplementedError("Non-relative patterns are unsupported")
    parts = list(pure.parts)
    if pattern[-1] in (os.sep, os.altsep):
        parts.append("")  # only folders match the last component
    steps = _steps(parts)
    if not Path(base).is_dir():
        return
    # pathlib drops a path a '**' finds twice; with one '**' no path can be found twice
    # (every path after it has the same number of components past its starting folder).
    seen: set[str] | None = set() if sum(step.part == "**" for step in steps) > 1 else None
    stack: list[_Paths] = [_listed(iter([(str(base), 0)]))]
    try:
        while stack:
            found = next(stack[-1], None)
            if found is None:
                stack.pop()
                continue
            path, done = found
            if done < len(steps):
                stack.append(_next_step(path, done, steps[done], len(stack) <= MAX_OPEN_SCANS))
            elif seen is None:
                yield Path(path)
            elif path not in seen:
                seen.add(path)
                yield Path(path)
    finally:
        for level in stack:
            level.close()


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


def _next_step(path: str, done: int, step: _Step, stream: bool) -> _Paths:
    """The paths one step further from `path`, read as they are asked for if `stream`."""
    if step.part == "**":
        found = _into_folders(path, done)
    elif step.match is None:
        found = _named(path, done, step)
    else:
        found = _matching(path, done, step)
    return found if stream else _listed(found)


def _listed(found: Iterator[_Partial]) -> _Paths:
    """The paths of `found`, all read (and its folder closed) at the first one asked for."""
    yield from list(found)


def _named(path: str, done: int, step: _Step) -> _Paths:
    """pathlib's _PreciseSelector: the child of that name, if there (a folder if dironly)."""
    try:
        child = Path(os.path.join(path, step.part))
        if child.is_dir() if step.dironly else child.exists():
            yield str(child), done + 1
    except PermissionError:
        return


def _matching(path: str, done: int, step: _Step) -> _Paths:
    """pathlib's _WildcardSelector: the children whose names match, an entry at a time."""
    assert step.match is not None
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if step.dironly:
                    try:
                        if not entry.is_dir():
                            continue
                    except OSError as exc:
                        if exc.errno not in _NOT_THERE:
                            raise
                        continue
                if step.match(entry.name):
                    yield os.path.join(path, entry.name), done + 1
    except PermissionError:
        return


def _into_folders(path: str, done: int) -> _Paths:
    """pathlib's _RecursiveWildcardSelector: `path` for the next step, then each subfolder.

    A subfolder goes back to this step, which gives it to the next step and then its own
    subfolders: the folders come parent first, as pathlib's _iterate_directories gives them.
    Links to folders are not entered.
    """
    yield path, done + 1
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError as exc:
                    if exc.errno not in _NOT_THERE:
                        raise
                    is_dir = False
                if is_dir:
                    yield os.path.join(path, entry.name), done
    except PermissionError:
        return
