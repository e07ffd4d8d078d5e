"""`compact_results` on its own."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core.config import GovernanceConfig
from nanobot_core.governance import Governor, builtin_stages
from nanobot_core.governance.stages import compact_results
from nanobot_core.governance.stages.compact import COMPACT_PREFIX, compact_notice
from nanobot_core.governance.tokens import count_request
from tests.governance.builders import call, calls, context, result, run_pure, user


def _history(sizes: list[int], names: list[str] | None = None) -> list[dict[str, Any]]:
    """One turn per size: a user message, a call, a result of that many characters."""
    history: list[dict[str, Any]] = []
    for index, size in enumerate(sizes):
        name = names[index] if names else "exec"
        history += [
            user(f"step {index}"),
            calls(call(f"c{index}", name)),
            result(f"c{index}", "r" * size),
        ]
    return history


def _compacted(messages: list[dict[str, Any]]) -> list[int]:
    return [
        i
        for i, m in enumerate(messages)
        if m["role"] == "tool" and m["content"].startswith(COMPACT_PREFIX)
    ]


def test_within_budget_nothing_is_compacted() -> None:
    """Under budget the stage does nothing, however big the results."""
    history = _history([40_000, 40_000])
    assert run_pure(compact_results, history, context()).messages is history


def test_oldest_results_go_first_until_the_request_fits() -> None:
    """Over budget, the oldest compactable results go first, and only as many as needed."""
    history = _history([1_000, 8_000, 3_000, 6_000, 500])
    budget = count_request(None, history) - 1_500  # the two oldest results together clear that
    ctx = context(budget=budget, options={"keep": 0}, low_watermark=1.0)
    outcome = run_pure(compact_results, history, ctx)
    assert _compacted(outcome.messages) == [2, 5]
    assert count_request(None, outcome.messages) <= budget
    assert outcome.messages[8:] == history[8:]
    assert all(a is b for a, b in zip(outcome.messages[8:], history[8:], strict=True))


def test_a_later_compaction_changes_nothing_before_the_results_it_compacts() -> None:
    """Compacting again (the history grew) leaves the results compacted before as they were."""
    history = _history([1_000, 1_000, 6_000, 1_000])
    budget = count_request(None, history) - 200
    ctx = context(budget=budget, options={"keep": 0}, low_watermark=1.0)
    first = run_pure(compact_results, history, ctx).messages
    grown = first + _history([6_000])
    second = run_pure(compact_results, grown, ctx).messages
    changed = [i for i, (a, b) in enumerate(zip(grown, second, strict=True)) if a is not b]
    assert changed and min(changed) > max(_compacted(first))
    assert second[: min(changed)] == first[: min(changed)]


def test_newest_results_are_kept() -> None:
    """Option `keep`: the newest N results stay intact even when they are the largest."""
    history = _history([1_000, 2_000, 9_000])
    budget = count_request(None, history) - 600
    ctx = context(budget=budget, options={"keep": 1}, low_watermark=1.0)
    outcome = run_pure(compact_results, history, ctx)
    assert 8 not in _compacted(outcome.messages)
    assert _compacted(outcome.messages) == [2, 5]


def test_excluded_and_unlisted_tools_are_kept() -> None:
    """Options `exclude_tools` and `tools` restrict what may be compacted."""
    history = _history([5_000, 5_000, 5_000], ["read_file", "exec", "grep"])
    budget = count_request(None, history) - 5_000
    excluded = run_pure(
        compact_results,
        history,
        context(
            budget=budget, options={"keep": 0, "exclude_tools": ["read_file"]}, low_watermark=1.0
        ),
    )
    assert 2 not in _compacted(excluded.messages)
    only = run_pure(
        compact_results,
        history,
        context(budget=budget, options={"keep": 0, "tools": ["grep"]}, low_watermark=1.0),
    )
    assert _compacted(only.messages) == [8]


def test_clear_at_least_keeps_going_after_the_request_fits() -> None:
    """Option `clear_at_least` compacts more than the bare minimum in one go."""
    history = _history([4_000, 4_000, 4_000])
    budget = count_request(None, history) - 100
    minimal = run_pure(
        compact_results, history, context(budget=budget, options={"keep": 0}, low_watermark=1.0)
    )
    generous = run_pure(
        compact_results,
        history,
        context(budget=budget, options={"keep": 0, "clear_at_least": 2_500}, low_watermark=1.0),
    )
    assert len(_compacted(minimal.messages)) == 1
    assert len(_compacted(generous.messages)) == 3


def test_notice_names_the_tool_and_how_to_narrow_the_call() -> None:
    """The notice says which tool, how big the result was and what to do instead."""
    history = _history([6_000], ["grep"])
    outcome = run_pure(compact_results, history, context(budget=100, options={"keep": 0}))
    notice = outcome.messages[2]["content"]
    assert "'grep'" in notice and "6000 characters" in notice and "narrower arguments" in notice


def test_notice_of_an_offloaded_result_keeps_its_path_and_size() -> None:
    """A compacted offload reference still tells where the full result is, and its size."""
    offloaded = (
        "[Tool result saved to a file: 90000 characters, too long to show here. Read it with "
        'read_file(path=".nanobot/cache/tool-results/abc.txt"), using offset and limit to page '
        "through it. Its start and end:]\n" + "x" * 3_000
    )
    history = [user(), calls(call("c")), result("c", offloaded)]
    outcome = run_pure(compact_results, history, context(budget=100, options={"keep": 0}))
    notice = outcome.messages[2]["content"]
    assert 'read_file(path=".nanobot/cache/tool-results/abc.txt")' in notice
    assert "returned 90000 characters" in notice


def test_a_needed_compaction_goes_down_to_the_low_watermark() -> None:
    """Once over budget, results are compacted until the request is within the low watermark."""
    history = _history([4_000] * 8)
    budget = count_request(None, history) - 100
    outcome = run_pure(compact_results, history, context(budget=budget, options={"keep": 0}))
    after = count_request(None, outcome.messages)
    assert after <= int(budget * 0.7)
    one_less = [m for i, m in enumerate(outcome.messages) if i != _compacted(outcome.messages)[-1]]
    assert count_request(None, one_less) > 0  # sanity: the history still has its messages
    exact = run_pure(
        compact_results, history, context(budget=budget, options={"keep": 0}, low_watermark=1.0)
    )
    assert len(_compacted(exact.messages)) == 1 < len(_compacted(outcome.messages))


def _governed(history: list[dict[str, Any]], budget: int, **options: Any) -> list[Any]:
    """What a governor with the built-in stages sends, `compact_results` configured so."""
    config = GovernanceConfig(input_limit=budget, stages={"compact_results": options})
    governor = Governor(builtin_stages(), config=config)
    return governor.govern(history).messages


def test_keep_defaults_to_the_three_newest_results() -> None:
    """Unconfigured, `keep` is 3: of four results over budget only the oldest is compacted."""
    history = _history([8_000, 8_000, 8_000, 8_000])
    sent = _governed(history, budget=count_request(None, history) - 100)
    assert _compacted(sent) == [2]


def test_fewer_results_than_keep_are_all_kept() -> None:
    """With fewer results than `keep` (two, default 3), none is compacted; the cut makes room."""
    history = _history([8_000, 8_000])
    sent = _governed(history, budget=3_000)
    assert _compacted(sent) == []
    assert sent[-1] is history[-1]


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=200, max_value=6_000), min_size=1, max_size=7),
    keep=st.integers(min_value=0, max_value=8),
    cut=st.floats(min_value=0.05, max_value=0.9),
)
def test_the_newest_keep_results_are_never_compacted(
    sizes: list[int], keep: int, cut: float
) -> None:
    """Whatever the number of results and the budget, the newest `keep` of them stay whole."""
    history = _history(sizes)
    budget = max(500, int(count_request(None, history) * (1 - cut)))
    outcome = run_pure(compact_results, history, context(budget=budget, options={"keep": keep}))
    results = [i for i, m in enumerate(history) if m["role"] == "tool"]
    newest = set(results[max(0, len(results) - keep) :]) if keep else set()
    assert not newest & set(_compacted(outcome.messages))


def test_a_result_no_longer_than_its_notice_is_left_as_it_is() -> None:
    """A result the notice would not shrink is neither replaced nor reported; bigger ones are."""
    size = 132
    assert len(compact_notice("exec", "r" * size)) == size  # the notice is as long as the result
    history = _history([size, 4_000, 1_000])
    budget = count_request(None, history) - 500
    outcome = run_pure(compact_results, history, context(budget=budget, options={"keep": 0}))
    assert outcome.messages[2] is history[2]
    assert _compacted(outcome.messages) == [5]
    assert [line.split(":")[0] for line in outcome.details] == ["messages[5]"]


@given(st.text(max_size=300))
@settings(max_examples=200, deadline=None)
def test_notice_names_any_tool_as_it_is_quoted(name: str) -> None:
    """The notice names a tool, short or long, by its quoted name (or "the tool")."""
    from nanobot_core._clip import quoted
    from nanobot_core.governance.stages.content import without_surrogates

    shown = quoted(without_surrogates(name)) if name else "the tool"
    notice = compact_notice(name or None, "r" * 40)
    assert notice == (
        f"{COMPACT_PREFIX}: {shown} returned 40 characters. Call it again with narrower "
        "arguments if you still need it.]"
    )


def test_long_tool_names_are_not_remembered() -> None:
    """A tool name longer than a real one is not kept by the notice's memo of names."""
    from nanobot_core.governance.stages import compact

    before = compact._remembered_names.cache_info().currsize
    for index in range(50):
        compact_notice(f"{index}{'x' * 10_000}", "r" * 40)
    assert compact._remembered_names.cache_info().currsize == before
    compact_notice("a tool name of usual length", "r" * 40)
    assert compact._remembered_names.cache_info().currsize == min(before + 1, 256)


def test_each_tool_is_named_once_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compacting many results of a few tools works out each tool's notice head and name once."""
    from nanobot_core.governance.stages import compact

    asked: list[str | None] = []
    names = compact._names

    def counted(tool: str | None) -> tuple[str, str]:
        asked.append(tool)
        return names(tool)

    monkeypatch.setattr(compact, "_names", counted)
    history = _history([2_000] * 12, ["grep", "exec", "grep"] * 4)
    outcome = run_pure(compact_results, history, context(budget=100, options={"keep": 0}))
    assert len(outcome.details) == 12
    assert sorted(asked) == ["exec", "grep"]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["grep", "exec", "", "x" * 200]),
            st.integers(0, 3_000),
            st.booleans(),
        ),
        min_size=1,
        max_size=8,
    )
)
@settings(max_examples=100, deadline=None)
def test_each_compacted_result_reads_as_compact_notice_says(
    results: list[tuple[str, int, bool]],
) -> None:
    """Whatever the tools and texts (offload references included), a compacted result holds
    `compact_notice` of its tool and text, and its report line names the tool."""
    from nanobot_core.governance.stages.compact import _names

    history: list[dict[str, Any]] = []
    for index, (name, size, offloaded) in enumerate(results):
        text = "r" * size
        if offloaded:
            text = (
                f"[Tool result saved to a file: {size + 90_000} characters, too long to show "
                f'here. Read it with read_file(path=".nanobot/cache/tool-results/{index}.txt") '
                "and start_char=0. Its start and end:]\n" + text
            )
        named = {"name": name} if name else {}  # else named by its call
        history += [
            user(),
            calls(call(f"c{index}", name or "exec")),
            result(f"c{index}", text, **named),
        ]
    outcome = run_pure(compact_results, history, context(budget=100, options={"keep": 0}))
    lines = iter(outcome.details)
    for index, (name, _size, _offloaded) in enumerate(results):
        position = 3 * index + 2
        tool = name or "exec"
        if outcome.messages[position] is history[position]:
            continue  # not worth compacting: no shorter than its notice
        notice = compact_notice(tool, history[position]["content"])
        assert outcome.messages[position]["content"] == notice
        assert next(lines).startswith(
            f"messages[{position}]: compacted the result of {_names(tool)[1]} ("
        )
