"""`sessions import`: every session checked before any is written, a write refused half-way
named with what was imported before it, and `--resume` to finish."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from nanobot_core._jsonl import encode_lines
from nanobot_core.errors import SessionError
from nanobot_core.jsonl_store import JsonlLease, JsonlSessionStore
from nanobot_core.session_transfer import (
    EXPORT_HEADER,
    ExportedSession,
    export_lines,
    export_sessions,
    import_sessions,
    read_export,
)
from tests.helpers import clean_env, install_plugin, plugin_env, run_cli

TIMEOUT = 60
LINE = '{"role":"user","content":"x"}'


def _sessions(count: int) -> list[ExportedSession]:
    """`count` sessions, "s0", "s1", ..., of one line each."""
    return [ExportedSession(f"s{n}", [f'{{"n":{n}}}']) for n in range(count)]


def _names(store: JsonlSessionStore) -> list[str]:
    return [info.name for info in store.list_sessions()]


class _RefusingLease:
    """A JSONL lease whose append fails as a full disk does, once the file was created."""

    def __init__(self, inner: JsonlLease) -> None:
        self.inner = inner
        self.session = inner.session

    def load(self) -> object:
        return self.inner.load()

    def append(self, lines: Sequence[str], *, expected_seq: int) -> int:
        raise SessionError(
            f"cannot append to session {self.session!r}: No space left on device; "
            "nothing was appended"
        )

    def release(self) -> None:
        self.inner.release()


class _RefusingStore(JsonlSessionStore):
    """The JSONL store, but the write of session `refused` fails (the disk filled up)."""

    name = "refusing"

    def __init__(self, workspace: Path, refused: str) -> None:
        super().__init__(workspace)
        self.refused = refused

    def lease(self, session: str, *, wait: float = 0.0) -> JsonlLease:
        lease = super().lease(session, wait=wait)
        if session == self.refused:
            return _RefusingLease(lease)  # type: ignore[return-value]
        return lease


def test_a_write_refused_half_way_names_the_sessions_imported_and_resume_finishes(
    tmp_path: Path,
) -> None:
    """The third session's write refused: the error names it, the two imported before it and
    the one after; those two stay; importing again with `resume` imports the rest."""
    sessions = _sessions(4)
    with pytest.raises(SessionError) as caught:
        import_sessions(_RefusingStore(tmp_path, "s2"), sessions)
    assert str(caught.value) == (
        "importing session 's2' into the refusing store failed: cannot append to session "
        "'s2': No space left on device; nothing was appended. Imported before it (2): "
        "'s0', 's1'; not imported: 's2' and the 1 after it. Import the same file again with "
        "--resume once the cause is fixed to import the rest (the sessions imported are "
        "checked and left as they are), or remove the sessions imported to undo it"
    )
    store = JsonlSessionStore(tmp_path)
    # The file the lease made for s2 is left, empty: resume fills it.
    assert _names(store) == ["s0", "s1", "s2"]
    assert store.load("s2").seq == 0
    with pytest.raises(SessionError, match=r"already has session\(s\) 's0', 's1', 's2';"):
        import_sessions(store, sessions)
    done = import_sessions(store, sessions, resume=True)
    assert ([s.name for s in done.imported], done.already) == (["s2", "s3"], ["s0", "s1"])
    assert [store.load(s.name).lines for s in sessions] == [s.lines for s in sessions]


def test_resume_refuses_a_session_holding_other_lines_and_writes_nothing(tmp_path: Path) -> None:
    """With `resume`, a session the store holds with other lines than the export's is refused,
    named with its line count, before any session is written."""
    store = JsonlSessionStore(tmp_path)
    import_sessions(store, [ExportedSession("s1", ['{"other":1}', '{"other":2}'])])
    with pytest.raises(SessionError) as caught:
        import_sessions(store, _sessions(3), resume=True)
    assert str(caught.value) == (
        "jsonl store already has session(s) 's1' (2 line(s) other than the export's); "
        "nothing was imported (remove them or import elsewhere)"
    )
    assert _names(store) == ["s1"]


def test_a_line_no_store_can_keep_in_any_session_is_refused_before_any_write(
    tmp_path: Path,
) -> None:
    """A session given twice, or a line that is no JSON object in the last session, is refused
    naming the session, and no session before it is written."""
    store = JsonlSessionStore(tmp_path)
    with pytest.raises(SessionError, match=r"^session 's0' is given twice; nothing was imp"):
        import_sessions(store, [*_sessions(3), ExportedSession("s0", [])])
    bad = [*_sessions(3), ExportedSession("s3", [LINE, "[1]"])]
    with pytest.raises(SessionError, match=r"^session 's3', line 2: a JSON list, not an object$"):
        import_sessions(store, bad)
    assert _names(store) == []


def test_a_bad_export_file_changes_nothing_and_names_file_line_and_session(tmp_path: Path) -> None:
    """`sessions import` of a file whose last session holds a line that is no object: exit 2,
    naming the file, the line and the session, and no session of the file is written."""
    values = [
        EXPORT_HEADER,
        {"session": "a", "line": LINE},
        {"session": "b", "line": LINE},
        {"session": "c", "line": "[1]"},
    ]
    export = tmp_path / "export.jsonl"
    export.write_text("".join(json.dumps(value) + "\n" for value in values))
    (tmp_path / "ws").mkdir()
    result = run_cli("sessions", "import", str(export), cwd=tmp_path / "ws", timeout=TIMEOUT)
    assert result.returncode == 2, result.stderr
    assert f"Error: {export}:4: session 'c': a JSON list, not an object" in result.stderr
    assert "Traceback" not in result.stderr
    assert _names(JsonlSessionStore(tmp_path / "ws")) == []


_SESSIONS = st.lists(
    st.lists(st.integers(0, 9).map(lambda n: f'{{"n":{n}}}'), max_size=3), min_size=1, max_size=6
)


@given(_SESSIONS, st.data())
@settings(max_examples=40, deadline=None, database=None)
def test_whatever_session_a_store_refuses_the_ones_before_it_are_named_and_kept(
    lines: list[list[str]], data: st.DataObject
) -> None:
    """Whichever session of an export the store refuses to write, the error names every one
    before it, they and only they are in the store, and `resume` then imports the same
    sessions a whole import does."""
    sessions = [ExportedSession(f"s{n}", session) for n, session in enumerate(lines)]
    refused = data.draw(st.integers(0, len(sessions) - 1))
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        export = b"".join(encode_lines(export_lines(sessions)))
        with pytest.raises(SessionError) as caught:
            import_sessions(_RefusingStore(root, f"s{refused}"), read_export(export, "x"))
        before = ", ".join(repr(s.name) for s in sessions[:refused]) or "none"
        assert f". Imported before it ({refused}): {before}; not imported: " in str(caught.value)
        store = JsonlSessionStore(root)
        assert [store.load(s.name).lines for s in sessions[:refused]] == lines[:refused]
        assert _names(store) == [s.name for s in sessions[: refused + 1]]
        import_sessions(store, read_export(export, "x"), resume=True)
        export_sessions(store, [], root / "again.jsonl")
        assert (root / "again.jsonl").read_bytes() == export


# A store plugin over the workspace's JSONL files whose append fails, as a full disk does,
# for the session REFUSE names.
REFUSING = """
import os
from nanobot_core import hookimpl
from nanobot_core.errors import SessionError
from nanobot_core.jsonl_store import JsonlSessionStore

class Lease:
    def __init__(self, inner):
        self.inner = inner
        self.session = inner.session

    def load(self):
        return self.inner.load()

    def append(self, lines, *, expected_seq):
        if self.session == os.environ.get("REFUSE"):
            raise SessionError(f"cannot append to session {self.session!r}: No space left")
        return self.inner.append(lines, expected_seq=expected_seq)

    def release(self):
        self.inner.release()

class Store(JsonlSessionStore):
    name = "refusing"

    def lease(self, session, *, wait=0.0):
        return Lease(super().lease(session, wait=wait))

@hookimpl
def nanobot_session_stores(ctx):
    return [Store(ctx.workspace)]
"""


def test_cli_import_refused_half_way_then_resumed(tmp_path: Path) -> None:
    """`sessions import` whose store refuses the third session: exit 1, no traceback, the
    sessions imported named; `--resume` once the store writes again imports the rest."""
    site = install_plugin(tmp_path / "site", "refusingstore", REFUSING)
    export = tmp_path / "export.jsonl"
    export.write_bytes(b"".join(encode_lines(export_lines(_sessions(4)))))
    workspace = tmp_path / "ws"
    workspace.mkdir()

    def imported(*args: str, refuse: str = "") -> tuple[int, str]:
        env = plugin_env(site, "refusingstore", NANOBOT_SESSIONS__STORE="refusing", REFUSE=refuse)
        done = run_cli("sessions", "import", str(export), *args, cwd=workspace, env=env)
        assert "Traceback" not in done.stderr
        return done.returncode, done.stderr

    code, stderr = imported(refuse="s2")
    assert code == 1
    assert "Error: importing session 's2' into the refusing store failed: " in stderr
    assert "Imported before it (2): 's0', 's1'; not imported: 's2' and the 1 after it." in stderr
    assert "again with --resume" in stderr
    code, stderr = imported()
    assert code == 1 and "import it again with --resume)" in stderr
    code, stderr = imported("--resume")
    assert code == 0, stderr
    assert stderr.endswith(
        "imported 2 session(s), 2 line(s) into the refusing store; 2 already there, "
        "left as they are\n"
    )
    store = JsonlSessionStore(workspace)
    assert [store.load(s.name).lines for s in _sessions(4)] == [s.lines for s in _sessions(4)]


class _InterruptedStore(JsonlSessionStore):
    """The JSONL store, but Ctrl-C arrives as session "s2" is leased."""

    def lease(self, session: str, *, wait: float = 0.0) -> JsonlLease:
        if session == "s2":
            raise KeyboardInterrupt
        return super().lease(session, wait=wait)


def test_an_import_interrupted_half_way_warns_naming_the_sessions_imported(
    tmp_path: Path,
) -> None:
    """Ctrl-C during an import goes on as it is, after a warning naming the session it
    stopped at and the sessions imported before it, which stay."""
    with capture_logs() as logs, pytest.raises(KeyboardInterrupt):
        import_sessions(_InterruptedStore(tmp_path), _sessions(4))
    assert [(e["event"], e["session"], e["imported"]) for e in logs] == [
        ("import stopped; the sessions imported before it stay", "s2", ["s0", "s1"])
    ]
    assert _names(JsonlSessionStore(tmp_path)) == ["s0", "s1"]


def _cli_bytes(*args: str, cwd: Path, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """``nanobot-core ARGS`` in a child process given `stdin` as bytes, its output as bytes."""
    return subprocess.run(
        [sys.executable, "-m", "nanobot_core", *args],
        cwd=cwd,
        env=clean_env(),
        input=stdin,
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )


# Session lines as a store keeps them: JSON objects of any text, so the pipe carries UTF-8.
_PIPED_LINES = st.lists(
    st.text(max_size=8).map(lambda text: json.dumps({"role": "user", "content": text})),
    min_size=1,
    max_size=3,
)


@given(st.dictionaries(st.sampled_from(["a", "b.c", "d_e"]), _PIPED_LINES, min_size=1))
@settings(max_examples=8, deadline=None, database=None)
def test_import_of_dash_reads_the_export_from_stdin_byte_for_byte(
    sessions: dict[str, list[str]],
) -> None:
    """`sessions export -o -` piped into `sessions import -` leaves every session file
    byte-identical in the other workspace, as `-` reads stdin for every other input."""
    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder, "source"), Path(folder, "target")
        target.mkdir()
        store = JsonlSessionStore(source)
        for name, lines in sessions.items():
            lease = store.lease(name)
            lease.load()
            lease.append(lines, expected_seq=0)
            lease.release()
        exported = _cli_bytes("sessions", "export", "-o", "-", cwd=source)
        assert exported.returncode == 0, exported.stderr
        imported = _cli_bytes("sessions", "import", "-", cwd=target, stdin=exported.stdout)
        assert imported.returncode == 0, imported.stderr
        assert imported.stderr.decode().endswith(
            f"imported {len(sessions)} session(s), "
            f"{sum(map(len, sessions.values()))} line(s) into the jsonl store\n"
        )
        for name in sessions:
            kept = Path(".nanobot", "sessions", f"{name}.jsonl")
            assert (target / kept).read_bytes() == (source / kept).read_bytes()


def test_import_of_dash_names_stdin_in_what_is_wrong_with_the_export(tmp_path: Path) -> None:
    """An export on stdin whose second line is no session line: exit 2 naming `stdin:2`,
    no traceback, and nothing written."""
    piped = json.dumps(EXPORT_HEADER) + "\n" + json.dumps({"name": "a"}) + "\n"
    result = _cli_bytes("sessions", "import", "-", cwd=tmp_path, stdin=piped.encode())
    stderr = result.stderr.decode()
    assert result.returncode == 2, stderr
    assert 'Error: stdin:2: expected {"session": NAME, "line": TEXT}' in stderr
    assert "Traceback" not in stderr
    assert _names(JsonlSessionStore(tmp_path)) == []


def _given_twice(name: str, first: int) -> str:
    """What `read_export` says of a line giving session `name` again, its first at `first`."""
    return (
        f"session {name!r} is given twice (its first lines are at line {first}): an export "
        "holds each session's lines together, and joining the two would guess their order; "
        "put them together, or give one part another name"
    )


def test_cli_import_of_a_session_whose_lines_are_apart_changes_nothing(tmp_path: Path) -> None:
    """An export whose session `a` comes back after `b` (a hand edit, two parts pasted) is
    exit 2 naming the file, the line of the second part and that of the first, and no
    session is written, as for a session given twice."""
    values = [
        EXPORT_HEADER,
        {"session": "a", "line": '{"n":1}'},
        {"session": "a", "line": '{"n":2}'},
        {"session": "b", "line": '{"n":3}'},
        {"session": "a", "line": '{"n":4}'},
    ]
    export = tmp_path / "export.jsonl"
    export.write_text("".join(json.dumps(value) + "\n" for value in values))
    (tmp_path / "ws").mkdir()
    result = run_cli("sessions", "import", str(export), cwd=tmp_path / "ws", timeout=TIMEOUT)
    assert result.returncode == 2, result.stderr
    assert f"Error: {export}:5: {_given_twice('a', 2)}\n" in result.stderr
    assert "Traceback" not in result.stderr
    assert _names(JsonlSessionStore(tmp_path / "ws")) == []


@pytest.mark.parametrize(
    ("values", "line", "first"),
    [
        ([{"session": "a"}, {"session": "a", "line": LINE}], 3, 2),  # a line after "no line"
        ([{"session": "a", "line": LINE}, {"session": "a"}], 3, 2),  # "no line" after a line
        ([{"session": "a"}, {"session": "a"}], 3, 2),
        ([{"session": "a"}, {"session": "b"}, {"session": "a"}], 4, 2),
    ],
)
def test_an_empty_session_with_lines_of_its_name_is_a_session_given_twice(
    values: list[dict[str, str]], line: int, first: int
) -> None:
    """`{"session": NAME}` is a whole session of no line: any other line of NAME with it
    is refused as a session given twice, naming both lines."""
    data = "\n".join(json.dumps(value) for value in [EXPORT_HEADER, *values]).encode()
    with pytest.raises(SessionError) as refused:
        read_export(data, "x")
    assert str(refused.value) == f"x:{line}: {_given_twice('a', first)}"


_PARTS = st.lists(
    st.tuples(
        st.text("abc.-_9", min_size=1, max_size=3).filter(lambda name: name not in (".", "..")),
        st.lists(st.integers(0, 9).map(lambda n: f'{{"n":{n}}}'), max_size=3),
    ),
    min_size=2,
    max_size=5,
    unique_by=lambda part: part[0],
)


@given(_PARTS, st.data())
@settings(max_examples=100, deadline=None, database=None)
def test_whatever_session_comes_back_after_another_the_export_is_refused_naming_both(
    parts: list[tuple[str, list[str]]], data: st.DataObject
) -> None:
    """Whatever the sessions of an export, a line (or an empty-session line) of one of them
    put after another session's lines is refused, naming it, the line it comes back at and
    the line its lines began at; the same sessions, each one's lines together, are read."""
    rows = [
        value
        for name, lines in parts
        for value in export_lines([ExportedSession(name, lines)], header=False)
    ]
    header = [EXPORT_HEADER]
    assert [(s.name, s.lines) for s in read_export(_encoded([*header, *rows]), "x")] == parts
    split = data.draw(st.integers(0, len(parts) - 2), label="session that comes back")
    after = data.draw(st.integers(split + 1, len(parts) - 1), label="after session")
    name = parts[split][0]
    again = data.draw(
        st.sampled_from([{"session": name}, {"session": name, "line": '{"again":1}'}]),
        label="line",
    )
    # Line numbers: the header is line 1; each session's rows follow in order.
    starts = []
    number = 2
    for _name, lines in parts:
        starts.append(number)
        number += max(len(lines), 1)
    end_of_after = starts[after] + max(len(parts[after][1]), 1)
    index = end_of_after - 2  # rows are numbered from line 2
    edited = [*rows[:index], again, *rows[index:]]
    with pytest.raises(SessionError) as refused:
        read_export(_encoded([*header, *edited]), "x")
    assert str(refused.value) == f"x:{end_of_after}: {_given_twice(name, starts[split])}"


def _encoded(values: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(value) + "\n" for value in values).encode()
