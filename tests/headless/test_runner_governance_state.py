"""The runner records the governor's decisions in the session and restores them on resume."""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

import attrs
import pytest
from structlog.testing import capture_logs

from nanobot_core import tool
from nanobot_core.config import Config
from nanobot_core.governance import Governor, builtin_stages
from nanobot_core.governance.continuity import (
    RECORD_VERSION,
    GovernanceState,
    latest_state,
    read_record,
)
from nanobot_core.governance.invariants import check_invariants
from nanobot_core.governance.stages.start import CONTINUE
from nanobot_core.jsonl_store import JsonlSessionStore
from nanobot_core.prompt import PromptBuilder, Section
from nanobot_core.providers.base import ProviderReply
from nanobot_core.runner import Runner
from nanobot_core.sessions import Session
from nanobot_core.tools.executor import Executor
from nanobot_core.tools.registry import ToolRegistry
from tests.headless.fake_server import (
    FakeChatServer,
    strict_refusal,
    text_reply,
    tool_call_reply,
)
from tests.headless.test_runner import Harness, _session_records


@pytest.fixture
def runs(tmp_path: Path, server: FakeChatServer) -> Harness:
    """A runner factory over real parts, aimed at the fake server."""
    return Harness(tmp_path, server)


def _records(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The governance record lines (other records, such as usage, left out)."""
    return [
        line
        for line in lines
        if "role" not in line and line.get("_meta", {}).get("kind") == "governance"
    ]


def test_cuts_are_recorded_and_each_new_runner_keeps_the_prefix_sent_before(
    runs: Harness, server: FakeChatServer
) -> None:
    """Every turn builds a new runner: restored from the record, it keeps the cut it made."""
    server.add(text_reply("ok"))
    base = runs.turn("hello").governance[0].tokens
    runs.config.governance.input_limit = base + 1_500
    for index in range(12):
        server.add(text_reply(f"answer {index} " + "a" * 900))
        runs.turn(f"question {index} " + "q" * 900)
    records = _records(_session_records(runs.workspace, "default"))
    assert records, "a cut was needed, so it was recorded"
    assert all(set(r) == {"_meta"} for r in records)
    bodies = server.bodies()
    for body in bodies:
        assert all(m.get("role") for m in body["messages"])
        assert "_meta" not in json.dumps(body["messages"])
    pairs = list(itertools.pairwise(bodies[1:]))  # after the first turn, which had no limit
    kept = [b["messages"][: len(a["messages"])] == a["messages"] for a, b in pairs]
    assert sum(kept) >= len(kept) // 2, kept
    assert not all(kept)  # the budget forced a new cut now and then


def test_a_session_without_cuts_gets_no_record(runs: Harness, server: FakeChatServer) -> None:
    """While everything fits, nothing but messages is appended to the session."""
    server.add(text_reply("one"), text_reply("two"))
    runs.turn("first")
    runs.turn("second")
    assert _records(_session_records(runs.workspace, "default")) == []


class _Restoring:
    """A governor that only remembers the states it was restored with."""

    def __init__(self) -> None:
        self.restored: list[GovernanceState] = []

    def restore(self, state: GovernanceState) -> None:
        self.restored.append(state)


def _runner_over(session: Any, governor: _Restoring) -> Runner:
    """A runner whose only part that matters is the governor: what it restores when built."""
    unused: Any = None
    return Runner(unused, unused, unused, governor, unused, session)


def _session_with_states(path: Path, states: list[GovernanceState]) -> Session:
    """A session of messages with a governance record after each one, newest last."""
    with JsonlSessionStore(path).open("resumed") as session:
        for index, state in enumerate(states):
            session.append({"role": "user", "content": f"question {index}"}, {"round": 1})
            session.append_records([state.to_record(), {"_meta": {"kind": "usage"}}])
        session.append_records([{"_meta": {"kind": "governance", "start": -1}}])  # not valid
    return JsonlSessionStore(path).open("resumed")


def test_newest_record_copies_the_newest_line_it_matches_and_nothing_else(
    tmp_path: Path,
) -> None:
    """`Session.newest_record` gives a copy of the newest matching line, or None."""
    states = [GovernanceState(start=1, length=3), GovernanceState(start=2, length=5)]
    with _session_with_states(tmp_path, states) as session:
        found = session.newest_record(lambda r: GovernanceState.from_record(r) is not None)
        assert found == states[-1].to_record()
        assert found is not None
        found["_meta"]["start"] = 99
        assert session.newest_record(lambda r: "_meta" in r) == {
            "_meta": {"kind": "governance", "start": -1}
        }
        assert session.newest_record(lambda r: r.get("role") == "assistant") is None
        assert latest_state(session.records) == states[-1]


def test_a_resumed_session_restores_its_newest_state_without_copying_every_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new runner restores the newest valid governance state, and never reads `records`."""
    states = [GovernanceState(start=1, length=3), GovernanceState(start=2, steps_from=3, length=6)]
    with _session_with_states(tmp_path, states) as session:
        expected = latest_state(session.records)

        def every_line(self: Session) -> list[dict[str, Any]]:
            raise AssertionError("the whole session was copied")

        monkeypatch.setattr(Session, "records", property(every_line))
        governor = _Restoring()
        _runner_over(session, governor)
    assert expected == states[-1]
    assert governor.restored == [expected]


def test_a_session_object_with_records_only_is_restored_from_them(tmp_path: Path) -> None:
    """A duck-typed session without `newest_record` is restored from its `records`."""
    states = [GovernanceState(start=1, length=3), GovernanceState(start=2, length=5)]
    with _session_with_states(tmp_path, states) as opened:
        records = opened.records

    class RecordsOnly:
        name = "records-only"

        def __init__(self) -> None:
            self.records = records

    governor = _Restoring()
    _runner_over(RecordsOnly(), governor)
    assert governor.restored == [states[-1]]


class _PrefixListener:
    """Hears where each request changed: calls `dump` `steps` times, then answers."""

    name = "prefix-listener"
    accepts_prefix = True

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.requests: list[list[Any]] = []
        self.prefixes: list[int | None] = []

    async def complete(self, messages: Any, tools: Any, prefix: int | None = None) -> ProviderReply:
        self.requests.append(copy.deepcopy(messages))
        self.prefixes.append(prefix)
        step = len(self.requests)
        if step > self.steps:
            return ProviderReply({"role": "assistant", "content": "done"}, finish_reason="stop")
        arguments = json.dumps({"part": step})
        call = {
            "id": f"c{step}",
            "type": "function",
            "function": {"name": "dump", "arguments": arguments},
        }
        return ProviderReply(
            {"role": "assistant", "content": None, "tool_calls": [call]}, finish_reason="tool_calls"
        )


def _first_change(before: list[Any], after: list[Any]) -> int | None:
    """Where `after` first differs from `before`; None when it starts with all of `before`."""
    for index, (old, new) in enumerate(zip(before, after, strict=False)):
        if old != new:
            return index
    return None if len(after) >= len(before) else len(after)


@tool
def dump(part: int) -> str:
    """Return one big part of a dump."""
    return f"part {part}: " + "x" * 4_000


def test_a_provider_taking_a_prefix_hears_where_each_request_changed(tmp_path: Path) -> None:
    """``prefix`` is the first message that differs from the request before, even the task
    right after the system prompt (changed when a cut adds its notice); None when none does."""
    config = Config()
    config = attrs.evolve(config, governance=attrs.evolve(config.governance, input_limit=3_000))
    registry = ToolRegistry()
    registry.add(dump)
    provider = _PrefixListener(steps=8)
    with JsonlSessionStore(tmp_path).open("prefix") as session:
        Runner(
            provider,
            registry,
            Executor(registry, default_timeout=5.0),
            Governor(builtin_stages(), config=config.governance, workspace=tmp_path),
            PromptBuilder([(Section("only", 1, lambda ctx: "Be brief."), "test")], config=config),
            session,
        ).run_turn("Dump every part, then say done.")
    before = zip(provider.requests, provider.requests[1:], strict=False)
    assert provider.prefixes == [None, *(_first_change(a, b) for a, b in before)]
    assert 1 in provider.prefixes  # the task's index: the history's first message changed


# What the runner warns when it passes over a damaged governance record.
_PASSED_OVER = "damaged governance record passed over"


@pytest.mark.parametrize(
    ("meta", "problem"),
    [
        ({"start": -1, "length": 4}, "start is -1, not a whole number of 0 or more"),
        ({"start": 1}, "length is null, not a whole number of 0 or more"),
        ({"start": 1, "length": 4, "compacted": "2"}, 'compacted is "2", not a list of whole'),
        (
            {"start": 1, "length": 4, "compacted": [], "steps_from": 2, "steps_left_out": 0},
            "steps_left_out is 0, not null or a whole number above 0",
        ),
        (
            {"start": 1, "length": 4, "compacted": [], "steps_left_out": 2},
            "steps_left_out is 2 without steps_from",
        ),
        (
            {"version": 0, "start": 1, "length": 4, "compacted": []},
            "version is 0, not a whole number of 1 or more",
        ),
        (
            {"version": "2", "start": 1, "length": 4, "compacted": []},
            'version is "2", not a whole number of 1 or more',
        ),
        (
            {"version": True, "start": 1, "length": 4, "compacted": []},
            "version is true, not a whole number of 1 or more",
        ),
    ],
)
def test_a_damaged_newest_record_is_named_and_passed_over_and_the_file_kept(
    tmp_path: Path, meta: dict[str, Any], problem: str
) -> None:
    """A governance record newer than the valid one restored, but not a state, is warned about
    naming the session, its file and line and what is wrong; the file is not touched."""
    states = [GovernanceState(start=1, length=3), GovernanceState(start=2, length=5)]
    _session_with_states(tmp_path, states).close()
    store = JsonlSessionStore(tmp_path)
    with store.open("resumed") as session:
        session.append({"role": "user", "content": "after"})
        session.append_records([{"_meta": {"kind": "governance", **meta}}])
    path = store.path("resumed")
    before = path.read_bytes()
    lines = before.decode().splitlines()
    valid = 1 + max(i for i, line in enumerate(lines) if '"start":2' in line)
    with store.open("resumed") as session, capture_logs() as logs:
        governor = _Restoring()
        _runner_over(session, governor)
    assert governor.restored == [states[-1]]
    warned = [entry for entry in logs if entry["event"] == _PASSED_OVER]
    assert len(warned) == 2  # the new one, and the one `_session_with_states` ends with
    assert {key: warned[0][key] for key in ("session", "location", "line", "restored")} == {
        "session": "resumed",
        "location": str(path),
        "line": len(lines),
        "restored": f"the older record on line {valid}",
    }
    assert warned[0]["problem"].startswith(problem)
    assert warned[1]["line"] == valid + 2  # after the usage record that follows the valid one
    assert path.read_bytes() == before


def test_a_session_of_damaged_records_only_is_governed_whole_and_said_so(tmp_path: Path) -> None:
    """With no valid record to fall back on, nothing is restored and the warning says so,
    naming the line of a session appended to in this process as the file numbers it."""
    with JsonlSessionStore(tmp_path).open("only") as session:
        session.append({"role": "user", "content": "q"})
        session.append_records([{"_meta": {"kind": "governance", "start": "1", "length": 2}}])
        with capture_logs() as logs:
            governor = _Restoring()
            _runner_over(session, governor)
    assert governor.restored == []
    [warned] = [entry for entry in logs if entry["event"] == _PASSED_OVER]
    assert (warned["line"], warned["restored"]) == (2, "none: the history is governed whole")
    assert warned["problem"] == 'start is "1", not a whole number of 0 or more'


def test_a_damaged_newest_record_sends_what_the_session_without_it_sends(
    tmp_path: Path, server: FakeChatServer
) -> None:
    """A turn on a session whose newest governance record is damaged sends the very request
    the same session without that line sends: the older cut, and nothing of the record."""
    damaged, plain = Harness(tmp_path / "damaged", server), Harness(tmp_path / "plain", server)
    server.add(text_reply("ok"))
    base = damaged.turn("hello").governance[0].tokens
    damaged.config.governance.input_limit = base + 1_500
    for index in range(8):
        server.add(text_reply(f"answer {index} " + "a" * 900))
        damaged.turn(f"question {index} " + "q" * 900)
    assert _records(_session_records(damaged.workspace, "default")), "a cut was recorded"
    source = JsonlSessionStore(damaged.workspace).path("default")
    copy_ = JsonlSessionStore(plain.workspace).path("default")
    copy_.parent.mkdir(parents=True)
    copy_.write_bytes(source.read_bytes())
    with source.open("ab") as handle:
        handle.write(b'{"_meta":{"kind":"governance","start":0,"length":-1,"compacted":[]}}\n')
    plain.config.governance.input_limit = base + 1_500
    sent = []
    for harness in (damaged, plain):
        server.add(text_reply("last"))
        harness.turn("the last question")
        sent.append(server.bodies()[-1]["messages"])
    assert sent[0][1:] == sent[1][1:]  # the system prompt names each workspace
    assert "_meta" not in json.dumps(sent[0])


# A session as nanobot-core wrote it before governance records had a version: kept as
# text, as such a file is on disk, not made by the code under test.
_BEFORE_VERSIONS = """\
{"role":"user","content":"question 0","_meta":{"time":"2025-01-31T09:30:00+01:00"}}
{"role":"assistant","content":"answer 0","_meta":{"round":1,"model":"m","finish_reason":"stop"}}
{"_meta":{"kind":"usage","round":1,"model":"m"}}
{"role":"user","content":"question 1","_meta":{"time":"2025-01-31T09:31:00+01:00"}}
{"_meta":{"kind":"governance","start":2,"steps_from":null,"compacted":[],"length":3,"steps_left_out":null}}
{"role":"assistant","content":"answer 1","_meta":{"round":1}}
{"role":"user","content":"question 2"}
{"_meta":{"kind":"governance","start":4,"steps_from":null,"compacted":[],"length":5,"steps_left_out":null}}
{"role":"assistant","content":"answer 2","_meta":{"round":1}}
"""


def test_a_record_written_before_records_had_a_version_is_read_as_version_one(
    tmp_path: Path,
) -> None:
    """A session whose governance records have no version (as written before they had one)
    is resumed from its newest record, without a warning, and the file is not touched."""
    store = JsonlSessionStore(tmp_path)
    path = store.path("old")
    path.parent.mkdir(parents=True)
    path.write_text(_BEFORE_VERSIONS, encoding="utf-8")
    with store.open("old") as session, capture_logs() as logs:
        governor = _Restoring()
        _runner_over(session, governor)
    assert governor.restored == [GovernanceState(start=4, length=5)]
    assert logs == []
    assert path.read_text(encoding="utf-8") == _BEFORE_VERSIONS


def test_a_new_record_says_its_version_and_reads_back_as_the_state() -> None:
    """`to_record` writes the version this nanobot-core writes (1), and the line reads back
    as the same state; a record of that version given explicitly reads as one without."""
    state = GovernanceState(start=4, steps_from=6, compacted=(7,), length=9, steps_left_out=2)
    record = state.to_record()
    assert record["_meta"]["version"] == RECORD_VERSION == 1
    assert read_record(record) == (state, "")
    unversioned = {"_meta": {k: v for k, v in record["_meta"].items() if k != "version"}}
    assert read_record(unversioned) == (state, "")


_NEWER = "governance record written by a newer nanobot-core passed over"


@pytest.mark.parametrize(
    "meta",
    [
        {"start": 1, "length": 4, "compacted": []},  # fields this code could misread
        {"cut": {"at": 1}},  # fields this code does not know at all
    ],
)
def test_a_record_of_a_newer_version_is_passed_over_naming_the_versions(
    tmp_path: Path, meta: dict[str, Any]
) -> None:
    """A governance record of a version above the one this nanobot-core knows is not read,
    nor called damaged: the older valid record is restored, a warning names the session,
    its file and line, the version found and the version known, and nothing is rewritten."""
    states = [GovernanceState(start=1, length=3)]
    store = JsonlSessionStore(tmp_path)
    with store.open("resumed") as session:
        session.append({"role": "user", "content": "question"})
        session.append_records([states[0].to_record()])
        session.append({"role": "assistant", "content": "answer"})
        session.append_records([{"_meta": {"kind": "governance", "version": 2, **meta}}])
    path = store.path("resumed")
    before = path.read_bytes()
    with store.open("resumed") as session, capture_logs() as logs:
        governor = _Restoring()
        _runner_over(session, governor)
    assert governor.restored == states
    assert [entry["event"] for entry in logs] == [_NEWER]
    [warned] = logs
    assert {k: v for k, v in warned.items() if k not in ("event", "log_level")} == {
        "session": "resumed",
        "location": str(path),
        "line": 4,
        "version": 2,
        "known_version": RECORD_VERSION,
        "restored": "the older record on line 2",
    }
    assert path.read_bytes() == before


class _FreshAlike:
    """The runner's governor, checking on every call that a fresh governor restored from the
    session as persisted at that moment (what a restart reads) sends the same messages."""

    def __init__(self, inner: Governor, fresh: Any, workspace: Path, session: str) -> None:
        self.inner, self.fresh, self.workspace, self.session = inner, fresh, workspace, session
        self.sent: list[list[Any]] = []

    def govern(self, messages: Any, *, system: Any = None, tools: Any = ()) -> Any:
        history = copy.deepcopy(list(messages))
        state = latest_state(_session_records(self.workspace, self.session))
        result = self.inner.govern(messages, system=system, tools=tools)
        restarted = self.fresh()
        restarted.restore(state)
        assert restarted.govern(history, system=system, tools=tools).messages == result.messages
        self.sent.append(copy.deepcopy(result.messages))
        return result


#: What the model answers, turn by turn: calls without a name (``""`` or null), answered by
#: the runner's errors, each time followed by a request that ends with ``(continue)``.
_CONTINUED_TURNS: list[tuple[str, list[Any]]] = [
    ("read notes.txt", [[("n1", "", "{}")], "Sorry: " + "a" * 700]),
    ("again " + "q" * 700, [[("r1", "read_file", '{"path": "notes.txt"}')], "Done " + "b" * 700]),
    ("third", [[("n2", None, "{}")], [("n3", "", "{}")], "Third " + "c" * 700]),
    ("fourth " + "d" * 700, ["Fourth"]),
    ("fifth", [[("n4", "", "{}"), ("r2", "read_file", '{"path": "notes.txt"}')], "Fifth"]),
]


@pytest.mark.parametrize("tight", [False, True], ids=["roomy", "cut"])
def test_requests_after_a_continue_are_taken_by_a_strict_server_and_survive_a_restart(
    tmp_path: Path, tight: bool
) -> None:
    """Over turns whose replies make calls without a name, each request a strict server takes
    ends where the history does, keeps what was sent up to an added ``(continue)`` (never
    stored, never sent again), and is what a fresh governor restored from the session sends."""
    with FakeChatServer(strict=True) as server:
        runs = Harness(tmp_path, server)
        (tmp_path / "notes.txt").write_text("two lines\n", encoding="utf-8")
        if tight:
            server.add(text_reply("ok"))
            base = runs.turn("hello", session="probe").governance[0].tokens
            runs.config.governance.input_limit = base + 1_200
        for _, replies in _CONTINUED_TURNS:
            server.add(
                *(
                    text_reply(reply) if isinstance(reply, str) else tool_call_reply(reply)
                    for reply in replies
                )
            )
        with runs.open("continued") as opened:
            runner = Runner.from_plugins(runs.manager(), session=opened)
            checked = _FreshAlike(runner.governor, runs.manager().governor, tmp_path, "continued")
            runner.governor = checked
            for text, replies in _CONTINUED_TURNS:
                result = runner.run_turn(text)
                assert (result.stop_reason, result.answer) == ("answer", replies[-1])
        bodies = server.bodies()[1 if tight else 0 :]
    assert [strict_refusal(body) for body in bodies] == [None] * len(bodies)
    sent = checked.sent
    assert [body["messages"][1:] for body in bodies] == sent
    lines = _session_records(tmp_path, "continued")
    assert all(line.get("content") != CONTINUE for line in lines)
    continued = [i for i, messages in enumerate(sent) if messages[-1]["content"] == CONTINUE]
    assert len(continued) == 3  # after n1, n2 and n3 (n4 came with a call that ran)
    for index, messages in enumerate(sent):
        assert check_invariants(messages) == [], index
        assert CONTINUE not in [m["content"] for m in messages[:-1]], index
        if index in continued:
            assert messages[-2]["role"] == "assistant"
            assert messages[-2]["content"].startswith("[None of the 1 tool call(s)")
    for index in continued:  # the model answered: what was sent up to it is sent again
        after, end = sent[index + 1], len(sent[index]) - 1
        if not tight:  # then what the history goes on with: the reply after the notice
            assert after[:end] == sent[index][:end], index
            assert after[end]["role"] == "assistant", index
    if tight:
        assert _records(lines), "a cut was needed, so it was recorded"
