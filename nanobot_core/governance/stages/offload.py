"""`offload_results` (budget phase): huge tool results replaced, in the copy, by a file reference.

A result longer than ``max_tool_result_chars`` is saved in the result store
(by default ``<workspace>/.nanobot/cache/tool-results/<sha256>.txt``) and the
model copy gets a notice instead: the path to pass to ``read_file``, the
original size, and the head and tail of the result. The persisted history
keeps the full result, so the cache can always be rebuilt. When the store
fails (or there is none) the result is truncated head and tail instead, and
the report says why. Option ``exclude_tools``: tool names never offloaded.
"""

from __future__ import annotations

import re
import reprlib
from typing import TYPE_CHECKING, Any

from nanobot_core._containment import contained
from nanobot_core.governance.messages import CallNames, content_text
from nanobot_core.governance.stage import StageOption, StageOutcome
from nanobot_core.governance.truncation import truncate_middle

if TYPE_CHECKING:
    from nanobot_core.governance.stage import StageContext

__all__ = [
    "OFFLOAD_OPTIONS",
    "OFFLOAD_PREFIX",
    "offload_notice",
    "offload_results",
    "offloaded_chars",
    "offloaded_path",
]

OFFLOAD_PREFIX = "[Tool result saved to a file"
_PATH_IN_NOTICE = re.compile(r'read_file\(path="([^"\n]+)"\)')
_SIZE_IN_NOTICE = re.compile(re.escape(OFFLOAD_PREFIX) + r": (\d{1,20}) characters")
# The part of a notice that previews the result, at most (head and tail together).
PREVIEW_CHARS = 2_000

#: What ``[governance.stages.offload_results]`` may hold (see `Stage.options`).
OFFLOAD_OPTIONS: dict[str, StageOption] = {
    "exclude_tools": StageOption(list[str], "tools whose results are never offloaded"),
}


def offload_notice(text: str, path: str, limit: int) -> str:
    """The text that replaces a result saved at `path` (within `limit` characters when possible)."""
    header = (
        f"{OFFLOAD_PREFIX}: {len(text)} characters, too long to show here. "
        f'Read it with read_file(path="{path}") and start_char=0, a page of characters at a '
        "time; each page ends with the start_char to continue from. Its start and end:]\n"
    )
    room = min(PREVIEW_CHARS, limit - len(header))
    return header + truncate_middle(text, max(room, 0), "not shown")


def offloaded_path(text: str) -> str | None:
    """The path inside an offload notice, or None when `text` is not one."""
    if not text.startswith(OFFLOAD_PREFIX):
        return None
    found = _PATH_IN_NOTICE.search(text, 0, 600)
    return found.group(1) if found else None


def offloaded_chars(text: str) -> int | None:
    """The size of the result an offload notice stands for, or None when `text` is not one."""
    found = _SIZE_IN_NOTICE.match(text)
    return int(found.group(1)) if found else None


def _tool_name(messages: list[Any], index: int, call_names: CallNames) -> str | None:
    name = messages[index].get("name")
    if isinstance(name, str) and name:
        return name
    return call_names(index)


def offload_results(messages: list[Any], ctx: StageContext) -> StageOutcome:
    """Save tool results over the size limit in the store; the copy keeps a reference."""
    limit = ctx.config.max_tool_result_chars
    # The largest result is among the list's totals: no survey of its runs is needed.
    if ctx.facts.totals(messages)[2] <= limit:
        return StageOutcome.unchanged(messages)
    excluded = set(ctx.option("exclude_tools", ()))
    call_names = CallNames(messages)
    known = ctx.facts.aligned(messages)
    result = list(messages)
    replaced = list(known)
    details: list[str] = []
    # The survey's size of a result's text is its length (0 for anything but a result).
    for index in [i for i, fact in enumerate(known) if fact[5] > limit]:
        message = messages[index]
        text = content_text(message.get("content"))
        if text is None or len(text) <= limit or text.startswith(OFFLOAD_PREFIX):
            continue
        if excluded and _tool_name(messages, index, call_names) in excluded:
            continue
        replacement, note = _offloaded(text, limit, ctx)
        replaced[index] = ctx.facts.replace_content(message, replacement, known[index])
        result[index] = replaced[index][0]
        details.append(f"messages[{index}]: {note}")
    if not details:
        return StageOutcome.unchanged(messages)
    ctx.facts.note(result, replaced)
    return StageOutcome(result, changed=True, details=details)


def _offloaded(text: str, limit: int, ctx: StageContext) -> tuple[str, str]:
    if ctx.store is None:
        reason = "no result store is configured"
    else:
        try:
            path = ctx.store.put(text)
        except BaseException as exc:  # a plugin's store: contained like any plugin code
            reason = f"the store failed: {contained(exc)}"
        else:
            if type(path) is str and _PATH_IN_NOTICE.fullmatch(f'read_file(path="{path}")'):
                return offload_notice(text, path, limit), f"{len(text)} characters saved to {path}"
            # The notice must hand the model a path it can read, and `offloaded_path` read back.
            reason = f"the store answered {_shown(path)}, not a path"
    cut = truncate_middle(text, limit, f"cut: the full result could not be saved ({reason})")
    return cut, f"{len(text)} characters truncated head and tail to {len(cut)}: {reason}"


def _shown(value: Any) -> str:
    """A store's answer as a report shows it: short, on one line."""
    if type(value) is not str:
        return f"{type(value).__name__} {reprlib.repr(value)}"
    return "an empty path" if not value else reprlib.repr(value)
