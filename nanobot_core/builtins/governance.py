"""Built-in plugin: the governance stages, the offline token counter and the offload store."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nanobot_core.hookspecs import hookimpl

if TYPE_CHECKING:
    from nanobot_core.governance import DirectoryResultStore, EstimateCounter, Stage
    from nanobot_core.kernel.context import PluginContext

__all__ = ["nanobot_governance_stages", "nanobot_result_store", "nanobot_token_counter"]

# The governance package is imported inside the hooks so that commands which
# never govern (tools, call, prompt) do not pay for it at start-up.


@hookimpl
def nanobot_governance_stages(ctx: PluginContext) -> list[Stage]:
    """The nine built-in stages: six repairs, then offload, compact and snip (budget)."""
    from nanobot_core.governance import builtin_stages

    return builtin_stages()


@hookimpl
def nanobot_token_counter(ctx: PluginContext) -> EstimateCounter:
    """The default counter: an offline estimate of about four UTF-8 bytes a token."""
    from nanobot_core.governance import EstimateCounter

    return EstimateCounter()


@hookimpl
def nanobot_result_store(ctx: PluginContext) -> DirectoryResultStore:
    """The default store: content-addressed files under ``<workspace>/.nanobot/cache/``."""
    from nanobot_core.governance import default_store

    return default_store(ctx.workspace, ctx.config.governance.store)
