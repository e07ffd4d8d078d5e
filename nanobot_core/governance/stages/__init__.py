"""The built-in stages, each a pure function ``(messages, ctx) -> StageOutcome``, and their table.

`BUILTIN_TABLE` is the one list of them: the default order (`BUILTIN_ORDER`),
each stage's phase and declarations, and which of them the governor's final
step runs again (`final`) are all read from it. A new built-in stage is its
module, one row here, and its tests. Every row declares the stage's options,
as a plugin's stage does: ``{}`` for a stage that reads none, so that a
``[governance.stages.<name>]`` table with any key is refused.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from nanobot_core.governance.stage import Stage, StageFunc, StageOption
from nanobot_core.governance.stages.backfill import backfill_results
from nanobot_core.governance.stages.calls import strip_malformed_calls
from nanobot_core.governance.stages.compact import COMPACT_OPTIONS, compact_results
from nanobot_core.governance.stages.content import sanitize_content
from nanobot_core.governance.stages.non_messages import drop_non_messages
from nanobot_core.governance.stages.offload import OFFLOAD_OPTIONS, offload_results
from nanobot_core.governance.stages.pairing import pair_results
from nanobot_core.governance.stages.placeholders import PLACEHOLDER_OPTIONS, strip_placeholders
from nanobot_core.governance.stages.snip import snip_history
from nanobot_core.governance.stages.user_turns import merge_user_turns

__all__ = [
    "BUILTIN_ORDER",
    "BUILTIN_TABLE",
    "BuiltinStage",
    "backfill_results",
    "builtin_stages",
    "compact_results",
    "drop_non_messages",
    "final_stages",
    "merge_user_turns",
    "offload_results",
    "pair_results",
    "sanitize_content",
    "snip_history",
    "strip_malformed_calls",
    "strip_placeholders",
]


@attrs.frozen
class BuiltinStage:
    """One row of the table: the stage as registered, and whether the final step runs it again."""

    stage: Stage
    final: bool = False


def _row(
    func: StageFunc,
    *,
    final: bool = False,
    options: Mapping[str, StageOption] | None = None,
    **declared: object,
) -> BuiltinStage:
    doc = (func.__doc__ or "").strip().splitlines()
    name: str = getattr(func, "__name__", "")
    stage = Stage(
        name=name,
        func=func,
        description=doc[0] if doc else "",
        options={} if options is None else options,
        **declared,  # type: ignore[arg-type]
    )
    return BuiltinStage(stage, final)


#: The built-in stages in their default order (DESIGN, "Names"), with their declarations.
BUILTIN_TABLE: tuple[BuiltinStage, ...] = (
    _row(
        strip_placeholders,
        phase="repair",
        acts_on=("placeholders",),
        widened_by=("patterns",),
        per_message=True,
        local=True,
        options=PLACEHOLDER_OPTIONS,
    ),
    _row(
        drop_non_messages,
        phase="repair",
        acts_on=("non_messages", "meta"),
        per_message=True,
        local=True,
        final=True,
    ),
    _row(
        strip_malformed_calls,
        phase="repair",
        acts_on=("malformed_calls",),
        local=True,
        final=True,
    ),
    _row(pair_results, phase="repair", acts_on=("stray_results",), local=True, final=True),
    _row(backfill_results, phase="repair", acts_on=("unanswered_calls",), local=True, final=True),
    _row(
        sanitize_content,
        phase="repair",
        acts_on=("dirty_text", "empty_results", "result_links"),
        per_message=True,
        local=True,
        final=True,
    ),
    _row(merge_user_turns, phase="repair", acts_on=("consecutive_users",), local=True, final=True),
    _row(
        offload_results,
        phase="budget",
        acts_on=("large_results",),
        per_message=True,
        whole_list_with=("exclude_tools",),
        options=OFFLOAD_OPTIONS,
    ),
    _row(compact_results, phase="budget", acts_on=("over_budget",), options=COMPACT_OPTIONS),
    _row(
        snip_history,
        phase="budget",
        acts_on=("over_budget",),
        cuts_to_watermark=True,
        final=True,
    ),
)

#: The names of the built-in stages, in their default order.
BUILTIN_ORDER: tuple[str, ...] = tuple(row.stage.name for row in BUILTIN_TABLE)


def builtin_stages() -> list[Stage]:
    """The built-in stages in their default order, under their DESIGN names."""
    return [row.stage for row in BUILTIN_TABLE]


def final_stages() -> list[Stage]:
    """The stages the final step runs again, in pipeline order."""
    return [row.stage for row in BUILTIN_TABLE if row.final]
