"""A Messages API reply in the core's shape, with nothing lost.

- ``text`` blocks become the content: a string for one plain block, else
  the blocks as text parts (citations and all);
- ``thinking`` and ``redacted_thinking`` blocks are kept, as received, under
  ``thinking_blocks`` (the next request sends them back byte-identical);
- ``tool_use`` blocks become ``tool_calls`` (input as JSON arguments); the
  one a reply stopped at ``max_tokens`` (or ``model_context_window_exceeded``)
  ends with was cut by the limit, and
  its arguments say so (the input's JSON without its closing brace), so the
  runner answers it unrun instead of running a guess;
- any other block (server tools, ...) is kept under ``anthropic_blocks``;
- a block no server takes back (not an object, without a ``type``, a text
  block without its text) is dropped, named by its index in a warning
  (the core's ``sendable_parts``), so the history never holds what the next
  request would be refused for;
- ``stop_reason`` is the finish reason; usage counts every input token as
  ``prompt_tokens`` (Anthropic's ``input_tokens`` leaves out what was read
  from or written to the cache) and keeps both cache counts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from nanobot_core.governance import OTHER_BLOCKS_KEY, THINKING_KEY
from nanobot_core.providers import (
    ProviderReply,
    Usage,
    normalise_assistant_message,
    sendable_parts,
    token_count,
)

__all__ = ["parse_reply", "parse_usage"]

_THINKING = frozenset({"thinking", "redacted_thinking"})
#: The stop reasons of a reply cut off mid-way: the output limit, or the model's context
#: window filled by the request and the reply (the runner's `CUT_OFF` holds both).
_CUT_OFF = frozenset({"max_tokens", "model_context_window_exceeded"})


def parse_usage(raw: object) -> Usage:
    """Anthropic's usage object as the core's (anything malformed counts as zero)."""
    if not isinstance(raw, Mapping):
        return Usage()
    fresh, output = token_count(raw, "input_tokens"), token_count(raw, "output_tokens")
    read = token_count(raw, "cache_read_input_tokens")
    written = token_count(raw, "cache_creation_input_tokens")
    prompt = fresh + read + written
    return Usage(prompt, output, prompt + output, read, written)


def _call(block: Mapping[str, Any], *, cut: bool = False) -> dict[str, Any]:
    """The core's tool call for a ``tool_use`` block; `cut`: the output limit ended it."""
    arguments = block.get("input")
    try:
        text = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
    except (TypeError, ValueError):
        text = "{}"
    if cut:
        # The API sends the input of a block the limit cut as an object, whole-looking
        # JSON: unmarked, the runner would run it with values cut short (a file written
        # half). Unclosed, it reads as the cut arguments they are, as OpenAI's come.
        text = text[:-1]
    return {
        "id": block.get("id"),
        "type": "function",
        "function": {"name": block.get("name"), "arguments": text},
    }


def parse_reply(data: Mapping[str, Any], *, salt: str = "") -> ProviderReply:
    """The normalised reply of a Messages API response body."""
    received = data.get("content")
    blocks = sendable_parts(received) if isinstance(received, list) else []
    texts = [b for b in blocks if b.get("type") == "text"]
    thinking = [b for b in blocks if b.get("type") in _THINKING]
    uses = [b for b in blocks if b.get("type") == "tool_use"]
    # Only the last block can be the one the limit cut; a call before it was finished.
    stopped = data.get("stop_reason")
    cut = isinstance(stopped, str) and stopped in _CUT_OFF and bool(uses) and blocks[-1] is uses[-1]
    calls = [_call(b, cut=cut and b is uses[-1]) for b in uses]
    others = [b for b in blocks if b.get("type") not in _THINKING | {"text", "tool_use"}]
    content: Any = ""
    if len(texts) == 1 and set(texts[0]) <= {"type", "text"}:
        content = texts[0].get("text") if isinstance(texts[0].get("text"), str) else ""
    elif texts:
        content = texts
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if thinking:
        message[THINKING_KEY] = thinking
    if others:
        message[OTHER_BLOCKS_KEY] = others
    if calls:
        message["tool_calls"] = calls
    model, stop = data.get("model"), data.get("stop_reason")
    return ProviderReply(
        message=normalise_assistant_message(message, salt=salt),
        usage=parse_usage(data.get("usage")),
        model=model if isinstance(model, str) else None,
        finish_reason=stop if isinstance(stop, str) else None,
    )
