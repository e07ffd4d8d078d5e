"""Discovery: the built-in plugin modules and the entry points that allow/block let through.

Discovery only decides what is a candidate and how to load it; the manager registers it.
Entry points are scanned once per process.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import re
from collections.abc import Callable, Collection, Iterator
from typing import TYPE_CHECKING, Any

import attrs

from nanobot_core import hookspecs
from nanobot_core._logging import get_logger
from nanobot_core.config import PluginsConfig, source_of
from nanobot_core.kernel.records import (
    BUILTIN_PLUGINS,
    PluginInfo,
    Source,
    builtin_info,
    canonical_name,
)

if TYPE_CHECKING:
    from importlib_metadata import EntryPoint

    from nanobot_core.kernel.context import PluginContext

__all__ = [
    "PLUGINS_GROUP",
    "TOOLS_GROUP",
    "Candidate",
    "builtin_candidates",
    "entry_point_candidates",
]

log = get_logger("nanobot_core.kernel")

TOOLS_GROUP = "nanobot.tools"
PLUGINS_GROUP = "nanobot.plugins"

Loader = Callable[[], object]


@attrs.frozen
class Candidate:
    """A plugin discovery found: how to load it, or why it is not loaded."""

    info: PluginInfo
    loader: Loader | None
    blocked: str | None = None


def builtin_candidates(disabled: Collection[str]) -> Iterator[Candidate]:
    """The built-in plugins, in their fixed order; those in `disabled` come back blocked.

    `disabled` is ``plugins.disabled_builtins``: the warning about a name in it that no
    built-in has names the source that set it, when `load_config` read it.
    """
    for unknown in sorted(set(disabled) - set(BUILTIN_PLUGINS)):
        log.warning(
            "unknown built-in plugin in plugins.disabled_builtins",
            name=unknown,
            key="plugins.disabled_builtins",
            **source_of(disabled),
        )
    for name, module_name in BUILTIN_PLUGINS.items():
        info = builtin_info(name)
        if name in disabled:
            log.info("built-in plugin disabled", plugin=name)
            yield Candidate(info, None, "disabled in config")
            continue
        yield Candidate(info, functools.partial(importlib.import_module, module_name))


def entry_point_candidates(settings: PluginsConfig, *, autoload: bool) -> Iterator[Candidate]:
    """Both entry-point groups, each entry point loadable or blocked with the reason."""
    block = set(settings.block)
    allow = None if settings.allow is None else set(settings.allow)
    matched: set[str] = set()
    if autoload:
        for group, ep, meant in _scan_entry_points().misplaced:
            dist = ep.dist.name if ep.dist is not None else None
            version = ep.dist.version if ep.dist is not None else None
            misplaced = PluginInfo(ep.name, "nanobot.plugins", dist, version)
            log.warning(
                "entry point in a group nanobot-core does not read; not loaded",
                plugin=misplaced.describe(),
                entry_point=f"{ep.name} = {ep.value}",
                group=group,
                did_you_mean=meant,
            )
    for group, ep in _scan_entry_points().found:
        dist = ep.dist.name if ep.dist is not None else None
        version = ep.dist.version if ep.dist is not None else None
        source: Source = "nanobot.tools" if group == TOOLS_GROUP else "nanobot.plugins"
        info = PluginInfo(
            name=ep.name,
            source=source,
            distribution=dist,
            version=version,
            entry_point=f"{ep.name} = {ep.value}",
        )
        names = {ep.name}
        if dist:
            names |= {dist, canonical_name(dist)}
        if not autoload:
            yield Candidate(info, None, "plugin autoload is disabled")
            continue
        hit_block = names & (block | {canonical_name(b) for b in block})
        if hit_block:
            matched |= hit_block
            log.info("plugin blocked", plugin=ep.name, distribution=dist, by=sorted(hit_block))
            yield Candidate(info, None, "blocked by configuration")
            continue
        if allow is not None:
            hit_allow = names & (allow | {canonical_name(a) for a in allow})
            if not hit_allow:
                log.info("plugin not allowed", plugin=ep.name, distribution=dist)
                yield Candidate(info, None, "not in the allow-list")
                continue
            matched |= hit_allow
        yield Candidate(info, functools.partial(_load_entry_point, ep, group))
    # With autoload off no entry point is matched against the lists: none is "unmatched".
    for name in sorted(block | (allow or set())) if autoload else ():
        if name not in matched and canonical_name(name) not in matched:
            listed = settings.block if name in block else settings.allow
            log.warning(
                "plugin name in block/allow list matches no installed plugin",
                name=name,
                key="plugins.block" if name in block else "plugins.allow",
                **source_of(listed),
            )


@attrs.frozen
class _Scan:
    """The entry points of both groups, and those in a group that looks like a misspelt one."""

    found: tuple[tuple[str, EntryPoint], ...]
    misplaced: tuple[tuple[str, EntryPoint, str], ...]


def _meant_group(group: str) -> str | None:
    """The group a plugin author most likely meant by `group`, when it is a near miss of ours.

    A misspelt group (`nanobot.tool`, `nanobot_plugins`) loads nothing and says nothing:
    entry points are only ever looked up by group. Only names close to ours count, so the
    groups of other projects (a `nanobot.channels`, say) are left alone.
    """
    if group in (TOOLS_GROUP, PLUGINS_GROUP):
        return None
    folded = re.sub(r"[\s_:/-]+", ".", group.strip().lower())
    close = difflib.get_close_matches(folded, (TOOLS_GROUP, PLUGINS_GROUP), n=1, cutoff=0.85)
    return close[0] if close else None


@functools.cache
def _scan_entry_points() -> _Scan:
    """Scan the entry points once per process: ours, and those in a near miss of our groups.

    Asking for one group reads every distribution's entry points anyway; reading them
    all once costs no more than the two lookups it replaces.
    """
    import importlib_metadata

    everything = importlib_metadata.entry_points()
    found: list[tuple[str, EntryPoint]] = []
    for group in (TOOLS_GROUP, PLUGINS_GROUP):
        seen: set[tuple[str, str]] = set()
        for ep in everything.select(group=group):
            dist = ep.dist.name if ep.dist is not None else ""
            # The same distribution can be visible twice on sys.path (editable + site); keep one.
            if (dist, ep.name) in seen:
                continue
            seen.add((dist, ep.name))
            found.append((group, ep))
    misplaced: list[tuple[str, EntryPoint, str]] = []
    for group in sorted(everything.groups):
        meant = _meant_group(group)
        if meant is not None:
            points = everything.select(group=group)
            ordered = sorted(points, key=lambda ep: (ep.dist.name if ep.dist else "", ep.name))
            misplaced.extend((group, ep, meant) for ep in ordered)
    return _Scan(tuple(found), tuple(misplaced))


class _ToolClassPlugin:
    """Wraps one ``nanobot.tools`` entry point (a tool class) as a plugin with one hook."""

    def __init__(self, tool_class: Any) -> None:
        self.tool_class = tool_class

    @hookspecs.hookimpl
    def nanobot_tools(self, ctx: PluginContext) -> list[Any]:
        return [self.tool_class]


def _load_entry_point(ep: EntryPoint, group: str) -> object:
    loaded = ep.load()
    if group == TOOLS_GROUP:
        return _ToolClassPlugin(loaded)
    return loaded
