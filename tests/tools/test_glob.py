"""find_files' glob: pathlib's results in pathlib's order, reading each folder as it goes."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from hypothesis import example, given, settings
from hypothesis import strategies as st

from nanobot_core.tools._glob import MAX_OPEN_SCANS, glob
from tests.tools.support import planted

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
def test_glob_yields_what_pathlib_yields_in_its_order(
    entries: list[tuple[tuple[str, ...], str]], pattern: str
) -> None:
    """Over trees of files, hidden names, folders and links of every kind, glob is Path.glob."""
    with planted(entries, "a.py") as (root, _):
        assert list(glob(root, pattern)) == list(root.glob(pattern))


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
    assert found == list(tmp_path.glob("**/*"))
    assert 0 < most <= MAX_OPEN_SCANS + 1  # the search's, and the listing of /dev/fd itself
    assert _open_descriptors() == before
    stopped = glob(tmp_path, "**/*")
    for _ in range(MAX_OPEN_SCANS):
        next(stopped)
    assert _open_descriptors() > before
    stopped.close()
    assert _open_descriptors() == before
