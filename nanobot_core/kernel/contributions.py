"""Contributions: adapting what a hook returned into named items, and resolving name clashes.

Adapting turns one plugin's return value into ``(name, item)`` pairs or raises
`ContributionError` saying which item is wrong (an adapter that raises `_LeftOut`
leaves out that item alone, said as one of the plugin's problems). Resolving walks
every plugin's items in canonical order: the first owner of a name wins, except that
a plugin named in ``plugins.overrides`` may take a built-in's name; the loser is kept,
marked shadowed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from nanobot_core._containment import describe
from nanobot_core._logging import get_logger
from nanobot_core.errors import PluginError
from nanobot_core.kernel.context import PluginContext
from nanobot_core.kernel.records import Contribution, Kind, PluginInfo, canonical_name

__all__ = [
    "KIND_HOOKS",
    "ContributionError",
    "adapt_all",
    "override_keys",
    "resolve",
]

log = get_logger("nanobot_core.kernel")

KIND_HOOKS: dict[Kind, str] = {
    "tool": "nanobot_tools",
    "stage": "nanobot_governance_stages",
    "section": "nanobot_prompt_sections",
    "provider": "nanobot_providers",
    "store": "nanobot_session_stores",
}


class ContributionError(PluginError):
    """A plugin's contribution is unusable; the message says which item and why."""


class _LeftOut(Exception):
    """Raised by an adapter: this item alone is unusable; the plugin's others are kept.

    `line`, when the adapter could name the item, is the whole problem listed, and
    `name` that name.
    """

    def __init__(self, reason: str, *, line: str | None = None, name: str | None = None) -> None:
        super().__init__(reason)
        self.line = line
        self.name = name


def adapt_all(
    kind: Kind, value: Any, ctx: PluginContext
) -> tuple[list[tuple[str, Any]], list[tuple[str, str | None]]]:
    """The named items in one plugin's return value for a collecting hook of `kind`.

    Also what was left out of it, one ``(line, name)`` per item an adapter refused with
    `_LeftOut`: the line for the caller to list among the plugin's problems, the item's
    name when the adapter could tell it (else None).
    """
    if value is None:
        return [], []
    if not isinstance(value, list | tuple):
        raise ContributionError(f"returned {type(value).__name__}, expected a list")
    adapted: list[tuple[str, Any]] = []
    left_out: list[tuple[str, str | None]] = []
    for index, raw in enumerate(value):
        try:
            item = _ADAPTERS[kind](raw, ctx)
        except _LeftOut as exc:
            line = exc.line or f"{KIND_HOOKS[kind]} item {index} ({_short(raw)}) left out: {exc}"
            left_out.append((line, exc.name))
            continue
        except Exception as exc:
            raise ContributionError(f"item {index} ({_short(raw)}): {describe(exc)}") from exc
        if item is None:  # a tool whose enabled(ctx) said no
            continue
        # A tool's is the name read as it was loaded (`LoadedTool.name`), not read again.
        name = getattr(item, "name", None)
        if not isinstance(name, str) or not name:
            raise ContributionError(f"item {index} ({_short(raw)}) has no usable name")
        adapted.append((name, item))
    return adapted, left_out


def resolve(
    kind: Kind, gathered: list[Contribution], overrides: dict[str, list[str]]
) -> list[Contribution]:
    """Every contribution in canonical order, the losers of a name clash marked shadowed."""
    owners: dict[str, Contribution] = {}
    resolved: list[Contribution] = []
    for contribution in gathered:
        owner = owners.get(contribution.name)
        if owner is None:
            owners[contribution.name] = contribution
            resolved.append(contribution)
            continue
        if (
            owner.plugin.builtin
            and not contribution.plugin.builtin
            and _may_override(overrides, contribution.plugin, contribution.name)
        ):
            resolved[resolved.index(owner)] = attrs.evolve(
                owner, shadowed_by=contribution.plugin.name
            )
            owners[contribution.name] = contribution
            resolved.append(contribution)
            log.warning(
                "built-in overridden by configuration",
                kind=kind,
                name=contribution.name,
                plugin=contribution.plugin.describe(),
            )
            continue
        resolved.append(attrs.evolve(contribution, shadowed_by=owner.plugin.name))
        log.warning(
            "name clash: first contribution wins",
            kind=kind,
            name=contribution.name,
            winner=owner.plugin.describe(),
            loser=contribution.plugin.describe(),
            reason="built-in names are protected"
            if owner.plugin.builtin
            else "ordered by distribution name, then entry-point name",
        )
    return resolved


def _may_override(overrides: dict[str, list[str]], plugin: PluginInfo, name: str) -> bool:
    return any(name in overrides.get(key, ()) for key in override_keys(plugin))


def override_keys(plugin: PluginInfo) -> frozenset[str]:
    """The ``plugins.overrides`` keys that name `plugin`: its name and its distribution's."""
    dist = plugin.distribution or ""
    return frozenset(key for key in (plugin.name, dist, canonical_name(dist)) if key)


def _short(value: Any) -> str:
    text = getattr(value, "__qualname__", None) or type(value).__name__
    return str(text)[:80]


def _adapt_tool(raw: Any, ctx: PluginContext) -> Any:
    """The tool `raw` stands for, read once (a `LoadedTool`, its schema compiled), or None."""
    from nanobot_core.tools.base import ToolAttributeError, ToolFlagError, load_tool
    from nanobot_core.tools.registry import LoadedTool

    try:
        loaded = load_tool(raw, ctx)
    except ToolFlagError as exc:
        # This tool alone, as for a bad schema: each of its calls would be refused.
        line = f"tool {exc.tool!r} left out: {exc.problem}"
        raise _LeftOut(str(exc), line=line, name=exc.tool) from None
    except ToolAttributeError as exc:
        # This tool alone too: a property of one tool that raises is no fault of the others.
        line = f"{exc.label} left out: {exc.problem}"
        raise _LeftOut(str(exc), line=line, name=exc.tool) from None
    if loaded is None:
        return None
    return LoadedTool.of(*loaded)


def _adapt_stage(raw: Any, ctx: PluginContext) -> Any:
    from nanobot_core.governance import Stage

    if not isinstance(raw, Stage):
        raise TypeError(f"expected a nanobot_core.Stage, got {type(raw).__name__}")
    return raw


def _adapt_section(raw: Any, ctx: PluginContext) -> Any:
    from nanobot_core.prompt import Section

    if not isinstance(raw, Section):
        raise TypeError(f"expected a nanobot_core.Section, got {type(raw).__name__}")
    return raw


def _adapt_provider(raw: Any, ctx: PluginContext) -> Any:
    if not callable(raw) or not isinstance(getattr(raw, "name", None), str):
        raise TypeError("expected a provider class or factory with a string `name`")
    return raw


def _adapt_store(raw: Any, ctx: PluginContext) -> Any:
    from nanobot_core.sessions import SessionStore

    # One bad item leaves out that item alone, as it always has for stores: a plugin's
    # other stores (the one `[sessions] store` names, say) stay usable.
    try:  # `name` may be a property, and the protocol check reads every member
        name = getattr(raw, "name", None)
        usable = isinstance(name, str) and bool(name) and isinstance(raw, SessionStore)
    except Exception as exc:
        raise _LeftOut(f"reading it raised {describe(exc)}") from exc
    if not usable:
        raise _LeftOut("not a SessionStore with a name")
    return raw


_ADAPTERS: dict[Kind, Callable[[Any, PluginContext], Any]] = {
    "tool": _adapt_tool,
    "stage": _adapt_stage,
    "section": _adapt_section,
    "provider": _adapt_provider,
    "store": _adapt_store,
}
