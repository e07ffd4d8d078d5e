"""nanobot-ai 0.3.5 side of the prepare_call benchmark (run with nanobot-ai's python).

Each BFCL case gets its own ``nanobot.agent.tools.registry.ToolRegistry`` holding its
functions as ``Tool`` subclasses whose ``parameters`` is a plain stored dict (cheaper
than nanobot-ai's own ``@tool_parameters``, which deep-copies the schema on every
access, so the comparison does not flatter us). Then ``prepare_call(name, raw)`` is
timed once per call and repetition, with the raw JSON arguments string as input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _common import parser, write
from bfcl_cases import load_cases
from prepare_call_timing import time_prepare_calls


def _registry_factory() -> Any:
    from nanobot.agent.tools.base import Tool
    from nanobot.agent.tools.registry import ToolRegistry

    class DefinedTool(Tool):
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

        @property
        def read_only(self) -> bool:
            return True

        async def execute(self, **kwargs: Any) -> Any:
            return "ok"

    def build(functions: tuple[dict[str, Any], ...]) -> Any:
        registry = ToolRegistry()
        for definition in functions:
            registry.register(DefinedTool(definition))
        return registry

    return build


def _accepted(outcome: Any) -> bool:
    _tool, _arguments, error = outcome
    return error is None


def main() -> None:
    args = parser(__doc__.splitlines()[0])
    args.add_argument("--bfcl", type=Path, required=True)
    options = args.parse_args()
    build = _registry_factory()
    figures = time_prepare_calls(load_cases(options.bfcl), build, _accepted, options.reps)
    write(options.out, figures)


if __name__ == "__main__":
    main()
