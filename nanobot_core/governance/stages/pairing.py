"""`pair_results`: every tool result in the run right after the call it answers, exactly once.

Results are matched by id within the run of tool messages directly after
their assistant message, so an id reused in a later turn is legal and both
pairs are kept. A result found anywhere else (after a user message, before a
later call, in another call's run) is moved back to the end of the run of the
nearest preceding assistant message with an unanswered call of that id; when
there is none it is dropped. A second result for an already answered call in
the same run is dropped as a duplicate (the first one is kept).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nanobot_core.governance.messages import call_id, preview, role_of
from nanobot_core.governance.stage import StageOutcome
from nanobot_core.governance.survey import Defect

if TYPE_CHECKING:
    from nanobot_core.governance.context import StageContext

__all__ = ["pair_results"]


class _Pairing:
    """One left-to-right pass deciding, for every tool message, keep, move or drop."""

    def __init__(self, messages: list[Any]) -> None:
        self.messages = messages
        self.dropped: set[int] = set()
        self.moved_to: dict[int, list[int]] = {}  # assistant index -> stray result indices
        self.run_end: dict[int, int] = {}  # index of a run's last message -> its assistant
        self.details: list[str] = []
        # call id -> assistant indices whose run ended with that call unanswered (ascending)
        self._waiting: dict[str, list[int]] = {}

    def scan(self) -> None:
        assistant: int | None = None
        pending: set[str] = set()
        for index, message in enumerate(self.messages):
            if role_of(message) == "tool":
                identifier = message.get("tool_call_id")
                if assistant is not None and isinstance(identifier, str) and identifier in pending:
                    pending.discard(identifier)
                elif assistant is not None and self._calls_id(assistant, identifier):
                    self._drop(index, f"dropped a duplicate result for {identifier!r}")
                else:
                    self._place_stray(index, identifier)
                continue
            if assistant is not None:
                self._close_run(assistant, index - 1, pending)
            assistant, pending = None, set()
            if role_of(message) == "assistant" and isinstance(message.get("tool_calls"), list):
                assistant = index
                pending = {i for c in message["tool_calls"] if (i := call_id(c))}
        if assistant is not None:
            self._close_run(assistant, len(self.messages) - 1, pending)

    def _calls_id(self, assistant: int, identifier: Any) -> bool:
        calls = self.messages[assistant]["tool_calls"]
        return isinstance(identifier, str) and any(call_id(c) == identifier for c in calls)

    def _close_run(self, assistant: int, last: int, pending: set[str]) -> None:
        self.run_end[last] = assistant
        for identifier in pending:
            self._waiting.setdefault(identifier, []).append(assistant)

    def _drop(self, index: int, why: str) -> None:
        self.dropped.add(index)
        self.details.append(f"messages[{index}]: {why}")

    def _place_stray(self, index: int, identifier: Any) -> None:
        waiting = self._waiting.get(identifier) if isinstance(identifier, str) else None
        if not waiting:
            self._drop(index, f"dropped a result for {preview(identifier)}: no call awaits it")
            return
        target = waiting.pop()
        self.dropped.add(index)
        self.moved_to.setdefault(target, []).append(index)
        self.details.append(
            f"messages[{index}]: moved the result for {identifier!r} to the run after "
            f"messages[{target}]"
        )

    def rebuilt(self) -> list[Any]:
        result: list[Any] = []
        for index, message in enumerate(self.messages):
            if index not in self.dropped:
                result.append(message)
            assistant = self.run_end.get(index)
            if assistant is not None:
                result += [self.messages[i] for i in self.moved_to.get(assistant, ())]
        return result


def pair_results(messages: list[Any], ctx: StageContext) -> StageOutcome:
    """Move misplaced tool results back after their call; drop duplicates and orphans."""
    if not ctx.survey(messages).has(Defect.STRAY_RESULTS):
        return StageOutcome.unchanged(messages)
    pairing = _Pairing(messages)
    pairing.scan()
    if not pairing.details:
        return StageOutcome.unchanged(messages)
    return StageOutcome(pairing.rebuilt(), changed=True, details=pairing.details)
