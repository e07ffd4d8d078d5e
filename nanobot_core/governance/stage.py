"""What a governance stage is: a named pure function over messages, placed by phase.

A stage function takes ``(messages, ctx)`` and returns a `StageOutcome` (or just
the list of messages, in which case the governor compares it with the input).
It must not mutate what it is given: it returns new dicts for the messages it
changes and shares the others. With nothing to do it returns the very list it
received, so that a clean history costs no copy at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import attrs

if TYPE_CHECKING:
    from nanobot_core.governance.context import StageContext

__all__ = ["PHASES", "Phase", "Stage", "StageFunc", "StageOutcome", "stage"]

Phase: TypeAlias = Literal["repair", "transform", "budget"]

#: The phases, in the order the pipeline runs them.
PHASES: tuple[Phase, ...] = ("repair", "transform", "budget")


@attrs.frozen
class StageOutcome:
    """What a stage did: the messages to hand on, whether it changed anything, and why.

    `details` become the stage's lines in the governance report; with
    ``changed=False`` the governor hands on the stage's *input* and ignores
    `messages`.
    """

    messages: list[Any]
    changed: bool = False
    details: list[str] = attrs.field(factory=list)

    @classmethod
    def unchanged(cls, messages: list[Any], *details: str) -> StageOutcome:
        """Nothing to do: hand `messages` on as they are."""
        return cls(messages=messages, changed=False, details=list(details))


StageFunc: TypeAlias = Callable[[list[Any], "StageContext"], "StageOutcome | list[Any]"]


def _names(value: Iterable[str] | str) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _check_name(_instance: Any, _attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"a stage name must be a non-empty string, got {value!r}")


def _check_phase(_instance: Any, _attribute: Any, value: Any) -> None:
    if value not in PHASES:
        raise ValueError(f"unknown phase {value!r}; expected one of {', '.join(PHASES)}")


def _check_func(_instance: Any, _attribute: Any, value: Any) -> None:
    if not callable(value):
        raise TypeError(f"a stage function must be callable, got {type(value).__name__}")


@attrs.frozen
class Stage:
    """A named governance stage, placed by `phase` and optional `before`/`after` stage names.

    Phases run in the order of `PHASES`; inside a phase, `before` and `after`
    order stages topologically (see `order_stages`). Third-party stages
    belong in ``transform`` unless they have a reason to sit elsewhere.
    """

    name: str = attrs.field(validator=_check_name)
    func: StageFunc = attrs.field(validator=_check_func)
    phase: Phase = attrs.field(default="transform", validator=_check_phase)
    before: tuple[str, ...] = attrs.field(default=(), converter=_names)
    after: tuple[str, ...] = attrs.field(default=(), converter=_names)
    description: str = ""

    def __call__(self, messages: list[Any], ctx: StageContext) -> StageOutcome | list[Any]:
        """Run the stage function."""
        return self.func(messages, ctx)


def stage(
    name: str | None = None,
    *,
    phase: Phase = "transform",
    before: Iterable[str] | str = (),
    after: Iterable[str] | str = (),
    description: str | None = None,
) -> Callable[[StageFunc], Stage]:
    """Decorate a stage function into a `Stage` (name and description default to the function's)."""

    def wrap(func: StageFunc) -> Stage:
        doc = (getattr(func, "__doc__", None) or "").strip().splitlines()
        default_name: str = getattr(func, "__name__", "")
        return Stage(
            name=name or default_name,
            func=func,
            phase=phase,
            before=_names(before),
            after=_names(after),
            description=description if description is not None else (doc[0] if doc else ""),
        )

    return wrap
