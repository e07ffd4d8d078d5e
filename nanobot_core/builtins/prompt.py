"""Built-in plugin: the sections of the system prompt (identity, bootstrap, tool_contract, ...)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nanobot_core.hookspecs import hookimpl

if TYPE_CHECKING:
    from nanobot_core.kernel.context import PluginContext
    from nanobot_core.prompt import Section


@hookimpl
def nanobot_prompt_sections(ctx: PluginContext) -> list[Section]:
    """The five built-in sections, with order keys 100 (identity) to 500 (skills)."""
    # Imported here so that commands which never build a prompt do not pay for it.
    from nanobot_core.prompt import builtin_sections

    return builtin_sections()
