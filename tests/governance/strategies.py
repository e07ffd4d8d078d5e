"""Hypothesis strategies that dirty REAL tool-calling conversations the ways real histories break.

The clean material is the shared data: 200 τ-bench airline conversations (GPT-4o) and the
650 LLaMA-Factory demo conversations (Glaive en/zh and the reasoning tool-use sample), both
in OpenAI message format. A dirty history is a cut of one conversation (a prefix, a suffix
or a window) with a few dirt operations applied: the defects that compaction bugs, buggy
stages, proxies and models really produce (see docs/error-catalog.md).
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
from hypothesis import strategies as st

from nanobot_core.builtins.governance import nanobot_governance_stages
from nanobot_core.config import Config, GovernanceConfig
from nanobot_core.governance import GovernanceReport, Governor, Stage
from nanobot_core.kernel.context import PluginContext
from tests.helpers import data_dir

Draw = Callable[[st.SearchStrategy[Any]], Any]
Messages = list[Any]


@attrs.frozen
class Conversation:
    """One clean conversation of the shared data, never mutated."""

    source: str
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...]


@attrs.frozen
class DirtyRequest:
    """A generated request: a dirty history plus the tools and system prompt sent with it."""

    source: str
    messages: Messages
    tools: tuple[dict[str, Any], ...] = attrs.field(repr=False)
    system: str | None
    dirt: tuple[str, ...]


# -- the real data, loaded once per session ----------------------------------------------


@functools.cache
def tau_bench_tools() -> tuple[dict[str, Any], ...]:
    """The 14 τ-bench airline tool definitions in OpenAI format."""
    path = data_dir() / "tau-bench-airline" / "airline_tools.json"
    return tuple(json.loads(path.read_text(encoding="utf-8")))


@functools.cache
def tau_bench_runs() -> tuple[dict[str, Any], ...]:
    """The 200 τ-bench airline runs as stored (`traj` is the message list)."""
    path = data_dir() / "tau-bench-airline" / "gpt-4o-airline.json"
    return tuple(json.loads(path.read_text(encoding="utf-8")))


@functools.cache
def llamafactory_rows() -> tuple[dict[str, Any], ...]:
    """Every converted LLaMA-Factory conversation (`messages`, `tools`, `anomalies`)."""
    folder = data_dir() / "llamafactory-toolcall-demos" / "openai_format"
    rows: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.openai.jsonl")):
        with path.open(encoding="utf-8") as lines:
            rows.extend(json.loads(line) for line in lines if line.strip())
    return tuple(rows)


@functools.cache
def tau_bench_conversations() -> tuple[Conversation, ...]:
    """The 200 τ-bench conversations, with the airline tools."""
    tools = tau_bench_tools()
    return tuple(
        Conversation(f"tau-bench[{index}]", tuple(run["traj"]), tools)
        for index, run in enumerate(tau_bench_runs())
    )


@functools.cache
def llamafactory_conversations() -> tuple[Conversation, ...]:
    """The 650 LLaMA-Factory conversations, each with its own tools."""
    return tuple(
        Conversation(f"llamafactory[{row['id']}]", tuple(row["messages"]), tuple(row["tools"]))
        for row in llamafactory_rows()
    )


# -- picking places ----------------------------------------------------------------------


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def _has_calls(message: Any) -> bool:
    return _role(message) == "assistant" and isinstance(message.get("tool_calls"), list)


def _calls(message: Any) -> list[Any]:
    return message["tool_calls"] if _has_calls(message) and message["tool_calls"] else []


def _pick(draw: Draw, messages: Messages, wanted: Callable[[Any], bool]) -> int | None:
    """The index of a message that satisfies `wanted`, or None when there is none."""
    candidates = [index for index, message in enumerate(messages) if wanted(message)]
    return draw(st.sampled_from(candidates)) if candidates else None


def _pick_call(draw: Draw, messages: Messages) -> dict[str, Any] | None:
    """A tool call dict of some assistant message, or None."""
    index = _pick(draw, messages, lambda m: any(isinstance(c, dict) for c in _calls(m)))
    if index is None:
        return None
    call: dict[str, Any] = draw(
        st.sampled_from([c for c in _calls(messages[index]) if isinstance(c, dict)])
    )
    return call


def _function(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function")
    if not isinstance(function, dict):
        function = call["function"] = {}
    return function


def _all_ids(messages: Messages) -> list[str]:
    ids = (c.get("id") for m in messages for c in _calls(m) if isinstance(c, dict))
    return [i for i in ids if isinstance(i, str) and i]


# -- dirt: dropping, duplicating, reordering ---------------------------------------------


def drop_message(draw: Draw, messages: Messages) -> None:
    """Lose any message (a compaction that cuts in the wrong place)."""
    if messages:
        del messages[draw(st.integers(0, len(messages) - 1))]


def drop_tool_result(draw: Draw, messages: Messages) -> None:
    """Lose a tool result; its call stays unanswered."""
    index = _pick(draw, messages, lambda m: _role(m) == "tool")
    if index is not None:
        del messages[index]


def drop_call_message(draw: Draw, messages: Messages) -> None:
    """Lose an assistant tool-call message; its results become orphans."""
    index = _pick(draw, messages, _has_calls)
    if index is not None:
        del messages[index]


def drop_call(draw: Draw, messages: Messages) -> None:
    """Lose one call out of an assistant message (possibly leaving an empty list)."""
    index = _pick(draw, messages, lambda m: bool(_calls(m)))
    if index is not None:
        calls = messages[index]["tool_calls"]
        del calls[draw(st.integers(0, len(calls) - 1))]


def duplicate_message(draw: Draw, messages: Messages) -> None:
    """Repeat a message somewhere (a retry that appended twice)."""
    if messages:
        source = draw(st.integers(0, len(messages) - 1))
        target = draw(st.integers(0, len(messages)))
        messages.insert(target, copy.deepcopy(messages[source]))


def duplicate_tool_result(draw: Draw, messages: Messages) -> None:
    """Answer the same call twice, right after the first answer."""
    index = _pick(draw, messages, lambda m: _role(m) == "tool")
    if index is not None:
        messages.insert(index + 1, copy.deepcopy(messages[index]))


def duplicate_call(draw: Draw, messages: Messages) -> None:
    """Repeat a call inside its own message, id and all."""
    index = _pick(draw, messages, lambda m: bool(_calls(m)))
    if index is not None:
        calls = messages[index]["tool_calls"]
        calls.append(copy.deepcopy(draw(st.sampled_from(calls))))


def move_message(draw: Draw, messages: Messages) -> None:
    """Move a message to another place (a merge of two histories gone wrong)."""
    if len(messages) > 1:
        message = messages.pop(draw(st.integers(0, len(messages) - 1)))
        messages.insert(draw(st.integers(0, len(messages))), message)


def swap_adjacent(draw: Draw, messages: Messages) -> None:
    """Swap two neighbours (a result landing before its call, a user message inside a run)."""
    if len(messages) > 1:
        index = draw(st.integers(0, len(messages) - 2))
        messages[index], messages[index + 1] = messages[index + 1], messages[index]


def reverse_calls(draw: Draw, messages: Messages) -> None:
    """Reverse the order of the calls of one message (results keep theirs)."""
    index = _pick(draw, messages, lambda m: len(_calls(m)) > 1)
    if index is not None:
        messages[index]["tool_calls"].reverse()


def merge_call_turns(draw: Draw, messages: Messages) -> None:
    """Fuse two consecutive call turns into one with parallel calls, results in either order."""
    starts = []
    for index, message in enumerate(messages):
        if not _calls(message):
            continue
        end = index + 1
        while end < len(messages) and _role(messages[end]) == "tool":
            end += 1
        if end < len(messages) and _calls(messages[end]):
            starts.append((index, end))
    if not starts:
        return
    first, second = draw(st.sampled_from(starts))
    second_end = second + 1
    while second_end < len(messages) and _role(messages[second_end]) == "tool":
        second_end += 1
    first_results = messages[first + 1 : second]
    second_results = messages[second + 1 : second_end]
    merged = dict(messages[first])
    merged["tool_calls"] = _calls(messages[first]) + _calls(messages[second])
    results = first_results + second_results
    if draw(st.booleans()):
        results.reverse()
    messages[first:second_end] = [merged, *results]


# -- dirt: corrupting calls and results --------------------------------------------------


def null_name(draw: Draw, messages: Messages) -> None:
    """Give a call a name no provider accepts."""
    call = _pick_call(draw, messages)
    if call is not None:
        function = _function(call)
        name = draw(st.sampled_from([None, "", 123, "<missing>"]))
        if name == "<missing>":
            function.pop("name", None)
        else:
            function["name"] = name


#: What the runner answers a call without a name (its tools listed), error hint included.
NAMELESS_ERROR = (
    "Error: the tool call has no tool name: call a tool by its name, one of the available "
    "tools. Available tools: "
    "get_user_details, cancel_reservation.\n\n[Analyze the error above and try a different "
    "approach.]"
)


def answered_nameless_call(draw: Draw, messages: Messages) -> None:
    """Add a call without a name to a reply, and the error the runner answered it with to
    the results after it (a model that called nothing by name, as a session stores it)."""
    index = _pick(draw, messages, _has_calls)
    if index is None:
        return
    calls = messages[index]["tool_calls"]
    call_id = f"nameless_{index}_{len(calls)}"
    name = draw(st.sampled_from(["", None, "  "]))
    function = {"name": name, "arguments": "{}"}
    calls.insert(
        draw(st.integers(0, len(calls))), {"id": call_id, "type": "function", "function": function}
    )
    end = index + 1
    while end < len(messages) and _role(messages[end]) == "tool":
        end += 1
    result = {"role": "tool", "tool_call_id": call_id, "content": NAMELESS_ERROR}
    messages.insert(draw(st.integers(index + 1, end)), result)


_GARBAGE_ARGUMENTS = ["", "{", "not json", "[1, 2]", "null", "42", '"text"', "{'a': 1}", "NaN"]


def corrupt_arguments(draw: Draw, messages: Messages) -> None:
    """Break a call's arguments: truncated, an object, garbage, a non-string or missing."""
    call = _pick_call(draw, messages)
    if call is None:
        return
    function = _function(call)
    arguments = function.get("arguments")
    kind = draw(st.sampled_from(["truncate", "object", "garbage", "non-string", "missing"]))
    if kind == "truncate" and isinstance(arguments, str) and arguments:
        function["arguments"] = arguments[: draw(st.integers(0, len(arguments) - 1))]
    elif kind == "object":
        try:
            decoded = json.loads(arguments) if isinstance(arguments, str) else None
        except ValueError:
            decoded = None
        function["arguments"] = decoded if isinstance(decoded, dict) else {"value": arguments}
    elif kind == "non-string":
        function["arguments"] = draw(st.sampled_from([None, 42, ["a", 1], True]))
    elif kind == "missing":
        function.pop("arguments", None)
    else:
        function["arguments"] = draw(st.sampled_from(_GARBAGE_ARGUMENTS))


def corrupt_call_shape(draw: Draw, messages: Messages) -> None:
    """Replace a call or its `function` by something that is not one, or drop its `type`."""
    index = _pick(draw, messages, lambda m: bool(_calls(m)))
    if index is None:
        return
    calls = messages[index]["tool_calls"]
    position = draw(st.integers(0, len(calls) - 1))
    kind = draw(st.sampled_from(["not-a-dict", "no-function", "no-type", "tool_calls"]))
    if kind == "not-a-dict":
        calls[position] = draw(st.sampled_from([None, "call", 42, []]))
    elif kind == "tool_calls":
        messages[index]["tool_calls"] = draw(st.sampled_from([None, [], {}, "calls"]))
    elif isinstance(calls[position], dict) and kind == "no-function":
        calls[position]["function"] = draw(st.sampled_from([None, "f", []]))
    elif isinstance(calls[position], dict):
        calls[position].pop("type", None)


def empty_id(draw: Draw, messages: Messages) -> None:
    """Empty a call's id (Gemini's OpenAI endpoint really sends `"id": ""`)."""
    call = _pick_call(draw, messages)
    if call is not None:
        value = draw(st.sampled_from(["", None, "<missing>"]))
        if value == "<missing>":
            call.pop("id", None)
        else:
            call["id"] = value


def duplicate_id(draw: Draw, messages: Messages) -> None:
    """Give a call the id of another call, in the same message or elsewhere."""
    ids = _all_ids(messages)
    call = _pick_call(draw, messages)
    if call is not None and ids:
        call["id"] = draw(st.sampled_from(ids))


def corrupt_result_id(draw: Draw, messages: Messages) -> None:
    """Point a tool result at nothing, at another call, or at no id at all."""
    index = _pick(draw, messages, lambda m: _role(m) == "tool")
    if index is None:
        return
    choices: list[Any] = ["", None, "<missing>", "call_that_never_was", *_all_ids(messages)[:8]]
    value = draw(st.sampled_from(choices))
    if value == "<missing>":
        messages[index].pop("tool_call_id", None)
    else:
        messages[index]["tool_call_id"] = value


def legacy_function_call(draw: Draw, messages: Messages) -> None:
    """Turn a call message into the legacy shape: its first call as `function_call`, or junk.

    Its results stay or go: a legacy call was answered by a `function` message, if at all.
    """
    index = _pick(draw, messages, lambda m: bool(_calls(m)))
    if index is None:
        return
    message = messages[index]
    first = message["tool_calls"][0]
    function = first.get("function") if isinstance(first, dict) else None
    value = draw(st.sampled_from(["call", "call", None, {"name": ""}, "junk", "both"]))
    if value == "call":
        message["function_call"] = function
    elif value == "both":
        message["function_call"] = function
        return
    else:
        message["function_call"] = value
    del message["tool_calls"]
    if draw(st.booleans()):
        while index + 1 < len(messages) and _role(messages[index + 1]) == "tool":
            del messages[index + 1]


def empty_tool_result(draw: Draw, messages: Messages) -> None:
    """Make a tool result empty: null, "", no parts, or no content key."""
    index = _pick(draw, messages, lambda m: _role(m) == "tool")
    if index is None:
        return
    value = draw(st.sampled_from([None, "", [], "<missing>"]))
    if value == "<missing>":
        messages[index].pop("content", None)
    else:
        messages[index]["content"] = value


# Big enough to be offloaded or compacted, small enough to keep 10,000 examples fast.
_HUGE_UNITS = ["x", "lorem ipsum dolor sit amet ", '{"row": 1, "ok": true}, ', "数据"]


def huge_tool_result(draw: Draw, messages: Messages) -> None:
    """Make a tool result huge (a file dump or a long log)."""
    index = _pick(draw, messages, lambda m: _role(m) == "tool")
    if index is not None:
        unit = draw(st.sampled_from(_HUGE_UNITS))
        size = draw(st.integers(20_000, 60_000))
        messages[index]["content"] = unit * (size // len(unit))


def content_to_parts(draw: Draw, messages: Messages) -> None:
    """Turn a string content into a list of text parts (the multimodal shape)."""
    index = _pick(
        draw, messages, lambda m: isinstance(m, dict) and isinstance(m.get("content"), str)
    )
    if index is not None:
        text = messages[index]["content"]
        cut = draw(st.integers(0, len(text)))
        parts = [{"type": "text", "text": text[:cut]}, {"type": "text", "text": text[cut:]}]
        messages[index]["content"] = [part for part in parts if part["text"]]


# -- dirt: things that are not messages, and broken text ---------------------------------

_NOT_MESSAGES: list[Any] = [
    None,
    "hello",
    42,
    [],
    {"content": "no role"},
    {"role": None},
    {"role": ["user"], "content": "a role that is a list"},
]
_UNKNOWN_ROLES = [
    {"role": "function", "name": "get_user_details", "content": "{}"},
    {"role": "critic", "content": "looks fine"},
    {"role": "", "content": "?"},
]


def insert_non_message(draw: Draw, messages: Messages) -> None:
    """Insert an entry that is not a chat message (a stray value or an unknown role)."""
    entry = draw(st.sampled_from([*_NOT_MESSAGES, *_UNKNOWN_ROLES]))
    messages.insert(draw(st.integers(0, len(messages))), copy.deepcopy(entry))


def _string_slots(value: Any) -> list[tuple[Any, Any]]:
    """(container, key) of every string value inside `value`, nested parts included."""
    slots: list[tuple[Any, Any]] = []
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if isinstance(item, str):
            slots.append((value, key))
        elif isinstance(item, dict | list):
            slots.extend(_string_slots(item))
    return slots


def lone_surrogate(draw: Draw, messages: Messages) -> None:
    """Put a lone surrogate into some string of a message (a split emoji, a bad decoder)."""
    index = _pick(draw, messages, lambda m: isinstance(m, dict) and bool(_string_slots(m)))
    if index is None:
        return
    container, key = draw(st.sampled_from(_string_slots(messages[index])))
    text = container[key]
    cut = draw(st.integers(0, len(text)))
    container[key] = (
        text[:cut] + draw(st.sampled_from(["\ud83d", "\udfff", "\ud800x"])) + text[cut:]
    )


# What compacting agents leave behind (nanobot writes the first one).
_PLACEHOLDERS = [
    "[Previous assistant message omitted.]",
    "[message omitted]",
    "[Earlier response removed for brevity]",
]


def insert_placeholder(draw: Draw, messages: Messages) -> None:
    """Insert an assistant message that only stands in for an elided one."""
    text = draw(st.sampled_from(_PLACEHOLDERS))
    messages.insert(draw(st.integers(0, len(messages))), {"role": "assistant", "content": text})


Operation = Callable[[Draw, Messages], None]

OPERATIONS: tuple[Operation, ...] = (
    drop_message,
    drop_tool_result,
    drop_call_message,
    drop_call,
    duplicate_message,
    duplicate_tool_result,
    duplicate_call,
    move_message,
    swap_adjacent,
    reverse_calls,
    merge_call_turns,
    null_name,
    answered_nameless_call,
    corrupt_arguments,
    corrupt_call_shape,
    empty_id,
    duplicate_id,
    corrupt_result_id,
    legacy_function_call,
    empty_tool_result,
    huge_tool_result,
    content_to_parts,
    insert_non_message,
    insert_placeholder,
    lone_surrogate,
)


# -- pure garbage -------------------------------------------------------------------------

_KEYS = ["role", "content", "tool_calls", "tool_call_id", "name", "id", "type", "function"]
_WORDS = ["user", "assistant", "tool", "system", "call_1", "", "{}", "\ud800", "[message omitted]"]


def _json_like() -> st.SearchStrategy[Any]:
    """Any JSON-like value (plus NaN, lone surrogates and non-string keys)."""
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=12),
        st.sampled_from(_WORDS),
    )
    keys = st.one_of(st.sampled_from([*_KEYS, "arguments", "text"]), st.integers(0, 3))
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5),
        max_leaves=8,
    )


def _message_like() -> st.SearchStrategy[dict[str, Any]]:
    """A dict shaped roughly like a message, every field possibly garbage."""
    junk = _json_like()
    call = st.fixed_dictionaries(
        {},
        optional={
            "id": st.one_of(st.sampled_from(["call_1", "call_2", ""]), junk),
            "type": st.one_of(st.just("function"), junk),
            "function": st.one_of(
                st.fixed_dictionaries({}, optional={"name": junk, "arguments": junk}), junk
            ),
        },
    )
    return st.fixed_dictionaries(
        {"role": st.one_of(st.sampled_from(["user", "assistant", "tool", "system"]), junk)},
        optional={
            "content": junk,
            "tool_calls": st.one_of(st.lists(call, max_size=3), junk),
            "tool_call_id": st.one_of(st.sampled_from(["call_1", "call_2"]), junk),
            "function_call": st.one_of(
                st.fixed_dictionaries({}, optional={"name": junk, "arguments": junk}), junk
            ),
        },
    )


def garbage_histories() -> st.SearchStrategy[list[Any]]:
    """Lists of message-like dicts and arbitrary JSON-like values: no real data at all."""
    return st.lists(st.one_of(_message_like(), _json_like()), max_size=6)


# -- cuts and whole requests -------------------------------------------------------------


def _cut(draw: Draw, messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A prefix, a suffix, a window, or the whole conversation (system message kept or not)."""
    size = len(messages)
    kind = draw(
        st.sampled_from(["whole", "whole", "prefix", "suffix", "window", "window-after-system"])
    )
    if kind == "whole":
        return list(messages)
    # Hypothesis favours small integers: measuring cuts from the far end keeps them long.
    start = 0 if kind == "prefix" else draw(st.integers(0, size))
    stop = size if kind == "suffix" else size - draw(st.integers(0, size - start))
    if kind == "window-after-system" and messages and _role(messages[0]) == "system":
        return [messages[0], *messages[max(start, 1) : stop]]
    return list(messages[start:stop])


@st.composite
def dirty_requests(draw: Draw, max_operations: int = 5) -> DirtyRequest:
    """A cut of a real conversation with up to `max_operations` dirt operations applied."""
    # Half τ-bench: its long conversations and big policy are what budgets bite on.
    pool = draw(st.sampled_from([tau_bench_conversations(), llamafactory_conversations()]))
    conversation: Conversation = draw(st.sampled_from(pool))
    messages: Messages = copy.deepcopy(_cut(draw, conversation.messages))
    applied = []
    for _ in range(draw(st.sampled_from(range(max_operations + 1)))):
        operation: Operation = draw(st.sampled_from(OPERATIONS))
        operation(draw, messages)
        applied.append(operation.__name__)
    system = draw(st.sampled_from([None, None, "You are a careful assistant."]))
    return DirtyRequest(conversation.source, messages, conversation.tools, system, tuple(applied))


# Budgets from roomy to impossible: the small ones drive offloading, compaction and
# snipping, the last cannot hold τ-bench's tools and policy at all.
GOVERNANCE_CONFIGS: tuple[GovernanceConfig, ...] = (
    GovernanceConfig(),
    GovernanceConfig(max_tool_result_chars=500),
    GovernanceConfig(context_window=16_000, max_output=2_048, safety_margin=512),
    GovernanceConfig(
        context_window=9_000, max_output=1_024, safety_margin=256, max_tool_result_chars=2_000
    ),
    GovernanceConfig(context_window=6_000, max_output=512, safety_margin=256),
    GovernanceConfig(context_window=2_500, max_output=256, safety_margin=128),
)


def config_indices() -> st.SearchStrategy[int]:
    """An index into GOVERNANCE_CONFIGS, biased towards the tight budgets that do the work."""
    return st.sampled_from([0, 1, 2, 3, 3, 4, 4, 5])


# -- the governor under test -------------------------------------------------------------


class GovernorFactory:
    """Built-in governors per budget variant (plus extra stages), offloading into one workspace."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self._governors: dict[tuple[int, tuple[str, ...]], Governor] = {}

    def get(self, config: GovernanceConfig, extra: Sequence[Stage] = ()) -> Governor:
        """The governor with the built-in stages and `extra` for `config` (built once)."""
        key = (id(config), tuple(stage.name for stage in extra))
        if key not in self._governors:
            self._governors[key] = build_builtin_governor(config, self.workspace, extra)
        return self._governors[key]


def build_builtin_governor(
    config: GovernanceConfig, workspace: Path, extra: Sequence[Stage] = ()
) -> Governor:
    """A governor with the built-in stages (and `extra` ones), as the runner would build it."""
    context = PluginContext(workspace=workspace, config=Config(governance=config))
    stages = [*nanobot_governance_stages(context), *extra]
    return Governor(stages, config=config, workspace=workspace)


# -- third-party stages that misbehave ---------------------------------------------------


def _orphan_result(messages: list[Any], ctx: Any) -> Any:
    return [*messages, {"role": "tool", "tool_call_id": "ghost", "content": "boo"}]


def _drop_first_user(messages: list[Any], ctx: Any) -> Any:
    first = next((i for i, m in enumerate(messages) if _role(m) == "user"), None)
    return messages if first is None else messages[:first] + messages[first + 1 :]


def _mutate_in_place(messages: list[Any], ctx: Any) -> Any:
    for message in messages:
        if isinstance(message, dict):
            message["content"] = "mutated \ud800"
            message.pop("tool_call_id", None)
    return messages


def _raise(messages: list[Any], ctx: Any) -> Any:
    raise RuntimeError("this stage is broken")


def _garbage(messages: list[Any], ctx: Any) -> Any:
    return {"messages": "not a list"}


def _duplicate_everything(messages: list[Any], ctx: Any) -> Any:
    return messages + messages


def _reverse(messages: list[Any], ctx: Any) -> Any:
    return list(reversed(messages))


def _non_messages(messages: list[Any], ctx: Any) -> Any:
    return [None, 42, {"role": "critic"}, *messages]


def _empty_results(messages: list[Any], ctx: Any) -> Any:
    return [{**m, "content": ""} if _role(m) == "tool" else m for m in messages]


def _object_arguments(messages: list[Any], ctx: Any) -> Any:
    changed = []
    for message in messages:
        if _calls(message):
            message = {
                **message,
                "tool_calls": [
                    {**c, "function": {"name": None, "arguments": {"x": 1}}}
                    for c in _calls(message)
                ],
            }
        changed.append(message)
    return changed


def _inflate(messages: list[Any], ctx: Any) -> Any:
    # Runs after the built-in budget stages: the governor must enforce the budget again.
    return [{**m, "content": "y" * 40_000} if _role(m) == "tool" else m for m in messages]


def hostile_stages() -> tuple[Stage, ...]:
    """Third-party stages that break the history in every way a buggy plugin could."""
    transforms = {
        "orphan_result": _orphan_result,
        "drop_first_user": _drop_first_user,
        "mutate_in_place": _mutate_in_place,
        "raise": _raise,
        "garbage": _garbage,
        "duplicate_everything": _duplicate_everything,
        "reverse": _reverse,
        "non_messages": _non_messages,
        "empty_results": _empty_results,
        "object_arguments": _object_arguments,
    }
    placed = [Stage(f"hostile_{name}", func) for name, func in transforms.items()]
    placed.append(Stage("hostile_inflate", _inflate, phase="budget", after="snip_history"))
    placed.append(Stage("hostile_first", _reverse, phase="repair", before="strip_placeholders"))
    return tuple(placed)


def report_changed(report: GovernanceReport) -> bool:
    """Whether a governance report says that anything was changed."""
    return bool(report.changed)
