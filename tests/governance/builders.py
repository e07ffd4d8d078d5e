"""Message builders and small helpers for the governance unit tests."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from typing import Any

import pytest

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


#: Entries a repair takes out from between two user messages, which `merge_user_turns` then
#: merges into one: not a message, an unknown role, a placeholder, a result no call awaits,
#: an assistant message with no content whose list of calls is empty. (One whose call has no
#: name stays, saying so: see `NAMELESS_REPLY`.)
DROPPED_BETWEEN_USER_MESSAGES = [
    pytest.param(None, id="not-a-message"),
    pytest.param({"role": "critic", "content": "looks wrong"}, id="unknown-role"),
    pytest.param(
        {"role": "assistant", "content": "[Previous assistant message omitted.]"}, id="placeholder"
    ),
    pytest.param({"role": "tool", "tool_call_id": "gone", "content": "stale"}, id="orphan-result"),
    pytest.param(calls(), id="no-calls"),
]

#: An assistant message with no content whose one call has no name, and the text
#: `strip_malformed_calls` leaves of it: the notice alone.
NAMELESS_REPLY = calls(call("nameless", name=""))
NAMELESS_NOTICE = (
    "[None of the 1 tool call(s) of this reply could run. "
    "A tool call needs the name of the tool to run: call tools by their names.]"
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


class AgentSession:
    """A long synthetic coding-agent session, with a little dirt of every kind now and then."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.messages: list[Any] = []
        self.calls = 0

    def text(self, low: int, high: int) -> str:
        words = ("file", "test", "patch", "error", "token", "stage", "value", "naïve", "数据")
        return " ".join(self.rng.choice(words) for _ in range(self.rng.randint(low, high)))

    def call(self, name: str = "read_file") -> Message:
        self.calls += 1
        arguments = json.dumps({"path": f"src/f{self.calls}.py"})
        function = {"name": name, "arguments": arguments}
        return {"id": f"call_{self.calls}", "type": "function", "function": function}

    def result(self, call: Message, content: str | None = None) -> Message:
        text = self.text(10, 200) if content is None else content
        if self.rng.random() < 0.03:
            text = "line of output\n" * self.rng.randint(1_500, 5_000)  # offloaded
        name = call["function"]["name"]
        return {"role": "tool", "tool_call_id": call["id"], "name": name, "content": text}

    def turn(self, number: int) -> None:
        self.messages.append({"role": "user", "content": self.text(5, 60)})
        for _ in range(self.rng.randint(1, 3)):
            calls = [self.call() for _ in range(self.rng.randint(1, 3))]
            assistant: Message = {"role": "assistant", "content": None, "tool_calls": calls}
            if self.rng.random() < 0.3:
                assistant["reasoning_content"] = self.text(5, 40)
            self.messages.append(assistant)
            self.messages += [self.result(call) for call in calls]
        if number % 7 == 3:
            self.dirt(number // 7)
        self.messages.append({"role": "assistant", "content": self.text(5, 80)})

    def dirt(self, kind: int) -> None:
        good, bad = self.call(), self.call()
        dirt = [
            [{"role": "assistant", "content": "[Previous assistant message omitted.]"}],
            [42, {"role": "critic", "content": "noise"}],
            [{"role": "assistant", "content": "", "tool_calls": [good]}],  # unanswered
            [{"role": "tool", "tool_call_id": "call_nobody", "content": "orphan"}],
            [
                {"role": "assistant", "content": None, "tool_calls": [good]},
                self.result(good),
                self.result(good),  # answered twice
            ],
            [
                {"role": "assistant", "content": None, "tool_calls": [{**good, "id": ""}]},
                {"role": "tool", "tool_call_id": "", "content": "no id"},
            ],
            [
                {"role": "assistant", "content": None, "tool_calls": [good, bad]},
                self.result(bad),  # out of order
                self.result(good, ""),  # empty
            ],
            [{"role": "user", "content": "more \ud83d", "_meta": {"at": "t"}}],
        ]
        self.messages += dirt[kind % len(dirt)]


def agent_session(turns: int, seed: int = 7) -> list[Any]:
    """A long coding-agent history of `turns` user turns, dirty now and then, ending on a user."""
    session = AgentSession(seed)
    for number in range(turns):
        session.turn(number)
    session.messages.append({"role": "user", "content": "Please go on."})
    return session.messages
