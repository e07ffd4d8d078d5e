"""What every model provider speaks: the `Provider` protocol and the normalised reply.

A reply is normalised before anything else sees it, because the assistant
message is persisted as it comes back and the session file must stay
loadable by any OpenAI-compatible endpoint: every tool call gets a non-empty
id of at most 40 characters that is unique within its message (derived from
the call itself when the reply's own is missing, too long or repeated, so the
same reply always gets the same ids), arguments become a JSON string, and
missing content becomes ``""``. A part of a content list no server takes back
(not an object, without a ``type``, a text part without its text) is dropped,
with a warning naming its index. A legacy ``function_call`` (the reply of a
server that still speaks OpenAI's functions API) becomes the message's one
tool call, so that it is run and answered like any other; ``function_call``
itself is never kept. Keys the core does not know
(``reasoning_content``, provider signatures, ...) are kept untouched.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from nanobot_core._clip import a_type
from nanobot_core._json_boundary import dumps
from nanobot_core._logging import get_logger
from nanobot_core.config import ProviderConfig

__all__ = [
    "MAX_CALL_ID_LENGTH",
    "ProgressCallback",
    "ProgressEvent",
    "Provider",
    "ProviderFactory",
    "ProviderReply",
    "RetryNotice",
    "Usage",
    "derive_call_id",
    "normalise_assistant_message",
    "normalise_usage",
    "sendable_call_id",
    "sendable_parts",
    "token_count",
    "with_sendable_call_ids",
]

Message = dict[str, Any]

log = get_logger("nanobot_core.providers")

#: The longest tool-call id kept as sent: OpenAI refuses a request holding a longer one.
MAX_CALL_ID_LENGTH = 40


@runtime_checkable
class ProgressEvent(Protocol):
    """Something worth telling a person watching a run (retries, tools); printed on stderr."""

    def describe(self) -> str:
        """One line of text for a terminal."""
        ...


ProgressCallback = Callable[[ProgressEvent], None]


@attrs.frozen
class RetryNotice:
    """A provider request failed in a way worth retrying; the next attempt comes after `delay`."""

    attempt: int
    max_retries: int
    delay: float
    reason: str

    def describe(self) -> str:
        """E.g. ``provider: HTTP 503 (Service Unavailable); retry 1/4 in 0.5s``."""
        return (
            f"provider: {self.reason}; retry {self.attempt}/{self.max_retries} in {self.delay:.2f}s"
        )


@attrs.frozen
class Usage:
    """Token usage as the server reported it (zeros when it did not).

    `prompt_tokens` is every input token of the request, cached or not; of
    those, `cache_read_input_tokens` were read from the provider's prompt cache
    and `cache_creation_input_tokens` were written to it.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
        )

    def to_json(self) -> dict[str, int]:
        """The ``usage`` object of OpenAI's replies, plus the two prompt-cache counts."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
        }


@attrs.frozen
class ProviderReply:
    """One normalised model reply: the assistant message to persist, and what it cost."""

    message: Message
    usage: Usage = Usage()
    model: str | None = None
    finish_reason: str | None = None

    @property
    def content(self) -> str:
        """The text of the reply (``""`` when there is none; text parts joined)."""
        content = self.message.get("content")
        if isinstance(content, list):
            return "".join(
                part["text"]
                for part in content
                if isinstance(part, Mapping)
                and part.get("type") == "text"
                and isinstance(part.get("text"), str)
            )
        return content if isinstance(content, str) else ""

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The tool calls of the reply, in the order the model made them."""
        calls = self.message.get("tool_calls")
        return list(calls) if isinstance(calls, list) else []


class Provider(Protocol):
    """A chat model behind some API: one request in, one normalised reply out.

    A provider that places prompt-cache marks itself may set the class
    attribute ``accepts_prefix = True``: the runner then calls
    ``complete(messages, tools, prefix=N)``, where N is the index in `messages`
    of the first message that differs from the previous call's when governance
    could not keep the prefix (``GovernanceResult.prefix``), else None.

    The runner hands a provider copies of the messages and tool definitions, which
    it may change as it likes. One that never changes what it is handed (it only
    reads it, as the built-in ``openai`` provider does) may set the class attribute
    ``leaves_input_unchanged = True`` to be handed the runner's own, and spare a
    copy of the request on every call: the session's messages, which every later
    request is made from. It is not inherited: a subclass (of ``OpenAIProvider``,
    say) is handed copies unless its own class declares it again.
    """

    name: str

    async def complete(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> ProviderReply:
        """Send `messages` (system first) and the tool definitions; return the model's reply.

        Raises :class:`~nanobot_core.errors.ProviderError` when the model cannot
        be reached or refuses the request.
        """
        ...


class ProviderFactory(Protocol):
    """What the ``nanobot_providers`` hook returns: builds a provider from the config."""

    name: str

    def __call__(
        self, config: ProviderConfig, *, progress: ProgressCallback | None = None
    ) -> Provider: ...


#: The largest token count of one reply taken as the server sent it: no model reads or writes
#: a trillion tokens in one call, and a count of thousands of digits (JSON allows one) would
#: make the turn's sum too long to write to the session file.
_MAX_TOKEN_COUNT = 10**12


def token_count(raw: Mapping[str, Any], key: str) -> int:
    """``raw[key]`` when it is an integer from 0 to a trillion, else 0 (a server's usage is
    not trusted)."""
    value = raw.get(key)
    return value if type(value) is int and 0 <= value <= _MAX_TOKEN_COUNT else 0


def normalise_usage(raw: object) -> Usage:
    """Read OpenAI's ``usage`` object; anything missing or malformed counts as zero.

    Cached input is ``prompt_tokens_details.cached_tokens``; OpenAI reports no
    cache writes (its cache is automatic and writing costs nothing extra).
    """
    if not isinstance(raw, Mapping):
        return Usage()
    prompt, completion = token_count(raw, "prompt_tokens"), token_count(raw, "completion_tokens")
    details = raw.get("prompt_tokens_details")
    cached = token_count(details, "cached_tokens") if isinstance(details, Mapping) else 0
    total = token_count(raw, "total_tokens") or prompt + completion
    return Usage(prompt, completion, total, cache_read_input_tokens=cached)


def normalise_assistant_message(raw: object, *, salt: str = "") -> Message:
    """The assistant message of a reply, made safe to persist and to send back.

    `salt` goes into the derived call ids (the provider passes the position of
    the reply in the conversation), so identical calls in different rounds get
    different ids while the same reply always gets the same ones.
    """
    source: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    message: Message = {
        k: v for k, v in source.items() if k not in _NOT_KEPT and not _is_placeholder(k, v)
    }
    message["role"] = "assistant"
    content = message.get("content")
    if isinstance(content, list):
        kept = sendable_parts(content)
        # A list that held only parts no server takes back: no content, as a missing one.
        message["content"] = kept if kept or not content else ""
    elif not isinstance(content, str):
        message["content"] = ""
    calls = source.get("tool_calls")
    if not (isinstance(calls, list) and calls):
        calls = _legacy_call(source.get("function_call"))
    if calls:
        message["tool_calls"] = _normalise_calls(calls, salt)
    return message


def _part_fault(part: object) -> str | None:
    """Why a part of a reply's content list cannot be sent back to a server, as a warning
    says it after the part's place (``"is a str, not an object"``, ``"has no 'type'"``); None
    for one that can (see `sendable_parts`)."""
    if not isinstance(part, Mapping):
        return f"is {a_type(part)}, not an object"
    kind = part.get("type")
    if kind is None:
        return "has no 'type'"
    if not isinstance(kind, str):
        return f"has a 'type' that is {a_type(kind)}"
    if not kind:
        return "has an empty 'type'"
    if kind == "text" and not isinstance(part.get("text"), str):
        return "is a text part whose 'text' is not a string"
    return None


#: How many dropped parts a warning names; the rest are counted.
_NAMED_FAULTS = 10


def sendable_parts(parts: Sequence[Any]) -> list[Any]:
    """The parts of a reply's content list a server takes back, in order; each other one is
    dropped and named by its index in one warning (``content[2] has no 'type'``), so that
    the stored history never holds what every later request would be refused for.

    A part is an object with a non-empty string ``type``; one of a type the core does not
    know is the server's own (Mistral's ``thinking``, Anthropic's server tools) and is
    kept as it came. A text part holds its text as a string.
    """
    faults = [(index, _part_fault(part)) for index, part in enumerate(parts)]
    dropped = [f"content[{index}] {fault}" for index, fault in faults if fault is not None]
    if not dropped:
        return list(parts)
    # Stored, the history would be refused by the server at every request from here on.
    log.warning(
        "reply content parts dropped: no server takes them back",
        parts=dropped[:_NAMED_FAULTS],
        dropped=len(dropped),
    )
    return [part for part, (_, fault) in zip(parts, faults, strict=True) if fault is None]


#: Keys of a reply not kept as sent: the calls (normalised apart), the legacy call (read as
#: one, or dropped: no endpoint need get it back) and the session's own bookkeeping key,
#: which a reply that sent it would otherwise pass off as the runner's.
_NOT_KEPT = frozenset({"tool_calls", "function_call", "_meta"})


def _legacy_call(function_call: object) -> list[dict[str, Any]]:
    """The legacy ``function_call`` of a message as a ``tool_calls`` list without an id.

    ``{"name": N, "arguments": A}`` becomes ``[{"type": "function", "function":
    {"name": N, "arguments": A}}]``; anything without a non-blank name (null,
    Snowflake's ``{"name": ""}``) calls nothing and gives ``[]``.
    """
    if not isinstance(function_call, Mapping):
        return []
    name = function_call.get("name")
    if not isinstance(name, str) or not name.strip():
        return []
    function = {"name": name, "arguments": function_call.get("arguments")}
    return [{"type": "function", "function": function}]


def _is_placeholder(key: str, value: object) -> bool:
    """Whether a reply key carries nothing, so sending it back could only cause trouble.

    Servers fill unused fields with null, and some (Snowflake) with empty
    objects: ``"audio": {"id": ""}`` (and ``"function_call": {"name": ""}``,
    which `_legacy_call` reads as no call).
    """
    if value is None:
        return True
    if key == "audio" and isinstance(value, Mapping):
        return not value.get("id")
    return False


def _normalise_calls(calls: list[Any], salt: str) -> list[dict[str, Any]]:
    seen: set[str] = set()
    normalised: list[dict[str, Any]] = []
    for index, raw in enumerate(calls):
        call: dict[str, Any] = dict(raw) if isinstance(raw, Mapping) else {}
        function = call.get("function")
        function = dict(function) if isinstance(function, Mapping) else {}
        function["arguments"] = _arguments_text(function.get("arguments"))
        call["function"] = function
        call["type"] = "function"
        call_id = call.get("id")
        if (
            not isinstance(call_id, str)
            or not call_id
            or len(call_id) > MAX_CALL_ID_LENGTH
            or call_id in seen
        ):
            call_id = derive_call_id(salt, index, function.get("name"), function["arguments"])
        seen.add(call_id)
        call["id"] = call_id
        normalised.append(call)
    return normalised


def _arguments_text(arguments: object) -> str:
    """Arguments as the JSON string the protocol wants; a string is kept as sent, even if broken."""
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return "{}"
    return dumps(arguments)


def derive_call_id(salt: str, index: int, name: object, arguments: str) -> str:
    """A tool-call id computed from the call, for servers that send none (or a duplicate)."""
    seed = json.dumps([salt, index, name, arguments], ensure_ascii=True)
    return "call_" + hashlib.sha256(seed.encode("ascii")).hexdigest()[:24]


def sendable_call_id(call_id: str) -> str:
    """`call_id` as OpenAI takes it: itself up to `MAX_CALL_ID_LENGTH` characters, else
    ``call_`` and 24 hex digits of its hash.

    A function of the id alone, so that a call and its result, wherever they
    are, get the same replacement; an id it returns is returned as it is.
    """
    if len(call_id) <= MAX_CALL_ID_LENGTH:
        return call_id
    digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()
    return "call_" + digest[:24]


def with_sendable_call_ids(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """`messages` with every call id OpenAI would refuse replaced by `sendable_call_id`.

    A session stored before replies were normalised, or imported, may hold
    ids longer than 40 characters, and OpenAI refuses every request holding
    one. The ids of calls and the ``tool_call_id`` of results get the same
    replacement, so each result still answers its call. Messages without such
    an id are shared, not copied; nothing in `messages` is changed.
    """
    sendable: list[Mapping[str, Any]] = list(messages)
    longest = MAX_CALL_ID_LENGTH
    for index, message in enumerate(sendable):
        if type(message) is not dict and not isinstance(message, Mapping):
            continue
        result_id = message.get("tool_call_id")
        if result_id is not None:
            if type(result_id) is str and len(result_id) > longest:
                sendable[index] = {**message, "tool_call_id": sendable_call_id(result_id)}
            continue
        calls = message.get("tool_calls")
        if not calls or type(calls) is not list:
            continue
        for call in calls:  # a plain loop: this runs on every request
            if _long_id(call):
                break
        else:
            continue
        shortened = [
            {**call, "id": sendable_call_id(call["id"])} if _long_id(call) else call
            for call in calls
        ]
        sendable[index] = {**message, "tool_calls": shortened}
    return sendable


def _long_id(call: object) -> bool:
    if not isinstance(call, Mapping):
        return False
    call_id = call.get("id")
    return type(call_id) is str and len(call_id) > MAX_CALL_ID_LENGTH
