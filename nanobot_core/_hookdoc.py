"""Render the hook reference (docs/hooks.md) from the hookspec docstrings.

Run ``python -m nanobot_core._hookdoc > docs/hooks.md`` after changing a hook;
a test fails when the page is stale or a hook has no docstring.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from nanobot_core import hookspecs


def hook_functions() -> list[Callable[..., Any]]:
    """Every hookspec function, in the order they are defined."""
    found = [
        value
        for name, value in vars(hookspecs).items()
        if name.startswith("nanobot_") and inspect.isfunction(value)
    ]
    return sorted(found, key=lambda f: f.__code__.co_firstlineno)


def _kind(function: Callable[..., Any]) -> str:
    opts = getattr(function, f"{hookspecs.PROJECT_NAME}_spec", {}) or {}
    return "firstresult" if opts.get("firstresult") else "collect / call each"


def render_hook_reference() -> str:
    """The Markdown of docs/hooks.md."""
    lines = [
        "# Hook reference",
        "",
        "Generated from `nanobot_core/hookspecs.py` by `python -m nanobot_core._hookdoc`.",
        "Implement a hook with `@nanobot_core.hookimpl` in a module or object named by an",
        "entry point in the `nanobot.plugins` group. An implementation may accept only the",
        "arguments it needs.",
        "",
        "A plugin that leaves something out but keeps working (a tool of a server it",
        "bridges whose definition is invalid, a server that did not start) reports it",
        "with `nanobot_core.report_problem(text)` from its hook: the line is listed",
        "under the plugin's `problems` in `nanobot-core plugins` (and `--json`), with",
        "its name, distribution and version, and logged as a warning, exactly like a",
        "tool the core leaves out for an invalid schema. The plugin stays loaded, in",
        "`--strict` mode too (only a failed plugin is fatal there).",
        "",
        "| hook | kind |",
        "|---|---|",
    ]
    functions = hook_functions()
    lines += [f"| `{f.__name__}` | {_kind(f)} |" for f in functions]
    for function in functions:
        signature = str(inspect.signature(function)).replace("'", "")
        lines += ["", f"## `{function.__name__}{signature}`", "", f"Kind: {_kind(function)}.", ""]
        lines.append(inspect.cleandoc(function.__doc__ or ""))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_hook_reference(), end="")
