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

from collections.abc import Callable, Iterator
from typing import Any, SupportsIndex, overload

from nanobot_core.governance.messages import container_copy

__all__ = ["Deferred", "Handed"]


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


class Deferred(Handed):
    """A `Handed` list whose messages are worked out only when the stage first looks at it.

    The governor hands one to a stage that declares nothing when the stages
    before it have not run yet: if the stage hands its input on without
    reading it (a no-op, or a stage with nothing to do this time), they never
    need to run on the whole history. Every list operation, reading or
    writing, first calls `produce` (once) and fills the list with its result.
    """

    def __init__(self, produce: Callable[[], list[Any]]) -> None:
        super().__init__([])
        self._produce: Callable[[], list[Any]] | None = produce

    @property
    def forced(self) -> bool:
        """Whether the messages were worked out (the stage looked)."""
        return self._produce is None

    def force(self) -> None:
        """Work the messages out now, if not done yet."""
        produce = self._produce
        if produce is None:
            return
        self._produce = None
        messages = produce()
        list.extend(self, messages)
        self._originals = tuple(messages)


def _forcing(name: str) -> Callable[..., Any]:
    inherited = getattr(Handed, name)

    def method(self: Deferred, *args: Any, **kwargs: Any) -> Any:
        self.force()
        return inherited(self, *args, **kwargs)

    method.__name__ = name
    method.__qualname__ = f"Deferred.{name}"
    method.__doc__ = inherited.__doc__
    return method


# Every method of a list, so that nothing a stage does can see the list before it is filled.
for _name in (
    "__add__",
    "__contains__",
    "__delitem__",
    "__eq__",
    "__ge__",
    "__getitem__",
    "__gt__",
    "__iadd__",
    "__imul__",
    "__iter__",
    "__le__",
    "__len__",
    "__lt__",
    "__mul__",
    "__ne__",
    "__reduce_ex__",
    "__repr__",
    "__reversed__",
    "__rmul__",
    "__setitem__",
    "__sizeof__",
    "append",
    "clear",
    "copy",
    "count",
    "extend",
    "index",
    "insert",
    "pop",
    "remove",
    "reverse",
    "sort",
):
    setattr(Deferred, _name, _forcing(_name))
del _name
