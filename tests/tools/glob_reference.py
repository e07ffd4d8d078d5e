"""``Path.glob`` of Python 3.11 as a plain model: the oracle of find_files' glob on every Python.

The interpreter running the tests cannot be the oracle: Python 3.12's ``Path.glob``
gives a ``**`` folder's subfolders before what is below them, and finds a broken
link named in full; 3.13's finds files with a pattern ending in ``**`` and can give a
path twice. `nanobot_core.tools._glob` keeps 3.11's behaviour on every version, so
its tests compare it with this model, written from pathlib 3.11's rules (not from
that module): each folder listed whole, every path looked at by its name.
`test_glob.py` checks this model against ``Path.glob`` where Python 3.11 runs them.

The rules, for a relative pattern:

- It is split into components as ``PurePosixPath`` splits it ('.' components drop
  out); a trailing '/' means its last component matches folders only.
- A component with none of ``*?[`` names a child: found if it exists, following
  links (a broken link or a loop of links is not found); a folder if more
  components follow.
- A wildcard matches the names of a folder's entries (``fnmatch.fnmatchcase``: case
  counts and ``*`` matches a leading '.'), in the order the folder lists them;
  only folders (or links to them) when more components follow.
- ``**`` is the folder itself and then every folder below it, depth first: a
  folder, then everything below it, then its next sibling; a link is never gone
  through. Only folders, when ``**`` is last.
- A path found more than once is given once, where it was first found.
- Nothing is found when the base is not a folder; a folder not readable is skipped.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath


def reference_glob(base: Path, pattern: str) -> list[Path]:
    """What ``base.glob(pattern)`` gives on Python 3.11, in its order."""
    if not os.path.isdir(base):
        return []
    components = PurePosixPath(pattern).parts
    given: dict[str, None] = {}  # insertion-ordered: a path where it was first found
    for path in _select(str(base), components, folders_last=pattern.endswith("/")):
        given.setdefault(path)
    return [Path(path) for path in given]


def _select(path: str, components: Sequence[str], *, folders_last: bool) -> Iterator[str]:
    """The paths below the folder `path` that `components` match."""
    if not components:
        yield path
        return
    component, rest = components[0], components[1:]
    folders_only = bool(rest) or folders_last
    if component == "**":
        for folder in _folders_from(path):
            yield from _select(folder, rest, folders_last=folders_last)
    elif any(char in component for char in "*?["):
        for name in _names(path):
            child = os.path.join(path, name)
            if fnmatch.fnmatchcase(name, component) and (not folders_only or os.path.isdir(child)):
                yield from _select(child, rest, folders_last=folders_last)
    else:
        child = os.path.join(path, component)
        if os.path.isdir(child) if folders_only else os.path.exists(child):
            yield from _select(child, rest, folders_last=folders_last)


def _folders_from(folder: str) -> Iterator[str]:
    """`folder`, then each folder below it depth first, never through a link."""
    yield folder
    for name in _names(folder):
        child = os.path.join(folder, name)
        if os.path.isdir(child) and not os.path.islink(child):
            yield from _folders_from(child)


def _names(folder: str) -> list[str]:
    """The names in `folder` in the order it lists them; none if it may not be read."""
    try:
        return os.listdir(folder)
    except PermissionError:
        return []
