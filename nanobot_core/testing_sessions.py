"""The contract every session store passes (:class:`SessionStoreContract`), and crash checks.

Give the subclass two fixtures: ``store``, a fresh, empty store, and
``second_store``, another instance over the same sessions (what another
worker would open). The built-in ``jsonl`` store and ``nanobot-postgres`` run
these same tests::

    class TestMyStore(SessionStoreContract):
        @pytest.fixture
        def store(self, tmp_path): ...

        @pytest.fixture
        def second_store(self, store): ...

Checking a session after crashes
--------------------------------

A store must keep what a run stored through a SIGKILL, a lost connection or a
server crash: whole, once, in order. A crash test kills runs at random moments
and, after each step, checks the session with these functions, each of which
returns the problems it found (an empty list when there are none):

- `check_appended`: what the runs of a step (each a `Turn`: its prompt, the
  replies the model server sent it, whether it finished) appended: the lines
  before the step unchanged; each turn's user message, then its replies in
  order, each round of tool results all or none; all of it when it finished;
  the turns of one step not interleaved;
- `check_request`: a model request is what a fresh governor, restored from
  the newest governance record, makes of the session as stored when the
  request came; a record was appended exactly when the decisions moved; every
  offloaded result the request points to is stored, holding a result of the
  session;
- `check_calls_once`: every tool call of a session made once, answered once.

Running a crash test
--------------------

The runs themselves are real ``nanobot-core run`` processes against a model
server of the test's own, and every crash test needs the same parts, here:

- `ScriptedRun`: one run, its session, prompt and scripted replies, which
  request to hold (`hold_at`), mark as answered (`reply_at`) or fail
  (`fail_at`), and then what the server received and how the run ended
  (`turn()` gives it to `check_appended`);
- `ScriptedModel`: an OpenAI-compatible chat server on 127.0.0.1 that answers
  each run's script, request by request, at a URL of its own; it refuses (HTTP
  400, noting the problem in `problems`) a request a strict server would
  refuse, and records each request with a snapshot of the session as stored
  when it came (what the `snapshot` function given reads);
- `RunProcess` (from `ScriptedModel.start_run`): the child process, its
  stderr read as it comes (`tool_running` is set once a tool runs); its
  `signal_at(moment, rng, window=...)` sends SIGKILL (or SIGINT, SIGTERM,
  SIGHUP: Ctrl-C's way out, exit 130, 143, 129) at one of
  `MOMENTS`, and `finish()` waits for it to end and notes how on the run;
- `restore_stop_signals`: the ``preexec_fn`` that lets Ctrl-C (SIGINT)
  interrupt a child, even where the test's own process ignores it.

The built-in store's crash test (``tests/headless/test_crash_fuzz.py``) and
``nanobot-postgres``'s use them::

    problems = check_appended(before, after, [Turn(prompt, replies, finished=code == 0)])
    assert problems == []

Requires pytest and hypothesis (test dependencies, not runtime ones).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs
import pytest

from nanobot_core.errors import (
    SessionConflictError,
    SessionError,
    SessionLockedError,
    SessionNotFoundError,
)
from nanobot_core.governance.continuity import GovernanceState, latest_state
from nanobot_core.governance.invariants import check_invariants
from nanobot_core.governance.stages.offload import OFFLOAD_PREFIX, offloaded_path
from nanobot_core.sessions import (
    SessionStore,
    is_meta_record,
    open_session,
    record_text,
    strip_meta,
)
from nanobot_core.testing_http import LoopbackRequest, LoopbackResponse, LoopbackServer

if TYPE_CHECKING:
    from nanobot_core.kernel.manager import PluginManager

__all__ = [
    "MOMENTS",
    "ReceivedRequest",
    "RunProcess",
    "ScriptedModel",
    "ScriptedRun",
    "SessionStoreContract",
    "Turn",
    "check_appended",
    "check_calls_once",
    "check_request",
    "restore_stop_signals",
]

# Lines whose exact text matters: escapes, non-ASCII, a separator JSON allows raw.
_AWKWARD_LINES = [
    '{"role":"user","content":"caf\u00e9 \U0001f600 \u2028 end"}',
    '{"role":"user","content":"\\u00e9 escaped, \\ud800 lone surrogate"}',
    '{ "spaced" : [1, 2.50, 1e3] , "_meta" : {"kind":"governance"} }',
    '{"_meta":{"kind":"usage","input":12}}',
]


class SessionStoreContract:
    """The behaviour every `SessionStore` shares (needs fixtures `store` and `second_store`)."""

    def test_is_a_session_store(self, store: SessionStore) -> None:
        """The store satisfies the protocol and has a non-empty name."""
        assert isinstance(store, SessionStore)
        assert isinstance(store.name, str) and store.name

    def test_new_session_is_empty(self, store: SessionStore) -> None:
        """A session never written loads empty with seq 0 under its lease."""
        lease = store.lease("fresh")
        try:
            loaded = lease.load()
        finally:
            lease.release()
        assert (loaded.records, loaded.lines, loaded.seq) == ([], [], 0)

    def test_an_empty_batch_at_seq_0_makes_an_empty_session(self, store: SessionStore) -> None:
        """No line appended at seq 0 makes the session exist: listed with no message, loaded
        empty, written to as any other (how ``sessions import`` brings in an empty one)."""
        lease = store.lease("empty")
        try:
            assert lease.append([], expected_seq=lease.load().seq) == 0
        finally:
            lease.release()
        assert [(info.name, info.messages) for info in store.list_sessions()] == [("empty", 0)]
        loaded = store.load("empty")
        assert (loaded.records, loaded.lines, loaded.problems, loaded.seq) == ([], [], [], 0)
        with open_session(store, "empty") as session:
            session.append({"role": "user", "content": "first"})
        assert store.load("empty").lines == ['{"role":"user","content":"first"}']
        lease = store.lease("empty")
        try:
            assert lease.load().seq == 1
            with pytest.raises(SessionConflictError):
                lease.append([], expected_seq=0)
        finally:
            lease.release()

    def test_lines_are_kept_exactly(self, store: SessionStore) -> None:
        """Appended texts come back byte for byte, `_meta`-only lines included."""
        lease = store.lease("exact")
        try:
            assert lease.load().seq == 0
            assert lease.append(_AWKWARD_LINES[:2], expected_seq=0) == 2
            assert lease.append(_AWKWARD_LINES[2:], expected_seq=2) == 4
        finally:
            lease.release()
        loaded = store.load("exact")
        assert loaded.lines == _AWKWARD_LINES
        expected = [json.loads(line) for line in _AWKWARD_LINES]
        # Decoding replaces a lone surrogate (the stored text keeps its escape).
        expected[1]["content"] = "\u00e9 escaped, \ufffd lone surrogate"
        assert loaded.records == expected
        assert loaded.seq == 4
        assert loaded.problems == []

    def test_wrong_expected_seq_appends_nothing(self, store: SessionStore) -> None:
        """An append expecting another line count raises SessionConflictError and writes nothing."""
        lease = store.lease("conflict")
        try:
            lease.load()
            lease.append(['{"n":1}'], expected_seq=0)
            with pytest.raises(SessionConflictError, match="expected 0"):
                lease.append(['{"n":2}', '{"n":3}'], expected_seq=0)
            assert lease.append(['{"n":2}'], expected_seq=1) == 2
        finally:
            lease.release()
        assert store.load("conflict").lines == ['{"n":1}', '{"n":2}']

    @pytest.mark.parametrize(
        "bad",
        ["not json", "[1]", '{"a":1}\n{"b":2}', '{"a":"\ud800"}'],
        ids=["not-json", "not-an-object", "line-break", "lone-surrogate"],
    )
    def test_append_refuses_a_line_the_store_could_not_keep(
        self, store: SessionStore, bad: str
    ) -> None:
        """A batch holding a line that is not one JSON object in UTF-8 is refused whole."""
        lease = store.lease("refused")
        try:
            lease.load()
            lease.append(['{"n":1}'], expected_seq=0)
            with pytest.raises(SessionError, match="line 3"):
                lease.append(['{"n":2}', bad], expected_seq=1)
            assert lease.append(['{"n":2}'], expected_seq=1) == 2
        finally:
            lease.release()
        assert store.load("refused").lines == ['{"n":1}', '{"n":2}']

    def test_second_writer_is_refused_naming_the_holder(
        self, store: SessionStore, second_store: SessionStore
    ) -> None:
        """While one lease is held another fails at once with the holder's pid in the message."""
        first = store.lease("busy")
        try:
            started = time.monotonic()
            with pytest.raises(SessionLockedError, match=str(os.getpid())):
                second_store.lease("busy")
            assert time.monotonic() - started < 5
            second_store.lease("other").release()  # other sessions are not affected
        finally:
            first.release()
        second_store.lease("busy").release()  # released means free

    def test_lease_wait_waits_for_the_holder(
        self, store: SessionStore, second_store: SessionStore
    ) -> None:
        """A writer given a wait gets the lease once the holder releases it within that wait."""
        first = store.lease("waited")
        releaser = threading.Timer(0.3, first.release)
        releaser.start()
        try:
            started = time.monotonic()
            lease = second_store.lease("waited", wait=10)
            assert 0.2 < time.monotonic() - started < 9
            lease.release()
        finally:
            releaser.join()

    def test_lease_wait_gives_up(self, store: SessionStore, second_store: SessionStore) -> None:
        """A writer whose wait runs out fails with SessionLockedError, after about that wait."""
        first = store.lease("held")
        try:
            started = time.monotonic()
            with pytest.raises(SessionLockedError, match="held"):
                second_store.lease("held", wait=0.3)
            assert time.monotonic() - started >= 0.25
        finally:
            first.release()

    def test_release_is_idempotent_and_final(self, store: SessionStore) -> None:
        """After release the lease appends nothing, and releasing twice is harmless."""
        lease = store.lease("released")
        lease.load()
        lease.release()
        lease.release()
        with pytest.raises(SessionError):
            lease.append(['{"late":true}'], expected_seq=0)

    def test_a_lease_that_can_check_holds_until_released(self, store: SessionStore) -> None:
        """A lease with the optional `check_held` passes it while held, and fails it released."""
        lease = store.lease("checked")
        check = getattr(lease, "check_held", None)
        if check is None:
            lease.release()
            pytest.skip("this store's leases have no check_held (it is optional)")
        try:
            lease.load()
            check()
            lease.append(['{"n":1}'], expected_seq=0)
            check()
        finally:
            lease.release()
        with pytest.raises(SessionError):
            check()

    def test_a_closed_store_is_usable_again(self, store: SessionStore) -> None:
        """After `close` (twice, harmlessly) the store lists, leases, appends and loads again.

        A plugin manager builds each store once and hands the same object to every
        command or runner that selects it, each of which closes it when done.
        """
        with open_session(store, "before") as session:
            session.append({"role": "user", "content": "one"})
        store.close()
        store.close()
        assert [info.name for info in store.list_sessions()] == ["before"]
        with open_session(store, "before") as session:
            session.append({"role": "user", "content": "two"})
        store.close()
        log = store.load("before")
        assert [line["content"] for line in log.records] == ["one", "two"]

    def test_unknown_session_is_an_error(self, store: SessionStore) -> None:
        """Loading a session that was never written raises SessionNotFoundError naming it."""
        with pytest.raises(SessionNotFoundError, match="nothing-here"):
            store.load("nothing-here")

    def test_list_sessions(self, store: SessionStore) -> None:
        """Listing gives each session by name with its message count (records left out), size."""
        assert store.list_sessions() == []
        for name, count in (("b", 2), ("a", 1)):
            with open_session(store, name) as session:
                for index in range(count):
                    session.append({"role": "user", "content": f"m{index}"})
                session.append_records([{"_meta": {"kind": "usage"}}])
        infos = store.list_sessions()
        assert [(i.name, i.messages) for i in infos] == [("a", 1), ("b", 2)]
        assert all(i.size > 0 for i in infos)

    def test_list_sessions_sorts_by_name(self, store: SessionStore) -> None:
        """Sessions are listed in the order Python sorts their names, so exports agree."""
        names = ["b", "a-b", "B", "a", "a.b", "a_b", "ab", "A-1"]
        for name in names:
            lease = store.lease(name)
            try:
                lease.load()
                lease.append(['{"role":"user","content":"x"}'], expected_seq=0)
            finally:
                lease.release()
        assert [info.name for info in store.list_sessions()] == sorted(names)

    def test_open_session_persists_messages_and_meta(
        self, store: SessionStore, second_store: SessionStore
    ) -> None:
        """A Session appends messages with `_meta`, and another store instance reads them back."""
        with open_session(store, "s") as session:
            session.append({"role": "user", "content": "hi"}, {"time": "t0"})
            session.append_many(
                [
                    ({"role": "assistant", "content": "a"}, None),
                    ({"role": "user", "content": "b"}, {"round": 1}),
                ]
            )
            session.append_records([{"_meta": {"kind": "governance", "cut": 0}}])
            assert session.seq == 4
        with open_session(second_store, "s") as reopened:
            assert reopened.history() == [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "a"},
                {"role": "user", "content": "b"},
            ]
            assert reopened.records[-1] == {"_meta": {"kind": "governance", "cut": 0}}
            assert reopened.records[0]["_meta"] == {"time": "t0"}

    def test_any_json_objects_round_trip(self, store: SessionStore) -> None:
        """Any batch of JSON objects is stored and read back with the same text and value."""
        from hypothesis import HealthCheck, given, settings
        from hypothesis import strategies as st

        scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=20)
        values = st.recursive(
            scalars,
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
            max_leaves=8,
        )
        objects = st.dictionaries(st.text(max_size=8), values, max_size=4)
        counter = iter(range(10**9))

        @settings(
            max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None
        )
        @given(st.lists(objects, min_size=1, max_size=4))
        def check(batch: list[dict[str, Any]]) -> None:
            name = f"prop-{next(counter)}"
            texts = [record_text(record) for record in batch]
            lease = store.lease(name)
            try:
                lease.load()
                lease.append(texts, expected_seq=0)
            finally:
                lease.release()
            loaded = store.load(name)
            assert loaded.lines == texts
            assert loaded.records == [json.loads(text) for text in texts]

        check()


# Checking a session after crashes.

#: How much of a message a problem quotes.
_QUOTED = 80


@attrs.frozen
class Turn:
    """One `run` of a crash test: what it was sent, and how it ended.

    `prompt` is the text its user message begins with (the runner may add to
    it); `replies` are the replies the model server answered its requests with,
    in order (the last may never have reached a run killed meanwhile);
    `finished` says it ended well (exit 0), so everything was stored; `reported`
    is what ``run --json`` printed as its ``messages``, when it finished.
    """

    prompt: str
    replies: Sequence[Mapping[str, Any]] = ()
    finished: bool = False
    reported: Sequence[Mapping[str, Any]] | None = None


def check_appended(
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    turns: Sequence[Turn],
) -> list[str]:
    """The problems with what the runs of one step appended to a session (none: `[]`).

    `before` and `after` are the session's lines (records included) as stored
    before the step and after it; `turns` are the step's runs, in the order
    they held the session. The lines before the step are all there, unchanged;
    each turn appended its user message, then the replies it was sent in
    order, each followed by the results of its calls: all of them or none, and
    none only where the turn's lines end; a finished turn appended all of it
    (`reported` included), a turn that stored nothing made no request; the
    turns' lines are not interleaved, and come in the order of `turns`.
    """
    for number, (old, new) in enumerate(zip(before, after, strict=False)):
        if old != new:
            return [f"line {number}, stored before the step, was changed: {_quote(new)}"]
    if len(after) < len(before):
        return [f"lines {len(after)} to {len(before) - 1}, stored before the step, are gone"]
    appended = [strip_meta(line) for line in after[len(before) :] if not is_meta_record(line)]
    parts = _split_turns(turns, appended)
    if isinstance(parts, str):
        return [parts]  # the turns' lines are not theirs to check
    problems: list[str] = []
    for turn, part in zip(turns, parts, strict=True):
        problems += _check_turn(turn, part)
    return problems


def _split_turns(
    turns: Sequence[Turn], appended: list[dict[str, Any]]
) -> list[list[dict[str, Any]]] | str:
    """The messages appended, by the turn whose user message began them; or the problem
    that made some of them nobody's (a user message of no turn, a turn begun twice or late)."""
    parts: list[list[dict[str, Any]]] = [[] for _ in turns]
    current = -1
    for message in appended:
        if message.get("role") == "user":
            content = message.get("content")
            owners = [
                index
                for index, turn in enumerate(turns)
                if isinstance(content, str) and content.startswith(turn.prompt)
            ]
            if len(owners) != 1:
                which = "no turn" if not owners else "several turns"
                return f"a user message that begins {which}: {_quote(message)}"
            if owners[0] <= current:
                # The same turn twice, or a turn stored after one that came after it.
                return f"{_named(turns[owners[0]])}: stored twice or out of order"
            current = owners[0]
        if current < 0:
            return f"a message before any turn's user message: {_quote(message)}"
        parts[current].append(message)
    return parts


def _check_turn(turn: Turn, appended: list[dict[str, Any]]) -> list[str]:
    """The problems with what one turn appended (its user message, then the rest)."""
    where = _named(turn)
    if not appended:
        # The user message is stored before the first request is made.
        if turn.finished or turn.replies:
            return [f"{where}: stored nothing, though it made requests or finished"]
        return []
    rest = appended[1:]  # after the user message (`_split_turns` began the part with it)
    position = 0
    for index, reply in enumerate(turn.replies):
        if position == len(rest):
            break
        if not _same_reply(rest[position], reply):
            return [f"{where}: reply {index} is not stored as sent: {_quote(rest[position])}"]
        position += 1
        calls = reply.get("tool_calls") or []
        ids = [call.get("id") for call in calls if isinstance(call, Mapping)]
        results = [message.get("tool_call_id") for message in rest[position : position + len(ids)]]
        # A round's results are one batch: all stored, or none (the run ended first).
        if results not in (ids, []):
            return [f"{where}: round {index} stored the results {results} of the calls {ids}"]
        if not ids and position < len(rest):
            # Only the last reply calls no tool: the turn ended there.
            return [f"{where}: reply {index} called no tool, yet more was stored after it"]
        position += len(results)
    if position < len(rest):
        return [f"{where}: stored more than it was sent: {_quote(rest[position])}"]
    if turn.finished:
        if not (rest and turn.replies and _same_reply(rest[-1], turn.replies[-1])):
            return [f"{where}: finished, but its last reply is not stored last"]
        if turn.reported is not None and list(turn.reported) != appended:
            return [f"{where}: what `run --json` reported is not what was stored"]
    return []


def _named(turn: Turn) -> str:
    """How a problem names a turn."""
    return f"turn {turn.prompt!r}"


def _same_reply(stored: Mapping[str, Any], sent: Mapping[str, Any]) -> bool:
    return stored.get("role") == "assistant" and all(
        stored.get(key) == sent.get(key) for key in ("content", "tool_calls")
    )


def check_request(
    records: Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
    pm: PluginManager,
    read_offloaded: Callable[[str], str | None],
) -> list[str]:
    """The problems with one model request a run made (none: `[]`).

    `records` are the session's lines as stored when the request came,
    `messages` the request's ``messages``; `pm` is a plugin manager of the
    runs' configuration and plugins (a fresh governor is built from it, its
    tools counted); `read_offloaded` gives the full result stored for the path
    an offload notice names, or None when nothing is stored there. The request
    is what that governor, restored from the newest governance record before
    it, makes of the history; a governance record stands last exactly when its
    decisions moved, and holds them; every offload notice it sends names a
    stored result that is a tool result of the session.
    """
    before = records
    appended: GovernanceState | None = None
    if records and is_meta_record(records[-1]):
        # A governance record is appended just before the request it governed: its input
        # was the state recorded before that one.
        appended = GovernanceState.from_record(records[-1])
        if appended is not None:
            before = records[:-1]
    recorded = latest_state(before)
    governor = pm.governor()
    governor.restore(recorded)
    first = messages[0] if messages else {}
    system = first.get("content") if first.get("role") == "system" else None
    history = [strip_meta(line) for line in before if not is_meta_record(line)]
    tools = pm.tool_registry().definitions()
    result = governor.govern(history, system=system, tools=tools)
    sent = list(messages[1:] if system is not None else messages)
    problems: list[str] = []
    if sent != result.messages:
        differs = _first_difference(sent, result.messages)
        problems.append(
            f"not what a resumed governor sends: message {differs} differs "
            f"({len(sent)} sent, {len(result.messages)} governed)"
        )
    moved = result.state.to_be_recorded(recorded)
    if appended is not None and not moved:
        problems.append("a governance record was appended, but the decisions did not move")
    elif appended is None and moved:
        problems.append("the decisions moved, but no governance record was appended")
    elif appended is not None and appended.to_record() != result.state.to_record():
        problems.append(f"the governance record appended is not the decisions: {appended}")
    results = {line.get("content") for line in history if line.get("role") == "tool"}
    for index, message in enumerate(sent):
        content = message.get("content")
        if not (isinstance(content, str) and content.startswith(OFFLOAD_PREFIX)):
            continue
        path = offloaded_path(content)
        if path is None:
            problems.append(f"message {index}: an offload notice without its path")
            continue
        saved = read_offloaded(path)
        if saved is None:
            problems.append(f"message {index}: nothing is stored for {path}")
        elif saved not in results:
            problems.append(f"message {index}: {path} holds no tool result of the session")
    return problems


def check_calls_once(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The problems with a session's tool calls (none: `[]`): each call id made once and
    answered at most once, however many runs were killed on the way."""
    made: dict[Any, int] = {}
    answered: dict[Any, int] = {}
    for line in records:
        if is_meta_record(line):
            continue
        for call in line.get("tool_calls") or []:
            if isinstance(call, Mapping):
                made[call.get("id")] = made.get(call.get("id"), 0) + 1
        if line.get("role") == "tool":
            answered[line.get("tool_call_id")] = answered.get(line.get("tool_call_id"), 0) + 1
    problems = [f"call {key!r} made {count} times" for key, count in made.items() if count > 1]
    problems += [
        f"call {key!r} answered {count} times" for key, count in answered.items() if count > 1
    ]
    return problems


def _first_difference(one: Sequence[Any], other: Sequence[Any]) -> int:
    """The index of the first item where two lists differ (the shorter's length if none)."""
    for index, (left, right) in enumerate(zip(one, other, strict=False)):
        if left != right:
            return index
    return min(len(one), len(other))


def _quote(message: Mapping[str, Any]) -> str:
    """A message, shortened for a problem."""
    text = json.dumps(message, ensure_ascii=False)
    return text if len(text) <= _QUOTED else text[: _QUOTED - 3] + "..."


# Running a crash test.

#: The moments `RunProcess.signal_at` sends its signal at: while the model server holds the
#: run's `hold_at` request, just after its `reply_at` answer went out, while a tool runs, or
#: at a random time within a window.
MOMENTS = ("request", "reply", "tool", "random")

#: How long a crash test waits for a run (or for a moment of it) before it gives up.
_RUN_TIMEOUT = 30.0
#: A signal sent at a moment comes that long after it, at most (drawn from 0 to this).
_LATE = 0.015

#: What a snapshot of the session, taken as each request comes, holds (the test's choice).
SnapshotT = TypeVar("SnapshotT")


@attrs.frozen
class ReceivedRequest(Generic[SnapshotT]):
    """A model request as `ScriptedModel` received it, and the session as stored then."""

    body: dict[str, Any]
    snapshot: SnapshotT


@attrs.define(eq=False)
class ScriptedRun(Generic[SnapshotT]):
    """One `run` process of a crash test: what it is to be sent, and what happened to it.

    `prompt` is the text its user message begins with; `script` the replies (assistant
    messages) its requests are answered with, in order. The model server holds request
    `hold_at` (setting `held`) until `release` is set, sets `replied` as the answer to
    request `reply_at` goes out, and answers request `fail_at` HTTP 500. It records each
    request in `requests`, and counts in `cut_requests` those whose body was cut short (a
    run killed while sending one); `finish` notes how the process ended.
    """

    session: str
    prompt: str
    script: list[dict[str, Any]]
    moment: str | None = None
    hold_at: int | None = None
    reply_at: int | None = None
    fail_at: int | None = None
    requests: list[ReceivedRequest[SnapshotT]] = attrs.field(factory=list)
    cut_requests: int = 0
    held: threading.Event = attrs.field(factory=threading.Event)
    replied: threading.Event = attrs.field(factory=threading.Event)
    release: threading.Event = attrs.field(factory=threading.Event)
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""

    def turn(self) -> Turn:
        """What the run was sent and how it ended, as `check_appended` takes it (the
        ``messages`` that ``run --json`` printed, when it finished)."""
        finished = self.returncode == 0
        reported = json.loads(self.stdout)["messages"] if finished else None
        return Turn(self.prompt, self.script[: len(self.requests)], finished, reported)


class ScriptedModel(Generic[SnapshotT]):
    """``with ScriptedModel(snapshot) as model:`` answers each run's script on 127.0.0.1.

    Each run is served at a URL of its own (`start_run` gives it to the process). A request
    a strict server would refuse (`check_invariants`), one past the run's script, or one of
    no run is answered HTTP 400 and noted in `problems`; a body that is not a JSON object
    (sent in part by a run killed while sending it) is answered 400 and counted on the run.
    `snapshot(run)` is called as each request of `run` comes, before it is answered: what
    the session held then, for `check_request`. `timeout` (seconds) bounds how long a
    request is held, and how long a `RunProcess` waits for its run.
    """

    def __init__(
        self,
        snapshot: Callable[[ScriptedRun[SnapshotT]], SnapshotT],
        *,
        timeout: float = _RUN_TIMEOUT,
    ) -> None:
        self.snapshot = snapshot
        self.timeout = timeout
        self.problems: list[str] = []
        self.runs: list[ScriptedRun[SnapshotT]] = []
        self._lock = threading.Lock()
        self._server = LoopbackServer(self._answer)

    def base_url(self, run: ScriptedRun[SnapshotT]) -> str:
        """The ``/v1`` URL `run` is answered at (the run is added to `runs` if it is new)."""
        with self._lock:
            if not any(known is run for known in self.runs):
                self.runs.append(run)
            number = next(index for index, known in enumerate(self.runs) if known is run)
        return f"{self._server.url}/run{number}/v1"

    def start_run(
        self,
        run: ScriptedRun[SnapshotT],
        *,
        cwd: Path,
        env: Mapping[str, str],
        stdout: Path,
    ) -> RunProcess[SnapshotT]:
        """``nanobot-core run PROMPT --json --session SESSION`` for `run`, in `cwd`, started.

        `env` is its environment, to which ``NANOBOT_BASE_URL`` (this server, for this run)
        is added; its stdout goes to the file `stdout` (a turn's JSON may be more than a
        pipe holds, and it is read once the run ended), its stderr is read as it comes.
        """
        command = [sys.executable, "-m", "nanobot_core", "run", run.prompt, "--json"]
        with stdout.open("wb") as sink:  # the child keeps its own copy open
            process = subprocess.Popen(
                [*command, "--session", run.session],
                cwd=cwd,
                env={**env, "NANOBOT_BASE_URL": self.base_url(run)},
                stdout=sink,
                stderr=subprocess.PIPE,
                text=True,
                preexec_fn=restore_stop_signals,
            )
        child = RunProcess(run, process, stdout, timeout=self.timeout)
        child.reader = threading.Thread(target=child.read_stderr, daemon=True)
        child.reader.start()
        return child

    def __enter__(self) -> ScriptedModel[SnapshotT]:
        self._server.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with self._lock:
            runs = list(self.runs)
        for run in runs:  # a held request lets its handler go, so the server stops at once
            run.release.set()
        self._server.stop()

    def _answer(self, request: LoopbackRequest) -> LoopbackResponse:
        match = re.match(r"/run(\d+)/", request.path)
        with self._lock:
            known = match is not None and int(match.group(1)) < len(self.runs)
            run = self.runs[int(match.group(1))] if match is not None and known else None
        if run is None:
            self.problems.append(f"a request nobody expected: {request.method} {request.path}")
            return LoopbackResponse(400, {"error": {"message": "unexpected"}})
        snapshot = self.snapshot(run)
        body = request.json
        with self._lock:
            if not isinstance(body, dict):
                run.cut_requests += 1
                return LoopbackResponse(400, {"error": {"message": "not a JSON object"}})
            index = len(run.requests)
            run.requests.append(ReceivedRequest(body, snapshot))
        violations = check_invariants(body.get("messages", []))
        if violations:
            self.problems.append(f"run {run.prompt!r}, request {index}: {violations}")
            return LoopbackResponse(400, {"error": {"message": "; ".join(violations)}})
        if index >= len(run.script):
            self.problems.append(f"run {run.prompt!r}: request {index} is past its script")
            return LoopbackResponse(400, {"error": {"message": "no more replies"}})
        if run.fail_at == index:
            return LoopbackResponse(500, {"error": {"message": "scripted failure"}})
        if run.hold_at == index:
            run.held.set()
            run.release.wait(self.timeout)
        if run.reply_at == index:
            run.replied.set()
        reply = run.script[index]
        finish = "tool_calls" if reply.get("tool_calls") else "stop"
        choice = {"index": 0, "message": reply, "finish_reason": finish}
        return LoopbackResponse(
            200, {"object": "chat.completion", "model": "fake-model", "choices": [choice]}
        )


@attrs.define(eq=False)
class RunProcess(Generic[SnapshotT]):
    """A `run` child of a crash test (`ScriptedModel.start_run`), its stderr read as it comes.

    `tool_running` is set once the run says a tool is running (to act while it runs).
    """

    run: ScriptedRun[SnapshotT]
    process: subprocess.Popen[str]
    stdout: Path
    timeout: float = _RUN_TIMEOUT
    tool_running: threading.Event = attrs.field(factory=threading.Event)
    stderr: list[str] = attrs.field(factory=list)
    reader: threading.Thread | None = None

    def read_stderr(self) -> None:
        """Read the child's stderr to its end (in a thread of its own), noting a tool run."""
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)
            if line.startswith("nanobot: tool ") and line.rstrip().endswith(": running"):
                self.tool_running.set()

    def until(self, event: threading.Event, what: str) -> bool:
        """Wait until `event` is set or the process has ended; whether `event` was set.

        Fails (AssertionError naming `what`) when neither happens within the timeout.
        """
        deadline = time.monotonic() + self.timeout
        # Woken the moment the event is set: a signal "at" it comes no later than drawn.
        while not event.wait(0.01) and self.process.poll() is None:
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
        return event.is_set()

    def signal_at(
        self,
        moment: str | None,
        rng: random.Random,
        *,
        window: tuple[float, float],
        signum: int = signal.SIGKILL,
    ) -> None:
        """Send `signum` at `moment` (one of `MOMENTS`; None: let the run finish), then
        `finish`: the process has ended when this returns.

        At ``"random"`` it comes a time drawn from `window` (seconds) after this call, unless
        the run ended first; at another moment, from at once to 15 ms after it came (before
        an answer is read, while it is stored, after; before a tool's result is stored,
        after), unless the run ended before it came. Draws from `rng` only as it goes, so a
        seeded test draws the same.
        """
        if moment is not None and moment not in MOMENTS:
            raise ValueError(f"moment {moment!r} is not one of {', '.join(MOMENTS)}")
        process = self.process
        triggers = {"request": self.run.held, "reply": self.run.replied, "tool": self.tool_running}
        if moment == "random":
            try:
                process.wait(rng.uniform(*window))
            except subprocess.TimeoutExpired:
                process.send_signal(signum)
        elif moment is not None and self.until(triggers[moment], moment):
            time.sleep(rng.choice((0.0, rng.uniform(0.0, _LATE))))
            process.send_signal(signum)
        self.finish()

    def finish(self) -> ScriptedRun[SnapshotT]:
        """Release the run's held request, wait for the process to end, and note on the run
        how it ended (exit code, stdout, stderr)."""
        self.run.release.set()
        self.process.wait(self.timeout)
        if self.reader is not None:
            self.reader.join(self.timeout)
        self.run.returncode = self.process.returncode
        self.run.stdout = self.stdout.read_text(encoding="utf-8")
        self.run.stderr = "".join(self.stderr)
        return self.run


def restore_stop_signals() -> None:
    """In a child process, before it starts (a ``preexec_fn``): SIGINT, SIGTERM and SIGHUP act
    as they do by default, as a user's Ctrl-C, a service manager and a closed terminal expect,
    even where the test's own process ignores them (a background job ignores SIGINT, a run
    under ``nohup`` SIGHUP)."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
