"""The system prompt: sections from plugins, the builder that joins them, the runtime block."""

from __future__ import annotations

from nanobot_core.config import Config
from nanobot_core.kernel.records import builtin_info
from nanobot_core.prompt.builder import SEPARATOR, BuiltPrompt, PromptBuilder, SectionReport
from nanobot_core.prompt.builtin_sections import BUILTIN_SECTION_NAMES, builtin_sections
from nanobot_core.prompt.runtime import (
    RUNTIME_BLOCK_CLOSE,
    RUNTIME_BLOCK_OPEN,
    append_runtime_block,
    build_runtime_block,
)
from nanobot_core.prompt.section import Section, SectionContext

__all__ = [
    "BUILTIN_PLUGIN_NAME",
    "BUILTIN_SECTION_NAMES",
    "RUNTIME_BLOCK_CLOSE",
    "RUNTIME_BLOCK_OPEN",
    "SEPARATOR",
    "BuiltPrompt",
    "PromptBuilder",
    "Section",
    "SectionContext",
    "SectionReport",
    "append_runtime_block",
    "build_default_prompt_builder",
    "build_runtime_block",
    "builtin_sections",
]

# The name the plugin manager registers nanobot_core.builtins.prompt under.
BUILTIN_PLUGIN_NAME = "builtin:prompt"


def build_default_prompt_builder(config: Config) -> PromptBuilder:
    """A builder over the built-in sections only, without the plugin manager."""
    owner = builtin_info(BUILTIN_PLUGIN_NAME)
    return PromptBuilder([(s, owner) for s in builtin_sections()], config=config)
