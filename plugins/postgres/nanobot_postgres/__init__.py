"""nanobot-postgres: sessions and offloaded results in PostgreSQL, for many workers.

``[sessions] store = "postgres"`` with ``[sessions.postgres] dsn`` (or
``NANOBOT_POSTGRES_DSN``). See docs/scale-out.md in the nanobot-core
repository for running many workers.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from nanobot_core import PluginContext, ToolCallEvent, hookimpl, source_prefix

from nanobot_postgres.store import PostgresSessionStore

__all__ = ["PostgresSessionStore", "store_for"]

__version__ = "0.1.0"

#: The settings of `[sessions.postgres]` a store is made with, by their config keys.
_KEYS = tuple(
    f"sessions.postgres.{key}"
    for key in ("dsn", "pool_size", "connect_timeout", "query_timeout", "results")
)
# One store (one pool) per configuration per process, shared by every hook.
_STORES: dict[tuple[Any, ...], PostgresSessionStore] = {}
_GUARD = threading.Lock()


def store_for(ctx: PluginContext) -> PostgresSessionStore:
    """The process's store for the DSN and pool settings of `ctx`'s config."""
    config = ctx.config.sessions.postgres
    # Results go through the pool only when this plugin's store keeps the sessions.
    results = _uses_postgres(ctx)
    # Where the settings were set is part of the key: a refusal of one names that source.
    sources = tuple(source_prefix(config=ctx.config, keys=[key]) for key in _KEYS)
    key = (
        config.dsn,
        config.pool_size,
        config.connect_timeout,
        config.query_timeout,
        results,
        sources,
    )
    with _GUARD:
        if key not in _STORES:
            _STORES[key] = PostgresSessionStore(
                config.dsn,
                pool_size=config.pool_size,
                connect_timeout=config.connect_timeout,
                query_timeout=config.query_timeout,
                results=results,
                config=ctx.config,
            )
        return _STORES[key]


def _uses_postgres(ctx: PluginContext) -> bool:
    sessions = ctx.config.sessions
    return sessions.store == PostgresSessionStore.name and sessions.postgres.results


@hookimpl
def nanobot_session_stores(ctx: PluginContext) -> list[Any]:
    """The ``postgres`` store (it connects on first use)."""
    return [store_for(ctx)]


@hookimpl
def nanobot_result_store(ctx: PluginContext) -> Any:
    """Offloaded results in the database too, when sessions are there (and results not off)."""
    if not _uses_postgres(ctx):
        return None
    from nanobot_postgres.results import PostgresResultStore

    return PostgresResultStore(store_for(ctx), Path(ctx.workspace))


@hookimpl
def nanobot_before_tool_call(ctx: PluginContext, call: ToolCallEvent) -> str | None:
    """Before ``read_file`` of an offloaded result missing here, fetch it from the database."""
    if call.tool != "read_file" or not _uses_postgres(ctx):
        return None
    from nanobot_postgres.results import PostgresResultStore, fetch_into_cache

    path = call.arguments.get("path") if isinstance(call.arguments, dict) else None
    try:
        fetch_into_cache(
            PostgresResultStore(store_for(ctx), Path(ctx.workspace)), ctx.workspace, path
        )
    except Exception:  # the read then reports the missing file as usual
        return None
    return None
