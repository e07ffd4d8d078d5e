"""Identical calls of read-only tools within one turn: the ones past the limit are not run.

A model that calls ``read_file`` on the same file with the same arguments a
third time in one turn already has the answer in its context; running it
again only grows the history. Past ``[tools] max_identical_calls`` (default
2) such a call is answered with an error saying so. Tools that are not
read-only are never refused this way: running the tests again after an edit
is legitimate.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

__all__ = ["RepeatedCalls"]


class RepeatedCalls:
    """Counts the read-only calls of one turn by name and arguments (a limit of 0: no check)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._seen: Counter[tuple[str, str]] = Counter()

    def refusal(self, name: str, arguments: dict[str, Any]) -> str | None:
        """Count this call; the error to answer it with when it is one too many, else None.

        Arguments no JSON text holds (what a tool's own check returned: an object, a
        cycle, keys of mixed types) are not counted: such a call is never refused.
        """
        if self.limit <= 0:
            return None
        written = _written(arguments)
        if written is None:
            return None
        key = (name, written)
        self._seen[key] += 1
        if self._seen[key] <= self.limit:
            return None
        return (
            f'Error: tool "{name}" was already called with these same arguments '
            f"{self.limit} time(s) in this turn, and its result is above in the "
            "conversation: use that result instead of calling again (this call was not run; "
            "[tools] max_identical_calls)"
        )


def _no_json_form(value: object) -> Any:
    raise TypeError(f"{type(value).__name__} is not a JSON type")


def _written(arguments: dict[str, Any]) -> str | None:
    """The arguments as one JSON text, the same for the same values; None when none holds them.

    Run no code of the values' own (a ``repr``: that of a tool's object may raise, and
    one with an address in it never repeats anyway).
    """
    try:
        return json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=_no_json_form)
    except (TypeError, ValueError, RecursionError):
        # A value of no JSON type, keys that do not sort (1 and "a"), a cycle, an int
        # past the digits a str may hold, nesting past the recursion limit.
        return None
