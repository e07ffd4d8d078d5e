"""The plugin manager: built-ins first, then entry points, with provenance and conflict rules.

Every tool, stage, section and provider the core uses comes through this
module. The core calls each hook implementation on its own, in a canonical
order that never depends on registration order, set order or ``tryfirst``:
built-in plugins first, then external plugins sorted by distribution name and
entry-point name. That order decides name clashes (first wins), and every
contribution remembers the plugin, distribution and version it came from.

A plugin that fails to import, fails pluggy's validation, raises in a hook,
returns the wrong type, or contributes a tool that cannot be built is
unregistered completely and recorded as failed. In strict mode the failure is
raised as :class:`~nanobot_core.errors.PluginError` instead.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs
import pluggy

from nanobot_core import hookspecs
from nanobot_core._logging import get_logger
from nanobot_core.config import Config
from nanobot_core.context import PluginContext, ToolCallEvent
from nanobot_core.errors import PluginError

if TYPE_CHECKING:
    from importlib_metadata import EntryPoint

    from nanobot_core.governance import Governor
    from nanobot_core.prompt import PromptBuilder
    from nanobot_core.tools.registry import ToolRegistry

__all__ = [
    "BUILTIN_PLUGINS",
    "Contribution",
    "PluginInfo",
    "PluginManager",
    "PluginRecord",
]

log = get_logger("nanobot_core.plugins")

Source = Literal["builtin", "nanobot.tools", "nanobot.plugins"]
Status = Literal["loaded", "failed", "blocked"]
Kind = Literal["tool", "stage", "section", "provider"]

TOOLS_GROUP = "nanobot.tools"
PLUGINS_GROUP = "nanobot.plugins"

# Built-in plugin names start with "builtin:" so that no distribution can claim them.
BUILTIN_PLUGINS: dict[str, str] = {
    "builtin:tools": "nanobot_core.builtins.tools",
    "builtin:governance": "nanobot_core.builtins.governance",
    "builtin:prompt": "nanobot_core.builtins.prompt",
    "builtin:providers": "nanobot_core.builtins.providers",
    "builtin:sessions": "nanobot_core.builtins.sessions",
}

_KIND_HOOKS: dict[Kind, str] = {
    "tool": "nanobot_tools",
    "stage": "nanobot_governance_stages",
    "section": "nanobot_prompt_sections",
    "provider": "nanobot_providers",
}


_HOOK_NAMES = frozenset(name for name in dir(hookspecs) if name.startswith("nanobot_"))


def canonical_name(name: str) -> str:
    """Normalise a distribution name the way packaging does (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@attrs.frozen
class PluginInfo:
    """Where a plugin comes from."""

    name: str
    source: Source
    distribution: str | None = None
    version: str | None = None
    entry_point: str | None = None

    @property
    def builtin(self) -> bool:
        """Whether this is one of the core's own plugins."""
        return self.source == "builtin"

    @property
    def sort_key(self) -> tuple[int, str, str]:
        """The canonical order: built-ins first, then by distribution, then by entry-point name."""
        if self.builtin:
            rank = list(BUILTIN_PLUGINS).index(self.name) if self.name in BUILTIN_PLUGINS else 99
            return (0, f"{rank:03d}", self.name)
        return (1, canonical_name(self.distribution or ""), self.name)

    def describe(self) -> str:
        """A short label naming the plugin, its distribution and version, for messages."""
        if self.builtin:
            return f"built-in plugin {self.name!r}"
        dist = f" from {self.distribution} {self.version}" if self.distribution else ""
        return f"plugin {self.name!r}{dist}"


@attrs.frozen
class Contribution:
    """One item (tool, stage, section, provider) contributed by one plugin."""

    kind: Kind
    name: str
    item: Any
    plugin: PluginInfo
    shadowed_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``{kind, name[, shadowed_by]}`` object of ``nanobot-core plugins --json``."""
        data: dict[str, Any] = {"kind": self.kind, "name": self.name}
        if self.shadowed_by is not None:
            data["shadowed_by"] = self.shadowed_by
        return data


@attrs.define
class PluginRecord:
    """The state of one plugin: loaded, failed or blocked, with what it contributed."""

    info: PluginInfo
    status: Status
    error: str | None = None
    hooks: list[str] = attrs.field(factory=list)
    contributions: list[Contribution] = attrs.field(factory=list)
    obj: Any = attrs.field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The object printed by ``nanobot-core plugins --json``."""
        return {
            "name": self.info.name,
            "distribution": self.info.distribution,
            "version": self.info.version,
            "source": self.info.source,
            "entry_point": self.info.entry_point,
            "status": self.status,
            "error": self.error,
            "hooks": sorted(self.hooks),
            "contributions": [c.to_json() for c in self.contributions],
        }


@functools.cache
def _scan_entry_points() -> tuple[tuple[str, EntryPoint], ...]:
    """Scan both entry-point groups once per process."""
    import importlib_metadata

    found: list[tuple[str, EntryPoint]] = []
    for group in (TOOLS_GROUP, PLUGINS_GROUP):
        seen: set[tuple[str, str]] = set()
        for ep in importlib_metadata.entry_points(group=group):
            dist = ep.dist.name if ep.dist is not None else ""
            # The same distribution can be visible twice on sys.path (editable + site); keep one.
            if (dist, ep.name) in seen:
                continue
            seen.add((dist, ep.name))
            found.append((group, ep))
    return tuple(found)


class _ToolClassPlugin:
    """Wraps one ``nanobot.tools`` entry point (a tool class) as a plugin with one hook."""

    def __init__(self, tool_class: Any) -> None:
        self.tool_class = tool_class

    @hookspecs.hookimpl
    def nanobot_tools(self, ctx: PluginContext) -> list[Any]:
        return [self.tool_class]


class _Failure(Exception):
    """Internal: a plugin misbehaved; carries the message recorded for it."""


class PluginManager:
    """Discovers, isolates and queries plugins; knows who contributed what.

    ``load()`` registers the built-in plugin modules, then the entry points of
    ``nanobot.tools`` and ``nanobot.plugins`` that the block/allow/autoload
    settings let through. Contributions are collected lazily per kind, so a
    command pays only for what it uses.
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        workspace: Path | str | None = None,
        autoload: bool | None = None,
        strict: bool | None = None,
    ) -> None:
        self.config = config or Config()
        self.context = PluginContext(
            workspace=Path(workspace or Path.cwd()).resolve(), config=self.config
        )
        self.autoload = (not self.config.plugins.disable_autoload) if autoload is None else autoload
        self.strict = self.config.plugins.strict if strict is None else strict
        self._pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self._pm.add_hookspecs(hookspecs)
        self._records: dict[str, PluginRecord] = {}
        self._collected: dict[Kind, list[Contribution]] = {}
        self._loaded = False
        self._registry: ToolRegistry | None = None

    # -- registration -------------------------------------------------------------------

    def load(self) -> PluginManager:
        """Register built-ins and discover entry points (idempotent)."""
        if self._loaded:
            return self
        self._loaded = True
        disabled = set(self.config.plugins.disabled_builtins)
        for unknown in sorted(disabled - set(BUILTIN_PLUGINS)):
            log.warning("unknown built-in plugin in plugins.disabled_builtins", name=unknown)
        for name, module_name in BUILTIN_PLUGINS.items():
            info = PluginInfo(
                name=name, source="builtin", distribution="nanobot-core", version=_core_version()
            )
            if name in disabled:
                self._records[name] = PluginRecord(info, "blocked", "disabled in config")
                log.info("built-in plugin disabled", plugin=name)
                continue
            self._register(info, functools.partial(_import, module_name))
        self._discover()
        return self

    def register(
        self,
        plugin: object,
        name: str,
        *,
        distribution: str | None = None,
        version: str | None = None,
    ) -> PluginRecord:
        """Register a plugin object directly (used by tests and embedding applications)."""
        self.load()
        info = PluginInfo(
            name=name, source="nanobot.plugins", distribution=distribution, version=version
        )
        record = self._register(info, lambda: plugin)
        self._invalidate()
        return record

    def _discover(self) -> None:
        settings = self.config.plugins
        block = set(settings.block)
        allow = None if settings.allow is None else set(settings.allow)
        matched: set[str] = set()
        for group, ep in _scan_entry_points():
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
            key = self._record_key(info)
            if not self.autoload:
                self._records[key] = PluginRecord(info, "blocked", "plugin autoload is disabled")
                continue
            hit_block = names & (block | {canonical_name(b) for b in block})
            if hit_block:
                matched |= hit_block
                self._records[key] = PluginRecord(info, "blocked", "blocked by configuration")
                log.info("plugin blocked", plugin=ep.name, distribution=dist, by=sorted(hit_block))
                continue
            if allow is not None:
                hit_allow = names & (allow | {canonical_name(a) for a in allow})
                if not hit_allow:
                    self._records[key] = PluginRecord(info, "blocked", "not in the allow-list")
                    log.info("plugin not allowed", plugin=ep.name, distribution=dist)
                    continue
                matched |= hit_allow
            loader = functools.partial(_load_entry_point, ep, group)
            self._register(info, loader)
        for name in sorted(block | (allow or set())):
            if name not in matched and canonical_name(name) not in matched:
                log.warning(
                    "plugin name in block/allow list matches no installed plugin", name=name
                )

    def _record_key(self, info: PluginInfo) -> str:
        if info.builtin:
            return info.name
        return f"{info.source}:{info.distribution or ''}:{info.name}"

    def _register(self, info: PluginInfo, loader: Callable[[], object]) -> PluginRecord:
        key = self._record_key(info)
        record = PluginRecord(info, "loaded")
        self._records[key] = record
        try:
            obj = loader()
        except Exception as exc:
            return self._fail(record, f"failed to import: {type(exc).__name__}: {exc}")
        try:
            self._pm.register(obj, name=key)
        except (pluggy.PluginValidationError, ValueError) as exc:
            return self._fail(record, f"failed hook validation: {exc}")
        record.obj = obj
        unknown = [
            attr
            for attr in dir(obj)
            if attr.startswith("nanobot_")
            and callable(getattr(obj, attr, None))
            and attr not in _HOOK_NAMES
        ]
        if unknown:
            return self._fail(record, f"implements unknown hooks: {', '.join(sorted(unknown))}")
        record.hooks = sorted({caller.name for caller in self._pm.get_hookcallers(obj) or []})
        log.debug(
            "plugin registered",
            plugin=info.name,
            distribution=info.distribution,
            version=info.version,
            source=info.source,
        )
        return record

    def _fail(self, record: PluginRecord, message: str) -> PluginRecord:
        record.status = "failed"
        record.error = message
        record.contributions = []
        if record.obj is not None and self._pm.is_registered(record.obj):
            self._pm.unregister(record.obj)
        record.obj = None
        log.error(
            "plugin failed",
            plugin=record.info.name,
            distribution=record.info.distribution,
            version=record.info.version,
            entry_point=record.info.entry_point,
            error=message,
        )
        self._invalidate()
        if self.strict:
            raise PluginError(f"{record.info.describe()} failed: {message}")
        return record

    def _invalidate(self) -> None:
        self._collected.clear()
        self._registry = None
        for record in self._records.values():
            record.contributions = []

    # -- queries ------------------------------------------------------------------------

    def records(self) -> list[PluginRecord]:
        """Every plugin the manager knows, in canonical order, with its contributions."""
        self.load()
        for kind in _KIND_HOOKS:
            self.contributions(kind, include_shadowed=True)
        return sorted(self._records.values(), key=lambda r: r.info.sort_key)

    def failures(self) -> list[PluginRecord]:
        """The plugins that failed."""
        return [r for r in self.records() if r.status == "failed"]

    def _loaded_records(self) -> list[PluginRecord]:
        return sorted(
            (r for r in self._records.values() if r.status == "loaded"),
            key=lambda r: r.info.sort_key,
        )

    def _impls_of(self, hook_name: str, record: PluginRecord) -> list[Any]:
        caller = getattr(self._pm.hook, hook_name)
        return [impl for impl in caller.get_hookimpls() if impl.plugin is record.obj]

    def call_each(self, hook_name: str, **kwargs: Any) -> list[tuple[PluginRecord, Any]]:
        """Call every implementation of `hook_name` on its own, in canonical order.

        A plugin whose implementation raises is marked failed (and unregistered)
        and left out of the result; the others are still called.
        """
        self.load()
        results: list[tuple[PluginRecord, Any]] = []
        for record in self._loaded_records():
            for impl in self._impls_of(hook_name, record):
                args = [kwargs[name] for name in impl.argnames]
                try:
                    results.append((record, impl.function(*args)))
                except Exception as exc:
                    self._fail(record, f"raised in {hook_name}: {type(exc).__name__}: {exc}")
                    return self.call_each(hook_name, **kwargs)
        return results

    def contributions(self, kind: Kind, *, include_shadowed: bool = False) -> list[Contribution]:
        """What plugins contributed of one kind, winners first in canonical order."""
        self.load()
        if kind not in self._collected:
            self._collected[kind] = self._collect(kind)
        items = self._collected[kind]
        return items if include_shadowed else [c for c in items if c.shadowed_by is None]

    def _collect(self, kind: Kind) -> list[Contribution]:
        hook_name = _KIND_HOOKS[kind]
        while True:
            try:
                raw = self._gather(kind, hook_name)
            except _Retry:
                continue
            return self._resolve(kind, raw)

    def _gather(self, kind: Kind, hook_name: str) -> list[Contribution]:
        gathered: list[Contribution] = []
        for record, value in self.call_each(hook_name, ctx=self.context):
            try:
                items = self._adapt_all(kind, value)
            except _Failure as exc:
                self._fail(record, f"{hook_name} {exc}")
                raise _Retry from None
            for name, item in items:
                gathered.append(Contribution(kind, name, item, record.info))
        return gathered

    def _adapt_all(self, kind: Kind, value: Any) -> list[tuple[str, Any]]:
        if value is None:
            return []
        if not isinstance(value, list | tuple):
            raise _Failure(f"returned {type(value).__name__}, expected a list")
        adapted: list[tuple[str, Any]] = []
        for index, raw in enumerate(value):
            try:
                item = _ADAPTERS[kind](raw, self.context)
            except Exception as exc:
                raise _Failure(
                    f"item {index} ({_short(raw)}): {type(exc).__name__}: {exc}"
                ) from exc
            if item is None:  # a tool whose enabled(ctx) said no
                continue
            name = getattr(item, "name", None)
            if not isinstance(name, str) or not name:
                raise _Failure(f"item {index} ({_short(raw)}) has no usable name")
            adapted.append((name, item))
        return adapted

    def _resolve(self, kind: Kind, gathered: list[Contribution]) -> list[Contribution]:
        overrides = self.config.plugins.overrides
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
                    plugin=contribution.plugin.name,
                    distribution=contribution.plugin.distribution,
                )
                continue
            resolved.append(attrs.evolve(contribution, shadowed_by=owner.plugin.name))
            log.warning(
                "name clash: first contribution wins",
                kind=kind,
                name=contribution.name,
                winner=owner.plugin.name,
                winner_distribution=owner.plugin.distribution,
                loser=contribution.plugin.name,
                loser_distribution=contribution.plugin.distribution,
                reason="built-in names are protected"
                if owner.plugin.builtin
                else "ordered by distribution name, then entry-point name",
            )
        by_plugin: dict[PluginInfo, PluginRecord] = {r.info: r for r in self._records.values()}
        for contribution in resolved:
            by_plugin[contribution.plugin].contributions.append(contribution)
        return resolved

    def first_result(self, hook_name: str, **kwargs: Any) -> Any:
        """The first non-None answer of a firstresult hook: external plugins before built-ins."""
        self.load()
        records = self._loaded_records()
        ordered = [r for r in records if not r.info.builtin] + [
            r for r in records if r.info.builtin
        ]
        for record in ordered:
            for impl in self._impls_of(hook_name, record):
                try:
                    value = impl.function(*[kwargs[n] for n in impl.argnames])
                except Exception as exc:
                    self._fail(record, f"raised in {hook_name}: {type(exc).__name__}: {exc}")
                    break
                if value is not None:
                    return value
        return None

    # -- the parts the core is built from ------------------------------------------------

    def tool_registry(self) -> ToolRegistry:
        """The active tools (built-ins, then plugins), without those disabled in config."""
        from nanobot_core.tools.registry import ToolRegistry

        if self._registry is None:
            registry = ToolRegistry()
            disabled = set(self.config.tools.disabled)
            for contribution in self.contributions("tool"):
                if contribution.name in disabled:
                    continue
                registry.add(
                    contribution.item,
                    builtin=contribution.plugin.builtin,
                    plugin=contribution.plugin.name,
                )
            self._registry = registry
        return self._registry

    def tool_call_hooks(self) -> _ToolCallHooks:
        """The before/after tool-call hooks of every plugin, for the executor."""
        return _ToolCallHooks(self)

    def token_counter(self) -> Any:
        """The token counter: the first plugin that offers one, else the built-in estimator."""
        return self.first_result("nanobot_token_counter", ctx=self.context)

    def result_store(self) -> Any:
        """The offload cache for huge tool results."""
        return self.first_result("nanobot_result_store", ctx=self.context)

    def governor(self) -> Governor:
        """A governor built from the active stages, in pipeline order."""
        from nanobot_core.governance import Governor

        disabled = set(self.config.governance.disabled)
        stages = [c.item for c in self.contributions("stage") if c.name not in disabled]
        return Governor(
            stages,
            config=self.config.governance,
            counter=self.token_counter(),
            store=self.result_store(),
            workspace=self.context.workspace,
        )

    def prompt_builder(self) -> PromptBuilder:
        """A prompt builder over the active sections, each labelled with its plugin."""
        from nanobot_core.prompt import PromptBuilder

        sections = [(c.item, c.plugin.name) for c in self.contributions("section")]
        return PromptBuilder(sections, config=self.config)

    def providers(self) -> dict[str, Any]:
        """Model providers by name."""
        return {c.name: c.item for c in self.contributions("provider")}

    def runtime_lines(self) -> list[str]:
        """Lines for the runtime-context block; a misbehaving plugin's lines are dropped."""
        lines: list[str] = []
        for record, value in self.call_each("nanobot_runtime_context", ctx=self.context):
            if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
                lines.extend(value)
            elif value is not None:
                log.error(
                    "runtime-context hook returned non-strings; lines dropped",
                    plugin=record.info.name,
                    distribution=record.info.distribution,
                    returned=type(value).__name__,
                )
        return lines


class _Retry(Exception):
    """Internal: a plugin failed while gathering; gather again without it."""


class _ToolCallHooks:
    """Adapts the tool-call hooks of all plugins to the executor's hook protocol."""

    def __init__(self, manager: PluginManager) -> None:
        self._manager = manager

    def before(self, call: ToolCallEvent) -> str | None:
        for record, reason in self._safe_each("nanobot_before_tool_call", call=call):
            if reason is not None:
                return f"{reason} (denied by {record.info.describe()})"
        return None

    def after(self, call: ToolCallEvent, result: Any) -> None:
        self._safe_each("nanobot_after_tool_call", call=call, result=result)

    def _safe_each(self, hook_name: str, **kwargs: Any) -> list[tuple[PluginRecord, Any]]:
        manager = self._manager
        results: list[tuple[PluginRecord, Any]] = []
        for record in manager._loaded_records():
            for impl in manager._impls_of(hook_name, record):
                values = {"ctx": manager.context, **kwargs}
                try:
                    results.append((record, impl.function(*[values[n] for n in impl.argnames])))
                except Exception as exc:
                    log.error(
                        "tool-call hook raised; ignored",
                        hook=hook_name,
                        plugin=record.info.name,
                        distribution=record.info.distribution,
                        error=f"{type(exc).__name__}: {exc}",
                    )
        return results


def _may_override(overrides: dict[str, list[str]], plugin: PluginInfo, name: str) -> bool:
    for key in (plugin.name, plugin.distribution or "", canonical_name(plugin.distribution or "")):
        if key and name in overrides.get(key, ()):
            return True
    return False


def _import(module_name: str) -> object:
    import importlib

    return importlib.import_module(module_name)


def _load_entry_point(ep: EntryPoint, group: str) -> object:
    loaded = ep.load()
    if group == TOOLS_GROUP:
        return _ToolClassPlugin(loaded)
    return loaded


@functools.cache
def _core_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nanobot-core")
    except PackageNotFoundError:
        return "0+unknown"


def _short(value: Any) -> str:
    text = getattr(value, "__qualname__", None) or type(value).__name__
    return str(text)[:80]


def _adapt_tool(raw: Any, ctx: PluginContext) -> Any:
    from nanobot_core.tools.base import as_tool

    return as_tool(raw, ctx)


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


_ADAPTERS: dict[Kind, Callable[[Any, PluginContext], Any]] = {
    "tool": _adapt_tool,
    "stage": _adapt_stage,
    "section": _adapt_section,
    "provider": _adapt_provider,
}
