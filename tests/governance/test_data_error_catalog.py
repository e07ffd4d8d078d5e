"""Every in-scope defect of the provider error catalog is healed before the request is sent.

Each catalog entry (a real provider error, quoted from a public issue) gets a history that
exhibits its defect, built from the error's own ids and the history sketches in its sources.
The test checks the defect is there before governing and gone after, with a check specific
to the defect class. docs/error-catalog.md says which classes are in scope and why.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import pytest

from nanobot_core.config import GovernanceConfig
from nanobot_core.governance.invariants import check_invariants
from tests.governance.strategies import build_builtin_governor, llamafactory_rows, tau_bench_runs
from tests.helpers import REPO_ROOT, data_dir

Message = dict[str, Any]
Finder = Callable[[Sequence[Any]], list[str]]


@cache
def catalog_entries() -> tuple[dict[str, Any], ...]:
    """The 33 real provider errors of provider-history-errors/catalog.json."""
    path = data_dir() / "provider-history-errors" / "catalog.json"
    return tuple(json.loads(path.read_text(encoding="utf-8"))["entries"])


@cache
def broken_histories() -> tuple[dict[str, Any], ...]:
    """The two complete histories a provider rejected, as transcribed from their sources."""
    path = data_dir() / "provider-history-errors" / "broken_histories.jsonl"
    with path.open(encoding="utf-8") as lines:
        return tuple(json.loads(line) for line in lines if line.strip())


@pytest.fixture(scope="module")
def governor(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The built-in governor with the default budget."""
    return build_builtin_governor(GovernanceConfig(), tmp_path_factory.mktemp("catalog"))


# -- message builders --------------------------------------------------------------------


def user(text: str = "Please check my reservation.") -> Message:
    return {"role": "user", "content": text}


def system(text: str = "You are an airline agent.") -> Message:
    return {"role": "system", "content": text}


def say(text: str = "Let me look that up.") -> Message:
    return {"role": "assistant", "content": text}


def call(call_id: str, name: str = "get_user_details", arguments: Any = None) -> Message:
    encoded = '{"user_id": "mia_li_3668"}' if arguments is None else arguments
    function = {"name": name, "arguments": encoded}
    return {"id": call_id, "type": "function", "function": function}


def calls(*tool_calls: Message, content: str | None = None) -> Message:
    return {"role": "assistant", "content": content, "tool_calls": list(tool_calls)}


def result(call_id: str, content: str = '{"name": "Mia Li"}', **extra: Any) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": content, **extra}


def padding(turns: int) -> list[Message]:
    """A long, legal stretch of real τ-bench traffic (a session hundreds of messages deep)."""
    real = [m for m in tau_bench_runs()[0]["traj"] if m["role"] != "system"]
    stretch: list[Message] = []
    while len(stretch) < turns:
        stretch += real
    return stretch[:turns] if stretch[turns - 1]["role"] != "assistant" else stretch[: turns + 1]


# -- defect finders, one per in-scope class ----------------------------------------------


def _run_end(messages: Sequence[Any], index: int) -> int:
    end = index + 1
    while end < len(messages) and messages[end].get("role") == "tool":
        end += 1
    return end


def _call_messages(messages: Sequence[Any]) -> list[tuple[int, list[Any]]]:
    return [
        (index, m["tool_calls"])
        for index, m in enumerate(messages)
        if m.get("role") == "assistant" and m.get("tool_calls")
    ]


def orphan_results(messages: Sequence[Any]) -> list[str]:
    """Tool results not in the run right after an assistant message that made their call."""
    answered: set[int] = set()
    for index, tool_calls in _call_messages(messages):
        ids = {c.get("id") for c in tool_calls}
        answered |= {
            i
            for i in range(index + 1, _run_end(messages, index))
            if messages[i].get("tool_call_id") in ids
        }
    return [
        f"messages[{i}] answers {m.get('tool_call_id')!r}, which the message before did not call"
        for i, m in enumerate(messages)
        if m.get("role") == "tool" and i not in answered
    ]


def results_per_call(messages: Sequence[Any]) -> list[tuple[int, str, int]]:
    """(call message index, call id, number of results in its run) for every call."""
    counts = []
    for index, tool_calls in _call_messages(messages):
        run = messages[index + 1 : _run_end(messages, index)]
        for tool_call in tool_calls:
            answers = sum(1 for m in run if m.get("tool_call_id") == tool_call.get("id"))
            counts.append((index, tool_call.get("id"), answers))
    return counts


def unanswered_calls(messages: Sequence[Any]) -> list[str]:
    """Calls with no result among the tool messages directly after them."""
    return [
        f"messages[{index}] calls {call_id!r} with no result right after"
        for index, call_id, answers in results_per_call(messages)
        if answers == 0
    ]


def duplicated_ids(messages: Sequence[Any]) -> list[str]:
    """Ids repeated inside one assistant message, and calls answered other than exactly once."""
    found = []
    for index, tool_calls in _call_messages(messages):
        ids = [c.get("id") for c in tool_calls]
        found += [
            f"messages[{index}] repeats id {i!r}" for i in sorted(set(ids)) if ids.count(i) > 1
        ]
    found += [
        f"messages[{index}] call {call_id!r} has {answers} results"
        for index, call_id, answers in results_per_call(messages)
        if answers != 1
    ]
    return found


def count_mismatches(messages: Sequence[Any]) -> list[str]:
    """Assistant messages whose run of tool messages is not as long as their list of calls."""
    return [
        f"messages[{index}] makes {len(tool_calls)} calls but "
        f"{_run_end(messages, index) - index - 1} results follow"
        for index, tool_calls in _call_messages(messages)
        if _run_end(messages, index) - index - 1 != len(tool_calls)
    ]


def wrong_start(messages: Sequence[Any]) -> list[str]:
    """The first message after the system messages, when it is not a user message."""
    history = [m for m in messages if m.get("role") not in {"system", "developer"}]
    return (
        [f"history starts with {history[0].get('role')!r}"]
        if history and (history[0].get("role") != "user")
        else []
    )


def misplaced_results(messages: Sequence[Any]) -> list[str]:
    """Tool results whose run does not start right after an assistant tool-call message."""
    found = []
    for index, message in enumerate(messages):
        if message.get("role") != "tool":
            continue
        start = index
        while start > 0 and messages[start - 1].get("role") == "tool":
            start -= 1
        before = messages[start - 1] if start else {}
        if not (before.get("role") == "assistant" and before.get("tool_calls")):
            found.append(f"messages[{index}] follows {before.get('role')!r}, not a tool call")
    return found


def _all_calls(messages: Sequence[Any]) -> list[Message]:
    return [c for _, tool_calls in _call_messages(messages) for c in tool_calls]


def non_string_arguments(messages: Sequence[Any]) -> list[str]:
    """Calls whose arguments are not a string."""
    return [
        f"call {c.get('id')!r} has {type(c['function'].get('arguments')).__name__} arguments"
        for c in _all_calls(messages)
        if not isinstance(c["function"].get("arguments"), str)
    ]


def non_object_arguments(messages: Sequence[Any]) -> list[str]:
    """Calls whose arguments do not decode to a JSON object."""
    found = []
    for c in _all_calls(messages):
        arguments = c["function"].get("arguments")
        try:
            decoded = json.loads(arguments)
        except (TypeError, ValueError):
            decoded = None
        if not isinstance(decoded, dict):
            found.append(f"call {c.get('id')!r} has arguments {arguments!r}")
    return found


FINDERS: dict[str, Finder] = {
    "orphan_tool_result": orphan_results,
    "tool_call_without_result": unanswered_calls,
    "duplicate_tool_call_id": duplicated_ids,
    "tool_call_result_count_mismatch": count_mismatches,
    "role_order_call_not_after_user": wrong_start,
    "role_order_response_not_after_call": misplaced_results,
    "arguments_not_json_string": non_string_arguments,
    "arguments_not_object": non_object_arguments,
}


# -- one history per in-scope catalog entry ----------------------------------------------


def _deepseek_interleaved() -> list[Message]:
    """DeepSeek's rejected Responses input, in chat shape: text between the two calls."""
    return [
        calls(call("call-a", "read", '{"path":"a"}'), content="<think>\ninspect inputs\n</think>"),
        calls(call("call-b", "view", '{"path":"b"}'), content="<think>\ninspect views\n</think>"),
        result("call-a", "contents"),
        result("call-b", "rendered"),
        user("Reply exactly: done"),
    ]


# What json.loads() returns a non-dict for, as listed by the LangChain fix.
NON_OBJECT_JSON = ['["a", 1]', '"go"', "42", "true", "null"]

HISTORIES: dict[str, Callable[[], list[Message]]] = {
    # orphan_tool_result
    "openai-orphan-tool-2024": lambda: [user(), say(), result("call_9Xn2")],
    "openai-orphan-tool-current": lambda: [
        # compaction dropped the assistant tool_calls message and kept its result
        system(),
        user(),
        result("call_kept"),
        say("Your reservation is confirmed."),
        user("Thanks"),
    ],
    "dashscope-orphan-tool": lambda: [user(), result("call_qwen_1"), user("Still there?")],
    "anthropic-unexpected-tool-use-id": lambda: [
        user(),
        calls(call("toolu_A")),
        result("toolu_A"),
        result("toolu_01JLpBvrkaJHBDU3z3cWqtyv"),
    ],
    "anthropic-server-tool-result-orphan": lambda: [
        user(),
        say(),
        result("srvtoolu_01JjfQsdhSJkT7qLCL7Pj9jc", "advice"),
        user("go on"),
    ],
    # tool_call_without_result
    "openai-missing-tool-result": lambda: [
        user(),
        calls(call("call_RTlWVuE5MqEb3WZJgTIl7Rsb")),
        user("Hello?"),
    ],
    "openai-missing-tool-result-insufficient": lambda: [
        user(),
        calls(
            call("call_a"),
            call("call_b", "get_reservation_details", '{"reservation_id": "NO6JO3"}'),
        ),
        result("call_a"),
        say("Done."),
    ],
    "dashscope-missing-tool-result": lambda: [
        *padding(531),
        calls(call("call_deep_532")),
        user("and now?"),
    ],
    "anthropic-tool-use-without-result": lambda: [
        user(),
        calls(call("toolu_01Gho1LhNQt7FjqEiiHkrVMK")),
        user("wait"),
        result("toolu_01Gho1LhNQt7FjqEiiHkrVMK"),
    ],
    "vercel-ai-missing-tool-results": lambda: [user(), calls(call("call_last"))],
    "deepseek-responses-no-tool-output": _deepseek_interleaved,
    # duplicate_tool_call_id
    "openai-duplicate-tool-call-id": lambda: [
        user(),
        calls(call("call_gmd4tanjXcwOxfPawOnDmq6R")),
        result("call_gmd4tanjXcwOxfPawOnDmq6R"),
        result("call_gmd4tanjXcwOxfPawOnDmq6R"),
    ],
    "openai-duplicate-call-ids-submitted": lambda: [
        user(),
        calls(call("call_iNI2Y7PgM8Cko9pxodjEKHYf")),
        result("call_iNI2Y7PgM8Cko9pxodjEKHYf", "first"),
        result("call_iNI2Y7PgM8Cko9pxodjEKHYf", "second"),
    ],
    "openai-responses-duplicate-item": lambda: [
        # a retry appended the same call item twice
        user(),
        calls(call("fc_1")),
        calls(call("fc_1")),
        result("fc_1"),
    ],
    "minimax-kimi-duplicate-id-2013": lambda: [
        user(),
        calls(call("functions.eval:301", "eval", '{"code": "1+1"}')),
        result("functions.eval:301", "2"),
        calls(call("functions.eval:301", "eval", '{"code": "2+2"}')),
        calls(call("functions.eval:302", "eval", '{"code": "3+3"}')),
        result("functions.eval:302", "6"),
    ],
    "duplicate-id-2013-status": lambda: [
        user(),
        calls(
            call("call_function_bhjpilv3nd53_1"), call("call_function_bhjpilv3nd53_1", "calculate")
        ),
        result("call_function_bhjpilv3nd53_1"),
        result("call_function_bhjpilv3nd53_1", "4"),
    ],
    "openai-compatible-duplicate-within-message": lambda: [
        user(),
        calls(call("call_par"), call("call_par", "list_all_airports", "{}")),
        result("call_par"),
    ],
    "anthropic-tool-use-ids-unique": lambda: [
        user(),
        calls(call("toolu_x"), call("toolu_y"), call("toolu_x")),
        result("toolu_x"),
        result("toolu_y"),
    ],
    # tool_call_result_count_mismatch
    "mistral-count-mismatch": lambda: [
        user(),
        calls(call("b9mgIC84m")),
        result("b9mgIC84m"),
        calls(call("b9mgIC84m")),
        user("nudge"),
    ],
    "gemini-call-response-count": lambda: [
        user(),
        calls(call("c1"), call("c2", "calculate", '{"expression": "2+2"}')),
        result("c1"),
        result("c2", "4"),
        result("c2", "4"),
    ],
    # role order
    "gemini-call-turn-order": lambda: [
        system(),
        calls(call("call_early")),
        result("call_early"),
        say("Found you."),
        user("ok"),
    ],
    "gemini-response-turn-order": lambda: [
        user(),
        calls(call("call_late")),
        say("One moment."),
        result("call_late"),
    ],
    # arguments
    "client-arguments-dict-not-string": lambda: [
        user("What is the weather?"),
        calls(
            call(
                "call_browse",
                "browser_use",
                {"action": "go_to_url", "url": "https://www.weather.com"},
            )
        ),
        result("call_browse", "Navigated to https://www.weather.com"),
    ],
    "client-non-dict-arguments": lambda: [
        user(),
        calls(*(call(f"call_{i}", arguments=value) for i, value in enumerate(NON_OBJECT_JSON))),
        *(result(f"call_{i}") for i in range(len(NON_OBJECT_JSON))),
    ],
}


def _in_scope_entries() -> list[dict[str, Any]]:
    return [entry for entry in catalog_entries() if entry["defect_class"] in FINDERS]


@pytest.mark.parametrize("entry", _in_scope_entries(), ids=lambda entry: entry["id"])
def test_catalog_defect_is_healed(governor: Any, entry: dict[str, Any]) -> None:
    """The history that made the provider fail loses that very defect when governed."""
    find = FINDERS[entry["defect_class"]]
    history = HISTORIES[entry["id"]]()
    assert find(history), "the history must exhibit the catalogued defect"
    result = governor.govern(history)
    assert find(result.messages) == []
    assert check_invariants(result.messages) == []


def test_object_arguments_are_encoded_not_replaced(governor: Any) -> None:
    """Arguments sent as an object reach the provider as the same object, JSON-encoded."""
    arguments = {"action": "go_to_url", "url": "https://www.weather.com"}
    history = [
        user(),
        calls(call("call_browse", "browser_use", dict(arguments))),
        result("call_browse"),
    ]
    sent = governor.govern(history).messages
    assert json.loads(sent[1]["tool_calls"][0]["function"]["arguments"]) == arguments


# -- the two complete rejected histories ---------------------------------------------------


@pytest.mark.parametrize("broken", broken_histories(), ids=lambda broken: broken["id"])
def test_rejected_history_loses_its_in_scope_defects(governor: Any, broken: dict[str, Any]) -> None:
    """A history a provider really rejected keeps none of the defects governance owns."""
    in_scope = [defect for defect in broken["defects"] if defect in FINDERS]
    assert in_scope, "each transcribed history has at least one in-scope defect"
    result = governor.govern(broken["messages"])
    for defect in in_scope:
        assert FINDERS[defect](broken["messages"]), defect
        assert FINDERS[defect](result.messages) == [], defect
    assert check_invariants(result.messages) == []


def test_onyx_history_keeps_its_search_arguments(governor: Any) -> None:
    """The onyx history's object arguments are sent as the same queries, JSON-encoded."""
    onyx = next(b for b in broken_histories() if b["id"].startswith("onyx"))
    sent = governor.govern(onyx["messages"]).messages
    tool_calls = next(m for m in sent if m.get("tool_calls"))["tool_calls"]
    assert json.loads(tool_calls[0]["function"]["arguments"]) == {"queries": ["..."]}


# -- real broken histories elsewhere in the shared data ------------------------------------


def _rows_with(kind: str) -> list[dict[str, Any]]:
    return [
        row
        for row in llamafactory_rows()
        if any(anomaly["kind"] == kind for anomaly in row["anomalies"])
    ]


@pytest.mark.parametrize(
    "row", _rows_with("orphan_tool_result_no_tool_call_id"), ids=lambda row: row["id"]
)
def test_real_orphan_result_is_healed(governor: Any, row: dict[str, Any]) -> None:
    """Glaive's observations that answer no call are not sent as orphan tool messages."""
    assert orphan_results(row["messages"])
    sent = governor.govern(row["messages"], tools=row["tools"]).messages
    assert orphan_results(sent) == []
    assert check_invariants(sent, tools=row["tools"]) == []


@pytest.mark.parametrize("row", _rows_with("tool_call_without_result"), ids=lambda row: row["id"])
def test_real_unanswered_calls_are_answered(governor: Any, row: dict[str, Any]) -> None:
    """The reasoning demo's trailing calls without results each get exactly one result."""
    assert unanswered_calls(row["messages"])
    sent = governor.govern(row["messages"], tools=row["tools"]).messages
    assert unanswered_calls(sent) == []
    assert check_invariants(sent, tools=row["tools"]) == []


# -- the catalog page ----------------------------------------------------------------------


def _documented_scope() -> dict[str, str]:
    """defect class -> "in" or "out", read from the table in docs/error-catalog.md."""
    page = (REPO_ROOT / "docs" / "error-catalog.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\|\s*`([a-z_]+)`\s*\|[^|]*\|\s*\**(in|out)\**\s*\|", page, re.MULTILINE)
    return dict(rows)


def test_catalog_page_classifies_every_defect_class() -> None:
    """docs/error-catalog.md gives every catalogued defect class a scope, matching the tests."""
    classes = {entry["defect_class"] for entry in catalog_entries()}
    classes |= {defect for broken in broken_histories() for defect in broken["defects"]}
    scope = _documented_scope()
    assert set(scope) == classes
    assert {name for name, where in scope.items() if where == "in"} == set(FINDERS)


def test_every_in_scope_entry_has_a_history() -> None:
    """Each in-scope catalog entry is reproduced by a history in this module."""
    assert {entry["id"] for entry in _in_scope_entries()} == set(HISTORIES)


def test_catalog_page_counts_the_entries_of_each_class() -> None:
    """The "entries" column of docs/error-catalog.md is the catalog's count of each class."""
    page = (REPO_ROOT / "docs" / "error-catalog.md").read_text(encoding="utf-8")
    documented = {
        name: int(count)
        for name, count in re.findall(r"^\|\s*`([a-z_]+)`\s*\|\s*(\d+)\s*\|", page, re.MULTILINE)
    }
    counted = Counter(entry["defect_class"] for entry in catalog_entries())
    assert documented == dict(counted)
    assert f"catalog of {sum(counted.values())} such errors" in page


def test_catalog_page_counts_the_real_broken_rows() -> None:
    """The page counts Glaive's orphan rows and the reasoning demo's open calls as the data does."""
    page = (REPO_ROOT / "docs" / "error-catalog.md").read_text(encoding="utf-8")
    orphans = [
        row["id"].removeprefix("zh_") for row in _rows_with("orphan_tool_result_no_tool_call_id")
    ]
    assert f"Glaive zh rows {' and '.join(orphans)}:" in page
    rows = _rows_with("tool_call_without_result")
    calls = sum(len(unanswered_calls(row["messages"])) for row in rows)
    assert f"{calls} calls without results at the end of {len(rows)} rows" in page
