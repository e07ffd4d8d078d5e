"""The list a whole-list stage that declares nothing is handed: copies made as it reads.

Such a stage might edit anything in place, so it must not touch the caller's
dicts; but copying the whole history for a stage that only looks at a few
messages (or at none: it has nothing to do) would cost more than the stage.
A `Handed` list holds the originals and gives out a copy of a message (every
dict and list in it; strings are shared) the first time it is read, by
index, slice, iteration or any list method that hands items out. What it
gave out is known, so the governor can tell the copies a stage handed back
as they were from the ones it changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, SupportsIndex, overload

from nanobot_core.governance.messages import container_copy

__all__ = ["Handed"]


class Handed(list[Any]):
    """A list of messages whose items are copied on first read (see the module docstring)."""

    def __init__(self, messages: list[Any]) -> None:
        super().__init__(messages)
        #: position at hand-out time -> (the original, its copy), for every copy given out.
        self.given: dict[int, tuple[Any, Any]] = {}
        self._originals = tuple(messages)
        self._uncopied: dict[int, Any] | None = None  # id -> original, once items moved

    def _copy(self, index: int) -> Any:
        item = list.__getitem__(self, index)
        position = index % len(self) if index < 0 else index
        if position < len(self._originals) and item is self._originals[position]:
            original = True
        else:  # the stage moved items: look the item up among the originals not yet copied
            if self._uncopied is None:
                copied = {id(pair[0]) for pair in self.given.values()}
                self._uncopied = {id(m): m for m in self._originals if id(m) not in copied}
            original = self._uncopied.get(id(item)) is item
        if not original:
            return item
        copy = container_copy(item)
        list.__setitem__(self, index, copy)
        self.given[id(copy)] = (item, copy)
        return copy

    @overload
    def __getitem__(self, index: SupportsIndex) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: SupportsIndex | slice) -> Any:
        if isinstance(index, slice):
            return [self._copy(i) for i in range(*index.indices(len(self)))]
        return self._copy(int(index))

    def __iter__(self) -> Iterator[Any]:
        for index in range(len(self)):
            if index >= len(self):
                return
            yield self._copy(index)

    def __reversed__(self) -> Iterator[Any]:
        for index in range(len(self) - 1, -1, -1):
            if index < len(self):
                yield self._copy(index)

    def _all(self) -> None:
        for index in range(len(self)):
            self._copy(index)

    def copy(self) -> list[Any]:
        return list(self)

    def pop(self, index: SupportsIndex = -1) -> Any:
        self._copy(int(index))
        return super().pop(index)

    def sort(self, *args: Any, **kwargs: Any) -> None:
        self._all()
        super().sort(*args, **kwargs)

    def __add__(self, other: Any) -> list[Any]:
        return [*self, *other]

    def __mul__(self, count: SupportsIndex) -> list[Any]:
        return list(self) * count

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        return (list, (list(self),))

    def originals(self, returned: list[Any]) -> list[Any]:
        """`returned` with every copy that is still equal to its original swapped back."""
        given = self.given
        if not given:
            return returned
        result = []
        for item in returned:
            known = given.get(id(item))
            if known is not None and known[1] is item and _equal(item, known[0]):
                item = known[0]
            result.append(item)
        return result


def _equal(left: Any, right: Any) -> bool:
    try:
        return bool(left == right)
    except Exception:
        return False
