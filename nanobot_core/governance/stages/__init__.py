"""The built-in stages, each a pure function ``(messages, ctx) -> StageOutcome``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nanobot_core.governance.stage import Phase, Stage, StageFunc
from nanobot_core.governance.stages.backfill import backfill_results
from nanobot_core.governance.stages.calls import strip_malformed_calls
from nanobot_core.governance.stages.compact import compact_results
from nanobot_core.governance.stages.content import sanitize_content
from nanobot_core.governance.stages.non_messages import drop_non_messages
from nanobot_core.governance.stages.offload import offload_results
from nanobot_core.governance.stages.pairing import pair_results
from nanobot_core.governance.stages.placeholders import strip_placeholders
from nanobot_core.governance.stages.snip import snip_history

__all__ = [
    "BUILTIN_FUNCS",
    "backfill_results",
    "builtin_stages",
    "compact_results",
    "drop_non_messages",
    "idle_when_clean",
    "offload_results",
    "pair_results",
    "sanitize_content",
    "snip_history",
    "strip_malformed_calls",
    "strip_placeholders",
]

_BUILTINS: tuple[tuple[StageFunc, Phase], ...] = (
    (strip_placeholders, "repair"),
    (drop_non_messages, "repair"),
    (strip_malformed_calls, "repair"),
    (pair_results, "repair"),
    (backfill_results, "repair"),
    (sanitize_content, "repair"),
    (offload_results, "budget"),
    (compact_results, "budget"),
    (snip_history, "budget"),
)

#: The built-in stage functions. The governor trusts them not to mutate their input
#: (their tests pin it), so it hands them the history itself, not a defensive copy.
BUILTIN_FUNCS: frozenset[StageFunc] = frozenset(func for func, _ in _BUILTINS)


def idle_when_clean(func: StageFunc, options: Mapping[str, Any]) -> bool:
    """Whether `func` is a built-in stage sure to change nothing on a clean history that fits.

    Clean: the survey finds no defect and no result over the offload limit.
    The governor then skips such stages without calling them.
    """
    if func not in BUILTIN_FUNCS:
        return False
    return not (func is strip_placeholders and options.get("patterns"))


def builtin_stages() -> list[Stage]:
    """The built-in stages in their default order, under their DESIGN names."""
    return [
        Stage(
            name=func.__name__,
            func=func,
            phase=phase,
            description=(func.__doc__ or "").strip().splitlines()[0],
        )
        for func, phase in _BUILTINS
    ]
