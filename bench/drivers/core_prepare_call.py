"""nanobot-core side of the prepare_call benchmark (run in the bench environment).

Each BFCL case gets its own ``nanobot_core.tools.registry.ToolRegistry`` holding its
functions as ``Tool`` subclasses; ``prepare_call(name, raw)`` is timed once per call
and repetition, with the raw JSON arguments string as input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _common import parser, silence_structlog, write
from bfcl_cases import load_cases
from prepare_call_timing import time_prepare_calls


def _registry_factory() -> Any:
    from nanobot_core.tools.base import Tool
    from nanobot_core.tools.registry import ToolRegistry

    class DefinedTool(Tool):
        read_only = True

        def __init__(self, definition: dict[str, Any]) -> None:
            self._definition = definition

        @property
        def name(self) -> str:
            return str(self._definition["name"])

        @property
        def description(self) -> str:
            return str(self._definition["description"])

        @property
        def parameters(self) -> dict[str, Any]:
            parameters: dict[str, Any] = self._definition["parameters"]
            return parameters

        async def execute(self, *args: Any, **kwargs: Any) -> Any:
            return "ok"

    def build(functions: tuple[dict[str, Any], ...]) -> Any:
        registry = ToolRegistry()
        for definition in functions:
            registry.add(DefinedTool(definition))
        return registry

    return build


def _accepted(outcome: Any) -> bool:
    return bool(outcome.ok)


def main() -> None:
    silence_structlog()
    args = parser(__doc__.splitlines()[0])
    args.add_argument("--bfcl", type=Path, required=True)
    options = args.parse_args()
    figures = time_prepare_calls(
        load_cases(options.bfcl), _registry_factory(), _accepted, options.reps
    )
    write(options.out, figures)


if __name__ == "__main__":
    main()
