"""Files and folders grep fails to read for another reason than permission (an I/O error, a
file removed between the walk's listing and its look at it): named in a last line, and
the search goes on.

Before, grep skipped them without a word, and answered ``No matches`` for files whose
lines it had never read. A disk's I/O error cannot be made on purpose: the system call
that fails is made to fail with its errno, on real files.
"""

from __future__ import annotations

import errno
import io
import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import IO, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core.tools import builtin
from nanobot_core.tools.base import ToolResult
from nanobot_core.tools.builtin import GrepTool, _contained

#: The errors a read may fail with that say nothing of the path being gone.
_ERRORS = [errno.EIO, errno.ESTALE, errno.EOVERFLOW, errno.ENOMEM]


def _failing_open(
    tool: GrepTool, failing: dict[str, int]
) -> Callable[..., AbstractContextManager[IO[Any]]]:
    """`tool.open`, except that a file named in `failing` fails with its errno when read."""
    real_open = tool.open

    @contextmanager
    def opening(target: Path, mode: str = "r") -> Iterator[IO[Any]]:
        code = failing.get(target.name)
        if code is None:
            with real_open(target, mode) as handle:
                yield handle
            return
        # As the system reports it: the error names the file by its full path on the host.
        raise OSError(code, os.strerror(code), str(target))

    return opening


def _search(tool: GrepTool, **arguments: Any) -> ToolResult:
    """What grep's child process answers, searched here (the child imports the installed
    package, not this one)."""
    return _contained(tool.search, **arguments)


def test_a_file_that_fails_to_read_is_named_with_the_systems_reason(tmp_path: Path) -> None:
    """A file whose read fails with an I/O error is named from the workspace with the
    system's reason, the search goes on, and no answer says where the workspace is."""
    (tmp_path / "a.txt").write_text("hit\n", encoding="utf-8")
    (tmp_path / "bad.txt").write_text("hit\n", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "worse.txt").write_text("hit\n", encoding="utf-8")
    grep = GrepTool(tmp_path)
    grep.open = _failing_open(grep, {"bad.txt": errno.EIO, "worse.txt": errno.ESTALE})  # type: ignore[method-assign]
    result = _search(grep, pattern="hit")
    assert str(result).splitlines() == [
        "a.txt:1: hit",
        "[not searched, could not be read (Input/output error, Stale file handle): 2 files, "
        "bad.txt, sub/worse.txt]",
    ]
    alone = _search(grep, pattern="hit", path="bad.txt")
    assert alone == (
        "No matches for 'hit'.\n"
        "[not searched, could not be read (Input/output error): 1 file, bad.txt]"
    )
    assert str(tmp_path) not in result and str(tmp_path) not in alone


def test_a_file_removed_between_the_listing_and_its_look_is_named(tmp_path: Path) -> None:
    """A file listed by the walk and removed before grep looks at it is named as changed;
    a link to nothing, never a file to search, is still passed over without a word."""
    for name in ("a.txt", "gone.txt", "z.txt"):
        (tmp_path / name).write_text("hit\n", encoding="utf-8")
    (tmp_path / "dangling").symlink_to("nowhere")
    real_walk = builtin._walk

    def walk_then_remove(*args: Any) -> Iterator[Path]:
        for file in real_walk(*args):
            if file.name == "gone.txt":
                file.unlink()  # after the listing, before grep looks at it
            yield file

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(builtin, "_walk", walk_then_remove)
        result = _search(GrepTool(tmp_path), pattern="hit")
    assert str(result).splitlines() == [
        "a.txt:1: hit",
        "z.txt:1: hit",
        "[not searched, changed while the search ran (removed, or replaced by a link or a "
        "folder): 1 file, gone.txt]",
    ]


def test_a_file_whose_look_fails_with_an_io_error_is_named(tmp_path: Path) -> None:
    """A file the system fails to look at (stat) with an I/O error is named, not passed over."""
    (tmp_path / "a.txt").write_text("hit\n", encoding="utf-8")
    (tmp_path / "bad.txt").write_text("hit\n", encoding="utf-8")
    real_stat = Path.stat

    def failing_stat(self: Path, *, follow_symlinks: bool = True) -> os.stat_result:
        if self.name == "bad.txt":
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(self))
        return real_stat(self, follow_symlinks=follow_symlinks)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Path, "stat", failing_stat)
        result = _search(GrepTool(tmp_path), pattern="hit")
    assert str(result).splitlines() == [
        "a.txt:1: hit",
        "[not searched, could not be read (Input/output error): 1 file, bad.txt]",
    ]


def test_a_folder_that_fails_to_read_is_named_and_the_walk_goes_on(tmp_path: Path) -> None:
    """A folder the walk fails to open with an I/O error is named as a folder not searched."""
    for folder in ("a", "bad", "c"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "f.txt").write_text("hit\n", encoding="utf-8")
    real_open = os.open

    def open_failing(path: Any, flags: int, *args: Any, dir_fd: int | None = None) -> int:
        if dir_fd is not None and path == "bad":
            raise OSError(errno.EIO, os.strerror(errno.EIO), path)
        return real_open(path, flags, *args, dir_fd=dir_fd)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "open", open_failing)
        result = _search(GrepTool(tmp_path), pattern="hit")
    assert str(result).splitlines() == [
        "a/f.txt:1: hit",
        "c/f.txt:1: hit",
        "[not searched, could not be read (Input/output error): 1 folder, bad]",
    ]


def test_many_files_that_fail_to_read_make_one_short_line(tmp_path: Path) -> None:
    """5,000 files that fail to read are one line: three named, the rest counted."""
    names = [f"f{index:04d}.txt" for index in range(5_000)]
    for name in names:
        (tmp_path / name).write_text("hit\n", encoding="utf-8")
    grep = GrepTool(tmp_path)
    grep.open = _failing_open(grep, dict.fromkeys(names, errno.EIO))  # type: ignore[method-assign]
    result = _search(grep, pattern="hit")
    assert result == (
        "No matches for 'hit'.\n"
        "[not searched, could not be read (Input/output error): 5000 files, f0000.txt, "
        "f0001.txt, f0002.txt and 4997 more]"
    )


_NAME = st.text(
    st.characters(codec="utf-8", exclude_characters="/\x00", exclude_categories=("Cs",)),
    min_size=1,
    max_size=20,
).filter(lambda name: name not in {".", ".."})


@settings(max_examples=40, deadline=None)
@given(files=st.dictionaries(_NAME, st.sampled_from([None, *_ERRORS]), min_size=1, max_size=8))
def test_whatever_files_fail_to_read_each_is_counted_and_the_rest_searched(
    files: dict[str, int | None],
) -> None:
    """Whatever the files are called and whichever fail with which error, the good ones are
    searched, the failed ones counted (the first three named, in the walk's order, with
    the first three reasons), and the workspace's place is never shown."""
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch).resolve()
        for name in files:
            (root / name).write_text("hit\n", encoding="utf-8")
        failing = {name: code for name, code in files.items() if code is not None}
        grep = GrepTool(root)
        grep.open = _failing_open(grep, failing)  # type: ignore[method-assign]
        result = str(_search(grep, pattern="hit"))
    good = sorted(name for name in files if name not in failing)
    lines = [f"{name}:1: hit" for name in good] or ["No matches for 'hit'."]
    if failing:
        order = sorted(failing)
        reasons = list(dict.fromkeys(os.strerror(failing[name]) for name in order))
        why = ", ".join(reasons[:3]) + (" and more" if len(reasons) > 3 else "")
        count = "1 file" if len(order) == 1 else f"{len(order)} files"
        more = f" and {len(order) - 3} more" if len(order) > 3 else ""
        lines.append(
            f"[not searched, could not be read ({why}): {count}, {', '.join(order[:3])}{more}]"
        )
    assert result == "\n".join(lines)
    assert scratch not in result


def test_a_file_too_large_to_search_is_named_with_how_to_read_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file over grep's size limit is named in a last line saying so, not passed over
    in silence as if it had been searched and held no match."""
    monkeypatch.setattr(builtin, "MAX_GREP_FILE_BYTES", 10)
    (tmp_path / "small.txt").write_text("hit\n", encoding="utf-8")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "big.log").write_text("hit\n" * 10, encoding="utf-8")
    result = _search(GrepTool(tmp_path), pattern="hit")
    assert str(result).splitlines() == [
        "small.txt:1: hit",
        "[not searched, larger than 10 bytes (read_file reads one by parts): 1 file, logs/big.log]",
    ]
    alone = _search(GrepTool(tmp_path), pattern="hit", path="logs")
    assert str(alone).splitlines() == [
        "No matches for 'hit'.",
        "[not searched, larger than 10 bytes (read_file reads one by parts): 1 file, logs/big.log]",
    ]


def test_a_search_stopped_at_one_match_says_one_match(tmp_path: Path) -> None:
    """The stop line of a search limited to one match says "1 match", not "1 matches"."""
    (tmp_path / "a.txt").write_text("hit\nhit\n", encoding="utf-8")
    result = _search(GrepTool(tmp_path), pattern="hit", max_matches=1)
    assert str(result).splitlines() == [
        "a.txt:1: hit",
        "[stopped after 1 match; narrow the search]",
    ]


class _FailingPart(io.FileIO):
    """A file that reads as it is up to byte `fail_at`, then fails with an I/O error."""

    def __init__(self, fd: int, fail_at: int) -> None:
        super().__init__(fd, "rb")
        self.fail_at = fail_at

    def readinto(self, buffer: Any) -> int | None:
        position = self.tell()
        if position >= self.fail_at:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return super().readinto(memoryview(buffer)[: self.fail_at - position])


def _failing_part_way(tool: GrepTool, name: str, fail_at: int) -> None:
    """`tool.open`, except that the file `name` fails with an I/O error past byte `fail_at`."""
    real_open = tool.open

    @contextmanager
    def opening(target: Path, mode: str = "r") -> Iterator[IO[Any]]:
        with real_open(target, mode) as handle:
            if target.name != name:
                yield handle
                return
            with io.BufferedReader(_FailingPart(os.dup(handle.fileno()), fail_at)) as failing:
                yield failing

    tool.open = opening  # type: ignore[method-assign]


def test_the_matches_found_before_a_read_fails_part_way_stand(tmp_path: Path) -> None:
    """A file whose read fails with an I/O error part-way keeps the matches found before, and
    is named as searched up to its last line read, not as unread."""
    lines = ["hit 1", *(["filler " * 10] * 300), "hit 2"]
    (tmp_path / "a.txt").write_text("hit\n", encoding="utf-8")
    (tmp_path / "big.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    grep = GrepTool(tmp_path)
    _failing_part_way(grep, "big.txt", fail_at=10_000)  # past the first look, before "hit 2"
    result = _search(grep, pattern="hit")
    read = sum(1 for end in itertools.accumulate(len(line) + 1 for line in lines) if end <= 10_000)
    assert str(result).splitlines() == [
        "a.txt:1: hit",
        "big.txt:1: hit 1",
        "[searched only in part, the read stopped (Input/output error): 1 file, big.txt up to "
        f"line {read}]",
    ]
    alone = _search(grep, pattern="hit", path="big.txt")
    assert str(alone).splitlines()[0] == "big.txt:1: hit 1"


def test_a_file_cut_short_while_it_is_read_is_named_with_its_matches(tmp_path: Path) -> None:
    """A file made shorter while grep reads it (a log rotated by truncation) keeps the
    matches read before, and is named as searched only up to its last line read."""
    lines = ["hit 1", *(["filler " * 10] * 300), "hit 2"]
    big = tmp_path / "big.txt"
    big.write_text("\n".join(lines) + "\n", encoding="utf-8")
    grep = GrepTool(tmp_path)
    real_open = grep.open

    class Truncating(io.FileIO):
        def readinto(self, buffer: Any) -> int | None:
            if self.tell() >= 16_384:
                os.truncate(big, 100)  # by another process, in between two reads
            return super().readinto(buffer)

    @contextmanager
    def opening(target: Path, mode: str = "r") -> Iterator[IO[Any]]:
        with (
            real_open(target, mode) as handle,
            io.BufferedReader(Truncating(os.dup(handle.fileno()), "rb")) as truncating,
        ):
            yield truncating

    grep.open = opening  # type: ignore[method-assign]
    result = _search(grep, pattern="hit")
    # Each line begun before the cut, the last as far as it was read.
    starts = itertools.accumulate((len(line) + 1 for line in lines), initial=0)
    read = sum(1 for start in starts if start < 16_384)
    assert str(result).splitlines() == [
        "big.txt:1: hit 1",
        "[searched only in part, the read stopped (cut short while read): 1 file, big.txt up to "
        f"line {read}]",
    ]


#: How many bytes grep looks at for binary content in the generated files.
_SNIFF = 16


@settings(max_examples=60, deadline=None)
@given(
    hits=st.lists(st.booleans(), min_size=1, max_size=400),
    width=st.integers(0, 30),
    percent=st.integers(0, 100),
)
def test_wherever_a_read_fails_the_lines_read_before_are_searched(
    hits: list[bool], width: int, percent: int
) -> None:
    """Whatever the lines and wherever the read fails, the matches in the lines read whole
    before it are shown and the file is named up to the last of them; failed before any
    line was read (in the look for binary content), it is named as not searched."""
    lines = [("hit " if hit else "") + "x" * width for hit in hits]
    text = "\n".join(lines) + "\n"
    fail_at = len(text) * percent // 100  # the whole file read, at 100
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch).resolve()
        (root / "f.txt").write_text(text, encoding="utf-8")
        grep = GrepTool(root)
        if fail_at < len(text):
            _failing_part_way(grep, "f.txt", fail_at)
        with pytest.MonkeyPatch.context() as patch:
            # A short look for binary content: most generated files are read past it.
            patch.setattr(builtin, "BINARY_SNIFF_BYTES", _SNIFF)
            result = str(_search(grep, pattern="hit"))
    ends = list(itertools.accumulate(len(line) + 1 for line in lines))
    if fail_at >= len(text):
        read = len(lines)
    elif fail_at < min(len(text), _SNIFF):
        read = 0  # the look for a NUL byte failed: not one line searched
    else:
        read = sum(1 for end in ends if end <= fail_at)
    shown = [
        f"f.txt:{number}: {line.rstrip()}"
        for number, line in enumerate(lines[:read], 1)
        if "hit" in line
    ]
    expected = shown or ["No matches for 'hit'."]
    if read == 0:
        expected.append("[not searched, could not be read (Input/output error): 1 file, f.txt]")
    elif read < len(lines):
        expected.append(
            "[searched only in part, the read stopped (Input/output error): 1 file, f.txt up "
            f"to line {read}]"
        )
    assert result == "\n".join(expected)


@pytest.mark.parametrize("change", ["removed", "file", "link"])
def test_a_folder_changed_before_the_walk_goes_into_it_is_named(
    tmp_path: Path, change: str
) -> None:
    """A folder listed, then removed, or replaced by a file or by a link out, before grep's
    walk goes into it is named as changed (as find_files names it), never followed out."""
    root = tmp_path / "ws"
    for folder in ("a", "bad", "c"):
        (root / folder).mkdir(parents=True)
        (root / folder / "f.txt").write_text("hit\n", encoding="utf-8")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("hit OUTSIDE\n", encoding="utf-8")
    real_open = os.open

    def opening(path: Any, flags: int, *args: Any, dir_fd: int | None = None) -> int:
        bad = root / "bad"
        if dir_fd is not None and path == "bad" and bad.is_dir() and not bad.is_symlink():
            shutil.rmtree(bad)  # between the listing of its folder and the walk going in
            if change == "file":
                bad.write_text("hit, now a file\n", encoding="utf-8")
            elif change == "link":
                bad.symlink_to(outside, target_is_directory=True)
        return real_open(path, flags, *args, dir_fd=dir_fd)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "open", opening)
        result = _search(GrepTool(root), pattern="hit")
    assert str(result).splitlines() == [
        "a/f.txt:1: hit",
        "c/f.txt:1: hit",
        "[not searched, changed while the search ran (removed, or replaced by a file or a "
        "link): 1 folder, bad]",
    ]
    assert str(tmp_path) not in result
