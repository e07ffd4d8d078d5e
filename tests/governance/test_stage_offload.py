"""`offload_results` and the content-addressed store."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from nanobot_core.governance import DirectoryResultStore, default_store
from nanobot_core.governance.stages import offload_results
from nanobot_core.governance.stages.offload import OFFLOAD_PREFIX, offloaded_path
from tests.governance.builders import call, calls, context, result, run_pure, user

LIMIT = 1_000


def _big(seed: str, size: int = 5_000) -> str:
    return (f"{seed} line\n" * size)[:size]


def test_big_result_is_saved_and_replaced_by_a_reference(tmp_path: Path) -> None:
    """The copy holds the path, the size and head and tail; the file holds the result exactly."""
    text = "HEAD" + _big("x") + "TAIL"
    history = [user(), calls(call("c")), result("c", text)]
    ctx = context(store=default_store(tmp_path), max_tool_result_chars=LIMIT)
    outcome = run_pure(offload_results, history, ctx)
    notice = outcome.messages[2]["content"]
    path = offloaded_path(notice)
    assert path == f".nanobot/cache/tool-results/{hashlib.sha256(text.encode()).hexdigest()}.txt"
    assert (tmp_path / path).read_bytes() == text.encode("utf-8")
    assert notice.startswith(OFFLOAD_PREFIX) and f"{len(text)} characters" in notice
    assert "HEAD" in notice and "TAIL" in notice
    assert len(notice) <= LIMIT
    assert outcome.messages[:2] == history[:2] and outcome.messages[0] is history[0]


def test_offloaded_copy_is_not_offloaded_again(tmp_path: Path) -> None:
    """Running the stage on its own output changes nothing."""
    ctx = context(store=default_store(tmp_path), max_tool_result_chars=LIMIT)
    first = run_pure(offload_results, [user(), calls(call("c")), result("c", _big("y"))], ctx)
    second = run_pure(offload_results, first.messages, ctx)
    assert not second.changed and second.messages is first.messages


def test_two_results_under_one_id_in_two_turns_are_both_recoverable(tmp_path: Path) -> None:
    """An id reused in a later turn never makes one result overwrite the other."""
    one, two = _big("first"), _big("second")
    history = [
        user(),
        calls(call("same")),
        result("same", one),
        user("again"),
        calls(call("same")),
        result("same", two),
    ]
    ctx = context(store=default_store(tmp_path), max_tool_result_chars=LIMIT)
    messages = run_pure(offload_results, history, ctx).messages
    paths = [offloaded_path(messages[i]["content"]) for i in (2, 5)]
    assert paths[0] != paths[1]
    assert [(tmp_path / p).read_text(encoding="utf-8") for p in paths if p] == [one, two]


@pytest.mark.parametrize(
    "hostile",
    [
        "../../../../etc/passwd",
        "/etc/passwd",
        "..\\..\\windows",
        "a/../../b",
        "session/../../x\x00",
    ],
)
def test_ids_never_reach_the_file_system(tmp_path: Path, hostile: str) -> None:
    """A hostile tool-call id or name cannot steer where a result is written."""
    workspace = tmp_path / "ws"
    history = [user(), calls(call(hostile, hostile)), result(hostile, _big("z"), name=hostile)]
    ctx = context(store=default_store(workspace), max_tool_result_chars=LIMIT)
    run_pure(offload_results, history, ctx)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert [p.parent for p in written] == [workspace / ".nanobot" / "cache" / "tool-results"]
    assert written[0].name == hashlib.sha256(_big("z").encode()).hexdigest() + ".txt"


def test_store_that_cannot_write_falls_back_to_truncation(tmp_path: Path) -> None:
    """A store directory that cannot be created (its parent is a file) means head-and-tail."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("in the way", encoding="utf-8")
    text = "START" + _big("w") + "END"
    ctx = context(store=DirectoryResultStore(blocker / "cache"), max_tool_result_chars=LIMIT)
    outcome = run_pure(offload_results, [user(), calls(call("c")), result("c", text)], ctx)
    cut = outcome.messages[2]["content"]
    assert len(cut) <= LIMIT and cut.startswith("START") and cut.endswith("END")
    assert "could not be saved" in cut
    assert "the store failed" in outcome.details[0] and "truncated" in outcome.details[0]


class _RaisingStore:
    def put(self, content: str) -> str:
        raise OSError(28, "No space left on device")


def test_store_whose_put_raises_falls_back_to_truncation() -> None:
    """A store raising OSError is reported, and the result is cut instead."""
    ctx = context(store=_RaisingStore(), max_tool_result_chars=LIMIT)
    outcome = run_pure(offload_results, [user(), calls(call("c")), result("c", _big("v"))], ctx)
    assert len(outcome.messages[2]["content"]) <= LIMIT
    assert "No space left on device" in outcome.details[0]


def test_without_a_store_results_are_truncated() -> None:
    """No store configured (no workspace): results over the limit are cut head and tail."""
    outcome = run_pure(
        offload_results,
        [user(), calls(call("c")), result("c", _big("u"))],
        context(max_tool_result_chars=LIMIT),
    )
    assert len(outcome.messages[2]["content"]) <= LIMIT
    assert "no result store" in outcome.details[0]


def test_excluded_tools_are_not_offloaded(tmp_path: Path) -> None:
    """Option `exclude_tools` keeps a tool's results in full (the name comes from its call)."""
    history = [user(), calls(call("c", "read_file")), result("c", _big("t"))]
    ctx = context(
        store=default_store(tmp_path),
        max_tool_result_chars=LIMIT,
        options={"exclude_tools": ["read_file"]},
    )
    outcome = run_pure(offload_results, history, ctx)
    assert outcome.messages is history


def test_text_parts_are_offloaded_as_their_joined_text(tmp_path: Path) -> None:
    """A result given as text parts is saved as the text of the parts."""
    parts = [{"type": "text", "text": _big("p")}, {"type": "text", "text": _big("q")}]
    ctx = context(store=default_store(tmp_path), max_tool_result_chars=LIMIT)
    messages = run_pure(
        offload_results, [user(), calls(call("c")), result("c", parts)], ctx
    ).messages
    path = offloaded_path(messages[2]["content"])
    assert path and (tmp_path / path).read_text(encoding="utf-8") == _big("p") + _big("q")


def test_store_writes_each_content_once_and_atomically(tmp_path: Path) -> None:
    """The same content twice gives the same path; no temporary file is left behind."""
    store = default_store(tmp_path)
    assert store.put("abc" * 10) == store.put("abc" * 10)
    assert DirectoryResultStore(tmp_path / ".nanobot/cache/tool-results", relative_to=tmp_path).put(
        "abc" * 10
    ) == store.put("abc" * 10)
    files = sorted(p.name for p in (tmp_path / ".nanobot/cache/tool-results").iterdir())
    assert files == [hashlib.sha256(b"abc" * 10).hexdigest() + ".txt"]


def test_store_rewrites_a_deleted_file(tmp_path: Path) -> None:
    """The cache may be deleted at any time: the next put writes the file again."""
    store = default_store(tmp_path)
    path = tmp_path / store.put("payload")
    path.unlink()
    assert (tmp_path / store.put("payload")).read_text(encoding="utf-8") == "payload"


def test_small_results_are_left_alone() -> None:
    """Nothing over the limit: the same list comes back."""
    history = [user(), calls(call("c")), result("c", "short")]
    assert (
        run_pure(offload_results, history, context(max_tool_result_chars=LIMIT)).messages is history
    )


def test_store_tells_apart_texts_alike_at_both_ends(tmp_path: Path) -> None:
    """Texts of one length that differ only in the middle get their own files."""
    store = default_store(tmp_path)
    first, second = "h" * 100 + "A" + "t" * 100, "h" * 100 + "B" + "t" * 100
    paths = [store.put(first), store.put(second), store.put(first[:50] + first[50:])]
    assert paths[0] != paths[1] and paths[2] == paths[0]
    assert (tmp_path / paths[1]).read_text(encoding="utf-8") == second
