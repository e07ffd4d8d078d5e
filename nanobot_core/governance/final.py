"""The governor's own last step: the guarantees no configuration can switch off.

Whatever the stages did (disabled, raised, returned garbage, broke pairing),
this step runs the built-in repairs again, puts a user message first, and then
enforces the budget by snipping. On a legal history that fits, every step
finds nothing to do in the memoised survey and the history is handed on as is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from nanobot_core._containment import describe
from nanobot_core.governance.stage import StageContext, StageOutcome
from nanobot_core.governance.stages import final_stages
from nanobot_core.governance.stages.start import ensure_user_start

__all__ = ["FINAL_STAGE", "FinalStep", "final_step"]

#: The name of the governor's own entry in the report.
FINAL_STAGE = "final"

_Step = tuple[str, Callable[[list[Any], StageContext], Any]]


@attrs.frozen
class FinalStep:
    """What the final step did."""

    messages: list[Any]
    changed: bool
    details: list[str]


def _start_at_user(messages: list[Any], _ctx: StageContext) -> StageOutcome:
    fixed, note = ensure_user_start(messages)
    return StageOutcome(fixed, changed=True, details=[note]) if note else StageOutcome(messages)


def final_step(
    messages: list[Any], ctx: StageContext, options: Mapping[str, Mapping[str, Any]]
) -> FinalStep:
    """Re-check shapes, calls, pairing and text, put a user message first, then the budget."""
    details: list[str] = []
    current = messages
    for name, step in _steps():
        context = attrs.evolve(ctx, options=options[name]) if name in options else ctx
        try:
            outcome = step(current, context)
        except Exception as exc:
            details.append(f"{name} failed: {describe(exc)}")
            continue
        if outcome.changed:
            current = outcome.messages
            details += [f"{name}: {line}" for line in outcome.details]
    return FinalStep(current, current is not messages, details)


def _steps() -> list[_Step]:
    """The final stages of the table, with the user-first step before the budget ones."""
    steps: list[_Step] = []
    for stage in final_stages():
        if stage.phase == "budget" and ("start_at_user", _start_at_user) not in steps:
            steps.append(("start_at_user", _start_at_user))
        steps.append((stage.name, stage.func))
    if ("start_at_user", _start_at_user) not in steps:
        steps.append(("start_at_user", _start_at_user))
    return steps
