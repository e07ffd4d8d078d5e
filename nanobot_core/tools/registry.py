"""The tool registry: the active tools, their definitions in a stable order, and call preparation.

Lenient toward the model: `ToolRegistry.prepare_call` accepts the argument
shapes models actually send (objects, JSON text, double-encoded JSON, an
``{"arguments": ...}`` wrapper, broken JSON), validates them, and casts only
what is invalid. It never raises for a bad call: the problem comes back as an
"Error..." string the model can act on.
"""

from __future__ import annotations

import copy
import inspect
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from nanobot_core._clip import a_type, clip
from nanobot_core._containment import PluginEscapeError, contained, describe, plugin_code
from nanobot_core._json_boundary import (
    MAX_ARGUMENT_VALUES,
    JSONLimitError,
    JSONRepeatedKeyError,
    JSONSyntaxError,
    check_depth,
    loads,
)
from nanobot_core._json_repair import repair
from nanobot_core._logging import get_logger
from nanobot_core.kernel.records import PluginInfo
from nanobot_core.schema import (
    InvalidSchemaError,
    SchemaChange,
    compile_schema,
    format_instance_path,
    normalise_schema_changes,
)
from nanobot_core.schema.casting import CastNote, cast_value_noted
from nanobot_core.schema.validation import MAX_CHECKS_PER_VALUE, more_values_than
from nanobot_core.tools.base import Tool, ToolAttributeError, ToolFacts, read_tool

if TYPE_CHECKING:
    from nanobot_core.config import Config
    from nanobot_core.kernel.manager import PluginManager
    from nanobot_core.schema import SchemaValidator

__all__ = ["PreparedCall", "ToolRegistry", "suggest_name"]

log = get_logger("nanobot_core.tools")

MCP_PREFIX = "mcp_"
_MAX_LISTED_TOOLS = 40
#: Errors of one call's arguments its answer lists; the others are counted. Each one is
#: short (a path and a message, each cut), but a call may have one per value: 50,000
#: wrong items of an array answered with 2 MB of errors.
MAX_LISTED_ERRORS = 8
#: The most values (each object, array, string, number..) a tool's parameters schema may
#: hold, as many as a call's arguments (`MAX_ARGUMENT_VALUES`): normalising and compiling
#: one of 100,000 properties took 5 s, and it would be sent with every request.
MAX_SCHEMA_VALUES = 100_000


@attrs.frozen
class PreparedCall:
    """A tool call ready to run (``error`` is None) or refused (``error`` says why, for the model).

    ``arguments`` is the parsed, validated (and, if needed, cast) object;
    ``repairs`` lists what was done to get there. ``name`` is the tool's, or
    for an unknown tool the name the call gave, clipped as its error quotes it
    (whole up to 200 characters): it names the result in the session.
    """

    name: str
    tool: Tool | None
    arguments: dict[str, Any] = attrs.field(factory=dict)
    repairs: list[str] = attrs.field(factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the call can run."""
        return self.error is None


@attrs.frozen
class LoadedTool:
    """A tool and all the registry keeps of it, read once (`read_tool`) as its plugin's code.

    The plugin manager makes one of each tool as it collects them and hands it to
    `ToolRegistry.build`, which registers it without reading the tool again: a
    plugin's ``name``, ``read_only`` or ``parameters`` property runs once per load.
    """

    tool: Tool
    facts: ToolFacts
    #: ``facts.parameters`` normalised (`normalise_schema_changes`), and the changes made.
    schema: dict[str, Any]
    changes: tuple[SchemaChange, ...]
    #: The schema compiled, or None when the tool cannot be offered (`problem` says why).
    validator: SchemaValidator | None = None
    #: Why the tool cannot be offered (``its parameters schema is invalid (...)``), or None.
    problem: str | None = None

    @property
    def name(self) -> str:
        """The name the tool was read with: the one the model sees and calls route by."""
        return self.facts.name

    @property
    def lost(self) -> list[SchemaChange]:
        """The changes normalising the schema made that lost something its author wrote."""
        return [change for change in self.changes if change.lost]

    @classmethod
    def of(cls, tool: Tool, facts: ToolFacts) -> LoadedTool:
        """`tool` with its `facts` and their schema normalised and compiled, once.

        A schema that cannot be normalised or compiled, that holds more than
        `MAX_SCHEMA_VALUES` values, or that would have a value of the arguments
        checked against more than `MAX_CHECKS_PER_VALUE` of its schemas, is no
        error: `problem` says why, for the caller to leave the tool out (or refuse
        it), naming it.
        """
        if more_values_than(facts.parameters, MAX_SCHEMA_VALUES):
            # Counted before any other work: the cost of what follows grows with the size.
            problem = (
                f"its parameters schema holds more than {MAX_SCHEMA_VALUES:,} values "
                "(MAX_SCHEMA_VALUES), more than a call's arguments may; it would be sent "
                "with every request"
            )
            return cls(tool, facts, facts.parameters, (), problem=problem)
        try:
            schema, changes = normalise_schema_changes(facts.parameters)
            validator = compile_schema(schema)
            validator.compile()
        except InvalidSchemaError as exc:
            return cls(tool, facts, facts.parameters, (), problem=_invalid(str(exc)))
        except Exception as exc:  # what the parameters held is the plugin's fault too
            return cls(tool, facts, facts.parameters, (), problem=_invalid(describe(exc)))
        checks = validator.checks_per_value()
        if checks > MAX_CHECKS_PER_VALUE:
            # jsonschema-rs checks each one, for each call: the time grows with the count.
            problem = (
                f"its parameters schema has a value checked against {_count(checks)} of its "
                f"schemas, more than {MAX_CHECKS_PER_VALUE:,} (MAX_CHECKS_PER_VALUE): a $ref "
                "named more than once in an anyOf, oneOf or allOf, level after level, "
                "checks it once per way there, and a call would take minutes to check"
            )
            return cls(tool, facts, schema, tuple(changes), problem=problem)
        return cls(tool, facts, schema, tuple(changes), validator)


def _invalid(reason: str) -> str:
    return f"its parameters schema is invalid ({reason})"


def _count(checks: int) -> str:
    """`checks` for a person: ``2,097,151``, or past a trillion ``more than 10**12``."""
    return f"{checks:,}" if checks < 10**12 else "more than 10**12"


@attrs.define
class _Entry:
    tool: Tool
    name: str  # as registered: a plugin's ``name`` property is not read again at call time
    description: str  # as registered: the definitions run no plugin code
    builtin: bool
    plugin: str
    owner: str  # the plugin as messages name it (`PluginInfo.describe`), "" when unknown
    schema: dict[str, Any]
    flags: Mapping[str, bool]  # as registered: listings show them, calls are scheduled by them
    validator: SchemaValidator  # compiled when the tool was loaded: calls never compile it

    @property
    def rank(self) -> int:
        if self.name.startswith(MCP_PREFIX):
            return 2
        return 0 if self.builtin else 1

    @property
    def label(self) -> str:
        """``tool "grep" of plugin 'search' from search-tools 1.2``, as its errors name it."""
        return tool_label(self.name, self.owner)


class ToolRegistry:
    """The active tools by name.

    `definitions` lists built-ins by name, then plugin tools by name, then
    ``mcp_`` tools by name: a stable prefix keeps the provider's prompt cache
    warm. Schemas are normalised and compiled when a tool is added (a schema
    that cannot be is refused then, never at a call); the warnings are kept in
    ``warnings`` and logged, those of a change that lost something the author
    wrote (`SchemaChange.lost`) as `build`'s ``noted`` says.
    """

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._definitions: list[dict[str, Any]] | None = None
        self.warnings: list[str] = []
        self.disabled: list[str] = []  # tool names left out by ``tools.disabled``

    @classmethod
    def build(
        cls,
        tools: Iterable[tuple[Tool | LoadedTool, bool, str | PluginInfo]],
        *,
        config: Config,
        left_out: Callable[[str | PluginInfo, str], None] | None = None,
        noted: Callable[[str | PluginInfo, str], None] | None = None,
        left_out_before: Collection[str] = (),
        failed: Collection[str] = (),
    ) -> ToolRegistry:
        """A registry of ``(tool, builtin, plugin)`` entries without those in ``tools.disabled``.

        ``plugin`` is as `add` takes it. ``tool`` is a `Tool`, read here as `add`
        reads it, or a `LoadedTool` (what `from_plugins` hands over), not read
        again. The names left out are kept in `disabled`; a disabled name that
        no tool has is logged. A tool that cannot be read as `add` reads it (its
        plugin's code raises, or holds what no tool may) is left out alone:
        ``left_out(plugin, problem)`` is told (by default a warning naming the
        plugin and its version). A tool
        whose schema lost something its author wrote when normalised (a type
        name nobody knows) is kept, and ``noted(plugin, problem)`` told
        (`SchemaChange.problem`; by default the same warning as the other changes).
        ``left_out_before`` names the tools left out before they reached the
        registry, each a problem of its plugin (`PluginManager.left_out`): a
        disabled name among them is no unknown name. ``failed`` names the plugins
        that failed as a whole, as messages name them (`PluginInfo.describe`): a
        disabled name no tool has may be one of theirs, which nobody can tell (a
        plugin that fails gives no tools), so the warning about it names them
        rather than calling the name unknown.
        """
        registry = cls()
        disabled = set(config.tools.disabled)
        for tool, builtin, plugin in tools:
            owner, name_of_plugin = _owner(plugin)
            if isinstance(tool, LoadedTool):
                loaded = tool
            else:
                problem: str | None = None
                try:
                    loaded = LoadedTool.of(tool, _read(tool, owner))
                except Exception as exc:  # the plugin's code, or what it holds: that tool alone
                    problem = _left_out_problem(tool, exc)
                else:
                    if loaded.problem is not None:  # as the plugin manager leaves it out
                        problem = f"tool {loaded.name!r} left out: {loaded.problem}"
                if problem is not None:
                    if left_out is None:
                        log.warning("tool left out", plugin=owner, problem=problem)
                    else:
                        left_out(plugin, problem)
                    continue
            name = loaded.name
            if name in disabled:
                registry.disabled.append(name)
                log.info("tool disabled in config (tools.disabled)", tool=name)
                continue
            lost = registry._add(loaded, builtin=builtin, plugin=name_of_plugin, owner=owner)
            for change in lost:
                if noted is None:
                    _log_change(name, owner, change)
                else:
                    noted(plugin, change.problem(name))
        # A disabled tool left out for a problem of its plugin is not offered, as asked, and
        # the problem is already listed and logged under its plugin: a warning calling the
        # name unknown would send the user hunting for a typo in a name that is right.
        for name in sorted(disabled & set(left_out_before)):
            log.info("tool in tools.disabled left out at load for a problem", tool=name)
        for name in sorted(disabled - set(registry.disabled) - set(left_out_before)):
            from nanobot_core.config import source_of  # as `Config`: not imported to run tools

            if failed:
                # The name may be right, and its tool that of a plugin that failed: a plugin
                # declares its tools only by giving them, so which one cannot be said.
                log.warning(
                    "tool name in tools.disabled not contributed by any loaded plugin; "
                    "a plugin failed to load",
                    name=name,
                    key="tools.disabled",
                    failed_plugins=list(failed),
                    **source_of(config.tools.disabled),
                )
                continue
            log.warning(
                "unknown tool name in tools.disabled",
                name=name,
                key="tools.disabled",
                **source_of(config.tools.disabled),
            )
        return registry

    @classmethod
    def from_plugins(cls, pm: PluginManager) -> ToolRegistry:
        """The registry over every plugin's tools (built-ins first): `build`'s code.

        A tool `build` leaves out, or one whose schema lost something when
        normalised, is listed under its plugin's ``problems``; the plugins failed by
        then are `build`'s ``failed``.
        """
        from nanobot_core.kernel.calling import note_problem

        def note(plugin: str | PluginInfo, problem: str) -> None:
            record = pm.record_of(plugin) if isinstance(plugin, PluginInfo) else None
            if record is not None and record.info == plugin:
                note_problem(record, problem)  # listed and logged once, however often noted

        contributed = pm.contributions("tool")
        left_out_before = pm.left_out("tool")
        # Read once the tools are collected: a plugin raising in its tools hook has failed.
        failed = [record.info.describe() for record in pm.failed_so_far()]
        return cls.build(
            # What the manager read of each tool as it collected it: nothing is read again.
            ((c.loaded or c.item, c.plugin.builtin, c.plugin) for c in contributed),
            config=pm.config,
            left_out=note,
            noted=note,
            left_out_before=left_out_before,
            failed=failed,
        )

    # -- contents --------------------------------------------------------------------------

    def add(self, tool: Tool, *, builtin: bool = False, plugin: str | PluginInfo = "") -> None:
        """Register a tool; raises ValueError if its name is taken, TypeError if it is no Tool.

        ``plugin`` is the plugin that contributed it: its name (reported to
        tool-call hooks), or its `PluginInfo`, whose name is reported and whose
        description (name, distribution and version) the tool's errors give.
        The tool's ``name``, ``description`` and ``parameters`` are read here,
        once (`read_tool`, as that plugin's code): calls find it by this name,
        and `definitions` give what was read, never running the tool's code.
        What `read_tool` raises is raised (a ValueError or TypeError when the
        tool cannot be used). The schema is normalised and compiled here, as a
        plugin's tools are at load: one that cannot be raises `InvalidSchemaError`
        (a ValueError) naming the tool and its plugin, rather than refusing each
        of its calls.
        """
        owner, name_of_plugin = _owner(plugin)
        loaded = LoadedTool.of(tool, _read(tool, owner))
        if loaded.problem is not None:
            raise InvalidSchemaError(
                f"{tool_label(loaded.name, owner)} cannot be added: {loaded.problem}"
            )
        lost = self._add(loaded, builtin=builtin, plugin=name_of_plugin, owner=owner)
        for change in lost:
            _log_change(loaded.name, owner, change)

    def _add(
        self, loaded: LoadedTool, *, builtin: bool, plugin: str, owner: str
    ) -> list[SchemaChange]:
        """Register the tool; the changes normalising its schema made that lost something,
        which the caller says (the others are logged here)."""
        name, facts = loaded.name, loaded.facts
        if name in self._entries:
            raise ValueError(f"a tool named {name!r} is already registered")
        if loaded.validator is None:
            raise InvalidSchemaError(f"{tool_label(name, owner)}: {loaded.problem}")
        for change in loaded.changes:
            self.warnings.append(f"{name}: {change}")
            if not change.lost:
                _log_change(name, owner, change)
        self._entries[name] = _Entry(
            loaded.tool,
            name,
            facts.description,
            builtin,
            plugin,
            owner,
            loaded.schema,
            facts.flags,
            loaded.validator,
        )
        self._definitions = None
        return loaded.lost

    def remove(self, name: str) -> Tool:
        """Unregister a tool and return it; raises KeyError if there is none of that name."""
        entry = self._entries.pop(name)
        self._definitions = None
        return entry.tool

    def get(self, name: str) -> Tool | None:
        """The tool of that name, or None."""
        entry = self._entries.get(name)
        return entry.tool if entry is not None else None

    def plugin_of(self, name: str) -> str:
        """The plugin that contributed the tool ("" when unknown)."""
        entry = self._entries.get(name)
        return entry.plugin if entry is not None else ""

    def owner_of(self, name: str) -> str:
        """The tool's plugin as messages name it, with its version ("" when unknown)."""
        entry = self._entries.get(name)
        return entry.owner if entry is not None else ""

    def flags_of(self, name: str) -> Mapping[str, bool]:
        """``read_only``, ``exclusive`` and ``concurrency_safe`` of the tool, as registered.

        What `add` (or the plugin manager, as it collected the tool) read as its plugin's
        code and checked: reading them here runs no plugin code. The executor schedules
        each call by them, so a listing shows what the calls run by.
        Raises KeyError if no tool has that name.
        """
        return self._entries[name].flags

    def names(self) -> list[str]:
        """Tool names in definition order."""
        return [entry.name for entry in self._ordered()]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Tool]:
        return (entry.tool for entry in self._ordered())

    def __len__(self) -> int:
        return len(self._entries)

    def _ordered(self) -> list[_Entry]:
        return sorted(self._entries.values(), key=lambda e: (e.rank, e.name))

    # -- definitions -----------------------------------------------------------------------

    def definitions(self) -> list[dict[str, Any]]:
        """The OpenAI tool definitions, in stable order (cached: do not mutate the result)."""
        if self._definitions is None:
            self._definitions = [
                {
                    "type": "function",
                    "function": {
                        "name": entry.name,
                        "description": entry.description,
                        "parameters": _canonical(entry.schema),
                    },
                }
                for entry in self._ordered()
            ]
        return self._definitions

    # -- calls -----------------------------------------------------------------------------

    def prepare_call(self, name: str, raw_arguments: Any) -> PreparedCall:
        """Parse, repair, validate and (only if invalid) cast the arguments of one call."""
        entry = self._entries.get(name) if isinstance(name, str) else None
        if entry is None:
            # The result pairs with its call by id; its name is for the reader and for
            # endpoints that want one (any a tool may have is kept whole), and a name the
            # model invented may be megabytes long, which the session would keep again.
            shown = clip(str(name or ""))
            return PreparedCall(name=shown, tool=None, error=self._unknown_tool(name))
        tool = entry.tool
        properties = entry.schema.get("properties")
        takes_arguments_key = isinstance(properties, dict) and "arguments" in properties
        parsed = parse_arguments(raw_arguments, unwrap=not takes_arguments_key)
        if parsed.error is not None:
            return PreparedCall(
                name,
                tool,
                repairs=list(parsed.repairs),
                error=f'Error: arguments for tool "{name}" {parsed.error}',
            )
        arguments, repairs = parsed.value, list(parsed.repairs)
        own = _own_check(entry, arguments)
        if own is not None:
            arguments, errors = own
            listed = _listed(errors[:MAX_LISTED_ERRORS], len(errors) - MAX_LISTED_ERRORS)
            error = f'Error: invalid arguments for tool "{name}": ' + listed
            return PreparedCall(name, tool, arguments, repairs, error=error if errors else None)
        try:
            validator = entry.validator
            # Only the errors the answer lists are rendered: a call may break the schema
            # once per value, and the rest are only counted.
            errors, more = validator.first_errors(arguments, MAX_LISTED_ERRORS)
            if errors:
                written = _written(raw_arguments, not takes_arguments_key, arguments)
                cast, notes = cast_value_noted(validator, written)
                # Nothing cast: the same values as before, so the same errors (not sought again).
                cast_errors, cast_more = (
                    validator.first_errors(cast, MAX_LISTED_ERRORS) if notes else (errors, more)
                )
                if cast_errors:
                    errors, more = cast_errors, cast_more
                else:
                    arguments, errors = cast, []
                    repairs.extend(_cast_repairs(notes))
        except ValueError as exc:  # a part compiled only when needed (its subschemas' map)
            return PreparedCall(
                name,
                tool,
                arguments,
                repairs,
                # Named with its plugin and version: the schema is theirs to fix.
                error=f"Error: {entry.label} cannot be called: its parameters schema is invalid "
                f"({exc})",
            )
        if errors:
            return PreparedCall(
                name,
                tool,
                arguments,
                repairs,
                error=f'Error: invalid arguments for tool "{name}": ' + _listed(errors, more),
            )
        return PreparedCall(name, tool, arguments, repairs)

    def _unknown_tool(self, name: Any) -> str:
        names = self.names()
        listed = ", ".join(names[:_MAX_LISTED_TOOLS])
        if len(names) > _MAX_LISTED_TOOLS:
            listed += f", ... ({len(names) - _MAX_LISTED_TOOLS} more)"
        available = f"Available tools: {listed}." if names else "No tools are available."
        # A blank name is no name, as governance reads it.
        if not isinstance(name, str) or not name.strip():
            # What to do, not only what went wrong: a model told only "no name" (or "try a
            # different approach") sends the same nameless call again.
            if not names:
                return (
                    "Error: the tool call has no tool name, and no tools are available: "
                    "answer without calling a tool."
                )
            return (
                "Error: the tool call has no tool name: call a tool by its name, one of the "
                f"available tools. {available}"
            )
        guess = suggest_name(name, names)
        hint = f' Did you mean "{guess}"?' if guess else ""
        return f'Error: unknown tool "{clip(name)}".{hint} {available}'


def _cast_repairs(notes: Sequence[CastNote]) -> list[str]:
    """The repairs a kept cast adds: its first `MAX_LISTED_ERRORS` notes, then how many more.

    A call may hold one value to cast per value (50,000 numbers written as strings):
    listed one by one, their notes would be four times the arguments, kept in the
    session and printed by ``--json``.
    """
    shown = [f"cast {note.text()}" for note in notes[:MAX_LISTED_ERRORS]]
    more = len(notes) - MAX_LISTED_ERRORS
    if more <= 0:
        return shown
    return [*shown, f"cast {more:,} more {'value' if more == 1 else 'values'}, not listed"]


def _listed(shown: list[str], more: int) -> str:
    """The errors an answer lists (`MAX_LISTED_ERRORS` at most), and how many more there are."""
    listed = "; ".join(shown)
    return f"{listed}; and {more:,} more" if more > 0 else listed


def _own_check(entry: _Entry, arguments: dict[str, Any]) -> tuple[dict[str, Any], list[str]] | None:
    """The tool's own argument check, run as plugin code: None, or (arguments, errors).

    What it prints goes to the log; what it raises (``SystemExit`` included),
    errors whose text cannot be read (their ``__str__`` is its code too) or a
    value other than None or an ``(object, list of errors)`` pair refuse the
    call with the reason, so a broken check never breaks the batch.
    """
    tool = entry.tool
    try:
        own_check = (
            getattr(tool.validate_arguments, "__func__", None) is not Tool.validate_arguments
        )
    except BaseException as exc:  # an attribute of its own that raises: read again as plugin code
        contained(exc)  # a real Ctrl-C goes on
        own_check = True
    if not own_check:
        return None  # no check of its own (the base class's says so): no plugin code runs
    failed = "the tool's own argument check"
    try:
        with plugin_code(entry.label):
            own = tool.validate_arguments(arguments)
            checked = _checked(own, failed)
    except PluginEscapeError as exc:
        return arguments, [f"{failed} {exc}"]
    except Exception as exc:  # the tool's own check is its code: contain it
        return arguments, [f"{failed} failed: {contained(exc)}"]
    if isinstance(checked, str):
        return arguments, [checked]
    return checked


def _checked(own: Any, failed: str) -> tuple[dict[str, Any], list[str]] | str | None:
    """What a tool's own check returned, read (as plugin code): the pair, None, or what is wrong."""
    if own is None:
        return None
    if (
        isinstance(own, tuple)
        and len(own) == 2
        and isinstance(own[0], dict)
        and isinstance(own[1], list)
    ):
        return own[0], [str(error) for error in own[1]]
    return (
        f"{failed} returned {a_type(own)}, expected None or an "
        "(arguments object, list of errors) pair"
    )


# -- argument parsing -----------------------------------------------------------------------


@attrs.frozen
class ParsedArguments:
    """The outcome of reading raw arguments: an object, or an error phrase."""

    value: dict[str, Any] = attrs.field(factory=dict)
    repairs: tuple[str, ...] = ()
    error: str | None = None


def parse_arguments(
    raw: Any, *, unwrap: bool = True, written_numbers: bool = False
) -> ParsedArguments:
    """Read raw call arguments into an object, noting every repair.

    Accepts an object; JSON text (also double-encoded, also broken: repaired
    in linear time, see `nanobot_core._json_repair`); None or "" for no
    arguments; and, when ``unwrap``, a lone ``{"arguments": ...}`` wrapper
    whose inner value may itself be JSON text. Text and objects outside the
    JSON boundary's limits (depth, integer digits; text of more than
    `MAX_ARGUMENT_VALUES` values) are refused with the reason; non-finite
    numbers are kept, for validation to refuse by name.
    With `written_numbers`, the numbers of JSON text are the JSON boundary's
    `WrittenFloat` and `WrittenInt`, which keep the text the model wrote: for
    casting only, which `ToolRegistry.prepare_call` asks for when it must cast.
    """
    repairs: list[str] = []
    try:
        value = _decode(raw, repairs, written_numbers)
        if unwrap and isinstance(value, dict) and list(value) == ["arguments"]:
            repairs.append('unwrapped an {"arguments": ...} wrapper')
            value = _decode(value["arguments"], repairs, written_numbers)
    except JSONRepeatedKeyError as exc:
        # Which value the model meant cannot be told; the parser would keep the last in silence.
        where = clip(format_instance_path(exc.path))
        return ParsedArguments(
            repairs=tuple(repairs),
            error=f"cannot be used: {where} is given twice; give each key once",
        )
    except JSONLimitError as exc:
        return ParsedArguments(repairs=tuple(repairs), error=f"cannot be used: {exc}")
    if not isinstance(value, dict):
        return ParsedArguments(
            repairs=tuple(repairs), error=f"must be a JSON object, got {_json_kind(value)}"
        )
    return ParsedArguments(value=value, repairs=tuple(repairs))


_UNPARSABLE = object()


def _written(raw: Any, unwrap: bool, arguments: dict[str, Any]) -> Any:
    """``arguments`` read again from ``raw`` with their numbers as written, for casting.

    Only a call that must be cast pays for this second reading. The numbers
    keep their text only where ``raw`` held them as JSON text: arguments that
    came as an object have none. Casting returns plain numbers, so no
    `WrittenFloat` reaches validation or the tool. ``arguments`` itself when
    the second reading differs (a NaN, never equal to itself; a tool's own
    check that changed ``arguments`` in place).
    """
    written = parse_arguments(raw, unwrap=unwrap, written_numbers=True).value
    return written if written == arguments else arguments


def _decode(raw: Any, repairs: list[str], written: bool) -> Any:
    if raw is None:
        return {}
    if not isinstance(raw, str):
        check_depth(raw)
        return raw
    if not raw.strip():
        return {}
    value = _loads(raw, repairs, written)
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        repairs.append("decoded double-encoded JSON")
        value = _loads(value, repairs, written)
    return value


def _loads(text: str, repairs: list[str], written: bool) -> Any:
    try:
        return loads(
            text,
            keep_nonfinite=True,
            written_numbers=written,
            max_values=MAX_ARGUMENT_VALUES,
            unique_keys=True,
        ).value
    except JSONSyntaxError:
        pass
    try:
        value, done = repair(text, keep_nonfinite=True, written_numbers=written, unique_keys=True)
    except JSONSyntaxError:
        return _UNPARSABLE
    repairs.append(done)
    return value


def _json_kind(value: Any) -> str:
    if value is _UNPARSABLE:
        return "text that is not JSON"
    kinds = {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "an array",
        type(None): "null",
    }
    return kinds.get(type(value), type(value).__name__)


# -- helpers --------------------------------------------------------------------------------


def _owner(plugin: str | PluginInfo) -> tuple[str, str]:
    """`plugin` as messages name it (`PluginInfo.describe`, "" when unknown), and its name."""
    if isinstance(plugin, PluginInfo):
        return plugin.describe(), plugin.name
    return (f"plugin {plugin!r}" if plugin else ""), plugin


def _read(tool: Tool, owner: str) -> ToolFacts:
    """`read_tool` of `tool`, as the code of its plugin `owner` when that is known."""
    if not isinstance(tool, Tool):
        raise TypeError(f"expected a Tool, got {_what_to_add(tool)}")
    if not owner:  # the caller's own tool: what it raises is the caller's
        return read_tool(tool)
    with plugin_code(owner):
        return read_tool(tool)


def _left_out_problem(tool: Any, exc: Exception) -> str:
    """The problem listed for a tool `build` leaves out because reading it raised `exc`."""
    if isinstance(exc, ToolAttributeError):  # says which attribute
        return f"{exc.label} left out: {exc.problem}"
    return f"tool {type(tool).__name__} left out: reading it raised {contained(exc)}"


def _what_to_add(given: Any) -> str:
    """What `add` was given instead of a tool, and how to make one of it."""
    if inspect.isclass(given):
        if issubclass(given, Tool):
            return f"the class {given.__name__}: add an instance, {given.__name__}()"
        return f"the class {given.__name__}"
    if callable(given):
        named = getattr(given, "__name__", None)
        what = (
            f"{type(given).__name__} {named!r}" if isinstance(named, str) else type(given).__name__
        )
        return f"{what}: make it a tool with @nanobot_core.tool"
    return type(given).__name__


def tool_label(name: str, owner: str) -> str:
    """``tool "grep"``, and ``of <plugin>`` (`PluginInfo.describe`) when that is known."""
    return f'tool "{name}"' + (f" of {owner}" if owner else "")


def _canonical(schema: Any) -> Any:
    """A deep copy for the definitions; ``required`` (a set in meaning) is sorted.

    Dict order is kept as written; sorting ``required`` removes the one place
    where a plugin building its schema from a Python set would make the bytes
    depend on PYTHONHASHSEED.
    """
    if isinstance(schema, dict):
        copied = {key: _canonical(value) for key, value in schema.items()}
        required = copied.get("required")
        if isinstance(required, list) and all(isinstance(item, str) for item in required):
            copied["required"] = sorted(required)
        return copied
    if isinstance(schema, list | tuple):
        return [_canonical(item) for item in schema]
    return copy.deepcopy(schema)


def _log_change(tool: str, owner: str, change: SchemaChange) -> None:
    # Named with its plugin: the author reads this warning, not the model's failures.
    event = "tool schema normalised" if change.changed else "tool schema likely wrong"
    log.warning(event, tool=tool, plugin=owner, change=str(change))


def _normalised_name(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def suggest_name(name: str, candidates: list[str]) -> str | None:
    """The one candidate the name most likely meant, or None when none or several fit.

    A candidate fits when it is equal after lower-casing and dropping
    non-alphanumerics, or else within a small edit distance of the name.
    """
    wanted = _normalised_name(name)
    exact = [c for c in candidates if _normalised_name(c) == wanted]
    if exact:
        return exact[0] if len(exact) == 1 else None
    limit = 1 if len(wanted) <= 4 else 2
    normalised = [(_normalised_name(c), c) for c in candidates]
    # The distance is at least the difference in length: a name far longer than every
    # candidate (a model's 100 KB name) is not compared, which took time in its length
    # times each candidate's.
    scored = [
        (_edit_distance(wanted, n), c) for n, c in normalised if abs(len(n) - len(wanted)) <= limit
    ]
    close = sorted((d, c) for d, c in scored if d <= limit)
    if not close or (len(close) > 1 and close[0][0] == close[1][0]):
        return None
    return close[0][1]


def _edit_distance(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, start=1):
        current = [i]
        for j, char_b in enumerate(b, start=1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b))
            )
        previous = current
    return previous[-1]
