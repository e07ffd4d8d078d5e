"""A plugin's token counter or result store that fails or lies cannot end or skew governance."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from nanobot_core import hookimpl
from nanobot_core.config import Config, GovernanceConfig, PluginsConfig
from nanobot_core.governance import Governor, build_governor, count_request
from nanobot_core.governance.invariants import check_invariants
from nanobot_core.governance.tokens import (
    MEMO_CHARS,
    CheckedCounter,
    MemoCounter,
    TokenCounter,
    estimate_tokens,
)
from nanobot_core.kernel.manager import PluginManager
from tests.governance.builders import call, calls, result, turn, user


class _Answers:
    """A counter that answers `answer` (or raises it) for every text."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked = 0

    def count_text(self, text: str) -> int:
        self.asked += 1
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer  # type: ignore[no-any-return]


class _WholeNumber:
    """A whole number that is not an int (as numpy's are)."""

    def __index__(self) -> int:
        return 7


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (ValueError("no such token"), "raised ValueError: no such token"),
        (SystemExit(4), "raised SystemExit(4)"),
        (-5, "answered -5, less than 0"),
        ("12", "answered something that is not a whole number"),
        (3.5, "answered something that is not a whole number"),
        (None, "answered something that is not a whole number"),
        (True, "answered something that is not a whole number"),
    ],
)
def test_a_count_the_plugin_cannot_give_is_the_estimate(answer: Any, why: str) -> None:
    """Each text the counter fails on counts the default estimate, and the failure is named."""
    checked = CheckedCounter(_Answers(answer), "plugin 'tok' from tok 1.2")
    with capture_logs() as logs:
        assert checked.count_text("hello world") == estimate_tokens("hello world")
        assert checked.count_text("x" * 41) == estimate_tokens("x" * 41)
    assert checked.failures == 2
    warned = [e for e in logs if e["event"].startswith("token counter failed")]
    assert len(warned) == 1  # once, not per text
    assert warned[0]["plugin"] == "plugin 'tok' from tok 1.2" and warned[0]["why"] == why


def test_a_whole_number_of_another_type_is_a_count() -> None:
    """An answer that is a whole number without being an int (numpy's) is taken as it is."""
    checked = CheckedCounter(_Answers(_WholeNumber()), "plugin 'tok'")
    assert checked.count_text("anything at all") == 7
    assert checked.failures == 0


def test_a_cancellation_in_a_counter_reaches_the_caller() -> None:
    """Cancellation is not a failure of the counter: it goes on, as from any plugin code."""
    import asyncio

    with pytest.raises(asyncio.CancelledError):
        CheckedCounter(_Answers(asyncio.CancelledError()), "plugin 'tok'").count_text("x")


@given(
    st.one_of(
        st.integers(min_value=-(10**30), max_value=10**30),
        st.floats(allow_nan=True),
        st.none(),
        st.booleans(),
        st.text(max_size=5),
        st.lists(st.integers(), max_size=2),
    ),
    st.text(max_size=200),
)
def test_every_answer_becomes_a_count_of_at_least_zero(answer: Any, text: str) -> None:
    """Whatever the plugin answers, the budget gets a whole number of at least 0."""
    counted = CheckedCounter(_Answers(answer), "plugin 'tok'").count_text(text)
    assert type(counted) is int and counted >= 0
    trusted = type(answer) is int and answer >= 0
    assert counted == (answer if trusted else estimate_tokens(text))


class _CounterPlugin:
    def __init__(self, counter: Any) -> None:
        self.counter = counter

    @hookimpl
    def nanobot_token_counter(self, ctx: Any) -> Any:
        return self.counter


class _FailsOnSome:
    """A tokenizer that cannot read a text holding a lone surrogate."""

    def count_text(self, text: str) -> int:
        text.encode("utf-8")
        return len(text) // 3 + 1


def _history() -> list[Any]:
    return [*turn(1), *turn(2, "ok \ud800 broken"), user("and now?")]


@pytest.mark.parametrize("counter", [_FailsOnSome(), _Answers(-1_000_000), _Answers(SystemExit(2))])
def test_a_session_governs_through_a_counter_that_fails(tmp_path: Path, counter: Any) -> None:
    """Governing with a plugin's failing or lying counter gives a legal request, never a raise."""
    config = Config(plugins=PluginsConfig(disable_autoload=True))
    manager = PluginManager(config, workspace=tmp_path).load()
    manager.register(_CounterPlugin(counter), "tok", distribution="tok", version="1.0")
    governed = Governor.from_plugins(manager).govern(_history())
    assert check_invariants(governed.messages) == []
    assert governed.tokens > 0  # a negative count cannot make the request look free


class _Store:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def put(self, content: str) -> Any:
        return self.answer


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (None, "NoneType None"),
        (42, "int 42"),
        ("", "an empty path"),
        ('/tmp/a"b.txt', "'/tmp/a\"b.txt'"),
        ("two\nlines", "'two\\nlines'"),
    ],
)
def test_a_store_that_answers_no_path_means_truncation(
    tmp_path: Path, answer: Any, said: str
) -> None:
    """A store whose answer the model could not read back from is a failed store: cut the result."""
    big = "START" + "y" * 5_000 + "END"
    history = [user(), calls(call("c")), result("c", big)]
    config = GovernanceConfig(max_tool_result_chars=1_000)
    governed = build_governor(config, tmp_path, store=_Store(answer)).govern(history)
    text = governed.messages[2]["content"]
    assert text.startswith("START") and text.endswith("END") and "read_file" not in text
    entry = governed.report.entry("offload_results")
    assert entry is not None
    assert f"the store answered {said}, not a path" in entry.details[0]


def test_a_store_that_raises_is_named_in_the_report(tmp_path: Path) -> None:
    """The report says what the store raised."""

    class Raises:
        def put(self, content: str) -> NoReturn:
            raise OSError("bucket gone")

    history = [user(), calls(call("c")), result("c", "z" * 5_000)]
    config = GovernanceConfig(max_tool_result_chars=1_000)
    governed = build_governor(config, tmp_path, store=Raises()).govern(history)
    entry = governed.report.entry("offload_results")
    assert entry is not None and "the store failed: OSError: bucket gone" in entry.details[0]


class _Words:
    """A deterministic counter that records every text it is asked, as a tokenizer would cost."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def count_text(self, text: str) -> int:
        self.asked.append(text)
        return len(text.split()) + text.count("\n") + len(text) // 7


@given(
    st.lists(st.text(alphabet="ab \n\u00e9\U0001f600", max_size=30), max_size=40),
    st.sampled_from(["checked", "memo", "governor"]),
    st.one_of(st.just(MEMO_CHARS), st.integers(min_value=0, max_value=400)),
)
def test_a_remembered_count_is_the_count(texts: list[str], wrapper: str, memo_chars: int) -> None:
    """Counting through the memo (a plugin's checked counter, a memo of its own, or the one a
    governor puts in front of a counter handed to it; large or forgetting all the time) gives
    each text exactly what the counter alone gives it."""
    remembered: TokenCounter
    if wrapper == "checked":
        remembered = CheckedCounter(_Words(), "plugin 'tok'", memo_chars=memo_chars)
    elif wrapper == "memo":
        remembered = MemoCounter(_Words(), memo_chars=memo_chars)
    else:
        remembered = build_governor(counter=_Words()).counter
    alone = _Words()
    assert [remembered.count_text(t) for t in texts] == [alone.count_text(t) for t in texts]


@given(st.lists(st.text(max_size=12), max_size=60))
def test_equal_text_is_counted_once(texts: list[str]) -> None:
    """The plugin's counter is asked once per distinct text, whatever object holds it."""
    words = _Words()
    checked = CheckedCounter(words, "plugin 'tok'")
    for text in texts:
        checked.count_text("".join(list(text)))  # an equal string, not the same object
    assert sorted(words.asked) == sorted(set(texts))


def test_the_memo_is_bounded_and_keeps_the_texts_used_last() -> None:
    """Past its bound the memo forgets the least recently used text first, and holds no more."""
    words = _Words()
    checked = CheckedCounter(words, "plugin 'tok'", memo_chars=3 * (100 + 64))
    first, second, third, fourth = ("a " * 50, "b " * 50, "c " * 50, "d " * 50)
    for text in (first, second, third, first, fourth):  # `first` used again before `fourth`
        checked.count_text(text)
    assert words.asked == [first, second, third, fourth]  # `first` remembered
    checked.count_text(second)  # forgotten to make room for `fourth`
    checked.count_text(first)
    assert words.asked == [first, second, third, fourth, second]
    assert checked._memo_held <= checked.memo_chars
    checked.count_text("x" * 1_000)  # longer than the whole memo: counted, not remembered
    checked.count_text("x" * 1_000)
    assert words.asked[-2:] == ["x" * 1_000] * 2


def test_a_failed_count_is_asked_again() -> None:
    """A text the counter failed on is not remembered: the next call asks the counter again."""

    class FailsOnce:
        def __init__(self) -> None:
            self.calls = 0

        def count_text(self, text: str) -> int:
            self.calls += 1
            if self.calls == 1:
                raise ValueError("not yet")
            return 3

    checked = CheckedCounter(FailsOnce(), "plugin 'tok'")
    assert checked.count_text("hello world") == estimate_tokens("hello world")
    assert checked.count_text("hello world") == 3
    assert checked.failures == 1


def test_a_session_asks_the_plugin_counter_once_per_text(tmp_path: Path) -> None:
    """Governed call after call through a plugin's counter, a session counts each distinct
    text once, with the very results a counter without a memo gives."""
    from tests.governance.builders import agent_session

    history = agent_session(60)
    config = Config(
        governance=GovernanceConfig(
            context_window=6_000, max_output=500, safety_margin=0, max_tool_result_chars=500
        ),
        plugins=PluginsConfig(disable_autoload=True),
    )

    manager = PluginManager(config, workspace=tmp_path).load()
    words = _Words()
    manager.register(_CounterPlugin(words), "tok", distribution="tok", version="1.0")
    remembering = Governor.from_plugins(manager)
    assert isinstance(remembering.counter, CheckedCounter)
    by_hand = build_governor(config, tmp_path, counter=_Words())  # the governor's own memo
    users = [i for i, m in enumerate(history) if isinstance(m, dict) and m.get("role") == "user"]
    acted = set()
    for end in [*users[1:], len(history)]:
        ours = remembering.govern(history[:end], system="Be brief.")
        theirs = by_hand.govern(history[:end], system="Be brief.")
        assert ours.messages == theirs.messages and ours.tokens == theirs.tokens
        assert ours.tokens == count_request("Be brief.", ours.messages, counter=_Words())
        acted |= {entry.stage for entry in ours.report if entry.changed}
    assert {"offload_results", "compact_results"} <= acted  # the notices are counted too
    assert len(words.asked) == len(set(words.asked))
