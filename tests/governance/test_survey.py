"""The survey: one pass that tells each stage whether it has anything to do."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core._json_boundary import MAX_ARGUMENT_VALUES
from nanobot_core.governance.checks import arguments_ok
from nanobot_core.governance.survey import Defect, FactsCache, Splice, survey_messages
from tests.governance.builders import call, calls, result, say, system, turn, user
from tests.governance.strategies import DirtyRequest, dirty_requests


def test_clean_history_has_no_defect() -> None:
    """A legal history reports no defect, its token total and its largest result."""
    history = [system(), *turn(1, "x" * 500), *turn(2, "y" * 20)]
    survey = survey_messages(history)
    assert survey.defects == Defect.NONE
    assert survey.largest_result == 500
    assert survey.tokens > 0


@pytest.mark.parametrize(
    ("history", "defect"),
    [
        ([user(), 3], Defect.NON_MESSAGES),
        ([user(), {"role": "critic", "content": "x"}], Defect.NON_MESSAGES),
        ([{**user(), "_meta": {}}], Defect.META),
        ([user(), say("[Previous assistant message omitted.]")], Defect.PLACEHOLDERS),
        ([user(), calls(call(name=None)), result()], Defect.MALFORMED_CALLS),
        ([user(), calls(call(arguments="{")), result()], Defect.MALFORMED_CALLS),
        ([user(), calls(call("a"), call("a")), result("a")], Defect.MALFORMED_CALLS),
        ([user(), say(), result()], Defect.STRAY_RESULTS),
        ([user(), calls(call()), result(), result()], Defect.STRAY_RESULTS),
        ([user(), calls(call())], Defect.UNANSWERED_CALLS),
        ([user("\ud83d")], Defect.DIRTY_TEXT),
        ([user(), {"role": "assistant", "content": 5}], Defect.DIRTY_TEXT),
        ([user(), calls(call()), result(content="")], Defect.EMPTY_RESULTS),
        ([system(), say()], Defect.NOT_USER_START),
        ([], Defect.NOT_USER_START),
    ],
)
def test_each_defect_is_found(history: list[Any], defect: int) -> None:
    """Each kind of defect sets its own bit."""
    assert survey_messages(history).has(defect)


def test_survey_says_where_the_run_defects_are() -> None:
    """Malformed calls, stray results and open runs come with their positions."""
    history = [
        user(),
        calls(call("a"), call("b")),  # 1: b never answered
        result("a"),
        result("a"),  # 3: a second answer
        say(),
        result("z"),  # 5: outside any run
        calls(call("c", None)),  # 6: a call without a name
        result("c"),
    ]
    survey = survey_messages(history)
    assert survey.malformed == (6,)
    assert survey.strays == ((3, 1), (5, None))
    assert survey.open_runs == ((1, 3, frozenset({"b"})),)


def _fields(survey: Any) -> tuple[Any, ...]:
    return (
        survey.defects,
        survey.tokens,
        survey.largest_result,
        survey.malformed,
        survey.strays,
        survey.open_runs,
    )


@settings(max_examples=150, deadline=None)
@given(dirty_requests(), st.data())
def test_a_list_that_extends_a_known_one_is_surveyed_as_a_fresh_list(
    request: DirtyRequest, data: st.DataObject
) -> None:
    """Totals and survey carried over from an earlier run's list equal those of a fresh cache."""
    history = request.messages
    split = data.draw(st.integers(0, len(history)), label="split")
    facts = FactsCache()
    base = history[:split]
    facts.survey(base)
    listing = facts.listing(base)
    assert listing is not None
    facts.new_run()
    facts.extend(history, listing)
    assert facts.registered(history) is not None
    assert _fields(facts.survey(history)) == _fields(survey_messages(history))
    assert facts.list_tokens(history) == FactsCache().list_tokens(history)


@given(dirty_requests(), st.data())
def test_a_spliced_list_carries_totals_equal_to_a_fresh_count(
    request: DirtyRequest, data: st.DataObject
) -> None:
    """A list spliced from stretches of a totalled one, with messages added, has the totals
    and tokens a fresh cache counts, whatever was taken out (defects, the largest result)."""
    history = request.messages
    facts = FactsCache()
    asked = data.draw(st.sampled_from(["sums", "tokens", "nothing"]), label="asked of the source")
    if asked == "sums":
        facts.totals(history)
    elif asked == "tokens":
        facts.list_tokens(history)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(history)), max_size=6), label="cuts"))
    bounds = [0, *cuts, len(history)]
    splice = Splice(history, facts)
    for index, (start, stop) in enumerate(itertools.pairwise(bounds)):
        if data.draw(st.booleans(), label=f"keep stretch {index}"):
            splice.copy(start, stop)
        if data.draw(st.booleans(), label=f"add after stretch {index}"):
            splice.add(result(f"added_{index}", "x" * data.draw(st.integers(0, 40))))
    spliced = splice.done()
    fresh = FactsCache()
    assert facts.list_tokens(spliced) == fresh.list_tokens(spliced)
    assert facts.totals(spliced) == fresh.totals(spliced)


def test_a_spliced_list_counts_again_what_it_cannot_carry_over() -> None:
    """Taking out the largest result or the only defect leaves neither in the spliced totals."""
    history = [user(), calls(call("a"), call("b")), result("a", "x" * 900), result("b", "")]
    facts = FactsCache()
    tokens, defects, largest = facts.totals(history)
    assert largest == 900
    assert defects & Defect.EMPTY_RESULTS
    splice = Splice(history, facts)
    splice.copy(0, 2)  # both results left out
    spliced = splice.done()
    assert facts.totals(spliced) == FactsCache().totals(spliced)
    assert facts.totals(spliced)[1:] == (0, 0)
    assert facts.list_tokens(spliced) < tokens


def test_a_list_that_does_not_start_with_the_known_one_is_not_carried_over() -> None:
    """A history whose start was replaced is learnt afresh, and surveyed as it is."""
    history = [user(), calls(call("a")), result("a"), say()]
    facts = FactsCache()
    facts.survey(history)
    listing = facts.listing(history)
    assert listing is not None
    facts.new_run()
    changed = [user(), calls(call("a")), say(), *history[3:]]  # the result is gone
    facts.extend(changed, listing)
    assert facts.registered(changed) is None
    assert facts.survey(changed).has(Defect.UNANSWERED_CALLS)


def _strict_object(text: str) -> bool:
    """The oracle: json.loads with NaN and Infinity refused gives a dict."""

    def refuse(name: str) -> Any:
        raise ValueError(name)

    try:
        return isinstance(json.loads(text, parse_constant=refuse), dict)
    except (ValueError, RecursionError):
        return False


_JSON_BITS = st.sampled_from(
    [
        '{"a": 1}',
        "{",
        "}",
        "[",
        "]",
        '"',
        ":",
        ",",
        " ",
        "NaN",
        "Infinity",
        "-Infinity",
        "1e5",
        "\ufeff",
        "\\u0000",
        "null",
        "true",
        '"k"',
        "{}",
        "[]",
        "\n",
        "\t",
        "\r",
        "\x0c",
        "\u00a0",
    ]
)


@settings(derandomize=True, deadline=None, max_examples=500)
@given(st.one_of(st.lists(_JSON_BITS, max_size=8).map("".join), st.text(max_size=20)))
def test_arguments_are_judged_as_json_loads_judges_them(text: str) -> None:
    """A call's arguments are well formed exactly when json.loads reads a strict object."""
    assert arguments_ok(text) is _strict_object(text)


def test_a_byte_order_mark_or_a_constant_makes_arguments_malformed() -> None:
    """A leading byte order mark, NaN or trailing data is refused; a bare object is not."""
    assert arguments_ok('{"path": "a.py"}')
    assert not arguments_ok('\ufeff{"path": "a.py"}')
    assert not arguments_ok('{"n": NaN}')
    assert not arguments_ok('{"n": 1} {}')
    assert not arguments_ok("[1]")
    assert not arguments_ok(None)


def test_arguments_of_more_values_than_the_limit_are_malformed() -> None:
    """Arguments one value past `MAX_ARGUMENT_VALUES` are refused; at the limit they are not."""
    at_limit = '{"items": [' + "1," * (MAX_ARGUMENT_VALUES - 3) + "1]}"
    over = '{"items": [' + "1," * (MAX_ARGUMENT_VALUES - 2) + "1]}"
    assert arguments_ok(at_limit)
    assert not arguments_ok(over)


def test_only_json_whitespace_may_follow_an_object() -> None:
    """Spaces, tabs and line breaks may trail an object; a form feed or no-break space may not."""
    assert arguments_ok('{"a": 1} \t\r\n')
    assert not arguments_ok('{"a": 1}\x0c')
    assert not arguments_ok('{"a": 1}\u00a0')
    assert not arguments_ok('{"a": 1}\u2028')
