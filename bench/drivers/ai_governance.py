"""nanobot-ai 0.3.5 side of the governance benchmark (run with nanobot-ai's python).

What is timed: ``ContextGovernor.prepare_for_model`` then ``ContextGovernor.fit_to_budget``
on ``[system] + history``, with the settings our side uses: a 128,000-token window,
8,192 output tokens, its fixed 1,024-token safety buffer, results over 16,000
characters offloaded to files under the workspace. Its tokenizer loader is
stubbed to fail, so every estimate takes its own offline fallback (UTF-8 bytes)
instead of retrying a download of the tiktoken encoding on each call.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from _common import parser, peak_extra_bytes, time_on_fresh_inputs, write
from histories import SYSTEM_PROMPT, TOOL_DEFINITIONS

CONTEXT_WINDOW = 128_000
MAX_OUTPUT = 8_192
MAX_TOOL_RESULT_CHARS = 16_000


def _offline_tokenizer() -> Any:
    raise RuntimeError("tokenizer disabled for the benchmark: use the offline estimate")


def _governor(workspace: Path) -> Any:
    import nanobot.utils.helpers as helpers
    from loguru import logger
    from nanobot.agent.context_governance import ContextGovernanceConfig, ContextGovernor
    from nanobot.agent.tools.registry import ToolRegistry

    helpers._get_token_encoding = _offline_tokenizer
    logger.remove()  # its repair warnings would otherwise be printed on every call
    config = ContextGovernanceConfig(
        provider=SimpleNamespace(generation=SimpleNamespace(max_tokens=MAX_OUTPUT)),
        model="bench",
        tools=ToolRegistry(),
        workspace=workspace,
        session_key="bench",
        max_tool_result_chars=MAX_TOOL_RESULT_CHARS,
        context_window_tokens=CONTEXT_WINDOW,
        max_tokens=MAX_OUTPUT,
    )
    governor = ContextGovernor()

    def govern(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        prepared = governor.prepare_for_model(config, messages)
        fitted: list[dict[str, Any]] = governor.fit_to_budget(
            config, prepared, tool_definitions=TOOL_DEFINITIONS
        )
        return fitted

    return govern


def main() -> None:
    args = parser(__doc__.splitlines()[0])
    args.add_argument("--history", type=Path, required=True)
    args.add_argument("--workspace", type=Path)
    args.add_argument("--memory", action="store_true", help="Also measure peak extra memory.")
    options = args.parse_args()
    text = options.history.read_text(encoding="utf-8")

    def fresh_messages() -> list[dict[str, Any]]:
        return [{"role": "system", "content": SYSTEM_PROMPT}, *json.loads(text)]

    with tempfile.TemporaryDirectory() as scratch:
        govern = _governor(options.workspace or Path(scratch))
        messages = fresh_messages()
        output = govern(messages)  # warm-up; also writes the offloaded files once
        samples = time_on_fresh_inputs(fresh_messages, govern, options.reps)
        peak = peak_extra_bytes(lambda: govern(messages)) if options.memory else None
    write(
        options.out,
        {
            "seconds": samples,
            "input_messages": len(messages),
            "output_messages": len(output),
            "peak_extra_bytes": peak,
        },
    )


if __name__ == "__main__":
    main()
