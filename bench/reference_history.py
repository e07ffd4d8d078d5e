"""The synthetic history the governance-v2 targets were measured on, message for message.

The issue's figures (a 5,000-message session of 1,052 calls, nanobot-ai at
49 ms for 10,000 messages) come from the reference measurements, whose
generator this module reproduces exactly (same seed, same draws in the same
order, so the same messages): turns of one user message, an assistant message
with one to three calls, their results (200 B to 5 kB of code, one in about
thirty of 60 kB), and a short answer; now and then an orphan result or a call
left unanswered. It is cleaner and lighter than `histories.generate_history`
(whose dirt and 60-200 kB results are harder on both sides), so the benchmarks
report both. Stdlib-only, like `histories`, so nanobot-ai's environment can
import it.
"""

from __future__ import annotations

import json
import random
from typing import Any

__all__ = ["REFERENCE_SEED", "reference_history"]

Message = dict[str, Any]

REFERENCE_SEED = 7
_TOOLS = ("read_file", "grep", "list_dir", "exec")
_RESULT_SIZES = (200, 800, 2_000, 5_000)
_LARGE_RESULT = 60_000
_LARGE_SHARE = 0.03  # a result is large when a draw falls under this
_DIRT_SHARE = 0.02  # the chance of each kind of dirt after a turn


def _turn(draw: random.Random, turn: int) -> list[Message]:
    words = "please look at the code " * draw.randint(2, 30)
    messages: list[Message] = [{"role": "user", "content": f"step {turn}: {words}"}]
    calls = []
    for slot in range(draw.choice([1, 1, 2, 3])):
        arguments = json.dumps({"path": f"src/m{turn}_{slot}.py"})
        function = {"name": draw.choice(_TOOLS), "arguments": arguments}
        calls.append({"id": f"call_{turn}_{slot}", "type": "function", "function": function})
    messages.append({"role": "assistant", "content": "", "tool_calls": calls})
    for call in calls:
        size = draw.choice(_RESULT_SIZES) if draw.random() > _LARGE_SHARE else _LARGE_RESULT
        result = "x = 1\n" * (size // 6)
        name = call["function"]["name"]
        messages.append(
            {"role": "tool", "tool_call_id": call["id"], "name": name, "content": result}
        )
    messages.append({"role": "assistant", "content": "I looked at it. " * draw.randint(2, 20)})
    if draw.random() < _DIRT_SHARE:
        orphan = {"role": "tool", "tool_call_id": f"orphan_{turn}", "name": "grep"}
        messages.append({**orphan, "content": "stale"})
    if draw.random() < _DIRT_SHARE:
        dangling = {"name": "exec", "arguments": "{}"}
        call = {"id": f"dangling_{turn}", "type": "function", "function": dangling}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
    return messages


def reference_history(messages: int, seed: int = REFERENCE_SEED) -> list[Message]:
    """The first `messages` messages of the reference history (its system prompt first)."""
    draw = random.Random(seed)
    history: list[Message] = [{"role": "system", "content": "You are a coding agent. " * 40}]
    turn = 0
    while len(history) < messages:
        turn += 1
        history += _turn(draw, turn)
    return history[:messages]
