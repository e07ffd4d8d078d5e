"""Built-in plugin: the governance stages, the offline token counter and the offload store."""

from __future__ import annotations

from nanobot_core.context import PluginContext
from nanobot_core.governance import (
    DirectoryResultStore,
    EstimateCounter,
    Stage,
    builtin_stages,
    default_store,
)
from nanobot_core.hookspecs import hookimpl

__all__ = ["nanobot_governance_stages", "nanobot_result_store", "nanobot_token_counter"]


@hookimpl
def nanobot_governance_stages(ctx: PluginContext) -> list[Stage]:
    """The nine built-in stages: six repairs, then offload, compact and snip (budget)."""
    return builtin_stages()


@hookimpl(trylast=True)
def nanobot_token_counter(ctx: PluginContext) -> EstimateCounter:
    """The default counter: an offline estimate of about four UTF-8 bytes a token."""
    return EstimateCounter()


@hookimpl(trylast=True)
def nanobot_result_store(ctx: PluginContext) -> DirectoryResultStore:
    """The default store: content-addressed files under ``<workspace>/.nanobot/cache/``."""
    return default_store(ctx.workspace)
