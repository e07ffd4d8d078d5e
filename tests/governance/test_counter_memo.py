"""A governor asks any counter but the estimate once per distinct text, from any thread."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from nanobot_core.config import GovernanceConfig
from nanobot_core.governance import EstimateCounter, build_governor, count_request, tokens
from nanobot_core.governance.tokens import CheckedCounter, MemoCounter, remembering
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
