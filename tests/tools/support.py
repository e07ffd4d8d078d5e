"""Helpers for the tool tests."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import strategies as st

T = TypeVar("T")

SECRET = "TOP-SECRET-OUTSIDE"

#: What every file tool answers once its workspace folder is gone.
WORKSPACE_GONE = (
    "Error: the workspace folder is gone (removed, moved or replaced since the file tools were "
    "set up): no file can be read, written, listed or searched until it is back; tell the user"
)

#: The capabilities that let root pass by permission bits (to read, search and write).
_BYPASSING = ("dac_override", "dac_read_search")

#: Whether `run_unprivileged` runs code the permission bits apply to: not root, or root
#: able to drop the capabilities that pass them by.
CAN_BE_REFUSED = os.geteuid() != 0 or shutil.which("setpriv") is not None


def run_unprivileged(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -c code args`` as a user the permission bits apply to; its output as text.

    Root reads and writes whatever the bits say (``CAP_DAC_OVERRIDE``,
    ``CAP_DAC_READ_SEARCH``): run as root, the child drops both with ``setpriv``
    so that a folder or file made unreadable is refused as it is to any user.
    """
    prefix = (
        []
        if os.geteuid() != 0
        else [
            "setpriv",
            "--bounding-set=" + ",".join(f"-{cap}" for cap in _BYPASSING),
            "--inh-caps=" + ",".join(f"-{cap}" for cap in _BYPASSING),
        ]
    )
    return subprocess.run(
        [*prefix, sys.executable, "-c", code, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on a fresh event loop."""
    return asyncio.run(coroutine)


#: Where each kind of link `plant` makes points, from the tree's root, the folder outside it
#: and the link's own path.
LINK_TARGETS: dict[str, Callable[[Path, Path, Path], str | Path]] = {
    "link_to_root": lambda root, outside, path: root,
    # Relative, to the folder (or whatever is there) "a" at the root.
    "link_in": lambda root, outside, path: os.path.relpath(root / "a", path.parent),
    "link_to_a.py": lambda root, outside, path: root / "a.py",
    "link_to_b": lambda root, outside, path: root / "b",
    "link_out": lambda root, outside, path: outside,
    # The root's parent: the tree and what is beside it (the outside folder).
    "link_up": lambda root, outside, path: root.parent,
    "broken_link": lambda root, outside, path: root / "nowhere",
    "broken_relative": lambda root, outside, path: "nowhere",
    "loop_link": lambda root, outside, path: path,
    "loop_relative": lambda root, outside, path: path.name,
}

#: Every kind of entry `plant` makes.
KINDS = ("file", "dir", *LINK_TARGETS)


def plant(root: Path, outside: Path, entries: list[tuple[tuple[str, ...], str]]) -> None:
    """Files, folders and links of every kind (`KINDS`) at the given paths below `root`.

    The first entry at a path wins; one under a file or a link is left out.
    """
    for parts, kind in entries:
        path = root.joinpath(*parts)
        prefixes = [root.joinpath(*parts[:end]) for end in range(1, len(parts))]
        if os.path.lexists(path) or any(
            prefix.is_symlink() or prefix.is_file() for prefix in prefixes
        ):
            continue  # taken, or under a file or a link
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "file":
            path.touch()
        elif kind == "dir":
            path.mkdir()
        else:
            path.symlink_to(LINK_TARGETS[kind](root, outside, path))


@contextmanager
def planted(
    entries: list[tuple[tuple[str, ...], str]], outside_file: str
) -> Iterator[tuple[Path, Path]]:
    """A scratch folder ``ws`` planted with `entries`, beside ``outside`` holding `outside_file`.

    Both are given resolved, and removed when the block is left. (Not pytest's
    ``tmp_path``: a hypothesis test wants a fresh tree for each example.)
    """
    with tempfile.TemporaryDirectory() as scratch:
        root, outside = Path(scratch, "ws").resolve(), Path(scratch, "outside").resolve()
        root.mkdir()
        outside.mkdir()
        (outside / outside_file).touch()
        plant(root, outside, entries)
        yield root, outside


def path_parts(min_size: int) -> st.SearchStrategy[list[str]]:
    """A path's parts as the model may give them: names a folder or file may have, each once
    (the part a test refuses is known by its name)."""
    return st.lists(
        st.text(
            st.characters(codec="utf-8", exclude_characters="/\x00", exclude_categories=("Cs",)),
            min_size=1,
            max_size=20,
        ).filter(lambda name: name not in {".", ".."}),
        min_size=min_size,
        max_size=4,
        unique=True,
    )
