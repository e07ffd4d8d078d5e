"""Built-in plugin: the ``openai`` provider (any OpenAI-compatible chat-completions endpoint)."""

from __future__ import annotations

from typing import Any

from nanobot_core.hookspecs import hookimpl
from nanobot_core.kernel.context import PluginContext


@hookimpl
def nanobot_providers(ctx: PluginContext) -> list[Any]:
    """The OpenAI-compatible HTTP provider, under the name ``openai``."""
    from nanobot_core.providers.openai import OpenAIProvider

    return [OpenAIProvider]
