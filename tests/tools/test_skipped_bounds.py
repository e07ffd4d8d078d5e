"""What grep and find_files could not search is counted, and only the few names an answer
shows are kept: a tree of a million unreadable files or folders cannot grow the
search's memory without bound.

Before, both kept every name (and grep every reason) until the answer was made, to
show three of them.
"""

from __future__ import annotations

import errno
import os
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nanobot_core.tools import _glob, builtin
from nanobot_core.tools.base import ToolResult
from nanobot_core.tools.builtin import FindFilesTool, GrepTool, _contained
from tests.tools.support import run

#: Files or folders skipped in each search: enough that keeping each name shows in memory.
_MANY = 10_000
#: Bytes a search of `_MANY` skipped paths may take at its peak (it takes under 200 kB):
#: each name kept would take well over 1 MB more.
_PEAK_BYTES = 500_000


def _peak(work: Callable[[], ToolResult]) -> tuple[ToolResult, int]:
    """What `work` answers, and the most memory Python held for it at once, in bytes.

    Measured on a second call: what the first sets up once (imports, caches) is not counted.
    """
    work()
    tracemalloc.start()
    try:
        result = work()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


def test_grep_keeps_only_the_names_it_shows_of_the_files_it_could_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """10,000 files whose look fails with an I/O error cost grep a count, not 10,000 names
    and reasons."""
    (tmp_path / "seen.txt").write_text("hit\n", encoding="utf-8")
    real_stat = Path.stat
    # Made once: a path made anew interns its name, and Python's table of interned names
    # may grow (by megabytes) while it is measured.
    names = [tmp_path / f"bad{index:02d}.txt" for index in range(100)]

    def walk(*_: Any) -> Iterator[Path]:
        """The walk of a tree of 10,000 files and one more, none made on the disk (under
        100 names, in as many folders)."""
        yield tmp_path / "seen.txt"
        for index in range(_MANY):
            yield names[index % 100]

    def failing_stat(self: Path, *, follow_symlinks: bool = True) -> os.stat_result:
        if self.name.startswith("bad"):
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(self))
        return real_stat(self, follow_symlinks=follow_symlinks)

    monkeypatch.setattr(builtin, "_walk", walk)
    monkeypatch.setattr(Path, "stat", failing_stat)
    result, peak = _peak(lambda: _contained(GrepTool(tmp_path).search, pattern="hit"))
    assert str(result).splitlines() == [
        "seen.txt:1: hit",
        f"[not searched, could not be read (Input/output error): {_MANY} files, bad00.txt, "
        f"bad01.txt, bad02.txt and {_MANY - 3} more]",
    ]
    assert peak < _PEAK_BYTES


def test_find_files_keeps_only_the_names_it_shows_of_the_folders_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """10,000 folders the system refuses cost find_files a count and the three it names
    (the first in sorted order, whatever order they are met in), not 10,000 names."""
    (tmp_path / "seen.txt").write_text("", encoding="utf-8")
    real_find = _glob.find

    def find(base: Path, pattern: str, **options: Any) -> Iterator[_glob.Found]:
        """The search of a tree of 10,000 refused folders, each met twice as '**' meets it."""
        refused = options["refused"]
        for index in reversed(range(_MANY)):
            folder = f"{tmp_path}{os.sep}d{index:05d}"
            refused(folder)
            refused(folder)
        yield from real_find(base, pattern, **options)

    monkeypatch.setattr(_glob, "find", find)
    result, peak = _peak(lambda: run(FindFilesTool(tmp_path).execute(pattern="**/*")))
    assert str(result).splitlines() == [
        "seen.txt",
        f"[not searched, permission denied: {_MANY} folders, d00000, d00001, d00002 and "
        f"{_MANY - 3} more]",
    ]
    assert peak < _PEAK_BYTES
