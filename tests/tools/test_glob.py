"""find_files' glob: Python 3.11 pathlib's results in its order, on every Python."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nanobot_core.tools._glob import MAX_OPEN_SCANS, glob
from tests.tools.glob_reference import reference_glob
from tests.tools.support import planted

#: find_files' glob, or the model of Python 3.11's it is checked against.
Search = Callable[[Path, str], Iterable[Path]]

NAMES = ["a", "b", ".h", "a.py", "b.txt"]
KINDS = [
    "file",
    "dir",
    "link_to_root",
    "link_to_a.py",
    "link_out",
    "broken_link",
    "loop_link",
]
COMPONENTS = ["*", "**", "**", "a", "b", ".h", "*.py", "?", "[ab]*", ".*", "[!a]", "x", "."]


trees = st.lists(
    st.tuples(
        st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map(tuple), st.sampled_from(KINDS)
    ),
    max_size=25,
)
patterns = (
    st.tuples(st.lists(st.sampled_from(COMPONENTS), min_size=1, max_size=4), st.booleans())
    .map(lambda drawn: "/".join(drawn[0]) + ("/" if drawn[1] else ""))
    .filter(lambda pattern: bool(PurePosixPath(pattern).parts))
)


@settings(max_examples=300, deadline=None)
@given(entries=trees, pattern=patterns)
@example(entries=[(("a", "a", "b.txt"), "file")], pattern="**/**")  # found twice, shown once
@example(entries=[(("a", "a", "b.txt"), "file")], pattern="**/a/**/*")
@example(entries=[(("a", "b", "a"), "dir"), (("a", "a", "a"), "dir")], pattern="**")  # order
@example(entries=[(("b",), "broken_link"), (("a",), "loop_link")], pattern="*/b")
@example(entries=[(("a", "b.txt"), "file")], pattern="a/**")  # folders only
def test_glob_yields_what_python_3_11_pathlib_yields_in_its_order(
    entries: list[tuple[tuple[str, ...], str]], pattern: str
) -> None:
    """Over trees of files, hidden names, folders and links of every kind, glob is 3.11's."""
    with planted(entries, "a.py") as (root, _):
        assert list(glob(root, pattern)) == reference_glob(root, pattern)


@pytest.mark.skipif(
    sys.version_info[:2] != (3, 11), reason="the model is of Python 3.11's Path.glob"
)
@settings(max_examples=300, deadline=None)
@given(entries=trees, pattern=patterns)
@example(entries=[(("a", "a", "b.txt"), "file")], pattern="**/**")
@example(entries=[(("a", "b", "a"), "dir"), (("a", "a", "a"), "dir")], pattern="**")
@example(entries=[(("b",), "broken_link"), (("a",), "loop_link")], pattern="*/b")
@example(entries=[(("a", "b.txt"), "file")], pattern="a/**")
def test_the_reference_model_is_python_3_11_pathlib(
    entries: list[tuple[tuple[str, ...], str]], pattern: str
) -> None:
    """The test oracle, reference_glob, gives what Path.glob gives on Python 3.11, in order."""
    with planted(entries, "a.py") as (root, _):
        assert reference_glob(root, pattern) == list(root.glob(pattern))


def _tree_where_versions_differ(root: Path) -> None:
    """Folders two deep under one folder, a file in each, and a broken link at the top."""
    for middle in ("x", "y"):
        (root / "top" / middle / "deep").mkdir(parents=True)
        (root / "top" / middle / "f.py").touch()
    (root / "gone").symlink_to(root / "nowhere")


@pytest.mark.parametrize("search", [glob, reference_glob])
def test_double_star_goes_down_each_folder_before_its_next_sibling(
    tmp_path: Path, search: Search
) -> None:
    """'**' gives a folder's subtree before its next sibling (3.12 gives the siblings first)."""
    _tree_where_versions_differ(tmp_path)
    top = tmp_path / "top"
    expected = [tmp_path, top]
    for middle in os.listdir(top):
        expected += [top / middle, top / middle / "deep"]
    assert list(search(tmp_path, "**")) == expected


@pytest.mark.parametrize("search", [glob, reference_glob])
@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("gone", []),  # a broken link named in full is not there (3.12 finds it)
        ("*/x/**", ["top/x", "top/x/deep"]),  # '**' last: folders only (3.13 adds files)
        # Each path once (3.13 gives some two and three times).
        ("**/*/**/", ["top", "top/x", "top/x/deep", "top/y", "top/y/deep"]),
    ],
)
def test_what_python_3_11_finds_where_later_versions_differ(
    tmp_path: Path, search: Search, pattern: str, expected: list[str]
) -> None:
    """The cases where Path.glob changed after 3.11 give what 3.11 gives, on every Python."""
    _tree_where_versions_differ(tmp_path)
    found = search(tmp_path, pattern)
    assert sorted(path.relative_to(tmp_path).as_posix() for path in found) == expected


def _open_descriptors() -> int:
    return len(os.listdir("/dev/fd"))


def test_a_deep_tree_keeps_few_folders_open_and_none_once_closed(tmp_path: Path) -> None:
    """Deeper than MAX_OPEN_SCANS a folder is read whole and closed; a closed search closes all."""
    deep = tmp_path.joinpath(*["d"] * (MAX_OPEN_SCANS * 2))
    deep.mkdir(parents=True)
    (deep / "x.py").touch()
    (tmp_path / "top.py").touch()
    before = _open_descriptors()
    search = glob(tmp_path, "**/*")
    most = 0
    found = []
    for path in search:
        found.append(path)
        most = max(most, _open_descriptors() - before)
    assert found == reference_glob(tmp_path, "**/*")
    assert 0 < most <= MAX_OPEN_SCANS + 1  # the search's, and the listing of /dev/fd itself
    assert _open_descriptors() == before
    stopped = glob(tmp_path, "**/*")
    for _ in range(MAX_OPEN_SCANS):
        next(stopped)
    assert _open_descriptors() > before
    stopped.close()
    assert _open_descriptors() == before


@pytest.mark.parametrize("pattern", ["", "/etc/*", "/"])
def test_an_empty_or_absolute_pattern_is_a_value_error(tmp_path: Path, pattern: str) -> None:
    """A pattern is relative to the folder searched: an empty or absolute one is refused."""
    with pytest.raises(ValueError, match="pattern"):
        list(glob(tmp_path, pattern))
