"""The session-store protocol: the JSONL store's contract, the store hook, export and import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from nanobot_core._jsonl import encode_lines, is_blank
from nanobot_core.cli import cli
from nanobot_core.config import Config, SessionsConfig, load_config
from nanobot_core.errors import ConfigError, SessionError
from nanobot_core.hookspecs import hookimpl
from nanobot_core.jsonl_store import JsonlSessionStore
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.session_transfer import (
    EXPORT_HEADER,
    ExportedSession,
    export_lines,
    export_sessions,
    import_sessions,
    read_export,
)
from nanobot_core.sessions import (
    ContainedStore,
    SessionInfo,
    open_session,
    select_session_store,
    session_stores,
)
from nanobot_core.testing_sessions import SessionStoreContract
from tests.headless.fake_server import FakeChatServer, text_reply, tool_call_reply
from tests.helpers import clean_env

TIMEOUT = 60


class TestJsonlStoreContract(SessionStoreContract):
    """The built-in file store passes the contract every store passes."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> JsonlSessionStore:
        """A store over an empty workspace."""
        return JsonlSessionStore(tmp_path)

    @pytest.fixture
    def second_store(self, store: JsonlSessionStore) -> JsonlSessionStore:
        """Another instance over the same directory (what another process opens)."""
        return JsonlSessionStore(store.workspace)


class _OtherStore(JsonlSessionStore):
    name = "other"


class _StorePlugin:
    @hookimpl
    def nanobot_session_stores(self, ctx: object) -> list[object]:
        workspace = ctx.workspace
        return [_OtherStore(workspace), JsonlSessionStore(Path(workspace) / "shadow"), "junk"]


def _manager(tmp_path: Path, store: str = "jsonl") -> PluginManager:
    config = Config(sessions=SessionsConfig(store=store))
    manager = PluginManager(config, workspace=tmp_path, autoload=False)
    manager.register(_StorePlugin(), name="store-plugin")
    return manager.load()


def test_default_store_is_the_builtin_jsonl(tmp_path: Path) -> None:
    """With no config the store is the workspace's JSONL store, which no plugin can replace."""
    contained = select_session_store(_manager(tmp_path))
    assert isinstance(contained, ContainedStore)
    assert contained.owner.startswith("built-in plugin 'builtin:sessions' from nanobot-core ")
    store = contained.store
    assert isinstance(store, JsonlSessionStore)
    assert store.directory == tmp_path / ".nanobot" / "sessions"


def test_plugin_store_is_picked_by_name(tmp_path: Path) -> None:
    """`[sessions] store` picks a plugin's store; items that are not stores are left out."""
    assert sorted(session_stores(_manager(tmp_path))) == ["jsonl", "other"]
    assert isinstance(select_session_store(_manager(tmp_path, "other")).store, _OtherStore)


class _Refusing(JsonlSessionStore):
    """A store whose `load` raises what `raised` holds."""

    name = "refusing"
    raised: BaseException = RuntimeError("disk on fire")

    def load(self, session: str) -> Any:
        raise self.raised


def test_a_store_lets_the_cores_own_errors_through_and_names_itself_for_others(
    tmp_path: Path,
) -> None:
    """A store's NanobotError (a ConfigError: an unset DSN) goes on as it is, exit 2 kept;
    anything else is a SessionError naming the store and its plugin."""
    store = _Refusing(tmp_path)
    contained = ContainedStore(store, "refusing", "plugin 'p' from p 1.0")
    store.raised = ConfigError("sessions.postgres.dsn: not set")
    with pytest.raises(ConfigError, match=r"^sessions\.postgres\.dsn: not set$"):
        contained.load("default")
    store.raised = RuntimeError("disk on fire")
    with pytest.raises(SessionError) as caught:
        contained.load("default")
    assert str(caught.value) == (
        "session store 'refusing' of plugin 'p' from p 1.0: load raised RuntimeError: disk on fire"
    )


def test_unknown_store_names_the_known_ones(tmp_path: Path) -> None:
    """An unknown store name is a ConfigError naming the key and the known stores."""
    with pytest.raises(ConfigError, match=r"sessions.store: .*'nope'.*known: jsonl, other"):
        select_session_store(_manager(tmp_path, "nope"))


def test_sessions_config_from_env_and_toml(tmp_path: Path) -> None:
    """Store, lease wait and DSN load from TOML and both DSN variables; the DSN is not in a repr."""
    (tmp_path / "nanobot.toml").write_text(
        '[sessions]\nstore = "postgres"\nlease_wait = 2.5\n'
        '[sessions.postgres]\ndsn = "postgresql://u:hunter2@db/x"\n'
    )
    config = load_config(cwd=tmp_path, environ={})
    assert (config.sessions.store, config.sessions.lease_wait) == ("postgres", 2.5)
    assert config.sessions.postgres.dsn == "postgresql://u:hunter2@db/x"
    assert "hunter2" not in repr(config)
    named = load_config(cwd=tmp_path, environ={"NANOBOT_POSTGRES_DSN": "host=a password=pw1"})
    assert named.sessions.postgres.dsn == "host=a password=pw1"
    nested = load_config(cwd=tmp_path, environ={"NANOBOT_SESSIONS__POSTGRES__DSN": "host=b"})
    assert nested.sessions.postgres.dsn == "host=b"


def test_sessions_config_rejects_bad_types(tmp_path: Path) -> None:
    """A lease wait that is not a number is a ConfigError naming the key."""
    with pytest.raises(ConfigError, match=r"sessions\.lease_wait"):
        load_config(cwd=tmp_path, environ={"NANOBOT_SESSIONS__LEASE_WAIT": "soon"})


def _write_session(store: JsonlSessionStore, name: str, lines: list[str]) -> None:
    lease = store.lease(name)
    try:
        lease.append(lines, expected_seq=lease.load().seq)
    finally:
        lease.release()


def test_export_import_round_trip_is_byte_identical(tmp_path: Path) -> None:
    """Export from one workspace, import into another: the session files are the same bytes."""
    source = JsonlSessionStore(tmp_path / "a")
    _write_session(
        source, "one", ['{"role":"user","content":"caf\u00e9"}', '{"_meta":{"kind":"x"}}']
    )
    _write_session(source, "two", ['{ "role" : "user", "content" : "\\u00e9" }'])
    export = tmp_path / "export.jsonl"
    export_sessions(source, [], export)
    target = JsonlSessionStore(tmp_path / "b")
    done = import_sessions(target, read_export(export.read_bytes(), "export.jsonl")).imported
    assert [s.name for s in done] == ["one", "two"]
    for name in ("one", "two"):
        assert target.path(name).read_bytes() == source.path(name).read_bytes()
    again = tmp_path / "again.jsonl"
    export_sessions(target, [], again)
    assert again.read_bytes() == export.read_bytes()
    first = json.loads(export.read_text().splitlines()[0])
    assert first == EXPORT_HEADER


def test_a_session_with_crlf_endings_exports_and_imports_byte_identical(tmp_path: Path) -> None:
    """Lines ending in CRLF (a file edited on Windows) export, import and keep their bytes."""
    source = JsonlSessionStore(tmp_path / "a")
    source.directory.mkdir(parents=True)
    content = b'{"role":"user","content":"hi"}\r\n{"role":"assistant","content":"yo"}\r\n'
    source.path("crlf").write_bytes(content)
    export = tmp_path / "export.jsonl"
    export_sessions(source, [], export)
    target = JsonlSessionStore(tmp_path / "b")
    import_sessions(target, read_export(export.read_bytes(), "export.jsonl"))
    assert target.path("crlf").read_bytes() == content


_BOM = b"\xef\xbb\xbf"
_PIECES = [
    b'{"role":"user","content":"x"}',
    b'{"a":NaN}',
    b'{"a":"\\ud800"}',
    b'{"_meta":{"kind":"governance"}}',
    b'{"b":"\xe2\x80\xa8"}',
    b"[1]",
    b"\xff",
    b"\xef\xbb\xbf",
    b"\r\n",
    b"\r",
    b" ",
    b"\t",
    b"\x0c",
    b"\n",
]


@given(st.lists(st.sampled_from(_PIECES), max_size=12))
@settings(max_examples=60, deadline=None, database=None)
def test_whatever_a_session_file_holds_its_export_imports_and_exports_again_the_same(
    parts: list[bytes],
) -> None:
    """Any session file exports to a file that imports, and exporting again gives the same bytes."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        source = JsonlSessionStore(root / "a")
        source.directory.mkdir(parents=True)
        source.path("s").write_bytes(b"".join(parts))
        export, again = root / "export.jsonl", root / "again.jsonl"
        export_sessions(source, [], export)
        target = JsonlSessionStore(root / "b")
        import_sessions(target, read_export(export.read_bytes(), "export.jsonl"))
        export_sessions(target, [], again)
        assert again.read_bytes() == export.read_bytes()
        assert [info.name for info in target.list_sessions()] == ["s"]  # even with no line


@given(st.lists(st.sampled_from(_PIECES), max_size=12))
@settings(max_examples=60, deadline=None, database=None)
def test_a_byte_order_mark_before_a_session_file_changes_nothing_read_from_it(
    parts: list[bytes],
) -> None:
    """Whatever a session file holds, a byte-order mark put before it (an editor saving it on
    Windows) gives the same lines, problems, line count and export as the file without."""
    data = b"".join(parts)
    if data.startswith(_BOM):  # the mark is read past once: one already there is the file's
        data = b" " + data
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        exports = []
        for prefix, where in ((b"", "plain"), (_BOM, "marked")):
            store = JsonlSessionStore(root / where)
            store.directory.mkdir(parents=True)
            store.path("s").write_bytes(prefix + data)
            loaded = store.load("s")
            exports.append((loaded.records, loaded.lines, loaded.problems, loaded.seq))
            export_sessions(store, [], root / f"{where}.jsonl")
            exports.append((root / f"{where}.jsonl").read_bytes())
        assert exports[:2] == exports[2:]


@given(st.lists(st.sampled_from(_PIECES), max_size=12))
@settings(max_examples=80, deadline=None, database=None)
def test_taking_the_lease_moves_out_only_a_torn_last_line_and_changes_no_line_read(
    parts: list[bytes],
) -> None:
    """Whatever a session file holds, the lease moves to the torn file only a last line that
    is neither blank (whitespace alone) nor a JSON object, and then loads the lines, their
    numbers and the invalid ones that reading the file without it gives."""
    data = b"".join(parts)
    tail = data[data.rfind(b"\n") + 1 :]
    bare = tail.removeprefix(_BOM) if b"\n" not in data else tail
    with tempfile.TemporaryDirectory() as folder:
        store = JsonlSessionStore(Path(folder))
        store.directory.mkdir(parents=True)
        path = store.path("s")
        path.write_bytes(data)
        read = store.load("s")
        torn = [problem.line for problem in read.problems if problem.kind == "torn"]
        with capture_logs(), store.open("s") as session:
            numbers = [n for n, _ in session.newest_lines(lambda record: True)][::-1]
            problems, seq = session.problems, session.seq
        moved = path.with_name("s.jsonl.torn")
        assert moved.exists() == bool(torn)
        assert torn == ([] if is_blank(bare) else torn)  # a blank last line is never torn
        if torn:
            assert moved.read_bytes() == tail + b"\n"
        assert numbers == (read.numbers or list(range(1, len(read.records) + 1)))
        assert problems == [problem for problem in read.problems if problem.kind != "torn"]
        assert seq == read.seq - len(torn)
        assert path.read_bytes().endswith(b"\n") or path.read_bytes() in (b"", _BOM)


def test_a_session_with_no_line_to_export_is_exported_and_imported_by_name(
    tmp_path: Path,
) -> None:
    """An empty session, and one whose every line is left out, are exported as
    ``{"session": NAME}`` and imported as empty sessions, not lost on the way."""
    source = JsonlSessionStore(tmp_path / "a")
    _write_session(source, "full", ['{"role":"user","content":"x"}'])
    source.path("empty").write_bytes(b"")
    source.path("junk").write_bytes(b"not json\n")
    export = tmp_path / "export.jsonl"
    problems = export_sessions(source, [], export).problems
    assert [(left.session, left.problem.line) for left in problems] == [("junk", 1)]
    assert [json.loads(line) for line in export.read_bytes().splitlines()[1:]] == [
        {"session": "empty"},
        {"session": "full", "line": '{"role":"user","content":"x"}'},
        {"session": "junk"},
    ]
    target = JsonlSessionStore(tmp_path / "b")
    done = import_sessions(target, read_export(export.read_bytes(), "export.jsonl")).imported
    assert [(s.name, s.lines) for s in done] == [
        ("empty", []),
        ("full", ['{"role":"user","content":"x"}']),
        ("junk", []),
    ]
    assert [(i.name, i.size) for i in target.list_sessions()] == [
        ("empty", 0),
        ("full", 30),
        ("junk", 0),
    ]
    with pytest.raises(SessionError, match=r"already has session.*'empty'"):
        import_sessions(target, read_export(export.read_bytes(), "export.jsonl"))


class _NoEmptySessions(JsonlSessionStore):
    """A store that keeps no session without a line: it lists none."""

    name = "no-empty"

    def list_sessions(self) -> list[SessionInfo]:
        return [info for info in super().list_sessions() if info.size]


def test_an_empty_session_a_store_does_not_keep_is_named_not_counted(tmp_path: Path) -> None:
    """Importing an empty session into a store that lists no session without a line warns,
    naming the session and the store, and leaves it out of what was imported."""
    data = b"".join(
        encode_lines(export_lines([ExportedSession("empty", []), ExportedSession("full", ["{}"])]))
    )
    with capture_logs() as logs:
        done = import_sessions(_NoEmptySessions(tmp_path), read_export(data, "x")).imported
    assert [s.name for s in done] == ["full"]
    assert [(e["event"], e["session"], e["store"]) for e in logs] == [
        (
            "empty session not imported: the store keeps no session without a line",
            "empty",
            "no-empty",
        )
    ]


def test_import_refuses_existing_sessions(tmp_path: Path) -> None:
    """Importing a session the store already has writes nothing at all and names it."""
    store = JsonlSessionStore(tmp_path)
    _write_session(store, "kept", ['{"n":1}'])
    before = store.path("kept").read_bytes()
    data = b"\n".join(
        json.dumps(v).encode()
        for v in (
            EXPORT_HEADER,
            {"session": "new", "line": "{}"},
            {"session": "kept", "line": "{}"},
        )
    )
    with pytest.raises(SessionError, match="'kept'"):
        import_sessions(store, read_export(data, "x"))
    assert store.path("kept").read_bytes() == before
    assert [i.name for i in store.list_sessions()] == ["kept"]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([b'{"other": 1}'], "x:1: not a sessions export"),
        ([json.dumps(EXPORT_HEADER).encode(), b"[1]"], "x:2: expected"),
        ([json.dumps(EXPORT_HEADER).encode(), b'{"session":"a","line":1}'], "x:2: expected"),
        ([json.dumps(EXPORT_HEADER).encode(), b'{"session":1}'], "x:2: expected"),
        ([json.dumps(EXPORT_HEADER).encode(), b'{"session":"a/b"}'], "x:2: invalid"),
        (
            [json.dumps(EXPORT_HEADER).encode(), b'{"session":"a","line":"{}","line":"{}"}'],
            "x:2: the key 'line' is given twice",
        ),
        (
            [json.dumps(EXPORT_HEADER).encode(), b'{"session":"a","session":"b","line":"{}"}'],
            "x:2: the key 'session' is given twice",
        ),
        ([json.dumps(EXPORT_HEADER).encode(), b'{"session":"a b","line":"{}"}'], "x:2: invalid"),
        ([json.dumps(EXPORT_HEADER).encode(), b'{"session":"a","line":"[]"}'], "x:2: .*not an obj"),
        ([json.dumps(EXPORT_HEADER).encode(), b"\xff"], "x:2: not a JSON line"),
        ([json.dumps(EXPORT_HEADER).encode(), _BOM + b'{"session":"a"}'], "x:2: not a JSON line"),
        ([_BOM + _BOM + json.dumps(EXPORT_HEADER).encode()], "x:1: not a JSON line"),
        ([json.dumps(EXPORT_HEADER).encode(), b"[" * 100_000], "x:2: .*nested deeper"),
        ([json.dumps(EXPORT_HEADER).encode(), b'{"n":' + b"1" * 5_000 + b"}"], "x:2: .*digits"),
        (
            [
                json.dumps(EXPORT_HEADER).encode(),
                b'{"session":"a","line":"{\\"a\\":\\"\\ud800\\"}"}',
            ],
            "x:2: .*surrogate",
        ),
    ],
)
def test_bad_export_files_name_the_line(lines: list[bytes], message: str) -> None:
    """An export file that is not one fails with the line number and what is wrong."""
    with pytest.raises(SessionError, match=message):
        read_export(b"\n".join(lines), "x")


_NAMES = st.text("ab.-_Z9", min_size=1, max_size=4).filter(lambda name: name not in (".", ".."))
_RECORDS = st.dictionaries(
    st.text(max_size=4),
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    max_size=3,
)


@given(st.dictionaries(_NAMES, st.lists(_RECORDS, max_size=3), max_size=4), st.booleans())
@settings(max_examples=100, deadline=None, database=None)
def test_every_session_of_an_export_is_read_back_with_its_lines(
    sessions: dict[str, list[dict[str, Any]]], bom: bool
) -> None:
    """Whatever sessions an export holds, empty ones included, reading it gives each back,
    by name and in order, with the exact text of every line, a byte-order mark an editor
    put before the file or not."""
    exported = [
        ExportedSession(name, [json.dumps(record) for record in records])
        for name, records in sessions.items()
    ]
    data = (_BOM if bom else b"") + b"".join(encode_lines(export_lines(exported)))
    assert read_export(data, "x") == exported


#: Blank lines as `is_blank` has them: JSON's whitespace alone, a CR of a CRLF end included.
_BLANK_LINES = st.text(" \t\r", max_size=3).map(str.encode)


@given(
    st.dictionaries(_NAMES, st.lists(_RECORDS, max_size=3), max_size=4),
    st.lists(st.tuples(st.integers(min_value=0), _BLANK_LINES), max_size=5),
    st.booleans(),
    st.booleans(),
)
@settings(max_examples=100, deadline=None, database=None)
def test_blank_lines_anywhere_in_an_export_are_skipped_and_counted(
    sessions: dict[str, list[dict[str, Any]]],
    blanks: list[tuple[int, bytes]],
    bom: bool,
    crlf: bool,
) -> None:
    """Blank lines put anywhere in an export, before its header too, are read past, CRLF
    ends a Windows editor wrote or not, and a bad line after them is still named by its line
    number in the file."""
    exported = [
        ExportedSession(name, [json.dumps(record) for record in records])
        for name, records in sessions.items()
    ]
    lines = [line.rstrip(b"\n") for line in encode_lines(export_lines(exported))]
    for position, blank in blanks:
        lines.insert(position % (len(lines) + 1), blank)
    end = b"\r\n" if crlf else b"\n"
    data = (_BOM if bom else b"") + end.join(lines) + end
    assert read_export(data, "x") == exported
    with pytest.raises(SessionError, match=rf"^x:{len(lines) + 1}: expected"):
        read_export(data + b"[1]\n", "x")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "x: empty file, not a sessions export"),
        (_BOM, "x: empty file, not a sessions export"),
        (b"\n \r\n\t\n", "x: a file of blank lines only, not a sessions export"),
        (b'\n\n{"other": 1}\n', "x:3: not a sessions export"),
        (
            b'{"nanobot_sessions_export": 2}\n{"session": "a"}\n',
            "x:1: a sessions export of format 2; this nanobot-core reads format 1 "
            '({"nanobot_sessions_export": 1})',
        ),
        (
            b'{"nanobot_sessions_export": true}\n',
            "x:1: a sessions export of format true; this nanobot-core reads format 1 "
            '({"nanobot_sessions_export": 1})',
        ),
        (
            b'{"nanobot_sessions_export": 1, "by": "x"}\n',
            "x:1: not a sessions export (the first line that is not blank must be "
            '{"nanobot_sessions_export": 1})',
        ),
        (
            b"".join(encode_lines([EXPORT_HEADER, {"session": "a"}])) * 2,
            "x:3: a second export header: exports joined into one file are not read as one; "
            "import each export file on its own",
        ),
    ],
)
def test_an_export_without_a_line_or_joined_to_another_is_refused_naming_why(
    data: bytes, message: str
) -> None:
    """A file of no line or only blank ones is no export, one of another format says which
    it is, and two joined are named as such."""
    with pytest.raises(SessionError) as caught:
        read_export(data, "x")
    assert str(caught.value).startswith(message)


def test_an_export_line_giving_a_key_twice_names_it_whatever_the_nesting_of_its_text() -> None:
    """Only the export line's own keys count: a session line that repeats a key is kept as is."""
    line = '{"a":1,"a":2}'
    data = b"".join(encode_lines(export_lines([ExportedSession("s", [line])])))
    assert read_export(data, "x") == [ExportedSession("s", [line])]


@given(st.lists(st.binary(max_size=40) | st.sampled_from([b"[" * 2_000, b"9" * 5_000])))
@settings(max_examples=200, deadline=None, database=None)
def test_any_export_file_is_read_or_refused_naming_its_line(lines: list[bytes]) -> None:
    """Whatever bytes follow the header, reading the export returns sessions or names a line."""
    try:
        read_export(b"\n".join([json.dumps(EXPORT_HEADER).encode(), *lines]), "x")
    except SessionError as exc:
        assert str(exc).startswith("x:")


def _cli(
    cwd: Path,
    *args: str,
    env: dict[str, str] | None = None,
    program: tuple[str, ...] = ("-m", "nanobot_core"),
) -> subprocess.CompletedProcess[str]:
    environ = clean_env(NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1", **(env or {}))
    return subprocess.run(
        [sys.executable, *program, *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def test_cli_export_and_import(tmp_path: Path) -> None:
    """`sessions export NAME --output` and `sessions import` copy one session exactly."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    source = JsonlSessionStore(tmp_path / "a")
    _write_session(source, "keep", ['{"role":"user","content":"x"}', '{"_meta":{"kind":"usage"}}'])
    _write_session(source, "skip", ['{"role":"user","content":"y"}'])
    out = tmp_path / "out.jsonl"
    exported = _cli(tmp_path / "a", "sessions", "export", "keep", "--output", str(out))
    assert exported.returncode == 0, exported.stderr
    assert "exported 1 session(s), 2 line(s)" in exported.stderr
    imported = _cli(tmp_path / "b", "sessions", "import", str(out))
    assert imported.returncode == 0, imported.stderr
    target = JsonlSessionStore(tmp_path / "b")
    assert target.path("keep").read_bytes() == source.path("keep").read_bytes()
    assert [i.name for i in target.list_sessions()] == ["keep"]
    twice = _cli(tmp_path / "b", "sessions", "import", str(out))
    assert twice.returncode == 1
    assert "already has session(s) 'keep'" in twice.stderr and "Traceback" not in twice.stderr
    missing = _cli(tmp_path / "a", "sessions", "export", "ghost", "--output", str(out))
    assert missing.returncode == 2 and "'ghost'" in missing.stderr


@pytest.mark.parametrize(
    "output",
    [".nanobot/sessions/keep.jsonl", ".nanobot/sessions/all.jsonl", "link/all.jsonl"],
)
def test_cli_export_into_the_stores_own_folder_is_refused_and_changes_nothing(
    tmp_path: Path, output: str
) -> None:
    """`sessions export -o` a file of the jsonl store's folder (a session's own file, a new
    one, or one through a link to the folder) would replace a session or make one of export
    lines: exit 2 naming `--output` and the folder, before anything is written."""
    store = JsonlSessionStore(tmp_path)
    _write_session(store, "keep", ['{"role":"user","content":"x"}'])
    (tmp_path / "link").symlink_to(store.directory)
    before = {path.name: path.read_bytes() for path in store.directory.iterdir()}
    refused = _cli(tmp_path, "sessions", "export", "-o", output)
    assert refused.returncode == 2, refused.stderr
    assert (
        f"Error: Invalid value for '--output': {output} is in the folder of the jsonl store's "
        f"sessions ({store.directory.resolve()}), where it would be read as a session, or "
        "replace a session's file or lock: write it elsewhere"
    ) in refused.stderr
    assert {path.name: path.read_bytes() for path in store.directory.iterdir()} == before
    beside = _cli(tmp_path, "sessions", "export", "-o", ".nanobot/all.jsonl")
    assert beside.returncode == 0, beside.stderr  # the folder above it is no session's


def test_cli_export_leaves_out_invalid_and_torn_lines_naming_each(tmp_path: Path) -> None:
    """As the README says, an export keeps the valid lines and warns of each one it leaves out."""
    store = JsonlSessionStore(tmp_path)
    store.directory.mkdir(parents=True)
    good = ['{"role":"user","content":"x"}', '{"role":"assistant","content":"y"}']
    store.path("s").write_text(f'{good[0]}\nnot json\n{good[1]}\n{{"role":"us', "utf-8")
    out = tmp_path / "out.jsonl"
    exported = _cli(tmp_path, "sessions", "export", "--output", str(out))
    assert exported.returncode == 0, exported.stderr
    assert [json.loads(line) for line in out.read_text("utf-8").splitlines()[1:]] == [
        {"session": "s", "line": line} for line in good
    ]
    path = store.path("s")
    assert f"warning: {path}:2: invalid line not exported (session 's'): " in exported.stderr
    assert f"warning: {path}:4: torn line not exported (session 's'): " in exported.stderr
    shown = _cli(tmp_path, "sessions", "show", "s")
    assert f"warning: {path}:2: invalid line skipped: " in shown.stderr  # as `show` names it
    assert f"warning: {path}:4: torn line skipped: " in shown.stderr


def test_cli_reports_files_it_cannot_use_without_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files the CLI cannot use (a folder as a session, a missing folder): errors, no traceback."""
    store = JsonlSessionStore(tmp_path)
    _write_session(store, "ok", ['{"role":"user","content":"x"}'])
    store.path("folder").mkdir()
    listed = _cli(tmp_path, "sessions", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [info["name"] for info in json.loads(listed.stdout)] == ["ok"]
    run = _cli(tmp_path, "run", "hi", "--session", "folder", "--base-url", "http://127.0.0.1:9")
    assert run.returncode == 1 and "cannot open session 'folder'" in run.stderr
    missing = tmp_path / "missing" / "out.jsonl"
    exported = _cli(tmp_path, "sessions", "export", "--output", str(missing))
    assert exported.returncode == 2
    assert f"the folder {missing.parent} does not exist" in exported.stderr
    for result in (run, exported):
        assert "Traceback" not in result.stderr
    export = tmp_path / "export.jsonl"
    export.write_text(json.dumps(EXPORT_HEADER) + "\n")
    real_open = Path.open

    def unreadable(path: Path, *args: Any, **kwargs: Any) -> Any:
        if path == export:
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(Path, "open", unreadable)
    imported = CliRunner().invoke(cli, ["sessions", "import", str(export)])
    assert imported.exit_code == 2
    assert f"cannot read {export}: Permission denied" in imported.output


def test_cli_unknown_store_is_a_config_error(tmp_path: Path) -> None:
    """`run` and `sessions` with an unknown store exit 2 naming the known stores, no traceback."""
    for args in (["sessions"], ["run", "hi", "--base-url", "http://127.0.0.1:9"]):
        result = _cli(tmp_path, *args, env={"NANOBOT_SESSIONS__STORE": "nope"})
        assert result.returncode == 2, result.stderr
        assert "sessions.store" in result.stderr and "known: jsonl" in result.stderr
        assert "Traceback" not in result.stderr


def test_cli_run_busy_session_names_the_holder(tmp_path: Path) -> None:
    """`run` on a session another writer holds exits 1 naming the holder's pid."""
    store = JsonlSessionStore(tmp_path)
    with open_session(store, "busy"):
        result = _cli(
            tmp_path, "run", "hi", "--session", "busy", "--base-url", "http://127.0.0.1:9"
        )
    assert result.returncode == 1
    assert f"pid {os.getpid()}" in result.stderr and "Traceback" not in result.stderr


def test_sessions_show_names_a_bookkeeping_record_by_its_kind(tmp_path: Path) -> None:
    """A `_meta` line is shown as its kind and what it holds, not as a message of role '?'."""
    store = JsonlSessionStore(tmp_path)
    _write_session(
        store,
        "s",
        [
            '{"role":"user","content":"hi"}',
            '{"_meta":{"kind":"usage","input_tokens":12}}',
            '{"role":"assistant","content":"hello"}',
        ],
    )
    shown = _cli(tmp_path, "sessions", "show", "s")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert '[2] (usage record) {"input_tokens": 12}' in lines
    assert "?" not in shown.stdout
    assert "[1] user" in lines and "[3] assistant" in lines


# `nanobot-core` with a JSONL store that cannot read any session file.
_FAILING_STORE = """
import sys
from nanobot_core.cli import main
from nanobot_core.errors import SessionError
from nanobot_core.jsonl_store import JsonlSessionStore

def load(self, session):
    raise SessionError(f"cannot read session {session!r}: Input/output error")

JsonlSessionStore.load = load
main(sys.argv[1:])
"""


def test_cli_store_failure_is_exit_1_and_an_unknown_session_exit_2(tmp_path: Path) -> None:
    """`sessions show` and `export` exit 2 for a session the store lacks, 1 when the store fails."""
    _write_session(JsonlSessionStore(tmp_path), "kept", ['{"role":"user","content":"x"}'])
    out = str(tmp_path / "out.jsonl")
    commands = (("show", "NAME"), ("export", "NAME", "-o", out), ("export", "-o", out))

    def run(name: str, *program: str) -> list[subprocess.CompletedProcess[str]]:
        return [
            _cli(
                tmp_path,
                "sessions",
                *[name if a == "NAME" else a for a in args],
                program=program or ("-m", "nanobot_core"),
            )
            for args in commands
        ]

    assert [r.returncode for r in run("kept")] == [0, 0, 0]
    missing = run("ghost")
    assert [r.returncode for r in missing] == [2, 2, 0]
    assert "no session named 'ghost'" in missing[0].stderr
    failed = run("kept", "-c", _FAILING_STORE)
    assert [r.returncode for r in failed] == [1, 1, 1]
    for result in failed:
        assert "cannot read session 'kept': Input/output error" in result.stderr
        assert "Traceback" not in result.stderr


_LEASE_LOST_AFTER_ONE_REQUEST = """
import sys
from nanobot_core.cli import main
from nanobot_core.errors import SessionError
from nanobot_core.jsonl_store import JsonlLease

asked = []

def check_held(self):
    asked.append(self.session)
    if len(asked) > 1:
        raise SessionError(f"the lease on session {self.session!r} was lost (the test's store)")

JsonlLease.check_held = check_held
main(sys.argv[1:])
"""


def test_cli_run_sends_no_model_request_once_the_lease_is_lost(
    tmp_path: Path, server: FakeChatServer
) -> None:
    """A lease lost between two model requests of a turn ends it, exit 1, before the second."""
    server.add(tool_call_reply([("c0", "list_dir", '{"path": "."}')]), text_reply("done"))
    env = {"NANOBOT_BASE_URL": server.base_url, "NANOBOT_MODEL": "fake-model"}
    result = _cli(tmp_path, "run", "hi", env=env, program=("-c", _LEASE_LOST_AFTER_ONE_REQUEST))
    assert result.returncode == 1, result.stderr
    assert len(server.requests) == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert errors == [
        "Error: the lease on session 'default' was lost (the test's store); "
        "the model request of round 2 was not sent"
    ], result.stderr
    assert "Traceback" not in result.stderr
    stored = JsonlSessionStore(tmp_path).load("default").messages()
    assert [m["role"] for m in stored] == ["user", "assistant", "tool"]


def test_a_jsonl_lease_holds_until_released(tmp_path: Path) -> None:
    """The JSONL lease answers `check_held` from memory: held until released, then an error."""
    session = JsonlSessionStore(tmp_path).open("s")
    session.check_held()
    session.close()
    with pytest.raises(SessionError, match=r"^session 's' is closed$"):
        session.check_held()
    lease = JsonlSessionStore(tmp_path).lease("s")
    lease.check_held()
    lease.release()
    with pytest.raises(SessionError, match=r"^the lease on session 's' was released$"):
        lease.check_held()


class _LeaseWithoutCheck:
    """A lease of a store written before `check_held` existed."""

    def __init__(self, lease: Any) -> None:
        self.session = lease.session
        self._lease = lease

    def load(self) -> Any:
        return self._lease.load()

    def append(self, lines: Any, *, expected_seq: int) -> int:
        return int(self._lease.append(lines, expected_seq=expected_seq))

    def release(self) -> None:
        self._lease.release()


class _OldStore(JsonlSessionStore):
    name = "old"

    def lease(self, session: str, *, wait: float = 0.0) -> Any:
        return _LeaseWithoutCheck(super().lease(session, wait=wait))


class _RaisingCheckStore(JsonlSessionStore):
    name = "raising"

    def lease(self, session: str, *, wait: float = 0.0) -> Any:
        lease = super().lease(session, wait=wait)

        def check_held() -> None:
            raise RuntimeError("socket gone")

        lease.check_held = check_held  # type: ignore[method-assign]
        return lease


def test_a_lease_without_check_held_is_taken_to_hold_and_a_crashing_one_is_named(
    tmp_path: Path,
) -> None:
    """A store's lease without `check_held` is not asked; one that crashes names the store."""
    old = open_session(ContainedStore(_OldStore(tmp_path), "old", "plugin 'p' from p 1.0"))
    old.check_held()
    old.close()
    raising = ContainedStore(_RaisingCheckStore(tmp_path), "raising", "plugin 'p' from p 1.0")
    with open_session(raising) as session, pytest.raises(SessionError) as caught:
        session.check_held()
    assert str(caught.value) == (
        "session store 'raising' of plugin 'p' from p 1.0: check_held raised RuntimeError: "
        "socket gone"
    )


def test_cli_run_on_a_session_with_a_damaged_middle_line_names_it_and_keeps_it(
    tmp_path: Path, server: FakeChatServer
) -> None:
    """`run` on a session with a damaged line between two messages warns naming the file and
    the line, sends the messages around it, and appends after it: the line stays, byte for
    byte, and a second run still names it."""
    store = JsonlSessionStore(tmp_path)
    store.directory.mkdir(parents=True)
    damaged = b'{"role":"assistant","content":"cut sho'
    before = b'{"role":"user","content":"one"}\n' + damaged + b"\n"
    before += b'{"role":"assistant","content":"two"}\n'
    store.path("default").write_bytes(before)
    env = {"NANOBOT_BASE_URL": server.base_url, "NANOBOT_MODEL": "fake-model"}
    for turn in ("first", "second"):
        server.add(text_reply(f"answer to {turn}"))
        result = _cli(tmp_path, "run", turn, env=env)
        assert result.returncode == 0, result.stderr
        warned = [line for line in result.stderr.splitlines() if "session line skipped" in line]
        assert len(warned) == 1, result.stderr
        assert f"location={store.path('default')}" in warned[0] and "line=2" in warned[0]
        sent = server.bodies()[-1]["messages"][1:]
        assert [m["content"] for m in sent[:2]] == ["one", "two"]
        assert sent[-1]["content"].startswith(turn)  # with the runtime context after it
    after = store.path("default").read_bytes()
    assert after.startswith(before)
    appended = [json.loads(line) for line in after[len(before) :].splitlines()]
    assert [(m["role"], m["content"][:6]) for m in appended if "role" in m] == [
        ("user", "first\n"),
        ("assistant", "answer"),
        ("user", "second"),
        ("assistant", "answer"),
    ]
