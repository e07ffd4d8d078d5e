"""The append-only session store: names, lines, healing, locking, listing."""

from __future__ import annotations

import errno
import json
import os
import re
import threading
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from nanobot_core.errors import SessionError, SessionLockedError
from nanobot_core.jsonl_store import JsonlSessionStore, sessions_dir
from nanobot_core.sessions import parse_session_lines

USER = {"role": "user", "content": "hello"}
ANSWER = {"role": "assistant", "content": "hi there"}


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")


@pytest.mark.parametrize("name", ["default", "a.b", "x_y-z", "2024.01.01", ".hidden", "A" * 200])
def test_valid_names(tmp_path: Path, name: str) -> None:
    """Letters, digits, '.', '_' and '-' make a session file in the sessions folder."""
    with JsonlSessionStore(tmp_path).open(name) as session:
        session.append(USER)
    assert (sessions_dir(tmp_path) / f"{name}.jsonl").is_file()


@pytest.mark.parametrize(
    "name", ["", ".", "..", "../escape", "a/b", "a b", "naïve", "x\n", "A" * 201]
)
def test_invalid_names_are_rejected_before_touching_disk(tmp_path: Path, name: str) -> None:
    """Any other name is a SessionError and creates nothing."""
    with pytest.raises(SessionError) as caught:
        JsonlSessionStore(tmp_path).open(name)
    assert "session name" in str(caught.value)
    assert list(tmp_path.rglob("*")) == []


def test_each_message_is_one_line_with_meta_kept_out_of_history(tmp_path: Path) -> None:
    """A line holds the OpenAI-shaped message plus `_meta`; history() leaves `_meta` out."""
    store = JsonlSessionStore(tmp_path)
    with store.open("s") as session:
        session.append(USER, {"time": "2024-01-01T00:00:00Z"})
        session.append(ANSWER, {"usage": {"total_tokens": 3}})
        # Visible to any reader as soon as append returns.
        on_disk = [json.loads(line) for line in _lines(store.path("s")) if line]
        assert on_disk == [
            {**USER, "_meta": {"time": "2024-01-01T00:00:00Z"}},
            {**ANSWER, "_meta": {"usage": {"total_tokens": 3}}},
        ]
        assert session.history() == [USER, ANSWER]
    with store.open("s") as reopened:
        assert reopened.history() == [USER, ANSWER]


def test_history_is_a_copy(tmp_path: Path) -> None:
    """Changing what history() returned does not change the session."""
    with JsonlSessionStore(tmp_path).open() as session:
        session.append({"role": "assistant", "content": "", "tool_calls": [{"id": "1"}]})
        session.history()[0]["tool_calls"].clear()
        assert session.history()[0]["tool_calls"] == [{"id": "1"}]


def test_lone_surrogates_are_replaced_before_they_are_stored(tmp_path: Path) -> None:
    """A lone surrogate (from a tool) is stored as U+FFFD: the file is strict UTF-8 JSON."""
    message = {"role": "tool", "tool_call_id": "1", "content": "bad \udc80 byte"}
    stored = {"role": "tool", "tool_call_id": "1", "content": "bad \ufffd byte"}
    store = JsonlSessionStore(tmp_path)
    with store.open() as session:
        session.append(message)
        assert session.history() == [stored]
    line = store.path("default").read_bytes()
    assert b"\\u" not in line and json.loads(line.decode("utf-8", "strict")) == stored
    with store.open() as session:
        assert session.history() == [stored]


def test_a_record_too_deep_to_read_back_is_refused_before_it_is_stored(tmp_path: Path) -> None:
    """A message nested past the boundary's depth limit is a SessionError; the file is untouched."""
    deep: object = "x"
    for _ in range(500):
        deep = [deep]
    store = JsonlSessionStore(tmp_path)
    with store.open() as session:
        session.append({"role": "user", "content": "kept"})
        with pytest.raises(SessionError, match="nested deeper than 100 levels"):
            session.append({"role": "tool", "tool_call_id": "1", "content": deep})
        assert session.history() == [{"role": "user", "content": "kept"}]
    with store.open() as session:
        assert session.history() == [{"role": "user", "content": "kept"}]
        assert session.problems == []


def test_torn_last_line_is_moved_aside_and_the_file_cut_back(tmp_path: Path) -> None:
    """A torn tail is appended to <name>.jsonl.torn and the file cut back, with a warning."""
    store = JsonlSessionStore(tmp_path)
    path = store.path("s")
    path.parent.mkdir(parents=True)
    good = json.dumps(USER).encode() + b"\n" + json.dumps(ANSWER).encode() + b"\n"
    torn = '{"role": "assistant", "content": "caf\u00e9'.encode()[:-1]  # cut inside a character
    path.write_bytes(good + torn)
    with capture_logs() as logs, store.open("s") as session:
        assert session.history() == [USER, ANSWER]
    assert path.read_bytes() == good
    torn_path = path.with_name("s.jsonl.torn")
    assert torn_path.read_bytes() == torn + b"\n"
    assert any(entry["event"].startswith("torn last line") for entry in logs)

    path.write_bytes(good + b'{"second tear')
    store.open("s").close()
    assert torn_path.read_bytes() == torn + b"\n" + b'{"second tear\n'


def test_a_stop_before_the_cut_back_leaves_the_torn_line_said_and_moved_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop signal landing as the file is cut back finds the move already said, and the
    next open, which finds the line torn still, moves it again: never cut out unsaid."""
    store = JsonlSessionStore(tmp_path)
    path = store.path("s")
    path.parent.mkdir(parents=True)
    good = json.dumps(USER).encode() + b"\n"
    torn = b'{"role": "assistant", "content": "half'
    path.write_bytes(good + torn)
    real_truncate = os.ftruncate

    def stopped_at_the_cut(fd: int, length: int) -> None:
        if length == len(good):  # the cut back (the lock file is emptied, to 0)
            raise KeyboardInterrupt  # as the CLI's stop-signal handler raises it
        real_truncate(fd, length)

    with capture_logs() as logs, monkeypatch.context() as patch:
        patch.setattr(os, "ftruncate", stopped_at_the_cut)
        with pytest.raises(KeyboardInterrupt):
            store.open("s")
    assert [entry["event"] for entry in logs] == ["torn last line moved out of the session"]
    assert path.read_bytes() == good + torn  # not cut yet: the next open moves it again
    with capture_logs() as logs, store.open("s") as session:
        assert session.history() == [USER]
    assert path.read_bytes() == good
    assert path.with_name("s.jsonl.torn").read_bytes() == torn + b"\n" + torn + b"\n"
    assert [entry["event"] for entry in logs] == ["torn last line moved out of the session"]


def test_complete_last_line_without_newline_is_kept(tmp_path: Path) -> None:
    """A last line that is a whole JSON object only lost its newline: it is completed, not moved."""
    store = JsonlSessionStore(tmp_path)
    path = store.path("s")
    path.parent.mkdir(parents=True)
    path.write_bytes(json.dumps(USER).encode())
    with store.open("s") as session:
        assert session.history() == [USER]
        session.append(ANSWER)
    assert [json.loads(line) for line in _lines(path) if line] == [USER, ANSWER]
    assert not path.with_name("s.jsonl.torn").exists()


@pytest.mark.parametrize("tail", [b"   ", b"\n   ", b"\n\n \t", b"\t\r", b"\xef\xbb\xbf  "])
def test_a_whitespace_only_last_line_is_a_blank_line_not_a_torn_one(
    tmp_path: Path, tail: bytes
) -> None:
    """Whitespace an editor left after the last line, without a newline, is passed over as a
    blank line: nothing is moved out or warned about, and the next line appended is a line of
    its own, numbered after the blank ones."""
    store = JsonlSessionStore(tmp_path)
    path = store.path("s")
    path.parent.mkdir(parents=True)
    good = b"" if tail.startswith(b"\xef") else json.dumps(USER).encode() + b"\n"
    path.write_bytes(good + tail)
    blank_lines = tail.count(b"\n") + 1
    loaded = good.count(b"\n")
    assert store.load("s").seq == loaded + blank_lines  # read as the lease will find it
    with capture_logs() as logs, store.open("s") as session:
        assert (session.problems, session.seq) == ([], loaded + blank_lines)
        session.append(ANSWER)
        newest, _ = next(session.newest_lines(lambda r: True))
        assert newest == loaded + blank_lines + 1
    assert logs == []
    assert not path.with_name("s.jsonl.torn").exists()
    assert (
        path.read_bytes()
        == good + tail + b"\n" + json.dumps(ANSWER, separators=(",", ":")).encode() + b"\n"
    )
    assert store.load("s").messages() == ([USER] if good else []) + [ANSWER]


def test_whitespace_only_lines_in_the_middle_and_at_the_end_are_passed_over(
    tmp_path: Path,
) -> None:
    """Complete lines of nothing but whitespace, between lines or after the last one, are
    blank lines: skipped without a warning, counted in the line numbers, left in the file."""
    store = JsonlSessionStore(tmp_path)
    path = store.path("s")
    path.parent.mkdir(parents=True)
    content = json.dumps(USER).encode() + b"\n \t\n" + json.dumps(ANSWER).encode() + b"\n\n   \n"
    path.write_bytes(content)
    with capture_logs() as logs, store.open("s") as session:
        assert (session.history(), session.problems, session.seq) == ([USER, ANSWER], [], 5)
        assert [n for n, _ in session.newest_lines(lambda r: True)] == [3, 1]
    assert logs == []
    assert path.read_bytes() == content
    assert not path.with_name("s.jsonl.torn").exists()


def test_invalid_middle_line_stays_in_the_file_and_is_skipped_with_its_number(
    tmp_path: Path,
) -> None:
    """A whole line that is not a JSON object stays on disk, is skipped and reported by number."""
    store = JsonlSessionStore(tmp_path)
    path = store.path("s")
    path.parent.mkdir(parents=True)
    content = b"\n".join(
        [json.dumps(USER).encode(), b"{not json", b"[1, 2]", json.dumps(ANSWER).encode(), b""]
    )
    path.write_bytes(content)
    with capture_logs() as logs, store.open("s") as session:
        assert session.history() == [USER, ANSWER]
        assert [(p.line, p.kind) for p in session.problems] == [(2, "invalid"), (3, "invalid")]
    assert path.read_bytes() == content
    assert [entry["line"] for entry in logs if entry["event"] == "session line skipped"] == [2, 3]


def test_a_byte_order_mark_before_the_first_line_is_no_part_of_it(tmp_path: Path) -> None:
    """A file an editor saved with a byte-order mark loads its first line; a mark before a
    later line still makes that line invalid; the file is appended to, never rewritten."""
    store = JsonlSessionStore(tmp_path)
    path = store.path("s")
    path.parent.mkdir(parents=True)
    bom = b"\xef\xbb\xbf"
    content = bom + json.dumps(USER).encode() + b"\n" + bom + json.dumps(ANSWER).encode() + b"\n"
    path.write_bytes(content)
    assert store.load("s").lines == [json.dumps(USER)]
    with store.open("s") as session:
        assert session.history() == [USER]
        assert [(p.line, p.kind) for p in session.problems] == [(2, "invalid")]
        session.append(ANSWER)
    assert path.read_bytes() == content + json.dumps(ANSWER, separators=(",", ":")).encode() + b"\n"
    assert [i.messages for i in store.list_sessions()] == [2]


@pytest.mark.parametrize(
    ("content", "history"),
    [
        (b"\xef\xbb\xbf", []),
        (b"\xef\xbb\xbf" + json.dumps(USER).encode(), [USER]),
    ],
)
def test_a_byte_order_mark_is_no_torn_line(
    tmp_path: Path, content: bytes, history: list[dict[str, str]]
) -> None:
    """A file holding a mark alone is empty, and a whole first line after the mark that only
    lost its newline is completed: neither is moved out as torn."""
    store = JsonlSessionStore(tmp_path)
    path = store.path("s")
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with store.open("s") as session:
        assert (session.history(), session.problems, session.seq) == (history, [], len(history))
        session.append(ANSWER)
    assert not path.with_name("s.jsonl.torn").exists()
    assert store.load("s").messages() == [*history, ANSWER]
    assert path.read_bytes().startswith(content)


def test_read_changes_nothing_and_reports_a_torn_tail(tmp_path: Path) -> None:
    """Reading (for `sessions show`) takes no lock, heals nothing and reports the torn tail."""
    store = JsonlSessionStore(tmp_path)
    path = store.path("s")
    path.parent.mkdir(parents=True)
    content = json.dumps(USER).encode() + b"\n" + b'{"role": "ass'
    path.write_bytes(content)
    with store.open("other"):
        log = store.load("s")
    assert log.messages() == [USER]
    assert [(p.line, p.kind) for p in log.problems] == [(2, "torn")]
    assert path.read_bytes() == content
    with pytest.raises(SessionError, match="no session named 'missing'"):
        store.load("missing")


def test_second_writer_fails_at_once(tmp_path: Path) -> None:
    """While one writer holds a session, opening it again raises SessionLockedError naming it."""
    store = JsonlSessionStore(tmp_path)
    first = store.open("busy")
    try:
        with pytest.raises(SessionLockedError) as caught:
            store.open("busy")
        assert "'busy' is in use by another process" in str(caught.value)
        store.open("free").close()  # other sessions are not affected
    finally:
        first.close()
    store.open("busy").close()  # released on close


def test_a_batch_the_disk_could_not_hold_is_taken_back_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails part way (a full disk) leaves none of the batch, and the lease goes on."""
    store = JsonlSessionStore(tmp_path)
    real_write = os.write
    with store.open("s") as session:
        session.append(USER)
        before = store.path("s").read_bytes()
        calls = iter(range(1_000))

        def disk_fills_up(fd: int, data: bytes | memoryview) -> int:
            if next(calls):  # the first write lands in part, the next finds the disk full
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real_write(fd, bytes(data)[: len(data) // 2])

        monkeypatch.setattr(os, "write", disk_fills_up)
        batch = [
            ({"role": "tool", "tool_call_id": f"c{n}", "content": "x" * 100}, None)
            for n in range(20)
        ]
        with pytest.raises(SessionError, match="No space left on device; nothing was appended"):
            session.append_many(batch)
        monkeypatch.setattr(os, "write", real_write)
        assert store.path("s").read_bytes() == before
        assert session.seq == 1
        session.append(ANSWER)
    assert store.load("s").messages() == [USER, ANSWER]


def test_a_folder_where_a_session_file_belongs_is_a_session_error(tmp_path: Path) -> None:
    """A session or lock path that is a folder fails with SessionError naming it, no OSError."""
    store = JsonlSessionStore(tmp_path)
    store.path("s").mkdir(parents=True)
    with pytest.raises(SessionError, match=r"cannot open session 's': .*s\.jsonl"):
        store.open("s")
    (store.directory / "t.lock").mkdir()
    with pytest.raises(SessionError, match=r"cannot lease session 't': .*t\.lock"):
        store.open("t")
    store.open("s2").close()  # the other sessions are not affected
    assert [info.name for info in store.list_sessions()] == ["s2"]


def test_closed_session_refuses_appends(tmp_path: Path) -> None:
    """Appending after close is a SessionError, not a silent loss."""
    session = JsonlSessionStore(tmp_path).open()
    session.close()
    with pytest.raises(SessionError, match="closed"):
        session.append(USER)


def test_listing_counts_messages_and_ignores_side_files(tmp_path: Path) -> None:
    """`list_sessions` gives name, messages, size and time; lock and torn files are not sessions."""
    store = JsonlSessionStore(tmp_path)
    assert store.list_sessions() == []
    with store.open("b") as session:
        session.append(USER)
        session.append(ANSWER)
    with store.open("a") as session:
        session.append(USER)
    store.path("a").with_name("a.jsonl.torn").write_bytes(b"junk\n")
    infos = store.list_sessions()
    assert [(i.name, i.messages) for i in infos] == [("a", 1), ("b", 2)]
    assert infos[1].size == store.path("b").stat().st_size
    assert set(infos[0].to_json()) == {"name", "path", "messages", "size", "modified"}


def test_parse_reports_each_problem_kind() -> None:
    """Blank lines are ignored, invalid lines and a torn tail are reported with line numbers."""
    records, problems = parse_session_lines(b'{"a": 1}\n\n"str"\n{"b": 2}\n{"c"')
    assert records == [{"a": 1}, {"b": 2}]
    assert [(p.line, p.kind) for p in problems] == [(3, "invalid"), (5, "torn")]


def test_a_whole_last_line_without_its_newline_is_loaded() -> None:
    """A last line that lost only its newline is a whole JSON object: loaded, nothing reported."""
    records, problems = parse_session_lines(b'{"a": 1}\n{"b": 2}')
    assert records == [{"a": 1}, {"b": 2}]
    assert problems == []


def test_empty_bookkeeping_adds_no_meta_to_the_line(tmp_path: Path) -> None:
    """A message appended with empty bookkeeping is stored as the message alone."""
    store = JsonlSessionStore(tmp_path)
    with store.open("s") as session:
        session.append(USER, {})
    assert [json.loads(line) for line in _lines(store.path("s")) if line] == [USER]


@pytest.mark.parametrize("linked", ["s.jsonl", "s.lock", "s.jsonl.torn"])
def test_a_store_file_that_is_a_link_out_of_the_folder_is_refused_and_its_target_untouched(
    tmp_path: Path, linked: str
) -> None:
    """A session, lock or torn file that is a symbolic link is a SessionError naming it; the
    file it points to (elsewhere) is neither emptied, cut back nor appended to."""
    store = JsonlSessionStore(tmp_path / "ws")
    store.directory.mkdir(parents=True)
    session = json.dumps(USER).encode() + b"\n" + b'{"torn'
    if linked != "s.jsonl":
        store.path("s").write_bytes(session)
    victim = tmp_path / "elsewhere.txt"
    victim.write_bytes(b"line one\nline two, no newline")
    (store.directory / linked).symlink_to(victim)
    refusal = rf"a symbolic link, which is not followed \(.*{re.escape(linked)}\)"
    with pytest.raises(SessionError, match=refusal):
        store.open("s")
    assert victim.read_bytes() == b"line one\nline two, no newline"
    if linked != "s.jsonl":
        assert store.path("s").read_bytes() == session  # not cut back: its tear is kept


def test_a_named_pipe_as_a_session_file_is_refused_not_waited_on(tmp_path: Path) -> None:
    """A named pipe where a session file belongs is a SessionError at once (open and read),
    and a listing leaves it out with a warning naming it."""
    store = JsonlSessionStore(tmp_path)
    store.directory.mkdir(parents=True)
    os.mkfifo(store.path("p"))
    outcome: list[BaseException | None] = []

    def open_pipe() -> None:
        try:
            store.open("p").close()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    opener = threading.Thread(target=open_pipe, daemon=True)
    opener.start()
    opener.join(timeout=5)
    if opener.is_alive():  # blocked on the pipe: let it go (a writer that closes at once)
        os.close(os.open(store.path("p"), os.O_WRONLY | os.O_NONBLOCK))
        opener.join(timeout=5)
        pytest.fail("opening the session waited on the named pipe")
    assert isinstance(outcome[0], SessionError)
    refusal = f"a named pipe (FIFO), not a regular file ({store.path('p')})"
    assert str(outcome[0]) == f"cannot open session 'p': {refusal}"
    with pytest.raises(SessionError) as info:
        store.load("p")
    assert str(info.value) == f"cannot read session 'p': {refusal}"
    with capture_logs() as logs:
        assert store.list_sessions() == []
    assert [(e["event"], e["reason"]) for e in logs] == [
        ("not a session file; left out", "a named pipe (FIFO), not a regular file")
    ]


def test_a_linked_session_is_left_out_of_a_listing_with_a_warning(tmp_path: Path) -> None:
    """A listing leaves out a session file that is a link, saying so, and lists the others."""
    store = JsonlSessionStore(tmp_path / "ws")
    with store.open("kept") as session:
        session.append(USER)
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_bytes(json.dumps(USER).encode() + b"\n")
    store.path("linked").symlink_to(elsewhere)
    with capture_logs() as logs:
        assert [info.name for info in store.list_sessions()] == ["kept"]
    assert [(e["event"], e["path"]) for e in logs] == [
        ("not a session file; left out", str(store.path("linked")))
    ]


def test_a_line_decoded_with_replacements_is_named_by_file_and_number(tmp_path: Path) -> None:
    """The warning that a session line held what had to be replaced (NaN, a lone surrogate)
    names the session's file and the line's number, when it is read and when it is loaded."""
    store = JsonlSessionStore(tmp_path)
    path = store.path("s")
    path.parent.mkdir(parents=True)
    path.write_bytes(
        b'{"role":"user","content":"a"}\n\n{"role":"user","content":"\\ud800","n":NaN}\n'
    )
    for load in (lambda: store.load("s"), lambda: store.open("s").close()):
        with capture_logs() as logs:
            load()
        warned = [e for e in logs if e["event"] == "session line decoded with replacements"]
        assert [(e["location"], e["line"]) for e in warned] == [(str(path), 3)]


def test_newest_lines_are_numbered_as_the_file_numbers_them(tmp_path: Path) -> None:
    """`Session.newest_lines` numbers each line as the file does, past blank and invalid
    lines, and the lines appended since after the last one loaded."""
    store = JsonlSessionStore(tmp_path)
    path = store.path("s")
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"n":1}\n\n{not json\n{"n":4}\n')
    with store.open("s") as session:
        session.append_records([{"n": 5}])
        assert list(session.newest_lines(lambda record: "n" in record)) == [
            (5, {"n": 5}),
            (4, {"n": 4}),
            (1, {"n": 1}),
        ]


@pytest.mark.parametrize(
    ("tail", "event"),
    [
        (b'{"role": "assistant", "content": "ha', "torn last line moved out of the session"),
        (json.dumps(ANSWER).encode(), "session line was missing its newline; completed"),
    ],
)
def test_healing_the_last_line_names_the_session_its_file_and_the_line(
    tmp_path: Path, tail: bytes, event: str
) -> None:
    """The warnings of healing a last line name it as every warning about a session line
    does: the session, its file (`location`) and the line, numbered past blank lines."""
    store = JsonlSessionStore(tmp_path)
    path = store.path("s")
    path.parent.mkdir(parents=True)
    path.write_bytes(json.dumps(USER).encode() + b"\n  \n" + tail)
    with capture_logs() as logs:
        store.open("s").close()
    [warned] = [entry for entry in logs if entry["event"] == event]
    assert (warned["session"], warned["location"], warned["line"]) == ("s", str(path), 3)
