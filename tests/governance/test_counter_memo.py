"""A governor asks any counter but the estimate once per distinct text, from any thread."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core import PluginManager, hookimpl
from nanobot_core.config import Config, GovernanceConfig, PluginsConfig
from nanobot_core.governance import (
    EstimateCounter,
    Governor,
    MemoCounter,
    build_governor,
    count_request,
    tokens,
)
from nanobot_core.governance.tokens import MEMO_CHARS, CheckedCounter, remembering
from tests.governance.builders import agent_session

_ENTRY = 64  # what the memo charges a text beyond its characters


class _Words:
    """A deterministic counter that records every text it is asked (thread-safely)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def count_text(self, text: str) -> int:
        self.asked.append(text)  # list.append is atomic in CPython
        return len(text.split()) + len(text) // 7


def _held_is_what_it_holds(memo: MemoCounter) -> bool:
    return memo._memo_held == sum(len(text) + _ENTRY for text in memo._memo)


def _in_threads(count: int, work: Callable[[int], None]) -> list[BaseException]:
    """Run `work(i)` for each i in `count` threads at once; what any of them raised."""
    raised: list[BaseException] = []

    def run(index: int) -> None:
        try:
            work(index)
        except BaseException as exc:
            raised.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return raised


@contextmanager
def _switching_often() -> Iterator[None]:
    """Threads switched every microsecond, so that a race shows in a short run."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def test_a_hand_built_governor_asks_its_counter_once_per_text(tmp_path: Path) -> None:
    """A governor built with a counter of one's own counts each distinct text of a session once,
    with the very totals the counter gives on its own."""
    history = agent_session(60)
    config = GovernanceConfig(
        context_window=6_000, max_output=500, safety_margin=0, max_tool_result_chars=500
    )
    words = _Words()
    governor = build_governor(config, tmp_path, counter=words)
    users = [i for i, m in enumerate(history) if isinstance(m, dict) and m.get("role") == "user"]
    acted = set()
    for end in [*users[1:], len(history)]:
        governed = governor.govern(history[:end], system="Be brief.")
        alone = count_request("Be brief.", governed.messages, counter=_Words())
        assert governed.tokens == alone
        acted |= {entry.stage for entry in governed.report if entry.changed}
    assert {"offload_results", "compact_results"} <= acted  # the notices are counted too
    assert words.asked and len(words.asked) == len(set(words.asked))


def test_a_counter_is_remembered_once_however_many_wrap_it() -> None:
    """A governor keeps a memo it is handed (a plugin's checked counter among them) and the
    estimate as they are, and puts anything else behind one memo of its own."""
    checked = CheckedCounter(_Words(), "plugin 'tok'")
    shared = MemoCounter(_Words())
    estimate = EstimateCounter()
    assert remembering(checked) is checked and remembering(shared) is shared
    assert remembering(estimate) is estimate
    assert build_governor(counter=checked).counter is checked
    words = _Words()
    wrapped = build_governor(counter=words).counter
    assert type(wrapped) is MemoCounter and wrapped.counter is words
    assert remembering(wrapped) is wrapped


def test_a_text_counted_by_several_threads_at_once_is_remembered_once() -> None:
    """Three threads that miss the same text together and all count it leave the memo as one
    count would: the text remembered, charged once, and room for as many texts as before."""
    together = threading.Barrier(3, timeout=10)

    class Together(_Words):
        def count_text(self, text: str) -> int:
            if text == "x" * 100:
                together.wait()  # every thread has missed the text before any remembers it
            return super().count_text(text)

    counter = Together()
    text, other = "x" * 100, "y" * 100
    memo = MemoCounter(counter, memo_chars=2 * (100 + _ENTRY))  # room for exactly two texts
    assert _in_threads(3, lambda _: memo.count_text(text) and None) == []
    assert counter.asked == [text] * 3 and _held_is_what_it_holds(memo)
    memo.count_text(other)
    memo.count_text(text)
    memo.count_text(other)
    assert counter.asked == [text] * 3 + [other]  # both remembered: nothing asked again


@pytest.mark.parametrize("gil", [True, False], ids=["with a GIL", "free-threaded"])
def test_one_memo_shared_by_many_threads_stays_whole(
    gil: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Threads counting overlapping texts through one small memo, switched every microsecond,
    all get the counter's counts, nothing raises, and the memo charges what it holds (reading
    a remembered count without the lock where a GIL allows it, under it where not)."""
    monkeypatch.setattr(tokens, "_GIL", gil)

    class Yielding(_Words):
        def count_text(self, text: str) -> int:
            time.sleep(0)  # another thread runs while this one counts, as a tokenizer lets it
            return super().count_text(text)

    texts = [f"{'word ' * (i % 13)}{i}" * (1 + i % 5) for i in range(60)]
    memo = MemoCounter(Yielding(), memo_chars=8 * (40 + _ENTRY))  # forgets all the time
    expected = {text: _Words().count_text(text) for text in texts}
    wrong: list[tuple[str, int]] = []

    def work(index: int) -> None:
        for round_ in range(300):
            text = texts[(index * 7 + round_ * (index + 1)) % len(texts)]
            counted = memo.count_text(text)
            if counted != expected[text]:
                wrong.append((text, counted))

    with _switching_often():
        raised = _in_threads(8, work)
    assert raised == [] and wrong == []
    assert _held_is_what_it_holds(memo) and memo._memo_held <= memo.memo_chars


class _Offers:
    """A plugin whose counter is a new `_Words` each time it is asked, as a plugin's may be."""

    def __init__(self) -> None:
        self.counters: list[_Words] = []

    @hookimpl
    def nanobot_token_counter(self, ctx: object) -> _Words:
        self.counters.append(_Words())
        return self.counters[-1]

    def asked(self) -> list[str]:
        return [text for counter in self.counters for text in counter.asked]


def _manager_with(plugin: object, tmp_path: Path, window: int = 128_000) -> PluginManager:
    config = Config(
        governance=GovernanceConfig(context_window=window, max_output=100, safety_margin=0),
        plugins=PluginsConfig(disable_autoload=True),
    )
    manager = PluginManager(config, workspace=tmp_path)
    manager.register(plugin, "words", distribution="words-counter", version="1.0")
    return manager


def test_every_governor_of_a_manager_counts_with_one_memo(tmp_path: Path) -> None:
    """A text one governor of a manager counted is not counted again by another: the three
    texts of a one-message session are asked once, however many governors govern it."""
    plugin = _Offers()
    manager = _manager_with(plugin, tmp_path)
    first, second, third = manager.governor(), Governor.from_plugins(manager), manager.governor()
    assert first.counter is second.counter is third.counter is manager.token_counter()
    first.govern([{"role": "user", "content": "one two three"}], system="Be brief.")
    assert sorted(plugin.asked()) == ["Be brief.", "one two three", "user"]
    second.govern([{"role": "user", "content": "one two three"}], system="Be brief.")
    assert sorted(plugin.asked()) == ["Be brief.", "one two three", "user"]  # nothing again
    third.govern([{"role": "user", "content": "four"}], system="Be brief.")
    assert sorted(plugin.asked()) == ["Be brief.", "four", "one two three", "user"]
    assert len(plugin.counters) == 1  # the plugin was asked for a counter once


def test_the_memo_bound_holds_for_all_governors_of_a_manager_together(tmp_path: Path) -> None:
    """Three governors of one manager, each counting 2 Mi characters of its own texts, remember
    at most `MEMO_CHARS` characters between them, the latest texts kept."""
    plugin = _Offers()
    manager = _manager_with(plugin, tmp_path, window=10_000_000)
    sessions = [
        [
            {"role": "user", "content": f"{session}.{number} " + "w " * 50_000}
            for number in range(21)
        ]
        for session in range(3)
    ]
    governors = [manager.governor() for _ in sessions]
    for governor, history in zip(governors, sessions, strict=True):
        governor.govern(history)
    memos = {id(governor.counter): governor.counter for governor in governors}
    assert len(memos) == 1
    (memo,) = memos.values()
    assert isinstance(memo, MemoCounter) and memo.memo_chars == MEMO_CHARS
    assert _held_is_what_it_holds(memo) and MEMO_CHARS - 100_100 < memo._memo_held <= MEMO_CHARS
    latest = sessions[-1][-1]["content"]
    asked = len(plugin.asked())
    governors[0].counter.count_text(latest)
    assert len(plugin.asked()) == asked  # the newest text is still remembered


def test_a_manager_keeps_its_counter_and_memo_when_plugins_come_and_go(tmp_path: Path) -> None:
    """Another plugin registered (which may answer first, so the counter is asked for again)
    leaves the counter plugin's memo as it was; a counter plugin that comes first in the
    canonical order takes over, with a memo of its own."""
    plugin = _Offers()
    manager = _manager_with(plugin, tmp_path)
    counter = manager.token_counter()
    counter.count_text("kept")

    class Lines:
        @hookimpl
        def nanobot_runtime_context(self, ctx: object) -> list[str]:
            return ["a line"]

    manager.register(Lines(), "lines", distribution="lines")
    assert manager.token_counter() is counter and len(plugin.counters) == 2
    manager.token_counter().count_text("kept")
    assert plugin.asked() == ["kept"]
    first = _Offers()
    manager.register(first, "alpha", distribution="alpha-counter", version="0.1")
    taken_over = manager.token_counter()
    assert taken_over is not counter and isinstance(taken_over, CheckedCounter)
    assert taken_over.owner == "plugin 'alpha' from alpha-counter 0.1"
    taken_over.count_text("kept")
    assert first.asked() == ["kept"] and manager.governor().counter is taken_over


def test_threads_asking_a_manager_for_its_counter_at_once_get_one(tmp_path: Path) -> None:
    """Eight threads building their governors from one manager at the same moment all count
    with the one counter, though the plugin may be asked by several of them."""
    together = threading.Barrier(8, timeout=10)
    manager = _manager_with(_Offers(), tmp_path)
    got: list[object] = []

    def build(_: int) -> None:
        together.wait()
        got.append(manager.governor().counter)

    with _switching_often():
        assert _in_threads(8, build) == []
    assert len(got) == 8 and all(counter is got[0] for counter in got)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.text(max_size=30), max_size=12), min_size=1, max_size=5),
)
def test_texts_counted_through_governors_of_one_manager_are_asked_once(
    texts_per_session: list[list[str]],
) -> None:
    """Whatever texts the sessions of one manager count, each distinct text is asked of the
    plugin once (they are far below the bound) and every count is the plugin's own."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        plugin = _Offers()
        manager = _manager_with(plugin, Path(folder))
        for texts in texts_per_session:
            counter = manager.governor().counter
            for text in texts:
                assert counter.count_text(text) == _Words().count_text(text)
        assert sorted(plugin.asked()) == sorted({t for ts in texts_per_session for t in ts})


def test_the_documented_memo_shared_by_two_managers_counts_a_text_once(tmp_path: Path) -> None:
    """docs/governance.md's `MemoCounter` block, run for two managers: their governors count
    with the one memo, with its bound, and a text one counted is not counted by the other."""
    import re

    page = (Path(__file__).parents[2] / "docs" / "governance.md").read_text(encoding="utf-8")
    (block,) = [
        b for b in re.findall(r"```python\n(.*?)```", page, re.DOTALL) if "MemoCounter(" in b
    ]
    words = _Words()
    names: dict[str, object] = {"my_counter": words}
    exec(compile(block, "governance.md", "exec"), names)
    config = Config(plugins=PluginsConfig(disable_autoload=True))
    one = PluginManager(config, workspace=tmp_path / "one").load()
    two = PluginManager(config, workspace=tmp_path / "two").load()
    first, second = (names["governor_of"](pm) for pm in (one, two))  # type: ignore[operator]
    assert first.counter is second.counter is names["shared"]
    assert first.counter.memo_chars == 16 * 2**20
    first.govern([{"role": "user", "content": "one two three"}], system="Be brief.")
    second.govern([{"role": "user", "content": "one two three"}], system="Be brief.")
    assert sorted(words.asked) == ["Be brief.", "one two three", "user"]


@pytest.mark.parametrize(
    ("counter", "memo_chars", "refusal"),
    [
        (
            "tiktoken",
            MEMO_CHARS,
            "MemoCounter: counter must have a count_text(text) -> int method, got str",
        ),
        (
            None,
            MEMO_CHARS,
            "MemoCounter: counter must have a count_text(text) -> int method, got NoneType",
        ),
        (_Words(), 1.5, "MemoCounter: memo_chars must be a whole number of characters, got float"),
        (_Words(), True, "MemoCounter: memo_chars must be a whole number of characters, got bool"),
        (_Words(), "4096", "MemoCounter: memo_chars must be a whole number of characters, got str"),
        (_Words(), -1, "MemoCounter: memo_chars must be at least 0 (0 remembers nothing), got -1"),
    ],
)
def test_a_memo_refuses_what_it_cannot_count_with_or_bound_by(
    counter: object, memo_chars: object, refusal: str
) -> None:
    """A memo built in code with no counter to ask, or a bound that is no count of characters,
    is refused at once, saying which argument and what it got, not at its first count."""
    with pytest.raises((TypeError, ValueError)) as raised:
        MemoCounter(counter, memo_chars=memo_chars)  # type: ignore[arg-type]
    assert str(raised.value) == refusal


@settings(max_examples=80, deadline=None)
@given(
    memo_chars=st.integers(min_value=0, max_value=2_000),
    texts=st.lists(st.text(max_size=200), max_size=40),
)
def test_a_memo_of_any_bound_gives_the_counters_counts_within_it(
    memo_chars: int, texts: list[str]
) -> None:
    """Whatever its bound and the texts counted, a memo answers what its counter does, holds no
    more than its bound, and charges what it holds; a text it holds is not asked again."""
    words = _Words()
    memo = MemoCounter(words, memo_chars=memo_chars)
    for text in texts:
        assert memo.count_text(text) == _Words().count_text(text)
        assert memo._memo_held <= memo_chars and _held_is_what_it_holds(memo)
    asked = len(words.asked)
    for text in list(memo._memo):
        memo.count_text(text)
    assert len(words.asked) == asked
