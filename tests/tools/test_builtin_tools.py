"""The built-in workspace tools: what each one reads, lists, finds, writes and edits."""

from __future__ import annotations

import collections
import os
import re
import sys
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanobot_core.builtins.workspace_tools import nanobot_tools
from nanobot_core.config import Config, GovernanceConfig
from nanobot_core.kernel.context import PluginContext
from nanobot_core.tools.base import ToolResult
from nanobot_core.tools.builtin import (
    MAX_EDIT_FILE_BYTES,
    MAX_LINE_CHARS,
    MAX_LISTED_ENTRIES,
    SKIPPED_DIRS,
    EditFileTool,
    FindFilesTool,
    GrepTool,
    ListDirTool,
    ReadFileTool,
    WorkspaceTool,
    WriteFileTool,
    _contained,
    _walk,
)
from nanobot_core.tools.workspace import open_in_workspace, resolve_in_workspace
from tests.tools.glob_reference import reference_glob
from tests.tools.support import KINDS, planted, run


def test_hook_contributes_six_tools_with_flags(ctx: PluginContext) -> None:
    """The built-in plugin gives the six tools; the four readers are read-only."""
    tools = {t.name: t for t in nanobot_tools(ctx)}
    assert sorted(tools) == [
        "edit_file",
        "find_files",
        "grep",
        "list_dir",
        "read_file",
        "write_file",
    ]
    assert {n for n, t in tools.items() if t.read_only} == {
        "find_files",
        "grep",
        "list_dir",
        "read_file",
    }
    assert all(t.workspace == ctx.workspace.resolve() for t in tools.values())  # type: ignore[attr-defined]


def test_output_budget_stays_under_the_governance_limit(workspace: Path) -> None:
    """Tools are built to answer below max_tool_result_chars, so results are never offloaded."""
    config = Config(governance=GovernanceConfig(max_tool_result_chars=6_000))
    reader = ReadFileTool.create(PluginContext(workspace=workspace, config=config))
    assert reader.max_output_chars < 6_000


# -- read_file ------------------------------------------------------------------------------


def test_read_file_numbers_lines(workspace: Path) -> None:
    """Every line comes with its 1-based number."""
    result = run(ReadFileTool(workspace).execute(path="notes.txt"))
    assert result == "     1\talpha\n     2\tbeta\n     3\tgamma"


def test_read_file_pages_with_offset_and_limit(workspace: Path) -> None:
    """offset/limit select lines, and the footer says where to continue."""
    result = run(ReadFileTool(workspace).execute(path="notes.txt", offset=2, limit=1))
    assert result == ("     2\tbeta\n\n[Lines 2-2 of 3. Call read_file with offset=3 to continue.]")


def test_read_file_stops_at_the_output_budget(workspace: Path) -> None:
    """A file larger than the budget is cut at a line, with a footer to continue."""
    (workspace / "big.txt").write_text("".join(f"line {i}\n" for i in range(1, 1001)))
    result = run(ReadFileTool(workspace, max_output_chars=200).execute(path="big.txt"))
    assert len(result) < 300
    assert result.startswith("     1\tline 1\n")
    assert "of 1000. Call read_file with offset=" in result


def test_read_file_reads_offloaded_results(workspace: Path) -> None:
    """A result offloaded under .nanobot/cache/ is read back like any workspace file."""
    cache = workspace / ".nanobot" / "cache"
    cache.mkdir(parents=True)
    (cache / "ab12.txt").write_text("offloaded output\n", encoding="utf-8")
    result = run(ReadFileTool(workspace).execute(path=".nanobot/cache/ab12.txt"))
    assert result == "     1\toffloaded output"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("missing.txt", "Error: file not found: missing.txt"),
        ("src", "Error: src is a directory; use list_dir"),
        ("blob.bin", "Error: blob.bin is a binary file"),
    ],
)
def test_read_file_errors(workspace: Path, path: str, message: str) -> None:
    """Missing files, directories and binary files give clear Error results."""
    (workspace / "blob.bin").write_bytes(b"\x00\x01\x02")
    result = run(ReadFileTool(workspace).execute(path=path))
    assert result.is_error and result.startswith(message)


def test_read_file_offset_past_the_end(workspace: Path) -> None:
    """An offset beyond the last line is an error that gives the line count."""
    result = run(ReadFileTool(workspace).execute(path="notes.txt", offset=10))
    assert result == "Error: offset 10 is past the end of notes.txt (3 lines)"


def test_read_file_holds_only_the_start_of_a_huge_line(workspace: Path) -> None:
    """A file of one 32 MiB line costs its shown start in memory, not the line, and says so."""
    size = 32 * 1024 * 1024
    (workspace / "dump.json").write_bytes(b"[" + b"1," * (size // 2 - 1) + b"]\nend\n")
    tracemalloc.start()
    try:
        result = run(ReadFileTool(workspace).execute(path="dump.json"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    first, second = result.splitlines()
    assert first == (
        f"     1\t[{'1,' * 999}1… [line cut, {size} characters; read_file with "
        "start_char=2000 shows the rest]"
    )
    assert second == "     2\tend"
    assert peak < 2 * 1024 * 1024


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=st.lists(
        st.tuples(st.sampled_from("ab€"), st.integers(0, 2 * MAX_LINE_CHARS + 5)),
        max_size=6,
    ),
    ending=st.sampled_from(["\n", "\r\n", "\r"]),
    last=st.booleans(),
    offset=st.integers(1, 4),
)
def test_read_file_shows_each_line_as_a_whole_read_would(
    workspace: Path,
    lines: list[tuple[str, int]],
    ending: str,
    last: bool,
    offset: int,
) -> None:
    """Whatever the lines, their endings and the page, each line shown is its text or, when
    long, its start with its length and the start_char of the rest."""
    text = ending.join(char * count for char, count in lines) + (ending if last else "")
    (workspace / "t.txt").write_bytes(text.encode("utf-8"))
    result = run(
        ReadFileTool(workspace, max_output_chars=100_000).execute(path="t.txt", offset=offset)
    )
    # The model's view: every ending read as one newline, positions counted in that text.
    read = text.replace("\r\n", "\n").replace("\r", "\n").splitlines(keepends=True)
    if not read:
        assert result == "(empty file)"
        return
    if offset > len(read):
        assert result == f"Error: offset {offset} is past the end of t.txt ({len(read)} lines)"
        return
    expected = []
    for number, line in enumerate(read[offset - 1 :], start=offset):
        bare = line.rstrip("\n")
        if len(bare) > MAX_LINE_CHARS:
            rest = sum(map(len, read[: number - 1])) + MAX_LINE_CHARS
            bare = (
                f"{bare[:MAX_LINE_CHARS]}… [line cut, {len(bare)} characters; read_file with "
                f"start_char={rest} shows the rest]"
            )
        expected.append(f"{number:>6}\t{bare}")
    assert str(result).split("\n") == expected


# -- list_dir and find_files ----------------------------------------------------------------


def test_list_dir_marks_folders_sizes_and_links(workspace: Path) -> None:
    """Entries are sorted; folders end with '/', files show their size, links end with '@'."""
    result = run(ListDirTool(workspace).execute())
    assert result.splitlines() == [
        "link_dir@",
        "link_file@",
        "notes.txt  (17 bytes)",
        "src/",
    ]


def test_list_dir_of_a_file_is_an_error(workspace: Path) -> None:
    """Listing a file points the model to read_file."""
    result = run(ListDirTool(workspace).execute(path="notes.txt"))
    assert result.is_error and "use read_file" in result


def test_list_dir_of_a_huge_folder_holds_only_what_it_shows(workspace: Path) -> None:
    """Of 20,000 entries the first 500 by name are listed and the rest only counted."""
    folder = workspace / "many"
    folder.mkdir()
    for n in range(20_000):
        (folder / f"f{n * 7_919 % 20_000:05d}.txt").touch()  # created out of name order
    tracemalloc.start()
    try:
        result = run(ListDirTool(workspace).execute(path="many"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert MAX_LISTED_ENTRIES == 500
    assert result.splitlines() == [
        *(f"f{n:05d}.txt  (0 bytes)" for n in range(500)),
        "[... 19500 more entries not shown; find_files with a pattern finds the others]",
    ]
    assert peak < 2 * 1024 * 1024


def test_find_files_globs_one_level_or_recursively(workspace: Path) -> None:
    """'*.txt' matches one level; '**/*.py' matches at any depth; results are relative."""
    (workspace / "src" / "deep").mkdir()
    (workspace / "src" / "deep" / "util.py").write_text("", encoding="utf-8")
    finder = FindFilesTool(workspace)
    assert run(finder.execute(pattern="*.txt")) == "notes.txt"
    assert run(finder.execute(pattern="**/*.py")).splitlines() == [
        "src/deep/util.py",
        "src/main.py",
    ]
    assert run(finder.execute(pattern="*.py", path="src")) == "src/main.py"


def test_find_files_stops_after_the_paths_it_could_show(workspace: Path) -> None:
    """'**/*' over 20,000 files stops once the answer could show no more paths, and says so."""
    for folder in range(200):
        (workspace / "data" / f"d{folder:03d}").mkdir(parents=True)
        for n in range(100):
            (workspace / "data" / f"d{folder:03d}" / f"{n:02d}").touch()
    finder = FindFilesTool(workspace, max_output_chars=2_000)  # at most 1,000 paths
    tracemalloc.start()
    try:
        result = run(finder.execute(pattern="**/*", path="data"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    *paths, cut, note = result.splitlines()
    assert note == (
        "[stopped after 1000 paths, in the order found, and more match; narrow the pattern or path]"
    )
    assert cut.startswith("[... ") and cut.endswith(" more paths not shown; narrow the search]")
    assert len(result) < 2_100 and paths == sorted(paths)  # the notes past the budget
    assert all(path.startswith("data/d") for path in paths)
    assert peak < 2 * 1024 * 1024


def test_find_files_on_one_huge_folder_reads_no_further_than_it_shows(workspace: Path) -> None:
    """'*' over a folder of 1,500 or of 6,000 files stops at 1,000 paths, holding as much."""
    folder = workspace / "many"
    folder.mkdir()
    finder = FindFilesTool(workspace, max_output_chars=2_000)  # at most 1,000 paths
    run(finder.execute(pattern="*", path="many"))  # the pattern's compiled form is cached
    peaks = []
    made = 0
    for size in (1_500, 6_000):
        while made < size:
            (folder / f"f{made:05d}").touch()
            made += 1
        tracemalloc.start()
        try:
            result = run(finder.execute(pattern="*", path="many"))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert result.splitlines()[-1] == (
            "[stopped after 1000 paths, in the order found, and more match; narrow the pattern "
            "or path]"
        )
        peaks.append(peak)
    # pathlib's glob held every entry of the folder: 0.4 MB for 1,500, 1.3 MB for 6,000.
    assert peaks[1] < peaks[0] * 1.2


def test_find_files_resolves_only_the_links_it_shows(workspace: Path) -> None:
    """Of 1,000 files and 10 links shown, only the links are resolved (realpath once each)."""
    folder = workspace / "many"
    folder.mkdir()
    for n in range(1_000):
        (folder / f"f{n:04d}").touch()
    for n in range(10):
        (folder / f"link{n}").symlink_to(f"f{n:04d}")
    finder = FindFilesTool(workspace)
    calls = collections.Counter[str]()

    def count(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            calls[frame.f_code.co_name] += 1

    sys.setprofile(count)
    try:
        result = finder.run(pattern="*", path="many")
    finally:
        sys.setprofile(None)
    assert len(str(result).splitlines()) == 1_010
    assert 10 <= calls["realpath"] < 13  # the links, and the path the model gave


def test_find_files_matches_hidden_names_and_a_final_slash_only_folders(workspace: Path) -> None:
    """'*' matches names starting with '.', folders end with '/', and 'x/' finds only folders."""
    (workspace / ".env").touch()
    (workspace / ".cache").mkdir()
    (workspace / ".cache" / "x").touch()
    finder = FindFilesTool(workspace)
    assert run(finder.execute(pattern="*")).splitlines() == [".cache/", ".env", "notes.txt", "src/"]
    assert run(finder.execute(pattern="*/")).splitlines() == [".cache/", "src/"]
    assert run(finder.execute(pattern=".*/*")) == ".cache/x"


def test_find_files_goes_through_a_named_link_but_never_into_one_with_a_double_star(
    workspace: Path,
) -> None:
    """'**' does not enter a link to a folder, so no file is found twice; 'link/*' goes through."""
    (workspace / "inner").symlink_to(workspace / "src", target_is_directory=True)
    finder = FindFilesTool(workspace)
    assert run(finder.execute(pattern="**/*.py")) == "src/main.py"
    assert run(finder.execute(pattern="inner/*.py")) == "src/main.py"
    assert run(finder.execute(pattern="**/")).splitlines() == ["./", "src/"]


def test_find_files_shows_a_link_loop_by_its_name(workspace: Path, outside: Path) -> None:
    """A loop of links is shown by its link's name (not a RuntimeError) only if that is inside."""
    (workspace / "src" / "loop").symlink_to("loop")
    (workspace / "src" / "a").symlink_to("b")
    (workspace / "src" / "b").symlink_to("a")
    (workspace / "src" / "via_out").symlink_to(outside / "c")  # back through the workspace
    (outside / "c").symlink_to(workspace / "src" / "via_out")
    (workspace / "src" / "to_out").symlink_to(outside / "d")  # a loop outside
    (outside / "d").symlink_to(outside / "e")
    (outside / "e").symlink_to(outside / "d")
    finder = FindFilesTool(workspace)
    expected = ["src/a", "src/b", "src/loop", "src/main.py", "src/via_out"]
    assert run(finder.execute(pattern="src/*")).splitlines() == expected
    assert run(finder.execute(pattern="**/*")).splitlines() == ["notes.txt", "src/", *expected]


def test_find_files_shows_each_link_as_where_it_leads_and_none_that_leads_out(
    workspace: Path, outside: Path
) -> None:
    """A link is shown as its target inside the workspace; one out, or a path through one, never."""
    (workspace / "src" / "deep").mkdir()
    (workspace / "src" / "deep" / "x.py").touch()
    (workspace / "src" / "to_notes").symlink_to("../notes.txt")  # a file inside, relative
    (workspace / "src" / "back").symlink_to(f"../../{workspace.name}/src/deep")  # out and in
    (workspace / "src" / "out").symlink_to(outside, target_is_directory=True)  # deeper, out
    (workspace / "src" / "gone").symlink_to("nowhere")  # dangling: shown where it points
    (workspace / "up").symlink_to("..", target_is_directory=True)  # the workspace's parent
    (outside / "in").symlink_to(workspace / "src", target_is_directory=True)
    finder = FindFilesTool(workspace)
    assert run(finder.execute(pattern="src/*")).splitlines() == [
        "notes.txt",
        "src/deep/",
        "src/deep/",
        "src/main.py",
        "src/nowhere",
    ]
    assert run(finder.execute(pattern="src/back/*")) == "src/deep/x.py"
    # Of the outside folder only its link back in is shown, as where it leads.
    assert run(finder.execute(pattern="src/out/*")) == "src/"
    assert run(finder.execute(pattern="src/out/**/*")) == "src/"
    assert "No files match" in run(finder.execute(pattern="src/out/*.txt"))
    assert run(finder.execute(pattern="up/*")) == "./"  # the workspace; 'outside' is not shown
    assert run(finder.execute(pattern="up/*/*.txt")) == "notes.txt"
    assert run(finder.execute(pattern="link_dir/in/*.py")) == "src/main.py"  # out and back in
    assert run(finder.execute(pattern="**/*.py")).splitlines() == ["src/deep/x.py", "src/main.py"]


_KINDS = [
    "file",
    "dir",
    "link_in",
    "link_to_b",
    "link_out",
    "link_up",
    "broken_relative",
    "loop_relative",
]


def _found_as_before(root: Path, pattern: str) -> str:
    """What find_files answered before it was made faster: Python 3.11's Path.glob (modelled,
    as later versions' differ), each match resolved."""
    found = []
    for match in reference_glob(root, pattern):
        resolved = Path(os.path.realpath(match))
        if resolved.is_relative_to(root):
            shown = resolved.relative_to(root).as_posix() if resolved != root else "."
            found.append(shown + ("/" if match.is_dir() else ""))
    return "\n".join(sorted(found)) if found else f"No files match {pattern!r} in the workspace."


@settings(max_examples=300, deadline=None)
@given(
    entries=st.lists(
        st.tuples(
            st.lists(st.sampled_from(["a", "b", ".h", "c.py"]), min_size=1, max_size=3).map(tuple),
            st.sampled_from(_KINDS),
        ),
        max_size=20,
    ),
    pattern=st.lists(
        st.sampled_from(["*", "**", "a", "b", "*.py", ".*", "[ab]", "ws", "outside", "x"]),
        min_size=1,
        max_size=4,
    ).map("/".join),
)
def test_find_files_shows_what_each_match_resolves_to_inside_the_workspace(
    entries: list[tuple[tuple[str, ...], str]], pattern: str
) -> None:
    """Over trees with links in, out, up, broken and looping, each match is shown as it resolves."""
    with planted(entries, "c.py") as (root, _):
        assert str(run(FindFilesTool(root).execute(pattern=pattern))) == _found_as_before(
            root, pattern
        )


def test_find_files_without_match_is_not_an_error(workspace: Path) -> None:
    """No match is a plain answer, not a failure."""
    result = run(FindFilesTool(workspace).execute(pattern="*.rs"))
    assert result == "No files match '*.rs' in the workspace." and not result.is_error


@pytest.mark.parametrize("pattern", ["***", "a**", "**.py", "src/***/x"])
def test_find_files_names_a_misplaced_double_star(workspace: Path, pattern: str) -> None:
    """'**' inside a name is an Error result naming the pattern and the rule, not a ValueError."""
    result = run(FindFilesTool(workspace).execute(pattern=pattern))
    assert result.is_error
    assert f"invalid pattern {pattern!r}: '**' must be a whole path component" in result


@pytest.mark.parametrize("pattern", [".", "./", "./."])
def test_find_files_refuses_a_pattern_that_names_no_file(workspace: Path, pattern: str) -> None:
    """A pattern of only '.' is an Error result, not pathlib's internal error."""
    result = run(FindFilesTool(workspace).execute(pattern=pattern))
    assert result.is_error and f"pattern {pattern!r} names no file" in result


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(pattern=st.text(alphabet="*?[]!/.ax\\-", max_size=10))
def test_find_files_answers_any_pattern(workspace: Path, pattern: str) -> None:
    """Whatever pattern the model sends, find_files answers with a result and never raises."""
    result = run(FindFilesTool(workspace).execute(pattern=pattern))
    assert isinstance(str(result), str)


# -- grep -----------------------------------------------------------------------------------


def test_grep_prints_path_line_and_text(workspace: Path) -> None:
    """Each matching line is shown as path:line: text."""
    result = run(GrepTool(workspace).execute(pattern=r"^(beta|gamma)"))
    assert result.splitlines() == ["notes.txt:2: beta", "notes.txt:3: gamma"]


def test_grep_filters_by_glob_and_ignores_case(workspace: Path) -> None:
    """glob narrows the files; ignore_case matches regardless of case."""
    grep = GrepTool(workspace)
    assert run(grep.execute(pattern="PRINT", ignore_case=True, glob="*.py")) == (
        "src/main.py:1: print('hello')"
    )
    assert run(grep.execute(pattern="print", glob="*.txt")) == "No matches for 'print'."


def test_grep_stops_after_max_matches(workspace: Path) -> None:
    """The number of matches is capped and the cap is announced."""
    (workspace / "many.txt").write_text("hit\n" * 50, encoding="utf-8")
    result = run(GrepTool(workspace).execute(pattern="hit", max_matches=3))
    assert result.splitlines() == [
        "many.txt:1: hit",
        "many.txt:2: hit",
        "many.txt:3: hit",
        "[stopped after 3 matches; narrow the search]",
    ]


def test_grep_skips_binary_files_and_reports_bad_regex(workspace: Path) -> None:
    """Binary files are skipped; an invalid pattern is an Error result."""
    (workspace / "blob.bin").write_bytes(b"alpha\x00beta")
    grep = GrepTool(workspace)
    assert run(grep.execute(pattern="alpha")) == "notes.txt:1: alpha"
    bad = run(grep.execute(pattern="(unclosed"))
    assert bad.is_error and "invalid regular expression" in bad


_SKIPPED = (
    "[not searched, changed while the search ran (removed, or replaced by a link or a folder): "
)


def _grep_changing(
    grep: GrepTool, change: Callable[[Path], None], **arguments: object
) -> ToolResult:
    """grep's search (in this process), each file changed by `change` just before it is read.

    The change comes after the file was checked (found, in the workspace, small enough).
    """
    search_code = GrepTool._search.__code__

    def before_read(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is search_code:
            change(frame.f_locals["file"])

    sys.setprofile(before_read)
    try:
        # What the search's child process runs (-I: it imports the installed package, not this).
        return _contained(grep.search, **arguments)
    finally:
        sys.setprofile(None)


@pytest.mark.parametrize("change", ["removed", "link_in", "link_out", "folder", "loop"])
def test_grep_goes_on_past_a_file_that_changes_before_it_is_read_and_names_it(
    workspace: Path, outside: Path, change: str
) -> None:
    """A file removed or replaced (link, folder, loop) after its check is named, not fatal."""
    (workspace / "b.txt").write_text("alpha b\n", encoding="utf-8")
    (workspace / "c.txt").write_text("alpha c\n", encoding="utf-8")
    changing = (workspace / "b.txt").resolve()

    def swap(file: Path) -> None:
        if file != changing:
            return
        file.unlink()
        if change == "link_in":
            file.symlink_to("c.txt")
        elif change == "link_out":
            file.symlink_to(outside / "secret.txt")
        elif change == "folder":
            file.mkdir()
        elif change == "loop":
            file.symlink_to(file.name)

    result = _grep_changing(GrepTool(workspace), swap, pattern="alpha|SECRET")
    assert not result.is_error
    assert str(result).splitlines() == [
        "c.txt:1: alpha c",
        "notes.txt:1: alpha",
        f"{_SKIPPED}1 file, b.txt]",
    ]
    only = _grep_changing(GrepTool(workspace), lambda file: None, pattern="alpha", path="c.txt")
    assert only == "c.txt:1: alpha c"  # nothing changed: nothing said


def test_grep_names_at_most_three_changed_files_shortened_and_counts_the_rest(
    workspace: Path,
) -> None:
    """Of many files removed while searched, three are named (long ones cut), the rest counted."""
    long_name = "n" * 200 + ".txt"
    names = ["a.txt", long_name, "m.txt", "x.txt", "y.txt"]
    for name in names:
        (workspace / name).write_text("alpha\n", encoding="utf-8")
    grep = GrepTool(workspace, max_output_chars=2_000)

    def remove(file: Path) -> None:
        if file.name in names:
            file.unlink()

    result = _grep_changing(grep, remove, pattern="alpha")
    assert str(result).splitlines() == [
        "notes.txt:1: alpha",
        f"{_SKIPPED}5 files, a.txt, m.txt, …{long_name[-119:]} and 2 more]",
    ]
    for name in names:
        (workspace / name).write_text("alpha\n" * 100, encoding="utf-8")
    (workspace / "notes.txt").write_text("alpha\n" * 200, encoding="utf-8")
    full = _grep_changing(grep, remove, pattern="alpha", max_matches=1_000)
    *_, more, note = str(full).splitlines()
    assert note == f"{_SKIPPED}5 files, a.txt, m.txt, …{long_name[-119:]} and 2 more]"
    assert more.startswith("[... ") and more.endswith(
        " more matching lines not shown; narrow the search]"
    )
    # The matching lines shown make room for both notes: the whole answer fits the budget.
    assert len(full) <= 2_000 < len(full) + len("\nnotes.txt:1: alpha")


def _walked_as_before(base: Path) -> list[Path]:
    """The files grep searched before it listed folders through descriptors: os.walk's."""
    found = []
    for root, dirs, files in os.walk(base, followlinks=False):
        dirs[:] = sorted(name for name in dirs if name not in SKIPPED_DIRS)
        found.extend(Path(root, name) for name in sorted(files))
    return found


@settings(max_examples=200, deadline=None)
@given(
    entries=st.lists(
        st.tuples(
            st.lists(st.sampled_from(["a", "b", ".git", "c.py"]), min_size=1, max_size=4).map(
                tuple
            ),
            st.sampled_from(KINDS),
        ),
        max_size=25,
    )
)
def test_grep_walks_the_files_os_walk_walks_in_its_order(
    entries: list[tuple[tuple[str, ...], str]],
) -> None:
    """Over trees with links of every kind, grep's walk lists what os.walk lists, in order."""
    with planted(entries, "c.py") as (root, _):
        assert list(_walk(root, root)) == _walked_as_before(root)
        for folder in [root / "a", root / "b"]:
            if folder.is_dir() and not folder.is_symlink():
                assert list(_walk(root, folder)) == _walked_as_before(folder)


_FILE_NAMES = (
    st.text(st.characters(codec="utf-8", exclude_characters="/\0"), min_size=1, max_size=150)
    .filter(lambda name: len(name.encode("utf-8")) <= 251)  # a name has at most 255 bytes
    .map(lambda name: name + ".txt")
)


@settings(max_examples=50, deadline=None)
@given(names=st.lists(_FILE_NAMES, min_size=1, max_size=6, unique=True))
def test_grep_names_changed_files_whatever_their_names_within_a_bound(names: list[str]) -> None:
    """Any files removed while searched are counted; the first three named, each cut to 120."""
    with tempfile.TemporaryDirectory() as scratch:
        workspace = Path(scratch).resolve()
        for name in names:
            (workspace / name).write_text("alpha\n", encoding="utf-8")

        def remove(file: Path) -> None:
            file.unlink()

        result = _grep_changing(GrepTool(workspace), remove, pattern="alpha")
    ordered = sorted(names)  # the order the walk searches them in
    shown = [name if len(name) <= 120 else "…" + name[-119:] for name in ordered[:3]]
    count = "1 file" if len(names) == 1 else f"{len(names)} files"
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    assert not result.is_error
    assert str(result) == f"No matches for 'alpha'.\n{_SKIPPED}{count}, {', '.join(shown)}{more}]"
    assert len(str(result)) < 600


def test_grep_and_read_file_skip_a_loop_of_links(workspace: Path, outside: Path) -> None:
    """Links in a loop (to themselves, each other, out and back) are skipped, not a traceback."""
    (workspace / "loop").symlink_to("loop")
    (workspace / "src" / "a").symlink_to("b")
    (workspace / "src" / "b").symlink_to("a")
    (workspace / "via_out").symlink_to(outside / "back")
    (outside / "back").symlink_to(workspace / "via_out")
    grep = GrepTool(workspace)
    # What the search's child process runs (-I: it imports the installed package, not this).
    result = _contained(grep.search, pattern="alpha|print")
    assert not result.is_error
    assert str(result).splitlines() == ["notes.txt:1: alpha", "src/main.py:1: print('hello')"]
    named = _contained(grep.search, pattern="alpha", path="src/a")
    assert named.is_error and named == f"Error: {_loop('src/a')}"
    read = run(ReadFileTool(workspace).execute(path="loop"))
    assert read.is_error and read == f"Error: {_loop('loop')}"


_LOOP = (
    "{!r} leads into a loop of symbolic links{} (followed, they come back to one already "
    "followed), never to a file or folder"
)


def _loop(path: str, at: str | None = None) -> str:
    """The refusal of `path`, which leads into a loop of links at `at` (if that is not it)."""
    return _LOOP.format(path, f" at {at!r}" if at else "")


@pytest.mark.parametrize(
    ("path", "looping"),
    [
        ("loop", None),  # a link to itself
        ("src/a", None),  # two links to each other
        ("./src/../src/b", "src/b"),
        ("into", "src/a"),  # a link to one of them
        ("loop/x.txt", "loop"),  # a loop where a folder is named
        ("src/b/deeper/x.txt", "src/b"),
    ],
)
@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        (WriteFileTool, {"content": "x"}),
        (EditFileTool, {"old_text": "a", "new_text": "b"}),
        (ReadFileTool, {}),
        (ListDirTool, {}),
        (FindFilesTool, {"pattern": "*"}),
    ],
)
def test_every_tool_says_a_loop_of_links_is_one(
    workspace: Path,
    tool: type[WorkspaceTool],
    arguments: dict[str, str],
    path: str,
    looping: str | None,
) -> None:
    """A path into a loop of links is refused as that, naming the loop, not as not found."""
    (workspace / "loop").symlink_to("loop")
    (workspace / "src" / "a").symlink_to("b")
    (workspace / "src" / "b").symlink_to("a")
    (workspace / "into").symlink_to("src/a")
    before = sorted(map(str, workspace.rglob("*")))
    result = run(tool(workspace).execute(path=path, **arguments))
    assert result == f"Error: {_loop(path, looping)}"
    assert sorted(map(str, workspace.rglob("*"))) == before  # nothing written
    searched = _contained(GrepTool(workspace).search, pattern="x", path=path)
    assert searched == f"Error: {_loop(path, looping)}"


@pytest.mark.parametrize("mode", ["r", "rb", "w"])
def test_opening_a_loop_of_links_says_it_is_a_loop_not_a_changed_path(
    workspace: Path, mode: str
) -> None:
    """open_in_workspace given a loop's link (as realpath leaves it) names the loop."""
    (workspace / "loop").symlink_to("loop")
    for target, looping in [("loop", None), ("loop/x.txt", "loop")]:
        with (
            pytest.raises(OSError, match=re.escape(_loop(target, looping))),
            open_in_workspace(workspace, resolve_in_workspace(workspace, target), mode),
        ):
            pass


# -- write_file and edit_file ---------------------------------------------------------------


def test_write_file_creates_parents_and_keeps_content_exact(workspace: Path) -> None:
    """Missing folders are created and the text is written byte for byte."""
    result = run(WriteFileTool(workspace).execute(path="a/b/c.txt", content="x\r\ny\n"))
    assert result == "Wrote 5 characters to a/b/c.txt."
    assert (workspace / "a" / "b" / "c.txt").read_bytes() == b"x\r\ny\n"


def test_write_file_onto_a_directory_is_an_error(workspace: Path) -> None:
    """Writing over a directory is refused."""
    assert run(WriteFileTool(workspace).execute(path="src", content="x")).is_error


@pytest.mark.parametrize("path", ["notes.txt/x.txt", "notes.txt/deeper/x.txt"])
def test_write_file_under_a_file_says_it_is_not_a_folder(workspace: Path, path: str) -> None:
    """A file named as a folder of the path is the reason given, not a changed path."""
    result = run(WriteFileTool(workspace).execute(path=path, content="x"))
    assert result == "Error: 'notes.txt' is a file, not a folder"
    assert (workspace / "notes.txt").read_text(encoding="utf-8") == "alpha\nbeta\ngamma\n"


def test_write_file_names_the_file_deeper_in_the_path(workspace: Path) -> None:
    """The file in the way is named by its workspace path."""
    result = run(WriteFileTool(workspace).execute(path="src/main.py/x.txt", content="x"))
    assert result == "Error: 'src/main.py' is a file, not a folder"


def test_edit_file_replaces_a_unique_match(workspace: Path) -> None:
    """A unique old_text is replaced once."""
    result = run(
        EditFileTool(workspace).execute(path="notes.txt", old_text="beta", new_text="BETA")
    )
    assert result == "Replaced 1 occurrence(s) in notes.txt."
    assert (workspace / "notes.txt").read_text(encoding="utf-8") == "alpha\nBETA\ngamma\n"


def test_edit_file_missing_text_is_an_error(workspace: Path) -> None:
    """old_text that is not in the file is an error, and the file is unchanged."""
    result = run(EditFileTool(workspace).execute(path="notes.txt", old_text="delta", new_text="x"))
    assert result.is_error and "old_text was not found in notes.txt" in result
    assert (workspace / "notes.txt").read_text(encoding="utf-8") == "alpha\nbeta\ngamma\n"


def test_edit_file_ambiguous_text_is_an_error_unless_replace_all(workspace: Path) -> None:
    """old_text found several times is refused, unless replace_all asks for every one."""
    path = workspace / "repeat.txt"
    path.write_text("x = 1\nx = 1\n", encoding="utf-8")
    editor = EditFileTool(workspace)
    refused = run(editor.execute(path="repeat.txt", old_text="x = 1", new_text="x = 2"))
    assert refused.is_error and "occurs 2 times" in refused
    assert path.read_text(encoding="utf-8") == "x = 1\nx = 1\n"
    done = run(
        editor.execute(path="repeat.txt", old_text="x = 1", new_text="x = 2", replace_all=True)
    )
    assert done == "Replaced 2 occurrence(s) in repeat.txt."
    assert path.read_text(encoding="utf-8") == "x = 2\nx = 2\n"


def test_edit_file_matches_across_windows_line_endings(workspace: Path) -> None:
    """old_text written with \\n matches a file that uses \\r\\n, which keeps its endings."""
    path = workspace / "dos.txt"
    path.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    result = run(
        EditFileTool(workspace).execute(path="dos.txt", old_text="one\ntwo", new_text="1\n2")
    )
    assert not result.is_error
    assert path.read_bytes() == b"1\r\n2\r\nthree\r\n"


def test_edit_file_on_a_missing_file_is_an_error(workspace: Path) -> None:
    """Editing a file that does not exist is an error."""
    result = run(EditFileTool(workspace).execute(path="nope.txt", old_text="a", new_text="b"))
    assert result == "Error: file not found: nope.txt"


def test_edit_file_refuses_a_file_over_the_limit_unread(workspace: Path) -> None:
    """A 64 MiB file is refused by its size, saying what to use instead, without being read."""
    path = workspace / "big.log"
    with path.open("wb") as handle:
        handle.write(b"needle\n")
        handle.truncate(64 * 1024 * 1024)  # sparse: nothing is written past the start
    editor = EditFileTool(workspace)
    tracemalloc.start()
    try:
        result = run(editor.execute(path="big.log", old_text="needle", new_text="x"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result == (
        "Error: big.log is 67,108,864 bytes, and edit_file edits files of at most 16,777,216 "
        "bytes: change it with a command-line tool if you have one (such as sed), or write "
        "what you need to a new file with write_file (read_file still reads it)"
    )
    assert MAX_EDIT_FILE_BYTES == 16 * 1024 * 1024
    assert peak < 1024 * 1024
    assert path.stat().st_size == 64 * 1024 * 1024
    with path.open("rb") as handle:
        assert handle.read(7) == b"needle\n"


def test_edit_file_edits_a_file_of_exactly_the_limit(workspace: Path) -> None:
    """The limit is inclusive: a file of max_file_bytes is edited, one byte more is refused."""
    path = workspace / "edge.txt"
    path.write_bytes(b"needle" + b"." * 94)
    editor = EditFileTool(workspace, max_file_bytes=100)
    done = run(editor.execute(path="edge.txt", old_text="needle", new_text="pin"))
    assert done == "Replaced 1 occurrence(s) in edge.txt."
    path.write_bytes(b"needle" + b"." * 95)
    refused = run(editor.execute(path="edge.txt", old_text="needle", new_text="pin"))
    assert refused.is_error and refused.startswith("Error: edge.txt is 101 bytes, and edit_file")
    assert path.read_bytes() == b"needle" + b"." * 95


def test_edit_file_refuses_an_edit_that_would_outgrow_the_limit(workspace: Path) -> None:
    """A short text replaced everywhere by a long one is refused before the result is built."""
    path = workspace / "short.txt"
    path.write_bytes(b"a" * 1024)
    editor = EditFileTool(workspace)
    tracemalloc.start()
    try:
        result = run(
            editor.execute(path="short.txt", old_text="a", new_text="b" * 20_000, replace_all=True)
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result == (
        "Error: this edit would make short.txt 20,480,000 bytes, more than edit_file writes "
        "(16,777,216); replace fewer occurrences or with shorter text, or write a new file "
        "with write_file"
    )
    assert peak < 1024 * 1024
    assert path.read_bytes() == b"a" * 1024


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    old=st.text(st.characters(codec="utf-8", exclude_characters="\r"), min_size=1, max_size=3),
    new=st.text(st.characters(codec="utf-8", exclude_characters="\r"), max_size=20),
    count=st.integers(1, 20),
    limit=st.integers(1, 300),
)
def test_edit_file_makes_an_edit_iff_its_result_fits(
    workspace: Path, old: str, new: str, count: int, limit: int
) -> None:
    """Whatever the texts, an edit within the limit is made exactly and one past it is refused."""
    path = workspace / "many.txt"
    original = old * count
    path.write_bytes(original.encode("utf-8"))
    editor = EditFileTool(workspace, max_file_bytes=limit)
    result = run(editor.execute(path="many.txt", old_text=old, new_text=new, replace_all=True))
    expected = original.replace(old, new).encode("utf-8")
    if len(original.encode("utf-8")) > limit:
        assert result.startswith("Error: many.txt is ")
    elif len(expected) > limit:
        assert result.startswith(f"Error: this edit would make many.txt {len(expected):,} bytes")
    else:
        assert not result.is_error, result
        assert path.read_bytes() == expected
        return
    assert path.read_bytes() == original.encode("utf-8")


# -- every answer fits the output budget ----------------------------------------------------

_BUDGETS = st.integers(min_value=2_000, max_value=8_000)  # output_budget gives at least 2,000


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    count=st.integers(min_value=0, max_value=300),
    shortest=st.integers(min_value=0, max_value=150),
    spread=st.integers(min_value=1, max_value=400),
    max_matches=st.integers(min_value=1, max_value=300),
    removed=st.integers(min_value=0, max_value=5),
    budget=_BUDGETS,
)
def test_grep_answers_within_its_budget_notes_included(
    count: int, shortest: int, spread: int, max_matches: int, removed: int, budget: int
) -> None:
    """Whatever the matches, their lengths and the notes, grep's answer fits max_output_chars."""
    lengths = [shortest + n * 7_919 % spread for n in range(count)]
    with tempfile.TemporaryDirectory() as scratch:
        workspace = Path(scratch).resolve()
        text = "".join("x" * length + "hit\n" for length in lengths)
        (workspace / "m.txt").write_text(text, encoding="utf-8")
        gone = [f"{'g' * 150}{n}.txt" for n in range(removed)]
        for name in gone:
            (workspace / name).write_text("hit\n", encoding="utf-8")

        def remove(file: Path) -> None:
            if file.name in gone:
                file.unlink()

        # What the child process answers (run in this process: see _grep_changing).
        answer = str(
            _grep_changing(
                GrepTool(workspace, max_output_chars=budget),
                remove,
                pattern="hit",
                max_matches=max_matches,
            )
        )
    assert len(answer) <= budget
    lines = answer.split("\n")
    found = min(len(lengths), max_matches)
    shown = [line for line in lines if line.startswith("m.txt:")]
    assert shown == [line for line in lines[: len(shown)]]  # the matches come first
    if len(shown) < found:
        assert lines[len(shown)] == (
            f"[... {found - len(shown)} more matching lines not shown; narrow the search]"
        )
    stopped = len(lengths) >= max_matches
    # Last, and saying the count of the files removed is partial when there is one above.
    said = "1 match" if max_matches == 1 else f"{max_matches} matches"
    assert lines[-1].startswith(f"[stopped after {said}; ") == stopped
    if stopped:
        assert lines[-1] == (
            f"[stopped after {said}; the count above is of what the search met "
            "before it stopped, and what it did not reach is not known; narrow the search]"
            if removed
            else f"[stopped after {said}; narrow the search]"
        )
    assert (_SKIPPED in answer) == bool(removed)
    if not lengths:
        assert lines[0] == "No matches for 'hit'."


_NAMES = st.text(st.sampled_from("abcdefghij"), min_size=1, max_size=200)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    names=st.lists(_NAMES, max_size=80, unique=True),
    extra=st.integers(min_value=0, max_value=520),
    budget=_BUDGETS,
)
def test_list_dir_and_find_files_answer_within_their_budget(
    names: list[str], extra: int, budget: int
) -> None:
    """Long names, many entries: list_dir and find_files answers fit, saying what is left out."""
    with tempfile.TemporaryDirectory() as scratch:
        workspace = Path(scratch).resolve()
        every = sorted([*names, *(f"z{n:04d}" for n in range(extra))])
        for name in every:
            (workspace / name).touch()
        listed = str(_contained(ListDirTool(workspace, max_output_chars=budget).run))
        found = str(_contained(FindFilesTool(workspace, max_output_chars=budget).run, "*"))
    for answer, entry, more in [
        (listed, lambda name: f"{name}  (0 bytes)", "entries"),
        (found, lambda name: name, "paths"),
    ]:
        assert len(answer) <= budget
        if not every:
            continue
        lines = answer.split("\n")
        shown = [line for line in lines if not line.startswith("[")]
        assert shown == [entry(name) for name in every[: len(shown)]]
        left = len(every) - len(shown)
        assert (left > 0) == (len(lines) > len(shown))
        if left:
            assert lines[len(shown)].startswith(f"[... {left} more {more} not shown; ")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lengths=st.lists(st.integers(min_value=0, max_value=2_600), min_size=1, max_size=30),
    budget=st.integers(min_value=300, max_value=8_000),
    by_chars=st.booleans(),
)
def test_read_file_pages_within_the_budget_footer_included(
    lengths: list[int], budget: int, by_chars: bool
) -> None:
    """Every page of read_file, footer included, fits its budget; its footers lead to the end."""
    with tempfile.TemporaryDirectory() as scratch:
        workspace = Path(scratch).resolve()
        text = "".join(f"{n % 10}" * length + "\n" for n, length in enumerate(lengths))
        (workspace / "f.txt").write_text(text, encoding="utf-8")
        reader = ReadFileTool(workspace, max_output_chars=budget)
        where = {"start_char": 0} if by_chars else {"offset": 1}
        pages = 0
        while True:
            page = str(_contained(reader.run, "f.txt", **where))
            assert len(page) <= budget
            footer = re.search(r"with (start_char|offset)=(\d+) to continue\.\]$", page)
            if footer is None:  # the last page: it ends where the file does
                if by_chars:
                    assert page == text[where["start_char"] :]
                else:
                    assert page.split("\n")[-1].startswith(f"{len(lengths):>6}\t")
                break
            moved = int(footer[2])
            assert moved > next(iter(where.values()))  # each page moves on
            where = {footer[1]: moved}
            pages += 1
            assert pages <= len(text) + 1


# -- grep stopped at its timeout ------------------------------------------------------------


def test_grep_stopped_in_its_first_file_blames_the_pattern(workspace: Path) -> None:
    """A pattern that backtracks without end is stopped in the first file and named the cause."""
    (workspace / "a.txt").write_text("a" * 40 + "!\n", encoding="utf-8")
    result = run(GrepTool(workspace, search_timeout=1).execute(pattern=r"(a+)+$", path="a.txt"))
    assert result.is_error
    assert result == (
        "Error: the search for '(a+)+$' did not finish within 1s and was stopped in the first "
        "file it searched, a.txt (1 file found): the regular expression may backtrack without "
        "end (nested quantifiers such as (a+)+); use a simpler pattern, or leave that file out "
        "with `path` or `glob`"
    )


def test_grep_stopped_in_a_large_tree_says_how_far_it_got(workspace: Path) -> None:
    """A tree too large to search in time: the answer counts the files and says to narrow it."""
    many = workspace / "many"
    many.mkdir()
    for n in range(40_000):
        (many / f"f{n:05d}.txt").write_text("plain\n", encoding="utf-8")
    searched = run(GrepTool(workspace, search_timeout=1.5).execute(pattern="absent"))
    assert searched.is_error
    assert re.fullmatch(
        r"Error: the search for 'absent' did not finish within 1\.5s and was stopped after it "
        r"had searched [\d,]+ files \([\d,]+ files found\), in many/f\d{5}\.txt: either the "
        r"tree is too large to search in that time \(narrow `path` and `glob`\) or the regular "
        r"expression backtracks without end \(nested quantifiers such as \(a\+\)\+; use a "
        r"simpler pattern\)",
        str(searched),
    )
    walked = run(GrepTool(workspace, search_timeout=1.5).execute(pattern="x", glob="*.none"))
    assert walked.is_error
    assert re.fullmatch(
        r"Error: the search for 'x' did not finish within 1\.5s and was stopped before it "
        r"searched a file \([\d,]+ files found, none searched yet\): the tree under `path` is "
        r"too large to go through in that time; narrow `path` \(`glob` chooses among the "
        r"files found, but all of them are still looked at\)",
        str(walked),
    )
