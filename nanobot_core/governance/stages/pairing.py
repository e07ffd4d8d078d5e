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

from nanobot_core._clip import quoted
from nanobot_core.governance.messages import call_id, preview, result_call_id
from nanobot_core.governance.stage import StageOutcome
from nanobot_core.governance.survey import Defect, Splice, Survey

if TYPE_CHECKING:
    from nanobot_core.governance.stage import StageContext

__all__ = ["pair_results"]


class _Pairing:
    """Decides, for every result the survey found out of place, drop it or move it back.

    Works from the survey's list of such results and of the runs that left
    calls unanswered, in the order of the history, as a left-to-right pass
    over every message would.
    """

    def __init__(self, messages: list[Any], survey: Survey) -> None:
        self.messages = messages
        self.survey = survey
        self.dropped: set[int] = set()
        self.moved_to: dict[int, list[int]] = {}  # assistant index -> stray result indices
        self.details: list[str] = []
        # call id -> assistant indices whose run ended with that call unanswered (ascending)
        self._waiting: dict[str, list[int]] = {}

    def scan(self) -> None:
        open_runs = self.survey.open_runs
        closed = 0  # open_runs[:closed] ended before the current result
        for index, assistant in self.survey.strays:
            while closed < len(open_runs) and open_runs[closed][1] < index:
                run_assistant, _, unanswered = open_runs[closed]
                for identifier in unanswered:
                    self._waiting.setdefault(identifier, []).append(run_assistant)
                closed += 1
            link = result_call_id(self.messages[index])
            if assistant is not None and self._calls_id(assistant, link):
                self._drop(index, f"dropped a duplicate result for {link!r}")
            else:
                self._place_stray(index, link)

    def _calls_id(self, assistant: int, identifier: Any) -> bool:
        calls = self.messages[assistant]["tool_calls"]
        return isinstance(identifier, str) and any(call_id(c) == identifier for c in calls)

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
            f"messages[{index}]: moved the result for {quoted(identifier)} to the run after "
            f"messages[{target}]"
        )

    def rebuilt(self, ctx: StageContext) -> list[Any]:
        """The messages without the dropped ones, moved results at the end of their new run."""
        messages = self.messages
        run_last = {assistant: last for assistant, last, _ in self.survey.open_runs}
        after = {run_last[a]: [messages[i] for i in moved] for a, moved in self.moved_to.items()}
        result = Splice(messages, ctx.facts)
        copied = 0  # messages[:copied] are decided; whole stretches in between are sliced in
        for index in sorted(self.dropped | after.keys()):
            result.copy(copied, index)
            if index not in self.dropped:
                result.add(messages[index])
            result.add(*after.get(index, ()))
            copied = index + 1
        result.copy(copied)
        return result.done()


def pair_results(messages: list[Any], ctx: StageContext) -> StageOutcome:
    """Move misplaced tool results back after their call; drop duplicates and orphans."""
    survey = ctx.survey(messages)
    if not survey.has(Defect.STRAY_RESULTS):
        return StageOutcome.unchanged(messages)
    pairing = _Pairing(messages, survey)
    pairing.scan()
    if not pairing.details:
        return StageOutcome.unchanged(messages)
    return StageOutcome(pairing.rebuilt(ctx), changed=True, details=pairing.details)
