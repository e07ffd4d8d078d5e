"""nanobot-core side of the governance benchmarks (run in the bench environment).

``--history FILE``: the governor built by ``build_governor`` from a config with the
settings nanobot-ai's side uses (128,000-token window, 8,192 output tokens, 1,024
safety margin, results over 16,000 characters offloaded to the workspace store),
timed on a synthetic history with the system prompt and tool definitions passed
separately.

``--tau FILE --tools FILE``: every tau-bench conversation as it is (its system
message passed as ``system``), timed as a whole per repetition; also counts the
conversations whose governed list *is* the input list (no copy).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import (
    load_json,
    parser,
    peak_extra_bytes,
    silence_structlog,
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


def _tau(
    govern: Govern, tau_file: Path, tools_file: Path, reps: int, memory: bool
) -> dict[str, Any]:
    text = tau_file.read_text(encoding="utf-8")
    tools = load_json(tools_file)

    def fresh_conversations() -> list[Conversation]:
        return _conversations(json.loads(text))

    def govern_all(conversations: list[Conversation]) -> list[Messages]:
        return [govern(history, system, tools) for system, history in conversations]

    conversations = fresh_conversations()
    outputs = govern_all(conversations)
    uncopied = sum(
        out is history for out, (_s, history) in zip(outputs, conversations, strict=True)
    )
    samples = time_on_fresh_inputs(fresh_conversations, govern_all, reps)
    worst_ratio = None
    if memory:
        worst_ratio = max(
            _peak_ratio(govern, history, system, tools) for system, history in conversations
        )
    return {
        "seconds": samples,
        "conversations": len(conversations),
        "messages": sum(len(history) for _s, history in conversations),
        "uncopied": uncopied,
        "worst_peak_ratio": worst_ratio,
    }


def _peak_ratio(
    govern: Govern, history: Messages, system: str | None, tools: list[dict[str, Any]]
) -> float:
    size = len(json.dumps(history, ensure_ascii=False).encode())
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
            figures = _synthetic(govern, options.history, options.reps, options.memory)
        else:
            figures = _tau(govern, options.tau, options.tools, options.reps, options.memory)
    write(options.out, figures)


if __name__ == "__main__":
    main()
