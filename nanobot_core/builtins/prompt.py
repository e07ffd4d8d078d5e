"""Built-in plugin: the sections of the system prompt (identity, bootstrap, tool_contract, ...)."""

from __future__ import annotations

from nanobot_core.context import PluginContext
from nanobot_core.hookspecs import hookimpl
from nanobot_core.prompt import Section, builtin_sections


@hookimpl
def nanobot_prompt_sections(ctx: PluginContext) -> list[Section]:
    """The five built-in sections, with order keys 100 (identity) to 500 (skills)."""
    return builtin_sections()
