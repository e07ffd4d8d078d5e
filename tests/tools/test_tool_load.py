"""Loading a plugin's tools: each attribute read once, and what was read is what is kept."""

from __future__ import annotations

import asyncio
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

import nanobot_core.schema
from nanobot_core import Tool
from nanobot_core.config import Config, PluginsConfig
from nanobot_core.hookspecs import hookimpl
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.tools import registry as registry_module
from nanobot_core.tools.executor import Executor, ToolCallRequest, run_calls
from nanobot_core.tools.registry import ToolRegistry

COUNTED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "description": "the counted tool's own",
}

#: Each attribute `read_tool` reads, with the value the counting tool answers.
ANSWERS: dict[str, Any] = {
    "name": "counted",
    "description": "Counts the reads of its attributes.",
    "parameters": COUNTED_SCHEMA,
    "timeout": None,
    "read_only": True,
    "exclusive": False,
}


def _counting(attribute: str, value: Any, reads: Counter[str]) -> property:
    """A property answering `value` that counts its reads in `reads`."""

    def read(self: Tool) -> Any:
        reads[attribute] += 1
        return value

    return property(read)


def _counting_tool(reads: Counter[str], *, own_safe: bool = False) -> Tool:
    """A tool whose every attribute is a counting property (``concurrency_safe`` if asked)."""
    members: dict[str, Any] = {
        name: _counting(name, value, reads) for name, value in ANSWERS.items()
    }

    async def execute(self: Tool, **kwargs: Any) -> str:
        return "ran"

    members["execute"] = execute
    if own_safe:
        members["concurrency_safe"] = _counting("concurrency_safe", True, reads)
    cls = type("Counted", (Tool,), members)
    return cls()  # type: ignore[no-any-return]


def _manager(tmp_path: Path, *tools: Any) -> PluginManager:
    """A manager of the built-ins and plugin 'counting' (nb-counting 1.0) giving `tools`."""

    class Plugin:
        @hookimpl
        def nanobot_tools(self, ctx: Any) -> list[Any]:
            return list(tools)

    config = Config(plugins=PluginsConfig(disable_autoload=True))
    manager = PluginManager(config, workspace=tmp_path).load()
    record = manager.register(Plugin(), "counting", distribution="nb-counting", version="1.0")
    assert record.status == "loaded"
    return manager


@pytest.fixture
def normalised(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], int]]:
    """How many times the counted tool's schema has been normalised, wherever that is done."""
    calls: list[Any] = []
    real = nanobot_core.schema.normalise_schema_changes

    def counting(schema: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(schema)
        return real(schema, *args, **kwargs)

    monkeypatch.setattr(nanobot_core.schema, "normalise_schema_changes", counting)
    monkeypatch.setattr(registry_module, "normalise_schema_changes", counting)
    yield lambda: sum(1 for schema in calls if schema == COUNTED_SCHEMA)


@pytest.mark.parametrize("own_safe", [False, True], ids=["default-safe", "own-safe"])
def test_each_attribute_of_a_plugin_tool_is_read_once_per_load(
    tmp_path: Path, normalised: Callable[[], int], own_safe: bool
) -> None:
    """Collecting a plugin's tool and building the registry read each attribute once, and
    normalise its schema once (before: name 3 times, read_only and exclusive 4, the schema
    normalised twice); the definitions and listings read none again."""
    reads: Counter[str] = Counter()
    manager = _manager(tmp_path, _counting_tool(reads, own_safe=own_safe))
    registry = manager.tool_registry()
    assert "counted" in registry
    registry.definitions()
    assert registry.flags_of("counted") == {
        "read_only": True,
        "exclusive": False,
        "concurrency_safe": True,
    }
    # The default concurrency_safe is made of the read_only and exclusive read, not read.
    expected = dict.fromkeys([*ANSWERS, *(["concurrency_safe"] if own_safe else [])], 1)
    assert dict(reads) == expected
    assert normalised() == 1


@pytest.mark.parametrize(
    "attribute", ["name", "description", "parameters", "timeout", "read_only", "exclusive"]
)
def test_an_attribute_that_raises_leaves_out_its_tool_alone_naming_it(
    tmp_path: Path, attribute: str
) -> None:
    """A tool whose attribute raises at load is left out alone, listed under its plugin
    (named with its distribution and version) with the attribute and what it raised."""

    class Raising(Tool):
        name = "raising"
        description = "One attribute raises."
        parameters: dict[str, Any] = {"type": "object", "properties": {}}

        async def execute(self, **kwargs: Any) -> str:
            return "ran"

    def boom(self: Tool) -> Any:
        raise RuntimeError(f"no {attribute} today")

    setattr(Raising, attribute, property(boom))

    class Steady(Tool):
        name = "steady"
        description = "Plain attributes."
        parameters: dict[str, Any] = {"type": "object", "properties": {}}

        async def execute(self, **kwargs: Any) -> str:
            return "ran"

    with capture_logs() as logs:
        manager = _manager(tmp_path, Raising(), Steady())
        registry = manager.tool_registry()
    assert "steady" in registry and "raising" not in registry
    (record,) = [r for r in manager.records() if r.info.name == "counting"]
    assert record.status == "loaded"
    who = "tool of class Raising" if attribute == "name" else "tool 'raising'"
    problem = f"{who} left out: reading its {attribute} raised RuntimeError: no {attribute} today"
    assert record.problems == [problem]
    (logged,) = [entry for entry in logs if entry.get("problem") == problem]
    assert logged["plugin"] == "plugin 'counting' from nb-counting 1.0"


class _Changing(Tool):
    """A tool whose name and read_only answer, read after read, what the test gives."""

    description = "Answers differently on each read."
    parameters: dict[str, Any] = {"type": "object", "properties": {}}

    def __init__(self, names: list[str], flags: list[bool]) -> None:
        self.names, self.flags = iter(names), iter(flags)

    @property  # type: ignore[override]
    def name(self) -> str:
        return next(self.names)

    @property  # type: ignore[override]
    def read_only(self) -> bool:
        return next(self.flags)

    async def execute(self, **kwargs: Any) -> str:
        return "ran"


_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True).map(lambda n: f"ch_{n}")


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    names=st.lists(_NAMES, min_size=4, max_size=4),
    flags=st.lists(st.booleans(), min_size=4, max_size=4),
)
def test_a_tool_answering_differently_on_each_read_is_kept_as_first_read(
    names: list[str], flags: list[bool]
) -> None:
    """Whatever a tool's name and read_only answer read after read, the registry keeps the
    first answers: the name the model sees routes the calls, and the flags listed are one
    reading (before, the registry kept a second reading, the load had checked the first)."""
    flags = [*flags, *([not flags[-1]] * 4)]  # more reads than expected answer other values
    tool = _Changing([*names, *(f"{n}_again" for n in names)], flags)
    with tempfile.TemporaryDirectory() as workspace:
        registry = _manager(Path(workspace), tool).tool_registry()
    shown = [d["function"]["name"] for d in registry.definitions()]
    assert [name for name in shown if name.startswith("ch_")] == [names[0]]
    assert registry.names().count(names[0]) == 1 and registry.get(names[0]) is tool
    assert registry.prepare_call(names[0], {}).error is None
    assert registry.flags_of(names[0])["read_only"] is flags[0]
    assert registry.flags_of(names[0])["concurrency_safe"] is flags[0]


def test_the_registry_built_from_given_tools_reads_each_once() -> None:
    """`ToolRegistry.build` of tools given as they are reads each attribute once too."""
    reads: Counter[str] = Counter()
    registry = ToolRegistry.build([(_counting_tool(reads), False, "given")], config=Config())
    assert "counted" in registry
    assert dict(reads) == dict.fromkeys(ANSWERS, 1)


class _FlipsAfterLoad(Tool):
    """A tool whose read_only answers `first` at its first read and the opposite after."""

    name = "flips"
    description = "Its read_only changes after its first read."
    parameters: dict[str, Any] = {"type": "object", "properties": {}}

    def __init__(self, first: bool) -> None:
        self.answers = iter([first])
        self.later = not first
        self.running = 0
        self.most_running = 0

    @property  # type: ignore[override]
    def read_only(self) -> bool:
        return next(self.answers, self.later)

    async def execute(self, **kwargs: Any) -> str:
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        await asyncio.sleep(0.05)
        self.running -= 1
        return "ran"


@pytest.mark.parametrize("first", [True, False], ids=["listed-read-only", "listed-not"])
def test_calls_are_scheduled_by_the_read_only_listed(tmp_path: Path, first: bool) -> None:
    """The read_only that ``nanobot-core tools`` lists (`ToolRegistry.flags_of`) is the one
    the executor batches calls by, whatever the property answers later (before, each call
    read it again: listed read-only, a tool could run alone, or listed not, together)."""
    tool = _FlipsAfterLoad(first)
    registry = _manager(tmp_path, tool).tool_registry()
    assert registry.flags_of("flips")["read_only"] is first
    calls = [ToolCallRequest(f"c{n}", "flips", {}) for n in range(2)]
    outcomes = run_calls(Executor(registry, default_timeout=5).run(calls))
    assert [outcome.result for outcome in outcomes] == ["ran", "ran"]
    assert tool.most_running == (2 if first else 1)


def _duck(reads: Counter[str], raising: str | None = None) -> Any:
    """A duck-typed tool (as written for HKUDS/nanobot) of counting properties; `raising`
    names one that raises instead."""
    members: dict[str, Any] = {
        name: _counting(name, value, reads) for name, value in ANSWERS.items()
    }
    if raising is not None:

        def boom(self: Any) -> Any:
            raise RuntimeError(f"no {raising} today")

        members[raising] = property(boom)

    async def execute(self: Any, **kwargs: Any) -> str:
        return "ran"

    members["execute"] = execute
    return type("Duck", (), members)()


def test_each_attribute_of_a_duck_typed_tool_is_read_once_per_load(tmp_path: Path) -> None:
    """A tool written for HKUDS/nanobot has each attribute read once when loaded (before:
    name, description and parameters twice, once only to see they were there)."""
    reads: Counter[str] = Counter()
    registry = _manager(tmp_path, _duck(reads)).tool_registry()
    assert "counted" in registry
    assert dict(reads) == dict.fromkeys(ANSWERS, 1)


@pytest.mark.parametrize("attribute", ["name", "description", "read_only", "timeout"])
def test_a_duck_typed_tool_attribute_that_raises_leaves_it_out_alone(
    tmp_path: Path, attribute: str
) -> None:
    """A duck-typed tool whose attribute raises at load is left out alone, the attribute
    named under its plugin (before, its whole plugin failed)."""
    manager = _manager(tmp_path, _duck(Counter(), raising=attribute), _duck(Counter()))
    registry = manager.tool_registry()
    (record,) = [r for r in manager.records() if r.info.name == "counting"]
    assert record.status == "loaded"
    assert registry.names().count("counted") == 1  # the plain duck, with no name clash
    who = "tool of class Duck" if attribute == "name" else "tool 'counted'"
    problem = f"{who} left out: reading its {attribute} raised RuntimeError: no {attribute} today"
    assert record.problems == [problem]


class _SchemaOnly(Tool):
    """A tool of the given name and schema."""

    description = "Has the schema it is given."

    def __init__(self, name: str, parameters: dict[str, Any]) -> None:
        self._name, self._parameters = name, parameters

    @property
    def name(self) -> str:
        return self._name

    @property
    def parameters(self) -> dict[str, Any]:
        return self._parameters

    async def execute(self, **kwargs: Any) -> str:
        return "ran"


def _fan_out(levels: int) -> dict[str, Any]:
    """Arguments whose `x` is an ``anyOf`` naming the level below twice, `levels` deep."""
    defs: dict[str, Any] = {"L0": {"type": "integer"}}
    for level in range(1, levels + 1):
        defs[f"L{level}"] = {"anyOf": [{"$ref": f"#/$defs/L{level - 1}"}] * 2}
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": f"#/$defs/L{levels}"}}}


FAN_OUT_PROBLEM = (
    "tool 'fan' left out: its parameters schema has a value checked against 4,294,967,295 "
    "of its schemas, more than 10,000 (MAX_CHECKS_PER_VALUE): a $ref named more than once "
    "in an anyOf, oneOf or allOf, level after level, checks it once per way there, and a "
    "call would take minutes to check"
)


def test_a_schema_checking_a_value_too_often_leaves_out_its_tool_alone(tmp_path: Path) -> None:
    """A plugin tool whose schema names a $ref twice at each of 30 levels (jsonschema-rs took
    26 s to check one argument against it) is left out at load, naming the plugin, the tool
    and why; the plugin's other tools stay."""
    fine = _SchemaOnly("fine", {"type": "object", "properties": {"x": {"type": "integer"}}})
    with capture_logs() as logs:
        manager = _manager(tmp_path, _SchemaOnly("fan", _fan_out(30)), fine)
        registry = manager.tool_registry()
    assert "fine" in registry and "fan" not in registry
    (record,) = [r for r in manager.records() if r.info.name == "counting"]
    assert record.status == "loaded" and record.problems == [FAN_OUT_PROBLEM]
    (logged,) = [entry for entry in logs if entry.get("problem") == FAN_OUT_PROBLEM]
    assert logged["plugin"] == "plugin 'counting' from nb-counting 1.0"


def test_a_schema_checking_a_value_too_often_is_refused_by_add() -> None:
    """`ToolRegistry.add` refuses the same schema, naming the tool; a few levels load."""
    registry = ToolRegistry()
    with pytest.raises(nanobot_core.schema.InvalidSchemaError) as raised:
        registry.add(_SchemaOnly("fan", _fan_out(30)))
    assert str(raised.value) == FAN_OUT_PROBLEM.replace(
        "tool 'fan' left out:", 'tool "fan" cannot be added:'
    )
    registry.add(_SchemaOnly("few", _fan_out(8)))
    assert registry.prepare_call("few", {"x": 3}).ok
    assert registry.prepare_call("few", {"x": "3"}).arguments == {"x": 3}


def test_a_pattern_written_as_a_regex_literal_is_listed_naming_plugin_tool_and_place(
    tmp_path: Path,
) -> None:
    """A plugin tool whose `pattern` is a JavaScript regex literal (``/abc/u``) is kept as
    written, and the plugin's problems (and the log, with its version) say where and why."""
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "/abc/u"}}}
    with capture_logs() as logs:
        manager = _manager(tmp_path, _SchemaOnly("codes", schema))
        registry = manager.tool_registry()
    assert registry.definitions()[-1]["function"]["parameters"] == schema
    (record,) = [r for r in manager.records() if r.info.name == "counting"]
    problem = (
        "tool 'codes' kept, its parameters schema is likely wrong: #/properties/code/pattern: "
        '"/abc/u" is written as a JavaScript regex literal: JSON Schema matches its slashes '
        'as characters and its flags (u) are letters to match: a pattern has none; "abc" was '
        "likely meant (kept as written)"
    )
    assert record.problems == [problem]
    assert any(entry.get("problem") == problem for entry in logs)
