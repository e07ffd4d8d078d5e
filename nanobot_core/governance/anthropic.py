"""The adapter for Anthropic-style histories: content blocks ``tool_use`` and ``tool_result``.

The stages speak the OpenAI shape. A history that holds Anthropic tool blocks
is converted to it (an assistant's ``tool_use`` blocks become ``tool_calls``
with the input encoded as arguments, a user message's ``tool_result`` blocks
become ``tool`` messages in front of what else the message said), governed,
and converted back (results merged into the user message that follows them).
Other blocks (text, images, thinking with its signature) travel as content
parts and come back untouched; block keys the adapter does not know are kept
aside and restored. A history the governor leaves unchanged is returned as
the very input, so a clean Anthropic history is never rebuilt.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence
from typing import Any

import attrs

from nanobot_core._json_boundary import JSONLimitError
from nanobot_core.governance.checks import NO_OUTPUT, decode_arguments, has_lone_surrogate
from nanobot_core.governance.messages import (
    TOOL_BLOCK_TYPES,
    Message,
    block_type,
    has_tool_blocks,
    preview,
    tool_calls_of,
)
from nanobot_core.governance.stages.content import without_surrogates

__all__ = [
    "CONTINUED",
    "OTHER_BLOCKS_KEY",
    "THINKING_KEY",
    "MessagesRequest",
    "from_openai_shape",
    "is_anthropic_shape",
    "to_messages_api",
    "to_openai_shape",
]

# Where the keys of a block the OpenAI shape has no place for wait for the way back.
_EXTRA = "_anthropic_block"
_USE_KEYS = frozenset({"type", "id", "name", "input"})
_RESULT_KEYS = frozenset({"type", "tool_use_id", "content"})


def is_anthropic_shape(messages: Sequence[Any]) -> bool:
    """Whether any message holds an Anthropic ``tool_use`` or ``tool_result`` block."""
    for message in messages:  # a plain loop: this runs on every history, clean or not
        if (
            type(message) is dict
            and type(message.get("content")) is list
            and has_tool_blocks(message)
        ):
            return True
    return False


def misplaced_tool_blocks(messages: Sequence[Any]) -> list[str]:
    """A report line for each tool block a message holds that its role cannot send, which
    the OpenAI shape leaves out: a ``tool_use`` block outside an assistant message, a
    ``tool_result`` block in one. Governing then changed the history even when no stage did.
    """
    lines: list[str] = []
    for index, message in enumerate(messages):
        if type(message) is not dict or type(message.get("content")) is not list:
            continue
        role = message.get("role")
        misplaced, key = (
            ("tool_result", "tool_use_id") if role == "assistant" else ("tool_use", "id")
        )
        for number, block in enumerate(message["content"]):
            if type(block) is dict and block_type(block) == misplaced:
                lines.append(
                    f"messages[{index}]: left out the {misplaced} block content[{number}] "
                    f"(id {preview(block.get(key))}): a message with role {preview(role)} "
                    "cannot send it"
                )
    return lines


def _extras(block: dict[str, Any], known: frozenset[str]) -> dict[str, Any]:
    extra = {k: v for k, v in block.items() if k not in known}
    return {_EXTRA: extra} if extra else {}


def _call(block: dict[str, Any]) -> Message:
    arguments = block.get("input")
    if isinstance(arguments, dict):
        # Left as it is when it cannot be encoded: strip_malformed_calls repairs it, and says so.
        with contextlib.suppress(TypeError, ValueError):
            arguments = json.dumps(arguments, ensure_ascii=False, allow_nan=False)
    function = {"name": block.get("name"), "arguments": arguments}
    return {
        "id": block.get("id"),
        "type": "function",
        "function": function,
        **_extras(block, _USE_KEYS),
    }


def _result(block: dict[str, Any]) -> Message:
    return {
        "role": "tool",
        "tool_call_id": block.get("tool_use_id"),
        "content": block.get("content"),
        **_extras(block, _RESULT_KEYS),
    }


def _converted(message: Message) -> list[Message]:
    blocks = message["content"]
    others = [block for block in blocks if block_type(block) not in TOOL_BLOCK_TYPES]
    if message.get("role") == "assistant":
        calls = [_call(block) for block in blocks if block_type(block) == "tool_use"]
        # Calls the message also holds in the OpenAI form are governed (and sent) too.
        calls = [*tool_calls_of(message), *calls]
        return [{**message, "content": others or None, "tool_calls": calls}]
    results = [_result(block) for block in blocks if block_type(block) == "tool_result"]
    rest = [{**message, "content": others}] if others else []
    return [*results, *rest]


def to_openai_shape(messages: Sequence[Any]) -> list[Any]:
    """The history in the OpenAI shape (messages without tool blocks are shared, not copied)."""
    converted: list[Any] = []
    for message in messages:
        if has_tool_blocks(message):
            converted += _converted(message)
        else:
            converted.append(message)
    return converted


def _decoded_input(arguments: Any) -> dict[str, Any] | str:
    """The ``input`` object of a call's arguments, or why they cannot be one (a reason to name).

    Arguments given as a dict are the input itself. None and blank text are no
    arguments: ``{}``, with nothing lost. An escaped lone surrogate
    (``"\\ud800"``, legal JSON) would decode into a raw one, which UTF-8 cannot
    encode: those become U+FFFD, so the blocks can be sent and converting them
    again gives the same text. Arguments are decoded by `decode_arguments`,
    within governance's limits (`MAX_ARGUMENT_VALUES` values, `MAX_ENCODED_DEPTH`
    levels).
    """
    if isinstance(arguments, dict):
        return arguments
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    if not isinstance(arguments, str):
        return f"are neither a JSON object nor its text (type {type(arguments).__name__})"
    try:
        value = decode_arguments(arguments, strict=False)
    except JSONLimitError as exc:
        return f"hold {exc}"
    except ValueError as exc:
        return f"are not JSON ({exc})"
    if not isinstance(value, dict):
        return f"are {_json_kind(value)} in JSON, not an object"
    # At most `MAX_ENCODED_DEPTH` levels deep, the value encodes again on every version;
    # a RecursionError here means the caller's stack is nearly spent: it goes as it is,
    # and the provider names it if the request cannot be encoded.
    with contextlib.suppress(RecursionError):
        text = json.dumps(value, ensure_ascii=False)
        if has_lone_surrogate(text):
            value = json.loads(without_surrogates(text))
    decoded: dict[str, Any] = value
    return decoded


def _json_kind(value: Any) -> str:
    """What decoded JSON `value` is, in JSON's words (``an array``, ``null``, ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "a string" if isinstance(value, str) else "an array"


def _use_block(call: dict[str, Any], index: int | None = None) -> dict[str, Any]:
    """The ``tool_use`` block of `call`. With the `index` of its message (at the provider's
    edge), arguments that cannot be its input raise ValueError naming the message and the
    call; without, they become ``{}`` (governance repaired and reported them already)."""
    function = call.get("function") or {}
    decoded = _decoded_input(function.get("arguments"))
    if isinstance(decoded, str):
        if index is not None:
            raise ValueError(
                f"messages[{index}]: the arguments of call {preview(call.get('id'))} {decoded}"
            )
        decoded = {}
    block = {
        "type": "tool_use",
        "id": call.get("id"),
        "name": function.get("name"),
        "input": decoded,
    }
    return {**block, **call.get(_EXTRA, {})}


def _result_block(message: dict[str, Any]) -> dict[str, Any]:
    block = {
        "type": "tool_result",
        "tool_use_id": message.get("tool_call_id"),
        "content": message.get("content"),
    }
    return {**block, **message.get(_EXTRA, {})}


def _as_blocks(content: Any) -> list[Any]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else [content]


def from_openai_shape(messages: Sequence[Any]) -> list[Any]:
    """Back to Anthropic blocks: calls become ``tool_use``, each run of results one user message."""
    return _restored(messages, at_edge=False)[0]


@attrs.frozen
class _Cut:
    """Where ``messages[:prefix]`` ends in what `_restored` made of all `messages`."""

    restored: int  # the restored messages made of messages[:prefix] alone
    # Its last tool results, which the next restored message starts with (alone: a user turn).
    pending: list[dict[str, Any]]


def _restored(
    messages: Sequence[Any], *, at_edge: bool, cut: int | None = None
) -> tuple[list[Any], _Cut | None]:
    """`from_openai_shape`, and where ``messages[:cut]`` ends in it (None without `cut`).

    `at_edge`: arguments that cannot be an input raise ValueError.
    """
    restored: list[Any] = []
    results: list[dict[str, Any]] = []
    where: _Cut | None = None
    for index, message in enumerate(messages):
        if index == cut:
            where = _Cut(len(restored), list(results))
        role = message.get("role") if isinstance(message, dict) else None
        if role == "tool":
            results.append(_result_block(message))
            continue
        if results and role == "user":
            restored.append({**message, "content": [*results, *_as_blocks(message.get("content"))]})
            results = []
            continue
        if results:
            restored.append({"role": "user", "content": results})
            results = []
        if role == "assistant" and isinstance(message.get("tool_calls"), list):
            blocks = _as_blocks(message.get("content")) + [
                _use_block(c, index if at_edge else None) for c in message["tool_calls"]
            ]
            restored.append(
                {k: v for k, v in message.items() if k != "tool_calls"} | {"content": blocks}
            )
        else:
            restored.append(message)
    if cut is not None and where is None:  # the cut is at the end
        where = _Cut(len(restored), list(results))
    if results:
        restored.append({"role": "user", "content": results})
    return restored, where


# -- the Messages API request, at the provider's edge -----------------------------------------

# Roles the Messages API takes in `messages`; system text goes to the top-level `system`.
_SYSTEM_ROLES = frozenset({"system", "developer"})
# Assistant keys holding blocks to pass back as received (LiteLLM's name for them).
THINKING_KEY = "thinking_blocks"
# Blocks of a reply the OpenAI shape has no place for (server tools, ...), passed back too.
OTHER_BLOCKS_KEY = "anthropic_blocks"
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_NO_AUDIO = "[audio left out: the Messages API takes no audio]"
# Sent when a history opens with the assistant: the Messages API wants a user turn first.
CONTINUED = "(continued)"
# Blocks the Messages API takes only in user turns, and only in assistant turns (server
# tools' blocks too: ``server_tool_use``, ``web_search_tool_result``, ...).
_USER_ONLY = frozenset({"image", "document", "tool_result", "search_result"})
_THINKING = frozenset({"thinking", "redacted_thinking"})
# What a thinking block must carry to be sent back: the API checks it, and refuses it absent.
_PROOF = {"thinking": "signature", "redacted_thinking": "data"}


def _assistant_only(kind: str | None) -> bool:
    return (
        kind in _THINKING or kind == "tool_use" or str(kind).endswith(("_tool_use", "_tool_result"))
    )


@attrs.frozen
class MessagesRequest:
    """The ``system`` and ``messages`` of a Messages API request."""

    system: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    #: With `to_messages_api`'s ``prefix``: the ``messages`` the history cut there converts to.
    prefix_messages: list[dict[str, Any]] | None = None


def to_messages_api(messages: Sequence[Any], *, prefix: int | None = None) -> MessagesRequest:
    """A governed history (OpenAI shape, Anthropic blocks allowed) as a Messages API request.

    System messages become top-level ``system`` text blocks; calls become
    ``tool_use`` blocks after the assistant's ``thinking_blocks`` (passed back
    as they came, signatures included) and text; each run of tool results
    becomes ``tool_result`` blocks at the head of one user turn; images and
    files become ``image`` and ``document`` blocks; consecutive turns of one
    role are merged, and blank text (which the API refuses) is left out, as
    is any block the API refuses in that turn: one without a type, thinking
    without its signature, the assistant's own blocks in a user turn, and in
    an assistant turn a call that is not one of its ``tool_calls`` or a tool
    result (an image or a document there becomes a text saying so). The
    turns open with a user turn (`CONTINUED` when the history has none first,
    or no turn at all).
    Nothing in `messages` is changed; blocks are shared, not copied.

    A call's arguments given as a dict are its input; absent, null or blank,
    the input is ``{}``. Arguments that cannot be an input (text that is not
    JSON, nests deeper than `MAX_ENCODED_DEPTH` levels, holds more than
    `MAX_ARGUMENT_VALUES` values or is not an object) raise ValueError naming
    the message's index and the call's id, rather than send the call without
    them: governance repairs such arguments, and reports it, before they get here.

    With `prefix`, ``prefix_messages`` is what ``to_messages_api(messages[:prefix])``
    gives as ``messages``, found in the same pass (a provider compares it with the
    whole request to see where the part an earlier call sent ends): the turns of the
    cut history are the whole one's cut where that history ends, sharing their blocks.
    """
    # What slicing messages[:prefix] would keep, negative and past-the-end prefixes alike.
    cut = None if prefix is None else len(range(len(messages))[:prefix])
    restored, where = _restored(messages, at_edge=True, cut=cut)
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    # Turns of messages[:prefix] and blocks of its last one, once the loop reached its end.
    end: tuple[int, int] | None = None
    reached = False
    for number, message in enumerate(restored):
        if where is not None and number == where.restored:
            end, reached = _turns_end(turns, where.pending), True
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role in _SYSTEM_ROLES:
            system += [b for b in _edge_blocks(message.get("content")) if block_type(b) == "text"]
            continue
        if role == "assistant":
            blocks = _assistant_blocks(message)
        else:
            role, blocks = "user", _user_blocks(message.get("content"))
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            # Extended where it is (each turn's list is its own, made above): a copy for
            # each message merged took time in the square of a run of same-role messages.
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    if where is not None and not reached:  # messages[:prefix] made every restored message
        end = _turns_end(turns, where.pending)
    # Ids are renamed in order, each from what came before it: a cut history's are the same.
    turns = _with_api_ids(turns)
    kept: list[dict[str, Any]] | None = None
    if end is not None:
        count, size = end
        kept = turns[: count - 1] if count else []
        if count:
            last = turns[count - 1]
            kept.append({**last, "content": last["content"][:size]})
        kept = _opened(kept)
    elif where is not None:  # a rare result that does not lead its turn: the cut converted
        kept = to_messages_api(messages[:prefix]).messages
    return MessagesRequest(system, _opened(turns), kept)


def _opened(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`turns`, with a `CONTINUED` user turn first when they do not open with a user turn."""
    if not turns or turns[0]["role"] == "assistant":
        # The API wants a user turn first, and at least one turn: a history whose every
        # user message was blank (left out above) would otherwise send none.
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": CONTINUED}]})
    return turns


def _turns_end(
    turns: list[dict[str, Any]], pending: list[dict[str, Any]]
) -> tuple[int, int] | None:
    """How many turns a history cut here converts to, and how many blocks its last one holds.

    `turns` are those of what comes before the cut; `pending` the cut history's last
    tool results, which the message after the cut starts with (alone, they make a
    user turn of their own, or end the user turn before them). None when one of them
    is not a ``tool_result`` block (its kept keys said another type): the next
    message's results would be put before it, and the cut history is not a prefix.
    """
    count = len(turns)
    blocks = len(turns[-1]["content"]) if turns else 0
    made = _user_blocks(pending) if pending else []
    if not made:
        return count, blocks
    if any(block_type(block) != "tool_result" for block in made):
        return None
    if turns and turns[-1]["role"] == "user":
        return count, blocks + len(made)
    return count + 1, len(made)


def _api_id(raw: Any, taken: set[str], numbered: dict[str, int]) -> str:
    """An id the API takes (``[A-Za-z0-9_-]+``, unique in the request) derived from `raw`.

    The first of ``base``, ``base_2``, ``base_3``... not in `taken`. `numbered` holds, per
    base, the number last given: those below it were taken then and still are, so the
    search goes on from there. Started from 1 each time, a history whose every call has
    the same id (or none) took time in the square of its calls.
    """
    base = _ID_UNSAFE.sub("_", raw) if isinstance(raw, str) and raw else "toolu"
    number = numbered.get(base, 1)
    candidate = base if number == 1 else f"{base}_{number}"
    while candidate in taken:
        number += 1
        candidate = f"{base}_{number}"
    taken.add(candidate)
    numbered[base] = number
    return candidate


def _with_api_ids(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool ids the API accepts: other providers' characters replaced, repeats numbered.

    The API refuses an id used twice in one request, which OpenAI-shape
    histories allow across messages; each result follows its call's turn, so
    renaming a call renames the results of the next user turn with it.
    """
    taken: set[str] = set()
    numbered: dict[str, int] = {}
    renamed: dict[Any, str] = {}
    for turn in turns:
        blocks = turn["content"]
        if turn["role"] == "assistant":
            renamed = {}
            for number, block in enumerate(blocks):
                if block_type(block) != "tool_use":
                    continue
                new = _api_id(block.get("id"), taken, numbered)
                if new != block.get("id"):
                    renamed[block.get("id")] = new
                    blocks[number] = {**block, "id": new}
            continue
        for number, block in enumerate(blocks):
            if block_type(block) == "tool_result" and block.get("tool_use_id") in renamed:
                blocks[number] = {**block, "tool_use_id": renamed[block["tool_use_id"]]}
        renamed = {}
    return turns


def _kept_blocks(value: Any) -> list[dict[str, Any]]:
    """The blocks of a list kept beside the content (`THINKING_KEY`, `OTHER_BLOCKS_KEY`)."""
    return _edge_blocks(value) if isinstance(value, list) else []


def _assistant_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    thinking = [b for b in _kept_blocks(message.get(THINKING_KEY)) if block_type(b) in _THINKING]
    content = [_from_assistant(b) for b in _edge_blocks(message.get("content"))]
    uses = [b for b in content if b is not None and block_type(b) == "tool_use"]
    # A call is sent only from tool_calls, whose results governance has paired: one
    # elsewhere would have none.
    others = [
        _from_assistant(b)
        for b in _kept_blocks(message.get(OTHER_BLOCKS_KEY))
        if block_type(b) != "tool_use"
    ]
    rest = [b for b in [*content, *others] if b is not None and block_type(b) != "tool_use"]
    return thinking + rest + uses


def _from_assistant(block: dict[str, Any]) -> dict[str, Any] | None:
    """`block` as the assistant may send it: what only a user may send is named in text."""
    kind = block_type(block)
    if kind in ("image", "document"):
        return {
            "type": "text",
            "text": f"[{kind} left out: the Messages API takes it from the user]",
        }
    return None if kind in _USER_ONLY else block


def _user_side(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`blocks` without those only the assistant may send (reasoning, calls, server tools)."""
    return [b for b in blocks if not _assistant_only(block_type(b))]


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    blocks = _user_side(_edge_blocks(content))
    # The API wants a turn's tool results before anything else it says.
    results = [b for b in blocks if block_type(b) == "tool_result"]
    return results + [b for b in blocks if block_type(b) != "tool_result"] if results else blocks


def _edge_blocks(content: Any) -> list[dict[str, Any]]:
    """Content as Messages API blocks, blank text left out."""
    blocks: list[dict[str, Any]] = []
    for part in _as_blocks(content):
        block = _edge_block(part)
        if block is not None:
            blocks.append(block)
    return blocks


def _edge_block(part: Any) -> dict[str, Any] | None:
    if isinstance(part, str):
        part = {"type": "text", "text": part}
    if not isinstance(part, dict):
        return None
    kind = block_type(part)
    if kind is None:
        return None  # a block must say its type
    if kind in _PROOF:
        proof = part.get(_PROOF[kind])
        return part if isinstance(proof, str) and proof else None
    if kind == "text":
        text = part.get("text")
        return part if isinstance(text, str) and text.strip() else None
    if kind == "image_url":
        return _image(part.get("image_url"))
    if kind == "file":
        return _document(part.get("file"))
    if kind == "input_audio":
        return {"type": "text", "text": _NO_AUDIO}
    if kind == "tool_result":
        return _edge_result(part)
    return part  # Anthropic's own blocks (image, document, thinking, ...) travel as they are


def _edge_result(block: dict[str, Any]) -> dict[str, Any]:
    content = block.get("content")
    if isinstance(content, list):
        parts = _user_side(_edge_blocks(content))
        return {**block, "content": parts or NO_OUTPUT}
    if not isinstance(content, str) or not content.strip():
        return {**block, "content": NO_OUTPUT}
    return block


def _data_url(url: str) -> tuple[str, str] | None:
    """(media type, base64 data) of a ``data:...;base64,`` URL."""
    head, comma, data = url.partition(",")
    if not comma or not head.startswith("data:") or not head.endswith(";base64"):
        return None
    return head[len("data:") : -len(";base64")] or "application/octet-stream", data


def _image(image: Any) -> dict[str, Any] | None:
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str) or not url:
        return None
    data = _data_url(url)
    if data is None:
        return {"type": "image", "source": {"type": "url", "url": url}}
    media_type, payload = data
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": media_type, "data": payload},
    }


def _document(file: Any) -> dict[str, Any] | None:
    if not isinstance(file, dict):
        return None
    file_id = file.get("file_id")
    if isinstance(file_id, str) and file_id:
        return {"type": "document", "source": {"type": "file", "file_id": file_id}}
    data = _data_url(file.get("file_data") or "")
    if data is None:
        return None
    media_type, payload = data
    block: dict[str, Any] = {
        "type": "document",
        "source": {"type": "base64", "media_type": media_type, "data": payload},
    }
    if isinstance(file.get("filename"), str):
        block["title"] = file["filename"]
    return block
