"""Message builders and small helpers for the governance unit tests."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from nanobot_core.config import GovernanceConfig
from nanobot_core.governance import Budget, StageContext, StageOutcome
from nanobot_core.governance.store import ResultStore

Message = dict[str, Any]


def user(text: str = "Please check my reservation.") -> Message:
    return {"role": "user", "content": text}


def system(text: str = "You are a careful assistant.") -> Message:
    return {"role": "system", "content": text}


def say(text: str = "Let me look that up.") -> Message:
    return {"role": "assistant", "content": text}


def call(call_id: Any = "call_1", name: Any = "get_user", arguments: Any = '{"id": 1}') -> Message:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def calls(*tool_calls: Message, content: Any = None) -> Message:
    return {"role": "assistant", "content": content, "tool_calls": list(tool_calls)}


def result(call_id: Any = "call_1", content: Any = '{"name": "Mia"}', **extra: Any) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": content, **extra}


def turn(index: int, result_text: str = "ok") -> list[Message]:
    """One legal turn: a user message, a call, its result, an answer."""
    identifier = f"call_{index}"
    return [
        user(f"question {index}"),
        calls(call(identifier, "lookup", f'{{"n": {index}}}')),
        result(identifier, result_text),
        say(f"answer {index}"),
    ]


def context(
    *,
    options: dict[str, Any] | None = None,
    budget: int | None = None,
    store: ResultStore | None = None,
    max_tool_result_chars: int = 16_000,
    fixed_tokens: int = 0,
    low_watermark: float = 0.7,
) -> StageContext:
    """A stage context with the default configuration, adjusted where asked."""
    config = GovernanceConfig(
        max_tool_result_chars=max_tool_result_chars, low_watermark=low_watermark
    )
    return StageContext(
        options=options or {},
        budget=Budget(budget) if budget is not None else Budget.from_config(config),
        store=store,
        config=config,
        system_tokens=fixed_tokens,
    )


Stagefunc = Callable[[list[Any], StageContext], StageOutcome]


def run_pure(func: Stagefunc, messages: list[Any], ctx: StageContext | None = None) -> StageOutcome:
    """Run a stage and assert it left its input (list and everything inside) as it was."""
    snapshot = copy.deepcopy(messages)
    identities = [id(m) for m in messages]
    outcome = func(messages, ctx or context())
    assert messages == snapshot, "the stage mutated its input"
    assert [id(m) for m in messages] == identities, "the stage reordered its input list"
    return outcome
