"""The plugin manager: built-ins first, then entry points, with provenance and conflict rules.

Every tool, stage, section, provider and session store the core uses comes
through this class. The core calls each hook implementation on its own (see
`nanobot_core.kernel.calling`), in a canonical order that never depends on
registration order or set order: built-in plugins first, then external plugins
sorted by distribution name and entry-point name. That order decides name
clashes (first wins), and every contribution remembers the plugin, distribution
and version it came from. A plugin's own name is one plugin's: a second plugin of a
name a loaded plugin has is refused (recorded as failed, naming the first), and the
first keeps its record and all it contributes.

A plugin that fails to import, fails pluggy's validation, uses a refused hook
marker, raises in a hook, returns the wrong type, or contributes a tool that
cannot be built is unregistered completely and recorded as failed. In strict
mode the failure is raised as :class:`~nanobot_core.errors.PluginError` instead.
"""

from __future__ import annotations

import difflib
import os
import re
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

from nanobot_core import hookspecs
from nanobot_core._containment import PluginEscapeError, describe, plugin_code
from nanobot_core._logging import get_logger
from nanobot_core.config import Config, check_config, source_of
from nanobot_core.errors import PluginError, WorkspaceError
from nanobot_core.kernel.calling import Outcome, call_in_order, note_problem, refused_markers
from nanobot_core.kernel.context import (
    PluginContext,
    ToolCallEvent,
    as_path,
    workspace_problem,
)
from nanobot_core.kernel.contributions import (
    KIND_HOOKS,
    ContributionError,
    adapt_all,
    override_keys,
    resolve,
)
from nanobot_core.kernel.discovery import builtin_candidates, entry_point_candidates
from nanobot_core.kernel.records import (
    Contribution,
    Kind,
    PluginInfo,
    PluginRecord,
    canonical_name,
)

if TYPE_CHECKING:
    from nanobot_core.governance import Governor
    from nanobot_core.governance.tokens import CheckedCounter
    from nanobot_core.prompt import PromptBuilder
    from nanobot_core.tools.registry import ToolRegistry

__all__ = ["PluginManager"]

log = get_logger("nanobot_core.kernel")

_HOOK_NAMES = frozenset(name for name in dir(hookspecs) if name.startswith("nanobot_"))

# pluggy's words for a hook implementation that takes an argument the hook's spec lacks.
_NOT_IN_SPEC = re.compile(
    r"for hook '(?P<hook>\w+)'.*Argument\(s\) \{(?P<args>[^}]*)\} are declared", re.DOTALL
)


def _workspace(workspace: Path | str | None) -> Path:
    """The workspace given (default: the working directory), resolved.

    A path no folder can ever be at is a `WorkspaceError` at once, naming it:
    a typo is caught where it was made. A folder not there yet is accepted, as
    a program may make it after building the manager; a `Runner` built for it
    while it is still missing is refused then.
    """
    given = as_path(workspace) if workspace else Path.cwd()
    # realpath, not Path.resolve: a loop of symbolic links raises RuntimeError on some
    # Pythons and passes on others; it is then the ELOOP of `workspace_problem` on all.
    root = Path(os.path.realpath(given))
    problem = workspace_problem(root, missing_ok=True)
    if problem is None:
        return root
    shown = repr(str(given)) if str(given) == str(root) else f"{str(given)!r} ({root})"
    raise WorkspaceError(
        f"PluginManager: workspace {shown} {problem}: give the folder the agent works in"
    )


def _with_suggestion(name: str) -> str:
    """An unknown hook name, with the hook it most resembles when one is close."""
    close = difflib.get_close_matches(name, sorted(_HOOK_NAMES), n=1, cutoff=0.8)
    return f"{name} (did you mean {close[0]}?)" if close else name


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
        if config is not None and not isinstance(config, Config):
            raise TypeError(
                "PluginManager: config must be a Config (load_config() or Config(...)), got "
                f"{type(config).__name__}"
            )
        if config is not None:
            check_config(config)  # built in code, it was never checked
        self._start(config or Config(), workspace, autoload, strict)

    @classmethod
    def _of_loaded(cls, config: Config, *, workspace: Path) -> PluginManager:
        """A manager of a config `load_config` has just returned, unchanged since (the CLI's).

        Not checked again: `load_config` checked every value as it read it, naming its
        source, and the same check again (`check_config`) would only cost its time.
        """
        manager = cls.__new__(cls)
        manager._start(config, workspace, None, None)
        return manager

    def _start(
        self,
        config: Config,
        workspace: Path | str | None,
        autoload: bool | None,
        strict: bool | None,
    ) -> None:
        self.config = config
        self.context = PluginContext(workspace=_workspace(workspace), config=self.config)
        self.autoload = (not self.config.plugins.disable_autoload) if autoload is None else autoload
        self.strict = self.config.plugins.strict if strict is None else strict
        self._pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self._pm.add_hookspecs(hookspecs)
        self._records: dict[str, PluginRecord] = {}
        self._collected: dict[Kind, list[Contribution]] = {}
        # The names of the items of each kind left out as it was collected (`left_out`).
        self._left_out: dict[Kind, frozenset[str]] = {}
        self._loaded = False
        self._registry: ToolRegistry | None = None
        self._overrides_checked = False
        # What `token_counter` answers, in a 1-tuple (its answer may be None); None: ask again.
        self._counter: tuple[Any] | None = None
        # Per counter plugin (record key): its record and its counter, checked and remembering.
        # Kept across a re-ask, so that every governor of the manager shares the one memo.
        self._checked: dict[str, tuple[PluginRecord, CheckedCounter]] = {}
        self._counter_lock = threading.Lock()
        # What `kept_files` answers; None: not asked yet.
        self._kept: list[tuple[Path, str]] | None = None

    # -- registration -------------------------------------------------------------------

    def load(self) -> PluginManager:
        """Register built-ins and discover entry points (idempotent)."""
        if self._loaded:
            return self
        self._loaded = True
        settings = self.config.plugins
        for candidate in builtin_candidates(settings.disabled_builtins):
            if candidate.loader is None:
                self._records[candidate.info.name] = PluginRecord(
                    candidate.info, "blocked", candidate.blocked
                )
                continue
            self._register(candidate.info, candidate.loader)
        # Registered in the canonical order, not the order the entry points were found in
        # (the order distributions were installed in): of two plugins of one name, the
        # first in that order keeps it, whatever was installed first (of one distribution's
        # two entry points of a name, that in nanobot.plugins: the groups in name order).
        candidates = sorted(
            entry_point_candidates(settings, autoload=self.autoload),
            key=lambda c: (c.info.sort_key, c.info.source, c.info.distribution or ""),
        )
        for candidate in candidates:
            if candidate.loader is None:
                key = self._record_key(candidate.info)
                self._records[key] = PluginRecord(candidate.info, "blocked", candidate.blocked)
                continue
            self._register(candidate.info, candidate.loader)
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

    def _record_key(self, info: PluginInfo) -> str:
        if info.builtin:
            return info.name
        return f"{info.source}:{info.distribution or ''}:{info.name}"

    def _holder_of(self, name: str) -> PluginRecord | None:
        """The loaded plugin named `name`, if any: a name is held by one plugin at a time.

        Config (``plugins.overrides``, the block and allow lists), a shadowed item's
        ``shadowed_by`` and every listing go by the plugin's name; a plugin failed or
        blocked holds none, so one registered again under its name is welcome.
        """
        return next(
            (r for r in self._records.values() if r.status == "loaded" and r.info.name == name),
            None,
        )

    def _spare_key(self, key: str) -> str:
        """`key`, or `key` numbered when a record holds it: a refused plugin's record key."""
        spare, number = key, 1
        while spare in self._records:
            number += 1
            spare = f"{key}#{number}"
        return spare

    def _register(self, info: PluginInfo, loader: Callable[[], object]) -> PluginRecord:
        key = self._record_key(info)
        record = PluginRecord(info, "loaded")
        holder = self._holder_of(info.name)
        if holder is not None:
            # Refused before it is loaded, and recorded beside the holder, never in its
            # place: the plugin registered first keeps its record, hooks and contributions.
            self._records[self._spare_key(key)] = record
            return self._fail(record, _name_taken(info, holder.info))
        self._records[key] = record
        try:
            with plugin_code(info.describe()):
                obj = loader()
        except Exception as exc:
            return self._fail(record, f"failed to import: {describe(exc)}")
        first = self._pm.get_name(obj)
        if first is not None and first in self._records:
            # Two entry points naming one module: pluggy's refusal would give the internal key
            # and every registered plugin object on one line; name the plugin that has it.
            return self._fail(
                record,
                f"loads the same object as {self._records[first].info.describe()}, which is "
                "registered already (each entry point needs a plugin object of its own)",
            )
        try:
            self._pm.register(obj, name=key)
        except (pluggy.PluginValidationError, ValueError) as exc:
            return self._fail(record, f"failed hook validation: {self._validation_error(exc, key)}")
        record.obj = obj
        implemented = {caller.name for caller in self._pm.get_hookcallers(obj) or []}
        # A marked function of a name no hook has is kept by pluggy and never called; so is a
        # misspelt `nanobot_` function, marked or not: the author meant a hook either way.
        unknown = {name for name in implemented if name not in _HOOK_NAMES} | {
            attr
            for attr in dir(obj)
            if attr.startswith("nanobot_")
            and callable(getattr(obj, attr, None))
            and attr not in _HOOK_NAMES
        }
        if unknown:
            named = ", ".join(_with_suggestion(name) for name in sorted(unknown))
            return self._fail(record, f"implements unknown hooks: {named}")
        # A hook function without the marker is not registered by pluggy at all: the plugin
        # would load and contribute nothing, without a word.
        unmarked = sorted(
            attr for attr in _HOOK_NAMES - implemented if callable(getattr(obj, attr, None))
        )
        if unmarked:
            one = len(unmarked) == 1
            return self._fail(
                record,
                f"{', '.join(unmarked)} {'is' if one else 'are'} not marked with "
                f"@nanobot_core.hookimpl, so {'it' if one else 'they'} would never be called",
            )
        refused = refused_markers(self._pm, obj)
        if refused:
            return self._fail(
                record,
                f"uses hook markers nanobot-core refuses: {'; '.join(refused)} "
                "(each implementation is called on its own, in the canonical order)",
            )
        record.hooks = sorted({caller.name for caller in self._pm.get_hookcallers(obj) or []})
        log.debug(
            "plugin registered",
            plugin=info.name,
            distribution=info.distribution,
            version=info.version,
            source=info.source,
        )
        return record

    def _validation_error(self, exc: Exception, key: str) -> str:
        """pluggy's refusal on one line, in the plugin's terms (not the key it was registered by).

        A hook asking for arguments its spec does not pass is said with the ones it may take.
        """
        text = str(exc)
        asked = _NOT_IN_SPEC.search(text)
        spec = getattr(self._pm.hook, asked["hook"], None) if asked else None
        if asked and spec is not None and spec.spec is not None:
            names = ", ".join(repr(name) for name in sorted(re.findall(r"'(\w+)'", asked["args"])))
            passes = ", ".join(spec.spec.argnames)
            return (
                f"{asked['hook']} asks for {names}, which the hook does not pass "
                f"(it passes: {passes})"
            )
        return text.replace(f"Plugin {key!r} ", "").replace("\n", "; ")

    def _fail(self, record: PluginRecord, message: str) -> PluginRecord:
        record.status = "failed"
        record.error = message
        record.contributions = []
        if record.obj is not None and self._pm.is_registered(record.obj):
            self._pm.unregister(record.obj)
        record.obj = None
        # Its counter's memo goes with it; not that of a plugin of the same name and
        # distribution it was refused beside, which is kept under the same key.
        key = self._record_key(record.info)
        held = self._checked.get(key)
        if held is not None and held[0] is record:
            del self._checked[key]
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
        self._counter = None  # a plugin registered may answer first, or the one that did failed
        for record in self._records.values():
            record.contributions = []

    # -- queries ------------------------------------------------------------------------

    def records(self) -> list[PluginRecord]:
        """Every plugin the manager knows, in canonical order, with its contributions."""
        self.load()
        # A plugin failing while one kind is collected takes back what every plugin
        # contributed (`_invalidate`), the kinds collected before it included: collect
        # again until a round fails none. Each further round fails one more plugin.
        while not all(kind in self._collected for kind in KIND_HOOKS):
            for kind in KIND_HOOKS:
                self.contributions(kind, include_shadowed=True)
        return sorted(self._records.values(), key=lambda r: r.info.sort_key)

    def record_of(self, plugin: PluginInfo) -> PluginRecord | None:
        """`plugin`'s record as it stands (None: not one of this manager's), calling no hook.

        For code that notes something about one plugin while the parts are being
        built: `records` collects every kind of contribution first, and a plugin
        failing in a hook at that moment would take back what the build was made from.
        """
        return self._records.get(self._record_key(plugin))

    def failures(self) -> list[PluginRecord]:
        """The plugins that failed."""
        return [r for r in self.records() if r.status == "failed"]

    def records_so_far(self) -> tuple[PluginRecord, ...]:
        """The plugins known by now, loading or loaded, in no order, calling no hook.

        Only reads: safe from another thread while the manager loads (the stall watch).
        """
        return tuple(self._records.values())

    def failed_so_far(self) -> list[PluginRecord]:
        """The plugins failed by now, in canonical order, calling no hook (`failures` first
        collects every kind of contribution, which may fail more of them)."""
        return sorted(
            (r for r in self._records.values() if r.status == "failed"),
            key=lambda r: r.info.sort_key,
        )

    def _loaded_records(self) -> list[PluginRecord]:
        return sorted(
            (r for r in self._records.values() if r.status == "loaded"),
            key=lambda r: r.info.sort_key,
        )

    def call_each(self, hook_name: str, **kwargs: Any) -> list[tuple[PluginRecord, Any]]:
        """Call every implementation of `hook_name` once, in canonical order.

        A plugin whose implementation raises is marked failed (and unregistered)
        and left out of the result; the others are still called, each once.
        """
        self.load()
        results: list[tuple[PluginRecord, Any]] = []
        for outcome in call_in_order(self._pm, hook_name, self._loaded_records(), kwargs):
            if outcome.failed:
                self._fail_in_hook(outcome, hook_name)
                continue
            results.append((outcome.record, outcome.value))
        return results

    def first_result(self, hook_name: str, **kwargs: Any) -> Any:
        """The first non-None answer of a firstresult hook: external plugins before built-ins."""
        found = self._first_usable(hook_name, kwargs)
        return found[1] if found is not None else None

    def _first_usable(
        self,
        hook_name: str,
        kwargs: dict[str, Any],
        unusable: Callable[[Any], str | None] = lambda value: None,
    ) -> tuple[PluginRecord, Any] | None:
        """The plugin and its answer, the first non-None one `unusable` has nothing against.

        External plugins are asked before built-ins. A plugin that raises, or
        whose answer `unusable` describes, is marked failed and the next asked.
        """
        self.load()
        records = self._loaded_records()
        ordered = [r for r in records if not r.info.builtin] + [
            r for r in records if r.info.builtin
        ]
        for outcome in call_in_order(self._pm, hook_name, ordered, kwargs):
            if outcome.failed:
                self._fail_in_hook(outcome, hook_name)
                continue
            if outcome.value is None:
                continue
            problem = unusable(outcome.value)
            if problem is not None:
                self._fail(outcome.record, f"{hook_name} returned {problem}")
                continue
            return outcome.record, outcome.value
        return None

    def _fail_in_hook(self, outcome: Outcome, hook_name: str) -> None:
        self._fail(outcome.record, f"raised in {hook_name}: {outcome.describe_error()}")

    def contributions(self, kind: Kind, *, include_shadowed: bool = False) -> list[Contribution]:
        """What plugins contributed of one kind, winners first in canonical order."""
        self.load()
        if kind not in self._collected:
            self._collected[kind] = self._collect(kind)
        items = self._collected[kind]
        return items if include_shadowed else [c for c in items if c.shadowed_by is None]

    def left_out(self, kind: Kind) -> frozenset[str]:
        """The names of the items of `kind` that loaded plugins gave and the core left out
        (a tool with a flag that is no flag, or an invalid schema), each listed under its
        plugin's problems; an item left out whose name could not be told is not here.
        """
        self.contributions(kind)
        return self._left_out.get(kind, frozenset())

    def _collect(self, kind: Kind) -> list[Contribution]:
        hook_name = KIND_HOOKS[kind]
        gathered: list[Contribution] = []
        left_out_names: list[tuple[PluginInfo, str]] = []
        for record, value in self.call_each(hook_name, ctx=self.context):
            try:
                with plugin_code(record.info.describe()):
                    items, left_out = adapt_all(kind, value, self.context)
            except (ContributionError, PluginEscapeError) as exc:
                self._fail(record, f"{hook_name} {exc}")
                continue
            for line, left_out_name in left_out:
                note_problem(record, line)
                if left_out_name is not None:
                    left_out_names.append((record.info, left_out_name))
            for name, item in items:
                if kind == "tool":  # a `LoadedTool`: its schema normalised and compiled once
                    if item.problem is not None:
                        # This tool alone: one bad schema (say from an MCP server) must not
                        # take the plugin's other tools with it, nor reach the model.
                        note_problem(record, f"tool {name!r} left out: {item.problem}")
                        left_out_names.append((record.info, name))
                        continue
                    # The tool is offered, but the model is told less than its author wrote
                    # (a misspelt type): the author's to fix, so listed where they look.
                    for change in item.lost:
                        note_problem(record, change.problem(name))
                    gathered.append(Contribution(kind, name, item.tool, record.info, loaded=item))
                    continue
                gathered.append(Contribution(kind, name, item, record.info))
        self._check_overrides()
        # A plugin failed on the way is left out entirely, also from what it gave before failing.
        loaded = {r.info for r in self._records.values() if r.status == "loaded"}
        self._left_out[kind] = frozenset(name for info, name in left_out_names if info in loaded)
        resolved = resolve(
            kind, [c for c in gathered if c.plugin in loaded], self.config.plugins.overrides
        )
        # Loaded records only: a plugin refused as a second of its name may share the
        # `PluginInfo` of the one it was refused beside, whose contributions these are.
        by_plugin = {r.info: r for r in self._records.values() if r.status == "loaded"}
        for contribution in resolved:
            by_plugin[contribution.plugin].contributions.append(contribution)
        return resolved

    def _check_overrides(self) -> None:
        """Warn, once, of each ``plugins.overrides`` name that no plugin has.

        An override left behind by an uninstalled plugin hands nothing to anyone; said
        as for the block and allow lists, rather than let a built-in name look taken
        over when it is not. Checked when contributions are first resolved, not at
        discovery: a plugin an application registers itself is known only by then.
        """
        if self._overrides_checked or not self.autoload:
            return  # with autoload off, as for the lists, nothing is said to match none
        self._overrides_checked = True
        named = {
            key
            for r in self._records.values()
            if not r.info.builtin
            for key in override_keys(r.info)
        }
        overrides = self.config.plugins.overrides
        for name in sorted(set(overrides) - named):
            log.warning(
                "plugin name in plugins.overrides matches no installed plugin",
                name=name,
                key=f"plugins.overrides.{name}",
                **source_of(overrides, name),
            )

    # -- the parts the core is built from ------------------------------------------------

    def tool_registry(self) -> ToolRegistry:
        """The active tools (built-ins, then plugins): `ToolRegistry.from_plugins`, memoised."""
        from nanobot_core.tools.registry import ToolRegistry

        if self._registry is None:
            self._registry = ToolRegistry.from_plugins(self)
        return self._registry

    def tool_call_hooks(self) -> _ToolCallHooks:
        """The before/after tool-call hooks of every plugin, for the executor."""
        return _ToolCallHooks(self)

    def token_counter(self) -> Any:
        """The token counter: the first plugin that offers one, else the built-in estimator.

        A plugin's counter is wrapped in a `CheckedCounter`, so that a count it
        cannot give (it raises, or answers something that is not a count) is
        the estimate's, said once naming the plugin; the core's own estimate
        needs no check, whoever returns it. A `CheckedCounter` is also the
        counter's memo (a `MemoCounter`): a governor puts no second one in front.

        The plugins are asked once, not per call: every governor built from the
        manager (`governor`, `Governor.from_plugins`, a `Runner` per session)
        counts with the same counter, so a text one session counted is not
        counted again for another, and the memo's bound (`MEMO_CHARS`) holds
        for all of them together. They are asked again after a plugin is
        registered or fails; the same plugin's counter keeps its memo.
        """
        known = self._counter
        if known is not None:
            return known[0]
        counter = self._ask_token_counter()
        with self._counter_lock:  # two threads asking at once get the same counter
            if self._counter is None:
                self._counter = (counter,)
            return self._counter[0]

    def _ask_token_counter(self) -> Any:
        from nanobot_core.governance.tokens import CheckedCounter, EstimateCounter

        found = self._first_usable(
            "nanobot_token_counter", {"ctx": self.context}, partial(_lacks, "count_text")
        )
        if found is None:
            return None
        record, counter = found
        if type(counter) is EstimateCounter:
            return counter
        key = self._record_key(record.info)
        with self._counter_lock:
            held = self._checked.get(key)
            if held is None or held[0] is not record:  # a plugin registered again is another
                held = self._checked[key] = (
                    record,
                    CheckedCounter(counter, record.info.describe()),
                )
            return held[1]

    def result_store(self) -> Any:
        """The offload cache for huge tool results (the first plugin's with a ``put`` method)."""
        found = self._first_usable(
            "nanobot_result_store", {"ctx": self.context}, partial(_lacks, "put")
        )
        return found[1] if found is not None else None

    def governor(self) -> Governor:
        """The governor over every stage, disabled ones reported: `Governor.from_plugins`."""
        from nanobot_core.governance import Governor

        return Governor.from_plugins(self)

    def prompt_builder(self) -> PromptBuilder:
        """The prompt builder over every section: `PromptBuilder.from_plugins`."""
        from nanobot_core.prompt import PromptBuilder

        return PromptBuilder.from_plugins(self)

    def providers(self) -> dict[str, Any]:
        """Model providers by name."""
        return {c.name: c.item for c in self.contributions("provider")}

    def kept_files(self) -> list[tuple[Path, str]]:
        """The files and folders plugins declare they read or keep (`nanobot_kept_files`),
        absolute, each with the plugin that declared it (`PluginInfo.describe`); asked once.

        A plugin whose answer is not a list of paths is marked failed, and its answer
        left out.
        """
        if self._kept is None:
            kept: list[tuple[Path, str]] = []
            for record, value in self.call_each("nanobot_kept_files", ctx=self.context):
                if value is None:
                    continue
                if not isinstance(value, list | tuple) or not all(
                    isinstance(item, str | os.PathLike) for item in value
                ):
                    self._fail(
                        record,
                        f"nanobot_kept_files returned {type(value).__name__}, not a list of paths",
                    )
                    continue
                try:
                    paths = [self.context.workspace / os.fspath(item) for item in value]
                except TypeError:  # an os.PathLike whose __fspath__ gives no str
                    self._fail(record, "nanobot_kept_files returned a path that is no str")
                    continue
                kept += [(path, record.info.describe()) for path in paths]
            self._kept = kept
        return self._kept

    def runtime_lines(self) -> list[str]:
        """Lines for the runtime-context block; a misbehaving plugin's lines are dropped."""
        lines: list[str] = []
        for record, value in self.call_each("nanobot_runtime_context", ctx=self.context):
            if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
                lines.extend(value)
            elif value is not None:
                log.error(
                    "runtime-context hook returned non-strings; lines dropped",
                    plugin=record.info.describe(),
                    returned=type(value).__name__,
                )
        return lines

    def _tool_call_outcomes(self, hook_name: str, kwargs: dict[str, Any]) -> list[Outcome]:
        """Each tool-call hook's outcome; a raising hook is logged and ignored, not failed."""
        outcomes: list[Outcome] = []
        values = {"ctx": self.context, **kwargs}
        for outcome in call_in_order(self._pm, hook_name, self._loaded_records(), values):
            if outcome.failed:
                log.error(
                    "tool-call hook raised; ignored",
                    hook=hook_name,
                    plugin=outcome.record.info.describe(),
                    error=outcome.describe_error(),
                )
                continue
            outcomes.append(outcome)
        return outcomes


class _ToolCallHooks:
    """Adapts the tool-call hooks of all plugins to the executor's hook protocol."""

    def __init__(self, manager: PluginManager) -> None:
        self._manager = manager

    def observes(self) -> bool:
        """Whether a plugin implements either tool-call hook: with none, the executor copies
        no arguments for them and calls neither (a plugin that failed is unregistered)."""
        hook = self._manager._pm.hook
        return bool(
            hook.nanobot_before_tool_call.get_hookimpls()
            or hook.nanobot_after_tool_call.get_hookimpls()
        )

    def before(self, call: ToolCallEvent) -> str | None:
        for outcome in self._manager._tool_call_outcomes(
            "nanobot_before_tool_call", {"call": call}
        ):
            value, plugin = outcome.value, outcome.record.info.describe()
            if value is None:
                continue
            if isinstance(value, str):
                # str.__str__, not format(): a str subclass's own __format__ is plugin code
                return f"{str.__str__(value)} (denied by {plugin})"
            # Anything else is still meant to deny, but is never turned into text: its
            # __str__ is the plugin's code, free to raise or exit outside its containment.
            log.error(
                "tool-call hook returned no reason string; call denied",
                hook="nanobot_before_tool_call",
                plugin=plugin,
                returned=type(value).__name__,
            )
            return f"its hook returned {type(value).__name__}, not a reason (denied by {plugin})"
        return None

    def after(self, call: ToolCallEvent, result: Any) -> None:
        self._manager._tool_call_outcomes(
            "nanobot_after_tool_call", {"call": call, "result": result}
        )


def _name_taken(info: PluginInfo, holder: PluginInfo) -> str:
    """Why the plugin of `info` is refused, `holder` having its name, and what to do."""
    if holder.builtin:
        todo = "register it under another name (a built-in plugin's name is the core's)"
    elif info.entry_point is None:
        todo = "register it under another name"
        if holder.distribution:
            todo += f", or block {holder.distribution} in plugins.block"
    elif info.distribution and canonical_name(info.distribution) == canonical_name(
        holder.distribution or ""
    ):
        todo = f"give the entry points of {info.distribution} names of their own"
    else:
        both = " or ".join(d for d in (holder.distribution, info.distribution) if d)
        todo = (
            f"uninstall {both or 'one of them'}, or block one of them by its distribution "
            "name in plugins.block"
        )
    return (
        f"its name is taken by {holder.describe()}, registered first (two plugins cannot "
        f"share a name, which config and listings know a plugin by): {todo}"
    )


def _lacks(method: str, value: Any) -> str | None:
    """What is wrong with `value`, which a hook returned to be used through `method`."""
    if callable(getattr(value, method, None)):
        return None
    return f"a {type(value).__name__}, which has no {method}() method"
