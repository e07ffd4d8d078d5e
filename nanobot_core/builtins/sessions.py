"""Built-in plugin: the ``jsonl`` session store (a file per session in the workspace)."""

from __future__ import annotations

from typing import Any

from nanobot_core.hookspecs import hookimpl
from nanobot_core.kernel.context import PluginContext


@hookimpl
def nanobot_session_stores(ctx: PluginContext) -> list[Any]:
    """The JSON-lines file store of the workspace, under the name ``jsonl``."""
    from nanobot_core.jsonl_store import JsonlSessionStore

    return [JsonlSessionStore(ctx.workspace)]
