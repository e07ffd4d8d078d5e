"""nanobot-core side of the governance benchmarks (run in the bench environment).

``--history FILE``: the governor built by ``build_governor`` from a config with the
settings nanobot-ai's side uses (128,000-token window, 8,192 output tokens, 1,024
safety margin, results over 16,000 characters offloaded to the workspace store),
timed on a synthetic history with the system prompt and tool definitions passed
separately.

``--tau FILE --tools FILE``: the tau-bench conversations as they are (each system
message passed as ``system``). Those that already satisfy the governance
invariants (checked with ``nanobot_core.governance.invariants``, the test oracle)
are the clean ones: they are timed together per repetition, their governed list
must *be* the input list (no copy), and each one's peak extra memory is measured.
All conversations are timed as well, for information. tau-bench timings are CPU time.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import (
    load_json,
    parser,
    peak_extra_bytes,
    silence_structlog,
    time_alternating,
    time_on_fresh_inputs,
    write,
)
from histories import SYSTEM_PROMPT, TOOL_DEFINITIONS

Messages = list[dict[str, Any]]
Govern = Callable[[Messages, str | None, list[dict[str, Any]]], Messages]


def _governor(workspace: Path) -> Govern:
    from nanobot_core.config import Config, GovernanceConfig
    from nanobot_core.governance import build_governor

    config = Config(
        governance=GovernanceConfig(
            context_window=128_000,
            max_output=8_192,
            safety_margin=1_024,
            max_tool_result_chars=16_000,
        )
    )
    governor = build_governor(config, workspace)

    def govern(messages: Messages, system: str | None, tools: list[dict[str, Any]]) -> Messages:
        result = governor.govern(messages, system=system, tools=tools)
        governed: Messages = result.messages
        return governed

    return govern


def _synthetic(govern: Govern, history_file: Path, reps: int, memory: bool) -> dict[str, Any]:
    text = history_file.read_text(encoding="utf-8")

    def fresh_history() -> Messages:
        history: Messages = json.loads(text)
        return history

    def run(history: Messages) -> Messages:
        return govern(history, SYSTEM_PROMPT, TOOL_DEFINITIONS)

    history = fresh_history()
    output = run(history)  # warm-up; fills the result store once
    samples = time_on_fresh_inputs(fresh_history, run, reps)
    peak = peak_extra_bytes(lambda: run(history)) if memory else None
    return {
        "seconds": samples,
        "input_messages": len(history),
        "output_messages": len(output),
        "peak_extra_bytes": peak,
    }


Conversation = tuple[str | None, Messages]


def _conversations(runs: list[dict[str, Any]]) -> list[Conversation]:
    """Each run's trajectory as (system prompt, the messages after it)."""
    conversations: list[Conversation] = []
    for run in runs:
        trajectory = run["traj"]
        if trajectory and trajectory[0].get("role") == "system":
            conversations.append((trajectory[0]["content"], trajectory[1:]))
        else:
            conversations.append((None, trajectory))
    return conversations


def _is_clean(conversation: Conversation, tools: list[dict[str, Any]]) -> bool:
    """Whether the conversation already satisfies the invariants (the shared test oracle)."""
    from nanobot_core.governance.invariants import check_invariants

    system, history = conversation
    return not check_invariants(history, system=system, tools=tools)


def _tau(
    govern: Govern, tau_file: Path, tools_file: Path, reps: int, memory: bool
) -> dict[str, Any]:
    text = tau_file.read_text(encoding="utf-8")
    tools = load_json(tools_file)
    every = _conversations(json.loads(text))
    clean_indexes = [i for i, conversation in enumerate(every) if _is_clean(conversation, tools)]

    def fresh(indexes: list[int]) -> Callable[[], list[Conversation]]:
        def make() -> list[Conversation]:
            conversations = _conversations(json.loads(text))
            return [conversations[i] for i in indexes]

        return make

    def govern_all(conversations: list[Conversation]) -> list[Messages]:
        return [govern(history, system, tools) for system, history in conversations]

    def dumps_all(conversations: list[Conversation]) -> list[str]:
        return [json.dumps(history) for _system, history in conversations]

    clean = fresh(clean_indexes)()
    outputs = govern_all(clean)
    uncopied = sum(out is history for out, (_s, history) in zip(outputs, clean, strict=True))
    # json.dumps of the same messages, timed in turn with governing: a yardstick of how
    # fast the machine was at that moment. CPU time: the figure is an absolute one, and
    # the time other processes of a shared machine hold the CPU is not the governor's.
    timed = time_alternating(
        fresh(clean_indexes),
        {"govern": govern_all, "dumps": dumps_all},
        reps,
        time.process_time,
    )
    all_seconds = time_on_fresh_inputs(
        fresh(list(range(len(every)))), govern_all, reps, time.process_time
    )
    ratios = (
        [_peak_ratio(govern, history, system, tools) for system, history in clean] if memory else []
    )
    return {
        "conversations": len(every),
        "messages": sum(len(history) for _s, history in every),
        "clean_conversations": len(clean),
        "clean_messages": sum(len(history) for _s, history in clean),
        "clean_seconds": timed["govern"],
        "clean_dumps_seconds": timed["dumps"],
        "all_seconds": all_seconds,
        "clean_uncopied": uncopied,
        "peak_ratios": ratios,
    }


def _peak_ratio(
    govern: Govern, history: Messages, system: str | None, tools: list[dict[str, Any]]
) -> float:
    """Peak extra bytes of one call over the JSON size of everything it was given."""
    given = {"system": system, "messages": history, "tools": tools}
    size = len(json.dumps(given, ensure_ascii=False).encode())
    return peak_extra_bytes(lambda: govern(history, system, tools)) / size


def main() -> None:
    args = parser(__doc__.splitlines()[0])
    args.add_argument("--history", type=Path)
    args.add_argument("--tau", type=Path)
    args.add_argument("--tools", type=Path)
    args.add_argument("--memory", action="store_true", help="Also measure peak extra memory.")
    options = args.parse_args()
    silence_structlog()
    with tempfile.TemporaryDirectory() as scratch:
        govern = _governor(Path(scratch))
        if options.history is not None:
            # A governor per call: one governor keeps what it learnt of a history across
            # calls (even of equal copies of it), which would time the second call of a
            # session rather than one call on a history it has never seen.
            def fresh(
                messages: Messages, system: str | None, tools: list[dict[str, Any]]
            ) -> Messages:
                return _governor(Path(scratch))(messages, system, tools)

            figures = _synthetic(fresh, options.history, options.reps, options.memory)
        else:
            figures = _tau(govern, options.tau, options.tools, options.reps, options.memory)
    write(options.out, figures)


if __name__ == "__main__":
    main()
