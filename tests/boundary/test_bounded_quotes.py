"""Values from the model quoted in errors and notices: cut to their head and tail, bounded."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core._clip import MAX_QUOTED_CHARS, clip, quoted
from nanobot_core.governance.truncation import truncate_middle
from nanobot_core.kernel.context import PluginContext
from nanobot_core.tools.builtin import (
    EditFileTool,
    FindFilesTool,
    GrepTool,
    ListDirTool,
    ReadFileTool,
    WorkspaceTool,
    WriteFileTool,
    _contained,
)
from nanobot_core.tools.executor import Executor, ToolCallRequest, run_calls
from nanobot_core.tools.registry import ToolRegistry
from tests.helpers import REPO_ROOT

#: A long value from the model, whose two ends a message must still show.
HEAD, TAIL = "HEAD", "TAIL"
LONG = HEAD + "a" * 100_000 + TAIL

_OMITTED = re.compile(r"\[\.\.\. (\d+) characters omitted \.\.\.\]")


@settings(max_examples=300, deadline=None)
@given(st.text(), st.integers(min_value=0, max_value=400))
def test_clip_is_within_its_limit_and_keeps_what_fits(text: str, limit: int) -> None:
    """A text that fits comes back whole; a longer one is cut to the limit at most."""
    clipped = clip(text, limit)
    assert len(clipped) <= limit or clipped == text
    if len(text) <= limit:
        assert clipped == text


@settings(max_examples=300, deadline=None)
@given(
    st.text(min_size=1, max_size=30).flatmap(
        lambda piece: st.integers(min_value=1, max_value=5_000).map(lambda times: piece * times)
    ),
    st.integers(min_value=60, max_value=MAX_QUOTED_CHARS),
)
def test_clip_keeps_the_head_and_tail_and_counts_the_rest(text: str, limit: int) -> None:
    """A text cut keeps its start and end, and the marker counts exactly what was left out."""
    clipped = clip(text, limit)
    if len(text) <= limit:
        assert clipped == text
        return
    assert len(clipped) <= limit
    found = _OMITTED.search(clipped)
    assert found is not None
    head, tail = clipped[: found.start()], clipped[found.end() :]
    assert text.startswith(head) and text.endswith(tail)
    assert len(head) + int(found.group(1)) + len(tail) == len(text)
    assert head and tail


def test_quoted_is_the_repr_cut_and_truncate_middle_cuts_the_same_way() -> None:
    """`quoted` cuts the repr; `truncate_middle` keeps the same ends, its marker on a line."""
    assert quoted("a\nb") == "'a\\nb'"
    shown = quoted(LONG)
    assert len(shown) <= MAX_QUOTED_CHARS
    assert shown.startswith("'" + HEAD) and shown.endswith(TAIL + "'")
    # Its marker is the same with a line break on each side: two characters more.
    assert truncate_middle(LONG, 102).replace("\n", "") == clip(LONG, 100)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace holding a file and a folder."""
    (tmp_path / "notes.txt").write_text("alpha\n", encoding="utf-8")
    (tmp_path / "src").mkdir()
    return tmp_path


def _tools(workspace: Path) -> dict[str, WorkspaceTool]:
    ctx = PluginContext(workspace=workspace)
    classes = (ReadFileTool, ListDirTool, FindFilesTool, GrepTool, WriteFileTool, EditFileTool)
    return {cls.name: cls.create(ctx) for cls in classes}


#: A call of a built-in tool with `LONG` in one of its arguments, and what the error says.
CASES: list[tuple[str, Callable[[str], dict[str, Any]], str]] = [
    ("read_file", lambda v: {"path": v}, "File name too long"),
    ("read_file", lambda v: {"path": "../" + v}, "points outside the workspace"),
    ("read_file", lambda v: {"path": v + "\x00"}, "contains a NUL character"),
    ("read_file", lambda v: {"path": "src/" + "/" * len(v) + v[-4:]}, "file not found"),
    ("list_dir", lambda v: {"path": "notes.txt" + "/" * len(v)}, "is a file, not a directory"),
    ("list_dir", lambda v: {"path": v}, "File name too long"),
    ("find_files", lambda v: {"pattern": "../" + v}, "must be relative"),
    ("find_files", lambda v: {"pattern": v + "**x"}, "'**' must be a whole path component"),
    ("find_files", lambda v: {"pattern": "*", "path": "notes.txt" + "/" * len(v)}, "not found"),
    ("grep", lambda v: {"pattern": "(" + v}, "invalid regular expression"),
    ("grep", lambda v: {"pattern": "x", "path": v}, "File name too long"),
    ("write_file", lambda v: {"path": "src" + "/" * len(v), "content": "x"}, "is a directory"),
    ("write_file", lambda v: {"path": v, "content": "x"}, "File name too long"),
    ("edit_file", lambda v: {"path": v, "old_text": "a", "new_text": "b"}, "File name too long"),
]


@pytest.mark.parametrize(("tool", "arguments", "said"), CASES)
def test_a_huge_path_or_pattern_is_quoted_by_its_ends(
    workspace: Path, tool: str, arguments: Callable[[str], dict[str, Any]], said: str
) -> None:
    """Each built-in tool's error about a 100 KB path or pattern shows its two ends, bounded."""
    result = _contained(_tools(workspace)[tool].run, **arguments(LONG))
    text = str(result)
    assert result.is_error, text[:300]
    assert said in text
    assert len(text) <= 1_000, text[:300]
    assert _OMITTED.search(text)
    assert TAIL in text or "/" * 20 in text  # the end of the path, where it went wrong


def test_find_files_with_no_match_quotes_a_long_pattern_by_its_ends(workspace: Path) -> None:
    """The answer that nothing matches a long pattern keeps its ends and says what was cut."""
    pattern = "q" * 300 + "*" + "z" * 300
    text = str(_contained(_tools(workspace)["find_files"].run, pattern=pattern))
    assert text == f"No files match {quoted(pattern)} in the workspace."
    assert "z'" in text and "characters omitted" in text


#: The most characters an `Error` answer to a call may take, whatever strings the call holds
#: (docs/limits.md): a quarter of the default `governance.max_tool_result_chars`.
ERROR_CHARS = 4_000

_HUGE = st.text(min_size=1, max_size=6).flatmap(
    lambda piece: st.integers(min_value=1, max_value=20_000).map(lambda times: piece * times)
)
_SHORT = st.text(max_size=12)
_BUILTIN_NAMES = ["read_file", "list_dir", "find_files", "grep", "write_file", "edit_file"]
_KEYS = ["path", "pattern", "glob", "content", "old_text", "new_text", "offset", "ignore_case"]


@settings(max_examples=40, deadline=None)
@given(
    name=st.one_of(st.sampled_from(_BUILTIN_NAMES), _HUGE),
    arguments=st.one_of(
        st.dictionaries(st.one_of(st.sampled_from(_KEYS), _HUGE), st.one_of(_HUGE, _SHORT)),
        _HUGE.map(lambda text: "{" + text),
        _HUGE,
    ),
)
def test_the_error_answer_to_any_call_with_huge_strings_is_bounded(
    tmp_path_factory: pytest.TempPathFactory, name: str, arguments: Any
) -> None:
    """Huge names, keys and values in a call to the built-in tools: the error stays short."""
    workspace = tmp_path_factory.mktemp("ws")
    (workspace / "notes.txt").write_text("alpha\n", encoding="utf-8")
    registry = ToolRegistry()
    for tool in _tools(workspace).values():
        registry.add(tool)
    executor = Executor(registry, default_timeout=60)
    [outcome] = run_calls(executor.run([ToolCallRequest("c1", name, arguments)]))
    text = str(outcome.result)
    if outcome.result.is_error:
        assert len(text) <= ERROR_CHARS, text[:500]


def test_the_doc_gives_the_bound_of_an_error_answer() -> None:
    """docs/limits.md states the bound the property above holds the answers to."""
    doc = " ".join((REPO_ROOT / "docs" / "limits.md").read_text(encoding="utf-8").split())
    assert f"at most {ERROR_CHARS:,} characters" in doc


def test_clip_and_quoted_are_public_for_plugin_authors() -> None:
    """A plugin imports the core's own cutting from `nanobot_core`, the one the core uses."""
    import nanobot_core

    assert nanobot_core.clip is clip and nanobot_core.quoted is quoted
    assert {"clip", "quoted"} <= set(nanobot_core.__all__)
    assert nanobot_core.clip(LONG).startswith(HEAD) and nanobot_core.clip(LONG).endswith(TAIL)
