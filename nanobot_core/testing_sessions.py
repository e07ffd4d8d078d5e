"""The contract every session store passes: subclass :class:`SessionStoreContract` in your tests.

Give the subclass two fixtures: ``store``, a fresh, empty store, and
``second_store``, another instance over the same sessions (what another
worker would open). The built-in ``jsonl`` store and ``nanobot-postgres`` run
these same tests::

    class TestMyStore(SessionStoreContract):
        @pytest.fixture
        def store(self, tmp_path): ...

        @pytest.fixture
        def second_store(self, store): ...

Requires pytest and hypothesis (test dependencies, not runtime ones).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import pytest

from nanobot_core.errors import (
    SessionConflictError,
    SessionError,
    SessionLockedError,
    SessionNotFoundError,
)
from nanobot_core.sessions import SessionStore, open_session, record_text

__all__ = ["SessionStoreContract"]

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
