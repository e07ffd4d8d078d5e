"""Reading history files (JSONL, JSON array) and writing JSONL atomically."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core.governance.history_file import (
    HistoryFormatError,
    parse_history,
    write_jsonl_atomic,
)
from nanobot_core.jsonl_store import JsonlSessionStore


def test_jsonl_lines_are_read_and_bad_ones_numbered() -> None:
    """Each line is one entry; blank lines are skipped; broken lines are reported by number."""
    loaded = parse_history(b'{"role": "user", "content": "a"}\n\n[1, 2\n"text"\n')
    assert loaded.shape == "jsonl"
    assert loaded.messages == [{"role": "user", "content": "a"}, "text"]
    assert [number for number, _ in loaded.left_out] == [3]


def test_json_array_and_object_with_messages_are_read_whole() -> None:
    """A JSON array, or an object with a "messages" array (a request body), is one history."""
    assert parse_history(b'[{"role": "user", "content": "a"}]').shape == "json-array"
    loaded = parse_history(b'{"model": "m", "messages": [{"role": "user", "content": "b"}]}')
    assert (loaded.shape, loaded.messages) == ("json-object", [{"role": "user", "content": "b"}])


def test_bytes_that_are_not_utf8_become_replacement_characters() -> None:
    """Invalid UTF-8 does not lose the line: the bad bytes become U+FFFD and are reported."""
    loaded = parse_history(
        b'{"role": "user", "content": "ok"}\n{"role": "user", "content": "caf\xe9"}\n'
    )
    assert loaded.messages[1]["content"] == "caf\ufffd"
    assert loaded.not_utf8 == [2]


def test_a_byte_order_mark_is_ignored() -> None:
    """A UTF-8 BOM in front of the first line does not break it."""
    assert parse_history('\ufeff{"role": "user", "content": "a"}\n'.encode()).messages == [
        {"role": "user", "content": "a"}
    ]


def test_write_replaces_the_file_in_one_step(tmp_path: Path) -> None:
    """The target holds exactly the new lines; no temporary file remains."""
    target = tmp_path / "out.jsonl"
    target.write_text("previous\n", encoding="utf-8")
    write_jsonl_atomic(target, [{"a": "é"}, {"b": 2}])
    assert target.read_text(encoding="utf-8") == '{"a": "é"}\n{"b": 2}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]
    assert json.loads(target.read_text(encoding="utf-8").splitlines()[0]) == {"a": "é"}


# ASCII and Unicode whitespace, a byte-order mark and the controls `str.strip` and
# `bytes.strip` take for whitespace: of these, only the first four are JSON's own.
_SPACES = " \t\r\n\x0b\x0c\x1c\x1f\x85\xa0\u1680\u2007\u2028\u2029\u202f\u3000\ufeff"
_LINE = '{"role":"user","content":"x"}'


@given(
    st.lists(st.text(_SPACES.replace("\n", ""), max_size=4) | st.just(_LINE), max_size=8),
    st.booleans(),
)
@settings(max_examples=300, deadline=None, database=None)
def test_govern_and_the_session_store_agree_on_which_lines_are_blank(
    lines: list[str], newline_last: bool
) -> None:
    """Whatever whitespace a file's lines hold, `govern`'s reader and the JSONL session
    store skip the same lines as blank, read the same lines and refuse the same ones."""
    data = ("\n".join(lines) + ("\n" if newline_last and lines else "")).encode("utf-8")
    with tempfile.TemporaryDirectory() as folder:
        store = JsonlSessionStore(Path(folder))
        store.directory.mkdir(parents=True)
        store.path("s").write_bytes(data)
        stored = store.load("s")
    stored_numbers = stored.numbers or list(range(1, len(stored.records) + 1))
    refused = [problem.line for problem in stored.problems]
    try:
        history = parse_history(data)
    except HistoryFormatError as exc:  # no line is JSON: it names the first one refused
        assert not stored.records and refused, str(exc)
        assert str(exc).startswith(f"no line is JSON; line {refused[0]}:")
        return
    assert history.lines == stored_numbers
    assert [number for number, _ in history.left_out] == refused
    # JSON's own whitespace alone is blank; any other character makes a line to refuse.
    expected = [
        number
        for number, line in enumerate(data.decode("utf-8").removeprefix("\ufeff").split("\n"), 1)
        if line.strip(" \t\r\n") and line != _LINE
    ]
    assert refused == expected
