"""Checks for the guarantees of a governed request (DESIGN, "Governance invariants" 2 to 5).

Each check is a pure function over a message list that never mutates it and never
raises on garbage: it returns human-readable violations that name the message
index (and the tool-call id where there is one), so a failing test says exactly
what a provider would have rejected. The governor's own tests, the property tests
and the public pytest plugin (`nanobot_core.testing`) share these checks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from nanobot_core._clip import quoted
from nanobot_core._json_boundary import JSONLimitError
from nanobot_core.governance.checks import decode_arguments, is_empty_result
from nanobot_core.governance.messages import KNOWN_ROLES, SYSTEM_ROLES
from nanobot_core.governance.tokens import TokenCounter, count_request

__all__ = [
    "assert_invariants",
    "check_alternation",
    "check_budget",
    "check_history_start",
    "check_invariants",
    "check_message_shapes",
    "check_text",
    "check_tool_pairing",
]


def check_invariants(
    messages: Sequence[Any],
    *,
    system: str | None = None,
    tools: Sequence[Any] = (),
    budget: int | None = None,
    counter: TokenCounter | None = None,
    budget_unreachable: bool = False,
) -> list[str]:
    """Return every violation of invariants 2, 3 and 5, and of 4 when a budget is given.

    The request is counted as the governor counts it (`tokens.count_request`), with
    `counter` or the default estimate. `budget_unreachable` says the governor
    reported that nothing could make the request fit; the budget check then only
    demands that the history was cut down to the newest user message.
    An empty list means the request is legal.
    """
    violations = check_message_shapes(messages)
    violations += check_tool_pairing(messages)
    violations += check_history_start(messages)
    violations += check_alternation(messages)
    violations += check_text(messages, system=system, tools=tools)
    if budget is not None:
        violations += check_budget(
            messages,
            system=system,
            tools=tools,
            budget=budget,
            counter=counter,
            budget_unreachable=budget_unreachable,
        )
    return violations


def assert_invariants(
    messages: Sequence[Any],
    *,
    system: str | None = None,
    tools: Sequence[Any] = (),
    budget: int | None = None,
    counter: TokenCounter | None = None,
    budget_unreachable: bool = False,
) -> None:
    """Raise `AssertionError` listing every violation found by `check_invariants`."""
    violations = check_invariants(
        messages,
        system=system,
        tools=tools,
        budget=budget,
        counter=counter,
        budget_unreachable=budget_unreachable,
    )
    if violations:
        listing = "\n".join(f"  - {violation}" for violation in violations)
        raise AssertionError(f"{len(violations)} governance invariant violation(s):\n{listing}")


# -- shapes ------------------------------------------------------------------------------


def check_message_shapes(messages: Sequence[Any]) -> list[str]:
    """Every entry is a dict with a known role and content of a type a provider accepts."""
    violations: list[str] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            violations.append(
                f"messages[{index}] is a {type(message).__name__}, not a message dict"
            )
            continue
        role = message.get("role")
        if not _known_role(role):
            violations.append(f"messages[{index}] has unknown role {role!r}")
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            violations.append(
                f"messages[{index}] ({role}): content is a {type(content).__name__}; "
                "expected a string, a list of parts or null"
            )
        elif isinstance(content, list):
            for part_index, part in enumerate(content):
                if not isinstance(part, dict):
                    violations.append(
                        f"messages[{index}].content[{part_index}] ({role}) is a "
                        f"{type(part).__name__}, not a content part dict"
                    )
    return violations


# -- invariant 2: tool calls and their results -------------------------------------------


def _known_role(role: Any) -> bool:
    # A role can be any value in a broken history, including an unhashable one.
    return isinstance(role, str) and role in KNOWN_ROLES


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def _is_system(message: Any) -> bool:
    role = _role(message)
    return isinstance(role, str) and role in SYSTEM_ROLES


def _calls_of(message: Any) -> Any:
    """The raw `tool_calls` value of an assistant message, or None."""
    if _role(message) != "assistant":
        return None
    return message.get("tool_calls")


def _call_id(call: Any) -> Any:
    return call.get("id") if isinstance(call, dict) else None


def _describe_call(index: int, position: int, call: Any) -> str:
    call_id = _call_id(call)
    label = f"messages[{index}].tool_calls[{position}]"
    return f"{label} (id {quoted(call_id)})" if isinstance(call_id, str) and call_id else label


def _arguments_problem(arguments: Any) -> str | None:
    if not isinstance(arguments, str):
        return f"arguments is a {type(arguments).__name__}, not a JSON string"

    try:
        parsed = decode_arguments(arguments)
    except JSONLimitError as exc:
        return f"arguments cannot be used (they hold {exc}): {_preview(arguments)}"
    except ValueError as exc:
        return f"arguments is not valid JSON ({exc}): {_preview(arguments)}"
    if not isinstance(parsed, dict):
        return f"arguments is JSON {type(parsed).__name__}, not an object: {_preview(arguments)}"
    return None


def _preview(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _check_call(index: int, position: int, call: Any, seen_ids: dict[str, int]) -> list[str]:
    label = _describe_call(index, position, call)
    if not isinstance(call, dict):
        return [f"{label} is a {type(call).__name__}, not a tool call dict"]
    problems: list[str] = []
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        problems.append(f"{label}: id is {quoted(call_id)}; expected a non-empty string")
    elif call_id in seen_ids:
        problems.append(f"{label}: id repeats tool_calls[{seen_ids[call_id]}] of the same message")
    else:
        seen_ids[call_id] = position
    if call.get("type") != "function":
        problems.append(f"{label}: type is {quoted(call.get('type'))}; expected 'function'")
    function = call.get("function")
    if not isinstance(function, dict):
        problems.append(f"{label}: function is a {type(function).__name__}, not a dict")
        return problems
    name = function.get("name")
    if not isinstance(name, str) or not name.strip():
        problems.append(f"{label}: name is {quoted(name)}; expected a non-blank string")
    arguments_problem = _arguments_problem(function.get("arguments"))
    if arguments_problem:
        problems.append(f"{label}: {arguments_problem}")
    return problems


def _check_run(index: int, calls: list[Any], run: range, messages: Sequence[Any]) -> list[str]:
    """Pair the calls of messages[index] with the tool messages at the indices in `run`."""
    problems: list[str] = []
    call_ids = {call_id for call in calls if isinstance(call_id := _call_id(call), str) and call_id}
    results: dict[str, list[int]] = {}
    for tool_index in run:
        result_id = messages[tool_index].get("tool_call_id")
        if not isinstance(result_id, str) or not result_id:
            problems.append(
                f"messages[{tool_index}] (tool): tool_call_id is {quoted(result_id)}; "
                "expected a non-empty string"
            )
        elif result_id not in call_ids:
            problems.append(
                f"messages[{tool_index}] (tool, tool_call_id {quoted(result_id)}): answers no call "
                f"of the assistant message messages[{index}]"
            )
        else:
            results.setdefault(result_id, []).append(tool_index)
    where = f"messages[{run.start}..{run.stop - 1}]" if run else "none follow"
    for position, call in enumerate(calls):
        call_id = _call_id(call)
        if (
            not isinstance(call_id, str)
            or not call_id
            or position != _first_position(calls, call_id)
        ):
            continue
        answered = results.get(call_id, [])
        if not answered:
            problems.append(
                f"{_describe_call(index, position, call)}: no result among the tool messages "
                f"directly after it ({where})"
            )
        elif len(answered) > 1:
            at = ", ".join(f"messages[{i}]" for i in answered)
            problems.append(
                f"{_describe_call(index, position, call)}: {len(answered)} results ({at}); "
                "expected exactly one"
            )
    return problems


def _first_position(calls: list[Any], call_id: str) -> int:
    return next(position for position, call in enumerate(calls) if _call_id(call) == call_id)


def check_tool_pairing(messages: Sequence[Any]) -> list[str]:
    """Invariant 2: well-formed calls, each answered exactly once by the tool run right after it.

    An assistant's legacy ``function_call`` is a violation too: nothing can answer it by id.
    """
    violations: list[str] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        if _role(message) == "tool":
            before = f"messages[{index - 1}] ({_role(messages[index - 1])})" if index else "nothing"
            result_id = quoted(message.get("tool_call_id"))
            violations.append(
                f"messages[{index}] (tool, tool_call_id {result_id}): not in the run of tool "
                f"messages right after an assistant tool call (it follows {before})"
            )
            index += 1
            continue
        calls = _calls_of(message)
        index += 1
        if _role(message) == "assistant" and "function_call" in message:
            violations.append(
                f"messages[{index - 1}] (assistant): holds a legacy function_call, "
                "a call no tool result can answer"
            )
        if calls is None:
            continue
        if not isinstance(calls, list):
            violations.append(
                f"messages[{index - 1}] (assistant): tool_calls is a {type(calls).__name__}, "
                "not a list"
            )
            continue
        if not calls:
            violations.append(f"messages[{index - 1}] (assistant): tool_calls is an empty list")
            continue
        seen_ids: dict[str, int] = {}
        for position, call in enumerate(calls):
            violations += _check_call(index - 1, position, call, seen_ids)
        run_start = index
        while index < len(messages) and _role(messages[index]) == "tool":
            index += 1
        violations += _check_run(run_start - 1, calls, range(run_start, index), messages)
    return violations


# -- invariant 3: where the history starts -----------------------------------------------


def check_history_start(messages: Sequence[Any]) -> list[str]:
    """Invariant 3: after the leading system messages, the history starts at a user message."""
    for index, message in enumerate(messages):
        if _is_system(message):
            continue
        role = _role(message)
        if role == "user":
            return []
        return [
            f"messages[{index}] ({role}): the history after the system messages must start "
            "at a user message"
        ]
    return []


def check_alternation(messages: Sequence[Any]) -> list[str]:
    """Invariant 3: never two user messages in a row (strict chat templates refuse them)."""
    return [
        f"messages[{index}] (user) follows messages[{index - 1}] (user): two user messages in a row"
        for index in range(1, len(messages))
        if _role(messages[index]) == "user" and _role(messages[index - 1]) == "user"
    ]


# -- invariant 5: text -------------------------------------------------------------------


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every string inside `value` (keys included), with the path that reaches it."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str):
                yield f"{path} key", key
            yield from _strings(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for position, item in enumerate(value):
            yield from _strings(item, f"{path}[{position}]")


def _unencodable(value: Any, path: str) -> list[str]:
    problems = []
    for where, text in _strings(value, path):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            problems.append(
                f"{where}: not encodable as UTF-8 ({exc.reason} at character {exc.start})"
            )
    return problems


def check_text(
    messages: Sequence[Any], *, system: str | None = None, tools: Sequence[Any] = ()
) -> list[str]:
    """Invariant 5: every string is encodable as UTF-8 and no tool result is empty."""
    violations = _unencodable(system, "system") if system is not None else []
    violations += _unencodable(list(tools), "tools")
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        violations += _unencodable(message, f"messages[{index}]")
        if message.get("role") == "tool" and is_empty_result(message):
            violations.append(
                f"messages[{index}] (tool, tool_call_id {quoted(message.get('tool_call_id'))}): "
                f"empty result (content {quoted(message.get('content'))})"
            )
    return violations


# -- invariant 4: the budget -------------------------------------------------------------


def check_budget(
    messages: Sequence[Any],
    *,
    system: str | None,
    tools: Sequence[Any],
    budget: int,
    counter: TokenCounter | None = None,
    budget_unreachable: bool = False,
) -> list[str]:
    """Invariant 4: the request fits the budget, or at most the newest user message is left."""
    tokens = count_request(system, messages, tools, counter)
    if tokens <= budget:
        return []
    if not budget_unreachable:
        return [f"the request counts {tokens} tokens, over the budget of {budget}"]
    history = [m for m in messages if not _is_system(m)]
    if not history or (len(history) == 1 and _role(history[0]) == "user"):
        return []
    return [
        f"the request counts {tokens} tokens, over the budget of {budget}, and keeps "
        f"{len(history)} non-system messages; when the budget cannot be met only the newest "
        "user message may remain"
    ]
