"""Code that reads what a model, a session or a workspace file holds, on adversarial input.

``bench_linear(rounds)`` gives one row: for each case, the CPU time per character of
its input at three sizes, which must not grow with the size. The sizes are called in
turn, round after round, and each size's least time is kept. Each case once took
time in the square of its input:

- ``to_messages_api`` (what the ``anthropic`` provider sends, over the whole governed
  history on every request): a history whose every reply reused one call id (x7.1
  per character from 25,000 to 400,000 characters), and runs of same-role messages
  (x4.2);
- ``parse_front_matter`` (every SKILL.md, at most ``prompt.max_file_bytes``, each time
  the prompt is built): a field continued over many indented lines (x5.8).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from report import Measured, Row
from stats import cpu_times_interleaved, summarize

LENGTHS = (25_000, 100_000, 400_000)
#: The time per character at the longest length may be this many times that at the shortest.
GROWTH_LIMIT = 2.0


def _reply(call_id: str) -> list[dict[str, Any]]:
    call = {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": "ok"},
    ]


def _repeated(unit: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    """A user message, then `unit` repeated until the history's JSON is about `size` characters."""
    each = len(json.dumps(unit)) + 2
    return [{"role": "user", "content": "go"}, *(unit * max(1, size // each))]


def _history(make: Callable[[int], list[dict[str, Any]]]) -> Callable[[int], tuple[Any, int]]:
    def made(size: int) -> tuple[Any, int]:
        history = make(size)
        return history, len(json.dumps(history))

    return made


def _text(make: Callable[[int], str]) -> Callable[[int], tuple[Any, int]]:
    def made(size: int) -> tuple[Any, int]:
        text = make(size)
        return text, len(text)

    return made


def _cases() -> list[tuple[str, Callable[[int], tuple[Any, int]], Callable[[Any], object]]]:
    """(name, the input of about n characters and its length, the code it is given to)."""
    from nanobot_core.governance.anthropic import to_messages_api
    from nanobot_core.prompt.skills import parse_front_matter

    user = [{"role": "user", "content": "hi"}]
    return [
        (
            "to_messages_api: every reply reuses the call id call_0",
            _history(lambda n: _repeated(_reply("call_0"), n)),
            to_messages_api,
        ),
        (
            "to_messages_api: every reply's call id is call.0 (renamed)",
            _history(lambda n: _repeated(_reply("call.0"), n)),
            to_messages_api,
        ),
        (
            "to_messages_api: user messages in a row",
            _history(lambda n: _repeated(user, n)),
            to_messages_api,
        ),
        (
            "to_messages_api: tool results then user messages in a row",
            _history(lambda n: [*_reply("c1"), *_repeated(user, n)]),
            to_messages_api,
        ),
        (
            "to_messages_api: assistant messages in a row",
            _history(lambda n: _repeated([{"role": "assistant", "content": "a"}], n)),
            to_messages_api,
        ),
        (
            "parse_front_matter: a field continued on every line",
            _text(lambda n: "---\ndescription: a\n" + " b\n" * (n // 3) + "---\nbody"),
            parse_front_matter,
        ),
    ]


def bench_linear(rounds: int) -> list[Row]:
    """One row: the worst growth of the time per character, shortest to longest input."""
    growths: list[float] = []
    full: list[float] = []
    notes: list[str] = []
    for name, make, function in _cases():
        made = {length: make(length) for length in LENGTHS}
        # The three lengths are called in turn, round after round, so that each length's
        # least time comes from the same stretch of the machine's life as the others'.
        seconds = cpu_times_interleaved(
            {str(length): functools.partial(function, made[length][0]) for length in LENGTHS},
            rounds,
        )
        per_char = [min(seconds[str(length)]) / made[length][1] for length in LENGTHS]
        full.append(min(seconds[str(LENGTHS[-1])]) * 1000)
        growths.append(per_char[-1] / per_char[0])
        notes.append(
            f"{name}: {full[-1]:.2f} ms at {LENGTHS[-1]:,} characters; time per character "
            f"x{growths[-1]:.2f} from {LENGTHS[0]:,} to {LENGTHS[-1]:,}"
        )
    worst = max(growths)
    return [
        Row(
            benchmark="Adversarial model and session input stays linear",
            ours=Measured(f"each case, {LENGTHS[-1]:,} characters", summarize(full), "ms"),
            figure=worst,
            figure_label=f"x time per character, {LENGTHS[-1]:,} vs {LENGTHS[0]:,} (worst case)",
            target=f"<= {GROWTH_LIMIT:g}x (linear; a pass quadratic in the size gives up to 16x)",
            passed=worst <= GROWTH_LIMIT,
            notes=[
                f"CPU time (`time.process_time`); the three lengths of a case called in turn, "
                f"{rounds} rounds; each length's least time (a shared machine only adds "
                "time), and the ms figures are those least times.",
                *notes,
            ],
        )
    ]


if __name__ == "__main__":
    for row in bench_linear(15):
        print(row.benchmark, f"x{row.figure:.2f}", "passed" if row.passed else "FAILED")
        for note in row.notes:
            print(" ", note)
