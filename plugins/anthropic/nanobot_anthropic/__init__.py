"""nanobot-anthropic: the ``anthropic`` provider, Anthropic's Messages API spoken natively.

Select it with ``nanobot-core run --provider anthropic`` or ``[provider] name =
"anthropic"``. The governed history is turned into Messages API blocks by the
core's converter (``nanobot_core.governance.to_messages_api``), prompt-cache
breakpoints are placed by :mod:`nanobot_anthropic.caching`, and replies come
back in the core's shape with thinking blocks, tool calls and cache usage.
"""

from __future__ import annotations

from typing import Any

from nanobot_core import PluginContext, hookimpl

__all__ = ["nanobot_providers"]


@hookimpl
def nanobot_providers(ctx: PluginContext) -> list[Any]:
    """The Messages API provider, under the name ``anthropic``."""
    from nanobot_anthropic.provider import AnthropicProvider

    return [AnthropicProvider]
