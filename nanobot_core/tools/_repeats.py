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
        """Count this call; the error to answer it with when it is one too many, else None."""
        if self.limit <= 0:
            return None
        key = (name, json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=repr))
        self._seen[key] += 1
        if self._seen[key] <= self.limit:
            return None
        return (
            f'Error: tool "{name}" was already called with these same arguments '
            f"{self.limit} time(s) in this turn, and its result is above in the "
            "conversation: use that result instead of calling again (this call was not run; "
            "[tools] max_identical_calls)"
        )
