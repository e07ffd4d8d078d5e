"""A value worked out when first asked for, then kept: `Later`, and `resolved`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["Later", "resolved"]

T = TypeVar("T")

_NOT_YET: Any = object()


class Later(Generic[T]):
    """A value that `work` gives when first asked for (calling it), then kept.

    For what a call's result holds that most callers never read (a first
    call's decisions, the report of a call whose stages all left the history
    alone): a caller that never asks never pays for it.
    """

    __slots__ = ("_value", "_work")

    def __init__(self, work: Callable[[], T]) -> None:
        self._work: Callable[[], T] | None = work
        self._value: T = _NOT_YET

    def __call__(self) -> T:
        if self._work is not None:
            self._value = self._work()
            self._work = None  # what it was worked out from can go
        return self._value


def resolved(value: T | Later[T]) -> T:
    """`value`, or what it stands for when it is a `Later`."""
    return value() if isinstance(value, Later) else value
