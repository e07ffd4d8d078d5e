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
from nanobot_core.governance import Governor, build_governor
from nanobot_core.governance.invariants import check_invariants
from nanobot_core.governance.tokens import CheckedCounter, estimate_tokens
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
