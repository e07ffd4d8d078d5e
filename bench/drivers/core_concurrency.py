"""Concurrency benchmark: ten concurrency-safe tools that each wait 100 ms, against one call.

Run in the bench environment. Each repetition times ``Executor.run`` for one call,
then for the ten calls together (one model reply), on a fresh event loop.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, ClassVar

from _common import parser, silence_structlog, write

WAIT_SECONDS = 0.1
TOOLS = 10


def _executor() -> Any:
    from nanobot_core.tools.base import Tool
    from nanobot_core.tools.executor import Executor
    from nanobot_core.tools.registry import ToolRegistry

    class Waiting(Tool):
        read_only = True
        description = "Wait a tenth of a second, then answer."
        parameters: ClassVar[dict[str, Any]] = {
            "type": "object",
            "properties": {"label": {"type": "string"}},
        }

        def __init__(self, index: int) -> None:
            self._name = f"wait_{index}"

        @property
        def name(self) -> str:
            return self._name

        async def execute(self, *args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(WAIT_SECONDS)
            return "done"

    registry = ToolRegistry()
    for index in range(TOOLS):
        registry.add(Waiting(index))
    return Executor(registry, default_timeout=60.0)


def main() -> None:
    silence_structlog()
    options = parser(__doc__.splitlines()[0]).parse_args()
    from nanobot_core.tools.executor import ToolCallRequest

    executor = _executor()
    calls = [ToolCallRequest(f"call_{i}", f"wait_{i}", '{"label": "x"}') for i in range(TOOLS)]

    def timed(batch: list[Any]) -> float:
        start = time.perf_counter()
        outcomes = asyncio.run(executor.run(batch))
        elapsed = time.perf_counter() - start
        failed = [o.result for o in outcomes if o.is_error]
        if failed:
            raise SystemExit(f"tool calls failed: {failed}")
        return elapsed

    timed(calls)  # warm-up: schema compilation, imports
    one: list[float] = []
    ten: list[float] = []
    for _ in range(options.reps):
        one.append(timed(calls[:1]))
        ten.append(timed(calls))
    write(options.out, {"one_call_seconds": one, "ten_calls_seconds": ten})


if __name__ == "__main__":
    main()
