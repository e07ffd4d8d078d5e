"""Reply normalisation and retry timing: pure functions, checked on real provider replies."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core.providers import (
    HTTP_STATUSES,
    SERVER_ERRORS,
    RetryPolicy,
    is_retryable_status,
    normalise_assistant_message,
    normalise_usage,
    retry_after_seconds,
)
from nanobot_core.providers.base import (
    MAX_CALL_ID_LENGTH,
    Usage,
    sendable_call_id,
    with_sendable_call_ids,
)


def _real_reply_messages(data_folder: Path) -> list[dict[str, Any]]:
    """Every assistant message of a recorded OpenAI-shaped 200 reply (pydantic-ai cassettes)."""
    messages = []
    path = data_folder / "pydantic-ai-cassettes" / "interactions.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        body = row["response_body"]
        if row["response_status"] == 200 and isinstance(body, dict) and body.get("choices"):
            messages.append(body["choices"][0]["message"])
    return messages


def test_real_replies_normalise_to_sendable_messages(data_folder: Path) -> None:
    """Every recorded reply becomes an assistant message with text content and well-formed calls."""
    messages = _real_reply_messages(data_folder)
    assert len(messages) >= 40
    for raw in messages:
        message = normalise_assistant_message(raw, salt="3")
        assert message["role"] == "assistant"
        assert isinstance(message["content"], str)
        assert all(value is not None for value in message.values())
        calls = message.get("tool_calls", [])
        assert calls or "tool_calls" not in message  # an empty or null list is dropped
        ids = [call["id"] for call in calls]
        assert all(isinstance(i, str) and i for i in ids) and len(set(ids)) == len(ids)
        for call, original in zip(calls, raw.get("tool_calls") or [], strict=True):
            assert call["function"] == original["function"]  # string arguments kept exactly
            assert call["id"] == original["id"]


def test_unknown_keys_pass_through(data_folder: Path) -> None:
    """Provider-specific keys (reasoning_content, thought signatures) are kept untouched."""
    kept = 0
    for raw in _real_reply_messages(data_folder):
        message = normalise_assistant_message(raw)
        for key in ("reasoning_content", "reasoning", "thought_signature", "extra_content"):
            if raw.get(key) is not None:
                assert message[key] == raw[key]
                kept += 1
    assert kept >= 5


def test_empty_placeholders_are_dropped() -> None:
    """Snowflake's empty audio and function_call objects and null fields are not kept."""
    raw = {
        "role": "assistant",
        "content": "sunny",
        "audio": {"data": "", "expires_at": 0, "id": "", "transcript": ""},
        "function_call": {"arguments": "", "name": ""},
        "refusal": None,
        "tool_calls": None,
    }
    assert normalise_assistant_message(raw) == {"role": "assistant", "content": "sunny"}


def test_empty_and_duplicate_ids_get_distinct_derived_ids() -> None:
    """Gemini's empty id and a repeated id are replaced; ids depend on the salt, not on chance."""
    raw = {
        "role": "assistant",
        "tool_calls": [
            {"id": "", "type": "function", "function": {"name": "t", "arguments": "{}"}},
            {"id": "a", "type": "function", "function": {"name": "t", "arguments": "{}"}},
            {"id": "a", "type": "function", "function": {"name": "t", "arguments": "{}"}},
        ],
    }
    first = [c["id"] for c in normalise_assistant_message(raw, salt="1")["tool_calls"]]
    again = [c["id"] for c in normalise_assistant_message(raw, salt="1")["tool_calls"]]
    other = [c["id"] for c in normalise_assistant_message(raw, salt="2")["tool_calls"]]
    assert first == again
    assert first[1] == "a" and len(set(first)) == 3
    assert other[0] != first[0]


def test_an_id_longer_than_openai_takes_gets_a_derived_id() -> None:
    """An id over 40 characters would make OpenAI refuse every later request: it is replaced."""
    raw = {
        "tool_calls": [
            {"id": "x" * 40, "function": {"name": "t", "arguments": "{}"}},
            {"id": "y" * 41, "function": {"name": "t", "arguments": "{}"}},
            {"id": "z" * 8_000_000, "function": {"name": "t", "arguments": "{}"}},
        ]
    }
    ids = [c["id"] for c in normalise_assistant_message(raw, salt="1")["tool_calls"]]
    assert ids[0] == "x" * 40
    assert all(i.startswith("call_") and len(i) <= MAX_CALL_ID_LENGTH for i in ids[1:])
    assert len(set(ids)) == 3


_IDS = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=60),
    st.sampled_from(["", "a", "call_1", "x" * 40, "x" * 41]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_IDS, st.text(max_size=5)), max_size=12), st.text(max_size=4))
def test_call_ids_are_always_sendable_and_kept_when_they_can_be(
    calls: list[tuple[object, str]], salt: str
) -> None:
    """Whatever ids a reply holds, each call ends with a unique id of 1 to 40 characters."""
    raw = {"tool_calls": [{"id": i, "function": {"name": n, "arguments": "{}"}} for i, n in calls]}
    message = normalise_assistant_message(raw, salt=salt)
    ids = [call["id"] for call in message.get("tool_calls", [])]
    assert len(ids) == len(calls)
    assert len(set(ids)) == len(ids)
    assert all(isinstance(i, str) and 1 <= len(i) <= MAX_CALL_ID_LENGTH for i in ids)
    for position, (sent, _) in enumerate(calls):
        first = [i for i, _ in calls].index(sent) == position
        if isinstance(sent, str) and 1 <= len(sent) <= MAX_CALL_ID_LENGTH and first:
            assert ids[position] == sent


def test_arguments_become_json_strings() -> None:
    """Object, list and missing arguments become JSON text; broken text is kept as sent."""
    raw = {
        "tool_calls": [
            {"id": "1", "function": {"name": "t", "arguments": {"x": [1, "é"]}}},
            {"id": "2", "function": {"name": "t"}},
            {"id": "3", "function": {"name": "t", "arguments": '{"x": 1'}},
        ]
    }
    calls = normalise_assistant_message(raw)["tool_calls"]
    assert [c["function"]["arguments"] for c in calls] == ['{"x": [1, "é"]}', "{}", '{"x": 1']
    assert all(c["type"] == "function" for c in calls)


def test_malformed_message_becomes_empty_reply() -> None:
    """A null or non-object message is an empty assistant message."""
    assert normalise_assistant_message(None) == {"role": "assistant", "content": ""}
    assert normalise_assistant_message(["x"]) == {"role": "assistant", "content": ""}


def test_usage_reads_what_is_there() -> None:
    """Missing totals are summed; garbage counts as zero."""
    assert normalise_usage({"prompt_tokens": 5, "completion_tokens": 2}) == Usage(5, 2, 7)
    assert normalise_usage({"prompt_tokens": "5", "total_tokens": True}) == Usage()
    assert normalise_usage(None) == Usage()


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["prompt_tokens", "completion_tokens", "total_tokens"]),
        st.one_of(st.integers(min_value=-(10**30), max_value=10**4299), st.floats(), st.text()),
    )
)
def test_any_usage_gives_counts_from_zero_to_a_trillion(raw: dict[str, Any]) -> None:
    """Whatever a server reports, each count is 0 to 10**12, a count in range kept as sent."""
    usage = normalise_usage(raw).to_json()
    for key in ("prompt_tokens", "completion_tokens"):
        sent = raw.get(key)
        in_range = type(sent) is int and 0 <= sent <= 10**12
        assert usage[key] == (sent if in_range else 0)
    assert 0 <= usage["total_tokens"] <= 2 * 10**12


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(400, False), (401, False), (404, False), (408, True), (429, True), (500, True), (503, True)],
)
def test_retryable_statuses(status: int, retryable: bool) -> None:
    """429, 408 and 5xx are retried; other 4xx are not."""
    assert is_retryable_status(status) is retryable


@given(st.integers(min_value=0, max_value=1_000))
def test_the_bounds_of_a_status_are_said_once_and_read_by_the_retry_rule(status: int) -> None:
    """HTTP's statuses are 100-599 and its server errors 500-599, one owner for both: the
    retry rule is 408, 429 and those 5xx, nothing past 599."""
    assert (HTTP_STATUSES[0], HTTP_STATUSES[-1]) == (100, 599)
    assert (SERVER_ERRORS[0], SERVER_ERRORS[-1]) == (500, 599)
    expected = status in (408, 429) or 500 <= status <= 599
    assert is_retryable_status(status) is expected


def test_no_provider_module_writes_the_bounds_of_a_status_itself() -> None:
    """The numbers 599 and 500-599 are written in the retry module only: the HTTP and the
    OpenAI modules read `HTTP_STATUSES` and `SERVER_ERRORS`, so they cannot drift apart."""
    import io
    import tokenize

    import nanobot_core.providers as providers

    folder = Path(providers.__file__).parent
    for name in ("http.py", "openai.py", "base.py", "endpoint.py"):
        source = (folder / name).read_text(encoding="utf-8")
        numbers = {
            token.string
            for token in tokenize.generate_tokens(io.StringIO(source).readline)
            if token.type == tokenize.NUMBER
        }
        assert not numbers & {"100", "500", "599", "600"}, name


def test_retry_after_forms() -> None:
    """Retry-After as seconds, as an HTTP date, and OpenAI's retry-after-ms are understood."""
    now = datetime(2024, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after_seconds({"Retry-After": "7"}, now=now) == 7.0
    assert retry_after_seconds({"retry-after": " \t007 "}, now=now) == 7.0
    assert retry_after_seconds({"Retry-After": "Mon, 01 Jan 2024 12:00:30 GMT"}, now=now) == 30.0
    assert retry_after_seconds({"Retry-After": "Mon, 01 Jan 2024 11:00:00 GMT"}, now=now) == 0.0
    assert retry_after_seconds({"retry-after-ms": "250", "Retry-After": "9"}, now=now) == 0.25
    assert retry_after_seconds({"retry-after-ms": "12.5"}, now=now) == 0.0125
    assert retry_after_seconds({"Retry-After": "soon"}, now=now) is None
    assert retry_after_seconds({}, now=now) is None


def test_a_negative_retry_after_is_no_wait_asked_for() -> None:
    """A negative delay is invalid (RFC 9110): read as absent, in either header, never as 0."""
    now = datetime(2024, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after_seconds({"Retry-After": "-3"}, now=now) is None
    assert retry_after_seconds({"Retry-After": "-0.5"}, now=now) is None
    assert retry_after_seconds({"retry-after-ms": "-250"}, now=now) is None
    assert retry_after_seconds({"retry-after-ms": "-250", "Retry-After": "2"}, now=now) == 2.0
    assert retry_after_seconds({"Retry-After": "-0"}, now=now) is None


@pytest.mark.parametrize(
    "value", ["+5", "1e3", "5.5", "0x10", "1_0", "\u0661\u0662", "\u00b2", "5 5", "5s", "inf"]
)
def test_a_retry_after_that_is_not_ascii_digits_nor_a_date_is_no_wait_asked_for(
    value: str,
) -> None:
    """RFC 9110's delay-seconds is ASCII digits only: a sign, a fraction, an exponent, a hex
    or another script's digits is invalid and read as absent (a fraction only in OpenAI's
    retry-after-ms)."""
    now = datetime(2024, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after_seconds({"Retry-After": value}, now=now) is None
    if value != "5.5":
        assert retry_after_seconds({"retry-after-ms": value}, now=now) is None


_OWS = st.text(alphabet=" \t", max_size=3)
#: What a number parser reads besides ASCII digits (no month's name can be spelt of it).
_NUMBERISH = "0123456789+-.eExX_ \t\u0661\u00b2adfin"


@settings(max_examples=300, deadline=None)
@given(
    before=_OWS,
    digits=st.text(alphabet="0123456789", min_size=1, max_size=40),
    after=_OWS,
)
def test_retry_after_digits_are_read_as_seconds_and_long_ones_as_past_any_cap(
    before: str, digits: str, after: str
) -> None:
    """Any run of ASCII digits, with spaces and tabs around it, is that many seconds; one of
    more than 15 significant digits is read as 10**15 seconds, never as no wait."""
    wait = retry_after_seconds({"Retry-After": before + digits + after})
    number = int(digits)
    assert wait == (float(number) if number < 10**15 else 1e15)
    assert RetryPolicy(cap=60.0).delay(1, wait) == min(float(number), 60.0)


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(_NUMBERISH), min_size=1).filter(
        lambda text: not text.strip(" \t").isascii() or not text.strip(" \t").isdigit()
    )
)
def test_a_retry_after_that_is_not_digits_is_never_a_wait(value: str) -> None:
    """What a number parser might take (signs, fractions, exponents, hex, ``_``, other
    scripts' digits) but delay-seconds does not is read as no wait asked for."""
    assert retry_after_seconds({"Retry-After": value}) is None


def test_a_retry_after_of_a_million_digits_is_read_in_one_pass_and_capped() -> None:
    """A delay of a million digits is no wait of `inf` nor a crash of `int`: it reads as a
    wait past any cap, at once, and the cap is what is waited."""
    wait = retry_after_seconds({"Retry-After": "9" * 1_000_000})
    assert wait == 1e15
    assert RetryPolicy(cap=60.0).delay(1, wait) == 60.0


def test_backoff_doubles_with_jitter_and_respects_the_cap() -> None:
    """Without Retry-After, the n-th wait lies in [base*2^(n-1)/2, base*2^(n-1)], capped."""
    policy = RetryPolicy(max_retries=6, backoff_base=1.0, cap=10.0)
    rng = random.Random(7)
    for retry, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (6, 10.0)]:
        for _ in range(20):
            assert ceiling / 2 <= policy.delay(retry, None, rng) <= ceiling
    assert policy.delay(1, 99.0) == 10.0
    assert policy.delay(1, 0.0) == 0.0


_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["_meta", "content", "role", "x", "audio"]) | st.text(max_size=6),
        _VALUES,
        max_size=6,
    )
)
def test_a_reply_never_brings_its_own_bookkeeping(raw: dict[str, Any]) -> None:
    """Whatever keys a reply holds, the message has none of the session's `_meta` bookkeeping."""
    message = normalise_assistant_message(raw)
    assert "_meta" not in message and message["role"] == "assistant"
    assert isinstance(message["content"], str | list)


@settings(max_examples=200, deadline=None)
@given(st.lists(_VALUES | st.fixed_dictionaries({"type": _VALUES, "text": _VALUES}), max_size=6))
def test_a_content_list_keeps_only_parts_a_server_takes_back_in_order(parts: list[Any]) -> None:
    """Whatever a reply's content list holds, what is kept is every object with a string
    `type` (a text part with its text a string), in order; a list left empty is ''."""
    wanted = [
        part
        for part in parts
        if isinstance(part, dict)
        and isinstance(part.get("type"), str)
        and part["type"]
        and (part["type"] != "text" or isinstance(part.get("text"), str))
    ]
    content = normalise_assistant_message({"content": parts})["content"]
    assert content == (wanted if wanted or not parts else "")


def test_a_legacy_function_call_becomes_one_tool_call() -> None:
    """OpenAI's old `function_call` is run like a tool call: one call with a derived id."""
    raw = {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
    }
    message = normalise_assistant_message(raw, salt="3")
    (call,) = message["tool_calls"]
    assert call["function"] == {"name": "read_file", "arguments": '{"path": "a.txt"}'}
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert "function_call" not in message and message["content"] == ""
    assert normalise_assistant_message(raw, salt="3") == message
    assert normalise_assistant_message(raw, salt="4")["tool_calls"][0]["id"] != call["id"]


def test_a_legacy_function_call_beside_tool_calls_is_not_kept() -> None:
    """A reply with both shapes runs its `tool_calls` only and never sends `function_call` back."""
    call = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
    raw = {"tool_calls": [call], "function_call": {"name": "t", "arguments": "{}"}}
    message = normalise_assistant_message(raw)
    assert message == {"role": "assistant", "content": "", "tool_calls": [call]}


@settings(max_examples=300, deadline=None, database=None)
@given(
    function_call=_VALUES
    | st.fixed_dictionaries({"name": _VALUES}, optional={"arguments": _VALUES}),
    tool_calls=st.none() | st.just([]),
)
def test_any_legacy_function_call_is_a_call_or_nothing(function_call: Any, tool_calls: Any) -> None:
    """Whatever a server puts in `function_call`, it is never kept: one call if it names one."""
    raw = {"role": "assistant", "content": "x", "function_call": function_call}
    if tool_calls is not None:
        raw["tool_calls"] = tool_calls
    message = normalise_assistant_message(raw, salt="1")
    assert "function_call" not in message
    name = function_call.get("name") if isinstance(function_call, dict) else None
    if isinstance(name, str) and name.strip():
        (call,) = message["tool_calls"]
        assert call["function"]["name"] == name
        assert isinstance(call["function"]["arguments"], str)
        assert 0 < len(call["id"]) <= MAX_CALL_ID_LENGTH
    else:
        assert "tool_calls" not in message


def _exchange(*ids: str) -> list[dict[str, Any]]:
    """A user message, one assistant message calling with `ids`, and a result for each."""
    calls = [
        {"id": i, "type": "function", "function": {"name": "t", "arguments": "{}"}} for i in ids
    ]
    results = [
        {"role": "tool", "tool_call_id": i, "content": f"result {n}"} for n, i in enumerate(ids)
    ]
    return [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        *results,
    ]


def test_stored_ids_too_long_for_openai_are_replaced_on_both_sides() -> None:
    """A stored call id over 40 characters is sent as call_<hash>, and so is its result's."""
    long_id = "functions.read_file:0/" + "x" * 60
    history = _exchange("short", long_id)
    snapshot = json.loads(json.dumps(history))
    sent = with_sendable_call_ids(history)
    assert history == snapshot  # nothing changed in place
    assert sent[0] is history[0] and sent[2] is history[2]  # untouched messages are shared
    ids = [call["id"] for call in sent[1]["tool_calls"]]
    assert ids[0] == "short" and ids[1] == sendable_call_id(long_id)
    assert ids[1].startswith("call_") and len(ids[1]) <= MAX_CALL_ID_LENGTH
    assert [m["tool_call_id"] for m in sent[2:]] == ids
    assert with_sendable_call_ids(sent) == sent


_ANY_IDS = st.text(min_size=1, max_size=8) | st.text(min_size=38, max_size=90)


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.lists(_ANY_IDS, min_size=1, max_size=4, unique=True), max_size=4))
def test_sent_call_ids_fit_stay_paired_and_are_stable(turns: list[list[str]]) -> None:
    """Any stored ids: each sent id fits and keeps its result; sending again changes nothing."""
    history = [message for ids in turns for message in _exchange(*ids)]
    sent = with_sendable_call_ids(history)
    assert sent == with_sendable_call_ids(history)
    assert with_sendable_call_ids(sent) == sent
    for before, after in zip(history, sent, strict=True):
        if before["role"] == "assistant":
            new_ids = [call["id"] for call in after["tool_calls"]]
            assert all(0 < len(i) <= MAX_CALL_ID_LENGTH for i in new_ids)
            assert len(set(new_ids)) == len(new_ids)
            old = [call["id"] for call in before["tool_calls"]]
            assert [
                i for i, o in zip(new_ids, old, strict=True) if len(o) <= MAX_CALL_ID_LENGTH
            ] == [o for o in old if len(o) <= MAX_CALL_ID_LENGTH]
        elif before["role"] == "tool":
            assert after["tool_call_id"] == sendable_call_id(before["tool_call_id"])
        else:
            assert after is before
    for index, message in enumerate(sent):
        if message["role"] == "assistant":
            calls = [call["id"] for call in message["tool_calls"]]
            answered = [m["tool_call_id"] for m in sent[index + 1 : index + 1 + len(calls)]]
            assert answered == calls
