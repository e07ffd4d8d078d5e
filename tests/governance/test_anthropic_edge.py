"""The Messages API request built from a governed history, and the round trip's text safety."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nanobot_core.config import GovernanceConfig
from nanobot_core.governance import Governor, builtin_stages, count_request
from nanobot_core.governance import anthropic as anthropic_module
from nanobot_core.governance.anthropic import (
    CONTINUED,
    from_openai_shape,
    to_messages_api,
    to_openai_shape,
)
from nanobot_core.governance.stages.calls import dropped_calls_notice

THINKING = {"type": "thinking", "thinking": "look it up", "signature": "EqQBCgIYAhIM1gbcDa=="}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}


def _call(call_id: str, arguments: str = '{"order": 7}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "get", "arguments": arguments}}


def test_system_goes_top_level_and_calls_become_tool_blocks() -> None:
    """System text leaves `messages`; calls and results become tool_use / tool_result blocks."""
    history = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "where is 7?"},
        {"role": "assistant", "content": "", "tool_calls": [_call("c1"), _call("c2", "{}")]},
        {"role": "tool", "tool_call_id": "c1", "name": "get", "content": "shipped"},
        {"role": "tool", "tool_call_id": "c2", "name": "get", "content": "  "},
        {"role": "user", "content": "and?"},
    ]
    request = to_messages_api(history)
    assert request.system == [{"type": "text", "text": "be brief"}]
    assert request.messages == [
        {"role": "user", "content": [{"type": "text", "text": "where is 7?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "c1", "name": "get", "input": {"order": 7}},
                {"type": "tool_use", "id": "c2", "name": "get", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "shipped"},
                {"type": "tool_result", "tool_use_id": "c2", "content": "(no output)"},
                {"type": "text", "text": "and?"},
            ],
        },
    ]


def test_thinking_blocks_go_back_first_and_byte_identical() -> None:
    """thinking_blocks are sent as received, before the text and the tool_use blocks."""
    history = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "Checking.",
            "thinking_blocks": [THINKING, REDACTED],
            "tool_calls": [_call("c1")],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    (_, assistant, _) = to_messages_api(history).messages
    assert assistant["content"][0] is THINKING and assistant["content"][1] is REDACTED
    assert [b["type"] for b in assistant["content"]] == [
        "thinking",
        "redacted_thinking",
        "text",
        "tool_use",
    ]
    assert json.dumps(assistant["content"][0]) == json.dumps(THINKING)


def test_same_role_turns_merge_and_blank_text_is_dropped() -> None:
    """Two user messages in a row become one turn; whitespace-only text is left out."""
    history = [
        {"role": "user", "content": "one"},
        {
            "role": "user",
            "content": [{"type": "text", "text": " \n"}, {"type": "text", "text": "two"}],
        },
        {"role": "assistant", "content": "a"},
        {"role": "assistant", "content": "b"},
    ]
    assert to_messages_api(history).messages == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
        },
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        },
    ]


def test_images_and_documents_are_carried() -> None:
    """image_url parts (data and http URLs) and file parts become image and document blocks."""
    history = [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
                {"type": "image_url", "image_url": {"url": "https://example.org/a.jpg"}},
                {
                    "type": "file",
                    "file": {
                        "file_data": "data:application/pdf;base64,JVBERi0x",
                        "filename": "a.pdf",
                    },
                },
                {"type": "file", "file": {"file_id": "file_011"}},
            ],
        }
    ]
    (turn,) = to_messages_api(history).messages
    assert turn["content"] == [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"},
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.org/a.jpg"}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"},
            "title": "a.pdf",
        },
        {"type": "document", "source": {"type": "file", "file_id": "file_011"}},
    ]


def test_a_history_opening_with_the_assistant_gets_a_user_turn_first() -> None:
    """The Messages API wants a user turn first; a short one is put in front."""
    request = to_messages_api([{"role": "assistant", "content": "hello"}])
    assert request.messages[0] == {"role": "user", "content": [{"type": "text", "text": CONTINUED}]}
    assert [m["role"] for m in request.messages] == ["user", "assistant"]


def test_a_history_with_only_blank_user_text_still_sends_a_user_turn() -> None:
    """When every user message is blank (left out), the request still holds one user turn."""
    for history in (
        [{"role": "user", "content": " "}],
        [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text"}]}],
        [{"role": "user", "content": []}, {"role": "user", "content": "\n"}],
    ):
        request = to_messages_api(history)
        assert request.messages == [
            {"role": "user", "content": [{"type": "text", "text": CONTINUED}]}
        ]


def test_blocks_the_api_refuses_in_their_turn_are_left_out() -> None:
    """Untyped and unsigned blocks go; so does what only the other role may send."""
    use = {"type": "tool_use", "id": "t1", "name": "get", "input": {}}
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    history = [
        {
            "role": "user",
            "content": [{"text": "untyped"}, THINKING, use, {"type": "text", "text": "go"}],
        },
        {
            "role": "assistant",
            "content": [image, {"type": "text", "text": "ok"}, {"type": 7}],
            "thinking_blocks": [{"type": "thinking", "thinking": "unsigned"}, use, THINKING],
            "anthropic_blocks": [use, {"type": "tool_result", "tool_use_id": "t1"}, REDACTED],
            "tool_calls": [_call("c1")],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": [THINKING, {"x": 1}]},
                {"type": "web_search_tool_result", "tool_use_id": "s1", "content": []},
            ],
        },
    ]
    messages = to_messages_api(history).messages
    assert messages[0]["content"] == [{"type": "text", "text": "go"}]
    assert messages[1]["content"] == [
        THINKING,
        {"type": "text", "text": "[image left out: the Messages API takes it from the user]"},
        {"type": "text", "text": "ok"},
        REDACTED,
        {"type": "tool_use", "id": "c1", "name": "get", "input": {"order": 7}},
    ]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "(no output)"}
    ]


def test_calls_in_both_forms_in_one_message_are_all_governed() -> None:
    """tool_calls beside tool_use blocks are answered too, so no call goes out without a result."""
    use = {"type": "tool_use", "id": "t1", "name": "get", "input": {}}
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [use], "tool_calls": [_call("c1")]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]},
    ]
    governor = Governor(builtin_stages(), config=GovernanceConfig())
    governed = governor.govern(history).messages
    messages = to_messages_api(governed).messages
    uses = [b["id"] for b in messages[1]["content"] if b["type"] == "tool_use"]
    answered = [b["tool_use_id"] for b in messages[2]["content"] if b["type"] == "tool_result"]
    assert sorted(uses) == sorted(answered) == ["c1", "t1"]
    assert governor.govern(governed).messages == governed


def test_anthropic_blocks_in_the_history_pass_through() -> None:
    """A stored Anthropic-shape history converts with its own blocks untouched."""
    use = {"type": "tool_use", "id": "t1", "name": "get", "input": {"a": 1}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "x"}
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [THINKING, use]},
        {"role": "user", "content": [result]},
    ]
    messages = to_messages_api(history).messages
    assert messages[1]["content"] == [THINKING, use]
    assert messages[2]["content"] == [result]


def test_escaped_surrogate_in_arguments_does_not_become_a_raw_one() -> None:
    """`"\\ud800"` in arguments comes back as U+FFFD, so the blocks encode as UTF-8."""
    history = [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", '{"q": "\\ud800x"}')]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "r"}]},
    ]
    blocks = from_openai_shape(to_openai_shape(history))
    assert blocks[1]["content"][0]["input"] == {"q": "\ufffdx"}
    json.dumps(blocks, ensure_ascii=False).encode("utf-8")  # raises on a raw surrogate


_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["\\ud800", "\\udfff", "\\ud83d\\ude00", "a\\ud83dz"]
)


@st.composite
def _histories(draw: st.DrawFn) -> list[Any]:
    """Mixed histories: Anthropic tool blocks and OpenAI calls whose arguments escape anything."""
    history: list[Any] = [{"role": "user", "content": draw(_TEXT) or "go"}]
    for step in range(draw(st.integers(1, 4))):
        call_id = f"t{step}"
        value = draw(_TEXT)
        arguments = '{"q": "' + value.replace('"', "") + '"}'
        if draw(st.booleans()):
            history.append(
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": call_id, "name": "get", "input": {"q": value}}
                    ],
                }
            )
        else:
            history.append(
                {"role": "assistant", "content": None, "tool_calls": [_call(call_id, arguments)]}
            )
        history.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call_id, "content": draw(_TEXT)}
                ],
            }
        )
    return history


@settings(max_examples=2000, deadline=None)
@given(_histories())
def test_governed_anthropic_histories_are_valid_utf8_and_stable(history: list[Any]) -> None:
    """Governed Anthropic-shape output encodes as UTF-8, and governing it again changes nothing."""
    governor = Governor(builtin_stages(), config=GovernanceConfig())
    first = governor.govern(history).messages
    json.dumps(first, ensure_ascii=False).encode("utf-8")
    json.dumps(to_messages_api(first).messages, ensure_ascii=False).encode("utf-8")
    again = governor.govern(first)
    assert again.messages == first
    assert not again.report.changed


@st.composite
def _block_histories(draw: st.DrawFn) -> list[Any]:
    """Anthropic-shape sessions: text, tool_use with inputs, results followed by user text."""
    history: list[Any] = []
    for turn in range(draw(st.integers(1, 12))):
        history.append({"role": "user", "content": "q" * draw(st.integers(1, 80))})
        use_id = f"toolu_{turn}"
        history.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "a" * draw(st.integers(1, 20))},
                    {"type": "tool_use", "id": use_id, "name": "get", "input": {"n": draw(_TEXT)}},
                ],
            }
        )
        results = [
            {
                "type": "tool_result",
                "tool_use_id": use_id,
                "content": "r" * draw(st.integers(0, 400)),
            }
        ]
        if draw(st.booleans()):
            results.append({"type": "text", "text": draw(_TEXT) or "k"})
        history.append({"role": "user", "content": results})
    return history


@settings(max_examples=2000, deadline=None)
@given(_block_histories(), st.integers(20, 2500))
def test_the_anthropic_shape_returned_is_what_fits_the_budget(
    history: list[Any], limit: int
) -> None:
    """What is said to fit fits in the shape returned, and fits whenever the OpenAI shape does."""
    governor = Governor(builtin_stages(), config=GovernanceConfig(input_limit=limit))
    result = governor.govern(history)
    if result.fits:
        assert count_request(None, result.messages) <= limit
    if governor.govern(to_openai_shape(history)).fits:
        assert result.fits


_NAMELESS_ERROR = "Error: the tool call has no tool name. Available tools: get."


@st.composite
def _histories_with_nameless_uses(draw: st.DrawFn) -> tuple[list[Any], list[str]]:
    """Block sessions in which some replies also call a tool by no name (its result the
    runner's error, or none), and the notice each of those replies is expected to keep."""
    history = draw(_block_histories())
    notices: list[str] = []
    for index in range(1, len(history), 3):
        if not draw(st.booleans()):
            continue
        use: dict[str, Any] = {"type": "tool_use", "id": f"nameless_{index}", "input": {}}
        name = draw(st.sampled_from(["", None, "<missing>"]))
        if name != "<missing>":
            use["name"] = name
        history[index]["content"].insert(draw(st.integers(1, 2)), use)
        answered = draw(st.booleans())
        if answered:
            result = {"type": "tool_result", "tool_use_id": use["id"], "content": _NAMELESS_ERROR}
            history[index + 1]["content"].append(result)
        notices.append(dropped_calls_notice(1, 2, _NAMELESS_ERROR if answered else None))
    return history, notices


@settings(max_examples=500, deadline=None)
@given(_histories_with_nameless_uses())
def test_a_reply_that_lost_a_nameless_tool_use_keeps_the_openai_shapes_notice(
    case: tuple[list[Any], list[str]],
) -> None:
    """Each reply that lost a tool_use without a name keeps one text block with the notice the
    OpenAI shape gives, before its tool_use blocks; the request is one the Messages API takes,
    and governing it again changes nothing."""
    history, notices = case
    governor = Governor(builtin_stages(), config=GovernanceConfig())
    first = governor.govern(history)
    told = [
        block["text"]
        for message in first.messages
        if message["role"] == "assistant"
        for block in message["content"]
        if block.get("type") == "text" and block["text"].startswith("[1 of the 2 tool call(s)")
    ]
    assert told == notices
    for message in first.messages:
        if message["role"] == "assistant":
            kinds = [block["type"] for block in message["content"]]
            assert kinds == sorted(kinds, key=lambda kind: kind == "tool_use")
            assert "nameless" not in json.dumps(message)
    request = to_messages_api(first.messages)
    assert all(turn["content"] for turn in request.messages)
    again = governor.govern(first.messages)
    assert again.messages is first.messages and not again.report.changed


def test_a_history_that_fits_as_worked_on_fits_as_returned() -> None:
    """A lone tool_result block costs more than its tool message: the result still fits."""
    history = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "a"},
                {
                    "type": "tool_use",
                    "id": "toolu_0",
                    "name": "get",
                    "input": {"n": "000\x80\x80\x80𐀀"},
                },
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_0", "content": ""}],
        },
    ]
    openai = Governor(builtin_stages(), config=GovernanceConfig(input_limit=36)).govern(
        to_openai_shape(history)
    )
    assert openai.fits
    result = Governor(builtin_stages(), config=GovernanceConfig(input_limit=36)).govern(history)
    assert result.fits and result.budget == 36
    assert result.tokens == count_request(None, result.messages) <= 36
    assert result.messages[-1]["role"] == "user"


_STORED_IDS = st.text(min_size=1, max_size=6) | st.text(alphabet="ab.:_-/", min_size=1, max_size=70)


@settings(max_examples=500, deadline=None, database=None)
@given(st.lists(st.lists(_STORED_IDS, min_size=1, max_size=3, unique=True), min_size=1, max_size=4))
def test_stored_ids_the_api_refuses_are_sent_valid_unique_and_paired(
    turns: list[list[str]],
) -> None:
    """Ids of other providers (dots, colons, any length, reused) reach the API valid and paired."""
    history: list[Any] = []
    for ids in turns:
        history.append({"role": "user", "content": "go"})
        history.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": i, "type": "function", "function": {"name": "t", "arguments": "{}"}}
                    for i in ids
                ],
            }
        )
        history += [{"role": "tool", "tool_call_id": i, "content": f"r{i}"} for i in ids]
    governed = Governor(builtin_stages(), config=GovernanceConfig()).govern(history).messages
    originals = [
        [call["id"] for call in message["tool_calls"]]
        for message in governed
        if message["role"] == "assistant" and message.get("tool_calls")
    ]
    sent = to_messages_api(governed).messages
    seen: set[str] = set()
    for number, turn in enumerate(sent):
        uses = [block["id"] for block in turn["content"] if block["type"] == "tool_use"]
        if not uses:
            continue
        assert all(re.fullmatch(r"[a-zA-Z0-9_-]+", i) for i in uses)
        assert seen.isdisjoint(uses) and len(set(uses)) == len(uses)
        seen.update(uses)
        answers = sent[number + 1]["content"][: len(uses)]
        assert [(b["tool_use_id"], b["content"]) for b in answers] == [
            (new, f"r{old}") for new, old in zip(uses, originals.pop(0), strict=True)
        ]
    assert not originals


_STRAY_USE = {"type": "tool_use", "id": "stray", "name": "get", "input": {}}


@pytest.mark.parametrize(
    "history",
    [
        [{"role": "tool", "tool_call_id": "c1", "content": [_STRAY_USE]}],
        [
            {"role": "user", "content": [{"type": "text", "text": "hi"}, _STRAY_USE]},
            {"role": "assistant", "content": "ok"},
        ],
        [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "ok"},
                    {"type": "tool_result", "tool_use_id": "stray", "content": "x"},
                ],
            },
        ],
    ],
)
def test_a_tool_block_its_role_cannot_send_is_never_handed_back(history: list[Any]) -> None:
    """A history whose only defect is a tool block in the wrong role comes back without it."""
    history.append({"role": "user", "content": "go on"})
    governed = Governor(builtin_stages(), config=GovernanceConfig()).govern(history)
    assert governed.messages is not history
    blocks = [
        block
        for message in governed.messages
        if isinstance(message.get("content"), list)
        for block in message["content"]
    ]
    assert not [b for b in blocks if "stray" in (b.get("id"), b.get("tool_use_id"))]
    assert not any(m.get("tool_call_id") == "c1" for m in governed.messages)


_LEFT_OUT = re.compile(
    r"messages\[(\d+)\]: left out the (tool_use|tool_result) block content\[(\d+)\]"
)


def _left_out(governed: Any) -> set[tuple[int, str, int]]:
    """(message index, block kind, content index) of every block the report says was left out."""
    return {
        (int(found[1]), found[2], int(found[3]))
        for entry in governed.report
        for line in entry.details
        if (found := _LEFT_OUT.match(line))
    }


def test_the_final_entry_names_each_tool_block_left_out() -> None:
    """Each block a role cannot send has a line in the final entry: message, kind, position."""
    history: list[Any] = [
        {"role": "user", "content": [{"type": "text", "text": "hi"}, _STRAY_USE]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_result", "tool_use_id": "gone", "content": "x"},
                {"type": "text", "text": "ok"},
            ],
        },
        {"role": "user", "content": "go on"},
    ]
    governed = Governor(builtin_stages(), config=GovernanceConfig()).govern(history)
    final = governed.report.entry("final")
    assert final is not None and final.changed and governed.changed
    assert final.details[:2] == [
        "messages[0]: left out the tool_use block content[1] (id 'stray'): "
        "a message with role 'user' cannot send it",
        "messages[1]: left out the tool_result block content[0] (id 'gone'): "
        "a message with role 'assistant' cannot send it",
    ]
    assert [e.stage for e in governed.report if _LEFT_OUT.search(" ".join(e.details))] == ["final"]


@st.composite
def _history_with_strays(draw: st.DrawFn) -> tuple[list[Any], set[tuple[int, str, int]]]:
    """A clean Anthropic-style history, then stray tool blocks put anywhere; where they went."""
    history: list[Any] = [{"role": "user", "content": [{"type": "text", "text": "start"}]}]
    for step in range(draw(st.integers(1, 4))):
        use = {"type": "tool_use", "id": f"t{step}", "name": "get", "input": {"n": step}}
        result = {"type": "tool_result", "tool_use_id": f"t{step}", "content": "done"}
        history += [
            {"role": "assistant", "content": [{"type": "text", "text": "looking"}, use]},
            {"role": "user", "content": [result]},
        ]
    history.append({"role": "user", "content": "go on"})
    strays: set[tuple[int, str, int]] = set()
    for number in range(draw(st.integers(0, 4))):
        index = draw(st.integers(0, len(history) - 1))
        message = history[index]
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if message["role"] == "assistant":
            kind, block = "tool_result", {"type": "tool_result", "tool_use_id": f"s{number}"}
        else:
            kind, block = "tool_use", {"type": "tool_use", "id": f"s{number}", "name": "x"}
        at = draw(st.integers(0, len(blocks)))
        # Blocks after the new one move up by one: the strays put there before move too.
        strays = {(i, k, c + 1 if i == index and c >= at else c) for i, k, c in strays}
        strays.add((index, kind, at))
        history[index] = {**message, "content": [*blocks[:at], block, *blocks[at:]]}
    return history, strays


@settings(max_examples=150, deadline=None)
@given(_history_with_strays())
def test_every_tool_block_left_out_is_reported_and_no_other(
    drawn: tuple[list[Any], set[tuple[int, str, int]]],
) -> None:
    """The report names exactly the stray blocks, none in a clean history, and none is sent."""
    history, strays = drawn
    governed = Governor(builtin_stages(), config=GovernanceConfig()).govern(history)
    assert _left_out(governed) == strays
    if not strays:
        assert governed.messages is history and not governed.changed
        return
    assert governed.changed
    sent = json.dumps(governed.messages)
    assert not re.search(r'"s\d+"', sent)


def _one_call(arguments: Any) -> list[dict[str, Any]]:
    """A history whose message 1 makes call 'c1' with `arguments` (not necessarily a string)."""
    call = {"id": "c1", "type": "function", "function": {"name": "get", "arguments": arguments}}
    return [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=8), max_size=4))
def test_arguments_given_as_a_dict_are_the_input(arguments: dict[str, Any]) -> None:
    """A dict of arguments is sent as the input itself, not replaced by an empty one."""
    request = to_messages_api(_one_call(arguments))
    assert request.messages[1]["content"] == [
        {"type": "tool_use", "id": "c1", "name": "get", "input": arguments}
    ]


@pytest.mark.parametrize("arguments", [None, "", "  \n"])
def test_no_arguments_are_an_empty_input(arguments: Any) -> None:
    """Absent, null or blank arguments lose nothing: the input is {}."""
    assert to_messages_api(_one_call(arguments)).messages[1]["content"][0]["input"] == {}


_NOT_AN_INPUT = st.one_of(
    st.text(min_size=1).filter(lambda text: text.strip() and not _decodes_to_object(text)),
    st.sampled_from(["[" * 50_000, '{"a": ' * 30_000, "[1, 2]", '"text"', "7", "null"]),
    st.just("[" + "0," * 100_000 + "0]"),
    st.integers() | st.lists(st.integers(), max_size=3),
)


def _decodes_to_object(text: str) -> bool:
    """Whether `text` is the JSON of an object."""
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False


@settings(max_examples=200, deadline=None)
@given(_NOT_AN_INPUT)
def test_arguments_that_cannot_be_the_input_are_named_at_the_edge(arguments: Any) -> None:
    """Arguments that are not a JSON object raise ValueError naming the message and the call."""
    with pytest.raises(ValueError, match=r"^messages\[1\]: the arguments of call 'c1' "):
        to_messages_api(_one_call(arguments))
    # Converting back after governance (which repaired and reported them) still gives {}.
    restored = from_openai_shape(_one_call(arguments))
    assert restored[1]["content"][0]["input"] == {}


_CUT_TEXT = st.sampled_from(["", " ", "ok", CONTINUED, "a longer text " * 5])
_CUT_IDS = st.sampled_from(["c1", "c2", "c.3", ""])
# A tool result whose keys kept from an Anthropic block say it is text.
_KEPT_AS_TEXT = {
    "role": "tool",
    "tool_call_id": "c1",
    "content": "r",
    "_anthropic_block": {"type": "text", "text": "kept"},
}


@st.composite
def _cut_message(draw: st.DrawFn) -> Any:
    """A message of either shape, where a cut may fall anywhere: system, blank, calls, results."""
    kind = draw(
        st.sampled_from(
            ["system", "user", "blank", "assistant", "calls", "uses", "tool", "results", "odd"]
        )
    )
    if kind == "system":
        return {"role": "system", "content": draw(_CUT_TEXT)}
    if kind in ("user", "blank"):
        text = {"type": "text", "text": draw(_CUT_TEXT)}
        return {"role": "user", "content": draw(st.sampled_from([" ", [text], text["text"]]))}
    if kind == "assistant":
        return {"role": "assistant", "content": draw(_CUT_TEXT), "thinking_blocks": [THINKING]}
    if kind == "calls":
        calls = [_call(draw(_CUT_IDS), "{}") for _ in range(draw(st.integers(1, 2)))]
        return {"role": "assistant", "content": draw(_CUT_TEXT), "tool_calls": calls}
    if kind == "uses":
        use = {"type": "tool_use", "id": draw(_CUT_IDS), "name": "get", "input": {}}
        return {"role": "assistant", "content": [use]}
    if kind == "tool":
        message = {"role": "tool", "tool_call_id": draw(_CUT_IDS), "content": draw(_CUT_TEXT)}
        # Keys kept from an Anthropic block may even say another type.
        return _KEPT_AS_TEXT if draw(st.booleans()) else message
    if kind == "results":
        result = {"type": "tool_result", "tool_use_id": draw(_CUT_IDS), "content": "r"}
        return {"role": "user", "content": [{"type": "text", "text": "and"}, result]}
    return draw(st.sampled_from(["not a message", None, {"content": "no role"}]))


@settings(max_examples=800, deadline=None)
@given(st.lists(_cut_message(), max_size=10), st.integers(-2, 12))
# A result whose kept keys make it text, cut before results that the API puts first.
@example(
    [
        {"role": "user", "content": "q"},
        _KEPT_AS_TEXT,
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "r"}]},
    ],
    2,
)
def test_the_cut_history_comes_from_the_same_pass_as_converting_it_alone(
    history: list[Any], prefix: int
) -> None:
    """With prefix, prefix_messages is what the history cut there converts to on its own."""
    whole = to_messages_api(history, prefix=prefix)
    assert whole.prefix_messages == to_messages_api(history[:prefix]).messages
    assert whole.messages == to_messages_api(history).messages
    assert to_messages_api(history).prefix_messages is None


def _replies_with_ids(replies: list[list[str]]) -> list[Any]:
    history: list[Any] = [{"role": "user", "content": "go"}]
    for ids in replies:
        history.append({"role": "assistant", "content": "", "tool_calls": [_call(i) for i in ids]})
        history += [{"role": "tool", "tool_call_id": i, "content": f"r{i}"} for i in ids]
    return history


def _sent_ids(history: list[Any]) -> list[str]:
    return [
        block["id"]
        for turn in to_messages_api(history).messages
        for block in turn["content"]
        if block["type"] == "tool_use"
    ]


def test_one_id_in_every_reply_is_numbered_in_order_and_keeps_its_result() -> None:
    """An id every reply reuses (dots replaced) is sent as call_0, call_0_2, call_0_3, ..."""
    sent = to_messages_api(_replies_with_ids([["call.0"]] * 4)).messages
    uses = [turn["content"][0] for turn in sent if turn["role"] == "assistant"]
    results = [turn["content"][0] for turn in sent if turn["role"] == "user"][1:]
    assert [use["id"] for use in uses] == ["call_0", "call_0_2", "call_0_3", "call_0_4"]
    assert [result["tool_use_id"] for result in results] == [use["id"] for use in uses]


class _CountedSet(set[str]):
    """A set that counts the membership tests made on every instance."""

    lookups = 0

    def __contains__(self, item: object) -> bool:
        type(self).lookups += 1
        return super().__contains__(item)


def test_an_id_reused_by_every_reply_costs_a_few_lookups_per_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """2,000 replies with the same id are numbered with at most two lookups each, not 2,000."""
    monkeypatch.setattr(anthropic_module, "set", _CountedSet, raising=False)
    monkeypatch.setattr(_CountedSet, "lookups", 0)
    sent = _sent_ids(_replies_with_ids([["call_0"]] * 2_000))
    assert sent[-1] == "call_0_2000" and len(set(sent)) == 2_000
    assert _CountedSet.lookups <= 2 * 2_000


def _numbered_from_one(raws: list[str]) -> list[str]:
    """The ids as numbering from 1 for every call gave them (the rule the API ids follow)."""
    taken: set[str] = set()
    out: list[str] = []
    for raw in raws:
        base = re.sub(r"[^A-Za-z0-9_-]", "_", raw) if raw else "toolu"
        candidate, number = base, 1
        while candidate in taken:
            number += 1
            candidate = f"{base}_{number}"
        taken.add(candidate)
        out.append(candidate)
    return out


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.lists(st.text(alphabet="ab_2-.", max_size=4), max_size=4), max_size=8))
@example([["a", "a_2"], ["a"], ["a", "a_3"], ["a"]])
@example([["", ""], ["toolu_2"], [""]])
def test_ids_are_numbered_as_counting_from_one_for_every_call_numbered_them(
    replies: list[list[str]],
) -> None:
    """Reused ids, ids that look numbered already and missing ids keep the numbers they got."""
    history = _replies_with_ids(replies)
    assert _sent_ids(history) == _numbered_from_one([i for ids in replies for i in ids])


def test_a_run_of_user_messages_and_results_is_one_turn_with_every_block_in_order() -> None:
    """Results and 500 user messages in a row make one turn, blocks in order, whole or cut."""
    history: list[Any] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [_call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
        *({"role": "user", "content": f"u{n}"} for n in range(500)),
    ]
    before = json.dumps(history)
    request = to_messages_api(history, prefix=103)
    sent = request.messages
    assert [turn["role"] for turn in sent] == ["user", "assistant", "user"]
    assert sent[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "r"},
        *({"type": "text", "text": f"u{n}"} for n in range(500)),
    ]
    assert request.prefix_messages == to_messages_api(history[:103]).messages
    assert request.prefix_messages[2]["content"][1:] == [
        {"type": "text", "text": f"u{n}"} for n in range(100)
    ]
    assert json.dumps(history) == before
