"""Reading history files (JSONL, JSON array) and writing JSONL atomically."""

from __future__ import annotations

import json
from pathlib import Path

from nanobot_core.governance.history_file import parse_history, write_jsonl_atomic


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
