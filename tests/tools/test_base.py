"""The Tool API: the three ways to write a tool, ToolResult conventions, and as_tool."""

from __future__ import annotations

import enum
import json
import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core.kernel.context import PluginContext
from nanobot_core.tools._foreign import ForeignTool, ForeignToolContext
from nanobot_core.tools._function import FunctionTool, parse_docstring, tool
from nanobot_core.tools.base import NO_OUTPUT, Tool, ToolFlagError, ToolResult, as_tool, read_tool
from tests.tools.support import run

# -- way 1: subclass Tool -------------------------------------------------------------------


class Weather(Tool):
    name = "weather"
    description = "Tell the weather."
    parameters = {"type": "object", "properties": {"city": {"type": "string"}}}
    read_only = True

    async def execute(self, city: str) -> str:
        return f"sunny in {city}"


class PropertyTool(Tool):
    @property
    def name(self) -> str:
        return "by_property"

    @property
    def description(self) -> str:
        return "Written with properties."

    @property
    def parameters(self) -> dict[str, Any]:
        return {"type": "object", "properties": {}}

    @property
    def concurrency_safe(self) -> bool:
        return True

    async def execute(self) -> str:
        return "ok"


def test_subclass_with_class_attributes_is_a_complete_tool() -> None:
    """Plain class attributes satisfy the abstract name/description/parameters."""
    weather = Weather()
    assert weather.definition() == {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "Tell the weather.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    assert run(weather.execute(city="Oslo")) == "sunny in Oslo"


def test_subclass_with_properties_is_a_complete_tool() -> None:
    """Properties satisfy the abstract members too, and may override concurrency_safe."""
    built = PropertyTool()
    assert built.name == "by_property"
    assert built.read_only is False and built.concurrency_safe is True


def test_concurrency_safe_defaults_to_read_only_and_not_exclusive() -> None:
    """concurrency_safe is derived from read_only and exclusive unless overridden."""

    class Exclusive(Weather):
        exclusive = True

    class Writer(Weather):
        read_only = False

    assert Weather().concurrency_safe is True
    assert Exclusive().concurrency_safe is False
    assert Writer().concurrency_safe is False


def test_subclass_missing_execute_cannot_be_instantiated() -> None:
    """A subclass that does not define execute stays abstract."""

    class NoExecute(Tool):
        name = "x"
        description = "x"
        parameters = {"type": "object"}

    with pytest.raises(TypeError, match="execute"):
        NoExecute()  # type: ignore[abstract]


# -- way 2: @tool --------------------------------------------------------------------------


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Options(TypedDict, total=False):
    deep: bool


@attrs.define
class Point:
    x: int
    y: int = 0


def test_tool_decorator_builds_schema_from_hints_and_docstring() -> None:
    """Type hints become the JSON Schema; the Google docstring gives the descriptions."""

    @tool
    def forecast(
        city: str,
        days: int = 3,
        unit: Literal["c", "f"] = "c",
        ratio: float | None = None,
        tags: list[str] | None = None,
        weights: dict[str, int] | None = None,
        verbose: bool = False,
        note: Annotated[str, "Free text."] = "",
    ) -> str:
        """Get the forecast.

        Uses the public API.

        Args:
            city: The city name.
            days (int): How many days,
                at most ten.

        Returns:
            The forecast text.
        """
        return city

    assert isinstance(forecast, FunctionTool)
    assert forecast.name == "forecast"
    assert forecast.description == "Get the forecast.\n\nUses the public API."
    assert forecast.parameters == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "The city name."},
            "days": {"type": "integer", "description": "How many days, at most ten.", "default": 3},
            "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
            "ratio": {"type": ["number", "null"]},
            "tags": {"type": ["array", "null"], "items": {"type": "string"}},
            "weights": {"type": ["object", "null"], "additionalProperties": {"type": "integer"}},
            "verbose": {"type": "boolean", "default": False},
            "note": {"type": "string", "description": "Free text.", "default": ""},
        },
        "required": ["city"],
        "additionalProperties": False,
    }


def test_tool_decorator_options_set_name_and_flags() -> None:
    """@tool(...) sets the name, description and scheduling flags."""

    @tool(name="renamed", description="Custom.", read_only=True, exclusive=True, timeout=2.5)
    async def original() -> str:
        return "x"

    assert (original.name, original.description) == ("renamed", "Custom.")
    assert original.read_only and original.exclusive and original.timeout == 2.5
    assert original.concurrency_safe is False


def test_tool_decorator_converts_enum_and_attrs_arguments() -> None:
    """Enum and attrs parameters get JSON schemas and receive real instances when called."""
    seen: list[Any] = []

    @tool
    def paint(color: Color, at: Point, options: Options | None = None) -> str:
        """Paint a point."""
        seen.append((color, at, options))
        return "done"

    properties = paint.parameters["properties"]
    assert properties["color"] == {"type": "string", "enum": ["red", "blue"]}
    assert properties["at"]["required"] == ["x"]
    assert properties["options"] == {
        "type": ["object", "null"],
        "properties": {"deep": {"type": "boolean"}},
    }
    run(paint.execute(color="blue", at={"x": 1}, options={"deep": True}))
    assert seen == [(Color.BLUE, Point(x=1, y=0), {"deep": True})]


def test_an_int_parameter_gets_an_int_for_a_whole_number_written_with_a_fraction() -> None:
    """JSON Schema's integer admits 3.0 (a model, or a provider decoding every number as a
    float, writes it so): an ``int`` parameter gets 3, where ``"ab" * 3.0`` raised."""
    from nanobot_core.testing import run_tool

    seen: list[Any] = []

    @tool
    def repeat(
        text: str,
        n: int,
        counts: list[int],
        limit: int | None = None,
        per_key: dict[str, int] | None = None,
        shades: dict[str, Color] | None = None,
    ) -> str:
        """Repeat the text."""
        seen.append((n, counts, limit, per_key))
        seen.append(shades)
        return text * n

    sent = (
        '{"text": "ab", "n": 3.0, "counts": [1, 2.0], "limit": 4.0, "per_key": {"a": 5.0}, '
        '"shades": {"sky": "blue"}}'
    )
    assert run_tool(repeat, sent) == "ababab"
    ((n, counts, limit, per_key), shades) = seen
    assert shades == {"sky": Color.BLUE}
    assert (n, counts, limit, per_key) == (3, [1, 2], 4, {"a": 5})
    assert [type(v) for v in (n, *counts, limit, *per_key.values())] == [int] * 5


@settings(max_examples=100, deadline=None)
@given(whole=st.integers(min_value=-(2**60), max_value=2**60))
def test_an_int_parameter_gets_the_int_of_any_whole_number_the_model_writes(whole: int) -> None:
    """Written as an integer, or with a fraction (3.0, 1e3) read as the float it is, a whole
    number reaches an ``int`` parameter as an int of the same value."""
    from nanobot_core.testing import run_tool

    got: list[Any] = []

    @tool
    def take(n: int) -> str:
        """Take n."""
        got.append(n)
        return "ok"

    forms = {str(whole): whole}
    forms.update({text: int(float(text)) for text in (repr(float(whole)), f"{float(whole):e}")})
    for written, expected in forms.items():
        got.clear()
        assert run_tool(take, f'{{"n": {written}}}') == "ok"
        (n,) = got
        assert type(n) is int and n == expected


def test_tool_decorator_keeps_the_function_callable() -> None:
    """A decorated function can still be called directly."""

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    assert add(2, 3) == 5


def test_tool_decorator_runs_sync_and_async_functions() -> None:
    """Sync functions run (in a worker thread) and async functions are awaited."""

    @tool
    def sync_double(n: int) -> int:
        """Double."""
        return n * 2

    @tool
    async def async_double(n: int) -> int:
        """Double."""
        return n * 2

    assert sync_double.blocking and not async_double.blocking
    assert run(sync_double.execute(n=4)) == 8
    assert run(async_double.execute(n=5)) == 10


def test_kwargs_leaves_the_schema_open() -> None:
    """A function taking **kwargs accepts properties it does not declare."""

    @tool
    def anything(**kwargs: Any) -> str:
        """Take anything."""
        return json.dumps(kwargs)

    assert "additionalProperties" not in anything.parameters


class Opaque:
    """A type with no JSON Schema."""


def test_unsupported_type_fails_at_decoration() -> None:
    """A parameter type with no JSON Schema is refused when the tool is defined."""
    with pytest.raises(TypeError, match=r"probe\(thing\).*cannot describe"):

        @tool
        def probe(thing: Opaque) -> str:
            """Probe."""
            return ""


def test_unresolvable_hint_fails_at_decoration() -> None:
    """A hint naming a type that cannot be resolved is refused with a TypeError."""
    with pytest.raises(TypeError, match="cannot resolve the type hints"):

        @tool
        def probe(thing: NoSuchType) -> str:  # type: ignore[name-defined]  # noqa: F821
            """Probe."""
            return ""


def test_docstring_without_args_section() -> None:
    """A docstring with no sections is all description and documents no parameters."""
    assert parse_docstring("Just a summary.\n\n    And more.") == (
        "Just a summary.\n\nAnd more.",
        {},
    )


_BACKTRACKING_ARG_LINE = re.compile(r"^\**(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


@settings(max_examples=300)
@given(st.text(alphabet="ab *():\t", max_size=30))
def test_an_args_entry_is_read_as_the_backtracking_pattern_read_it(line: str) -> None:
    """The parameter line pattern, its first run of spaces possessive, matches as before."""
    from nanobot_core.tools._function import _ARG_LINE

    old = _BACKTRACKING_ARG_LINE.match(line)
    new = _ARG_LINE.match(line)
    assert (old and old.groups()) == (new and new.groups())


def test_a_long_run_of_spaces_in_an_args_entry_is_read_in_one_pass() -> None:
    """A parameter line of 20,000 spaces and no colon is no entry, read without backtracking."""
    doc = "Probe.\n\nArgs:\n    x" + " " * 20_000 + "y\n    z: the z.\n"
    assert parse_docstring(doc) == ("Probe.", {"z": "the z."})


# -- ToolResult -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text", "is_error"),
    [
        ("fine", "fine", False),
        ("Error: disk full", "Error: disk full", True),
        ("Error executing x", "Error executing x", True),
        ("error in lower case is just text", "error in lower case is just text", False),
        ({"b": 1, "a": [1, "é"]}, '{"b": 1, "a": [1, "é"]}', False),
        ([1, 2], "[1, 2]", False),
        (True, "true", False),
        (3, "3", False),
        (None, NO_OUTPUT, False),
        (b"bytes", "bytes", False),
    ],
)
def test_tool_result_of_converts_returns(value: Any, text: str, is_error: bool) -> None:
    """ToolResult.of turns tool returns into text, with the "Error" prefix meaning failure."""
    result = ToolResult.of(value)
    assert (str(result), result.is_error) == (text, is_error)


def test_tool_result_error_prefixes_error() -> None:
    """ToolResult.error is the explicit failure, always starting with "Error"."""
    assert ToolResult.error("no such file") == "Error: no such file"
    assert ToolResult.error("Error: already prefixed") == "Error: already prefixed"
    assert ToolResult.error("x").is_error


def test_tool_result_keeps_content_blocks() -> None:
    """Content blocks are kept as blocks, with a text rendering as the string."""
    blocks = [
        {"type": "text", "text": "a chart:"},
        {"type": "image_url", "image_url": {"url": "u"}},
    ]
    result = ToolResult.of(blocks)
    assert result.blocks == tuple(blocks)
    assert result == "a chart:\n[image_url]"
    assert not result.is_error


def test_tool_result_honours_a_foreign_error_flag() -> None:
    """A str subclass with its own boolean is_error keeps that flag."""

    class TheirResult(str):
        is_error = False

    class TheirFailure(str):
        is_error = True

    assert ToolResult.of(TheirResult("Error-free text about Errors")).is_error is False
    failure = ToolResult.of(TheirFailure("quota exceeded"))
    assert failure.is_error and failure == "Error: quota exceeded"


class _Lying(str):
    """A str whose own methods say something else than its text."""

    def __str__(self) -> str:
        return "Error: made up"

    def startswith(self, *args: Any, **kwargs: Any) -> Any:
        return "not a bool"


class _LyingBytes(bytes):
    def decode(self, *args: Any, **kwargs: Any) -> Any:
        return 42


class _OwnResult(ToolResult):
    def endswith(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("not called")


@settings(derandomize=True, deadline=None, max_examples=200)
@given(st.text())
def test_tool_result_of_reads_a_str_subclass_as_its_text(text: str) -> None:
    """Whatever a str subclass's own methods say, the result is a plain ToolResult of its text."""
    result = ToolResult.of(_Lying(text))
    assert type(result) is ToolResult
    assert str.__str__(result) == text
    assert result.is_error is text.startswith("Error")


def test_tool_result_of_reads_bytes_and_result_subclasses_plainly() -> None:
    """A bytes subclass is decoded as bytes; a ToolResult subclass becomes a plain ToolResult."""
    decoded = ToolResult.of(_LyingBytes(b"caf\xc3\xa9"))
    assert (type(decoded), str(decoded)) == (ToolResult, "café")
    blocks = [{"type": "text", "text": "t"}]
    own = ToolResult.of(_OwnResult("Error: x", is_error=True, blocks=blocks))
    assert type(own) is ToolResult
    assert (str(own), own.is_error, own.blocks) == ("Error: x", True, tuple(blocks))
    assert own.endswith("x")


@pytest.mark.parametrize("value", [object(), {1, 2}, b"\xff\xfe", {"a": object()}])
def test_unconvertible_returns_are_errors(value: Any) -> None:
    """A return that cannot become text is an error result that names what was returned."""
    result = ToolResult.of(value)
    assert result.is_error and result.startswith("Error")


# -- way 3: duck-typed (HKUDS/nanobot) tools, and as_tool --------------------------------------


class QuackTool:
    """Shaped like the nbtest-duck plugin: no base class, async execute."""

    name = "quack"
    description = "Quack."
    parameters = {"type": "object", "properties": {"times": {"type": "integer"}}}
    read_only = True

    async def execute(self, times: int, **kwargs: Any) -> str:
        return " ".join(["quack"] * times)


class HkudsStyleTool:
    """Shaped like a current HKUDS/nanobot tool: properties, enabled/create taking their ctx."""

    _plugin_discoverable = True
    created_with: Any = None

    def __init__(self, workspace: str) -> None:
        self.workspace = workspace

    @classmethod
    def enabled(cls, ctx: Any) -> bool:
        return ctx.sessions is None  # their optional services read as None here

    @classmethod
    def create(cls, ctx: Any) -> HkudsStyleTool:
        HkudsStyleTool.created_with = ctx
        return cls(ctx.workspace)

    @property
    def name(self) -> str:
        return "where"

    @property
    def description(self) -> str:
        return "Say the workspace."

    @property
    def parameters(self) -> dict[str, Any]:
        return {"type": "object", "properties": {}}

    @property
    def exclusive(self) -> bool:
        return True

    async def execute(self, **kwargs: Any) -> str:
        return self.workspace


class OldStyleTool:
    """Shaped like an early HKUDS/nanobot tool: execute(ctx, **kwargs)."""

    name = "old"
    description = "Old style."
    parameters = {"type": "object", "properties": {"x": {"type": "string"}}}

    async def execute(self, ctx: Any, **kwargs: Any) -> str:
        return f"{ctx.agent_name}:{kwargs['x']}"


class HiddenHelper(QuackTool):
    _plugin_discoverable = False


def test_as_tool_wraps_duck_typed_classes(ctx: PluginContext) -> None:
    """A class with name/description/parameters/async execute becomes a ForeignTool."""
    quack = as_tool(QuackTool, ctx)
    assert isinstance(quack, ForeignTool)
    assert quack.read_only and quack.concurrency_safe
    assert run(quack.execute(times=2)) == "quack quack"


def test_as_tool_builds_hkuds_tools_with_their_context(ctx: PluginContext) -> None:
    """enabled(ctx)/create(ctx) get a context shaped like HKUDS/nanobot's (workspace as str)."""
    where = as_tool(HkudsStyleTool, ctx)
    assert isinstance(where, ForeignTool)
    assert isinstance(HkudsStyleTool.created_with, ForeignToolContext)
    assert run(where.execute()) == str(ctx.workspace)
    assert where.exclusive and not where.concurrency_safe


def test_foreign_execute_taking_ctx_receives_it(ctx: PluginContext) -> None:
    """An execute whose first parameter is ctx gets the foreign context."""
    old = as_tool(OldStyleTool(), ctx)
    assert old is not None
    assert run(old.execute(x="y")) == "nanobot:y"


def test_undiscoverable_foreign_class_is_skipped(ctx: PluginContext) -> None:
    """A class marked _plugin_discoverable = False (HKUDS internal helper) is not loaded."""
    assert as_tool(HiddenHelper, ctx) is None


def test_as_tool_honours_enabled_and_create(ctx: PluginContext) -> None:
    """A Tool subclass is skipped when enabled(ctx) is false, else built with create(ctx)."""

    class Off(Weather):
        @classmethod
        def enabled(cls, ctx: PluginContext) -> bool:
            return False

    class Built(Weather):
        def __init__(self, label: str) -> None:
            self.label = label

        @classmethod
        def create(cls, ctx: PluginContext) -> Built:
            return cls(label=ctx.workspace.name)

    assert as_tool(Off, ctx) is None
    built = as_tool(Built, ctx)
    assert isinstance(built, Built) and built.label == ctx.workspace.name


def test_as_tool_accepts_instances_and_decorated_functions(ctx: PluginContext) -> None:
    """Tool instances and @tool functions pass through unchanged."""

    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    weather = Weather()
    assert as_tool(weather, ctx) is weather
    assert as_tool(ping, ctx) is ping


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (lambda: "x", "plain function: decorate it with @nanobot_core.tool"),
        ("a string", "is not a tool"),
        (42, "is not a tool"),
    ],
)
def test_as_tool_rejects_what_is_not_a_tool(item: Any, message: str, ctx: PluginContext) -> None:
    """Anything that cannot become a tool raises TypeError saying why."""
    with pytest.raises(TypeError, match=message):
        as_tool(item, ctx)


def test_as_tool_rejects_sync_execute(ctx: PluginContext) -> None:
    """A duck-typed class with a sync execute is refused, naming the problem."""

    class SyncTool:
        name = "s"
        description = "s"
        parameters: dict[str, Any] = {}

        def execute(self) -> str:
            return ""

    with pytest.raises(TypeError, match="async execute"):
        as_tool(SyncTool, ctx)


@pytest.mark.parametrize("name", ["two words", "grep\n", "\ngrep", "", "x" * 65], ids=repr)
def test_as_tool_rejects_invalid_names(name: str, ctx: PluginContext) -> None:
    """A tool name the model APIs would refuse (a final line break too) is refused at load time."""

    class Named(Weather):
        pass

    Named.name = name
    with pytest.raises(ValueError, match=f"tool name {re.escape(repr(name))} is invalid"):
        as_tool(Named, ctx)


def _timed(kind: str, timeout: Any) -> type:
    """A native (`Weather`) or duck-typed (`QuackTool`) tool class whose timeout is `timeout`."""
    timed = type("Timed", (Weather if kind == "native" else QuackTool,), {})
    timed.timeout = timeout  # type: ignore[attr-defined]  # a class attribute, as tools write it
    return timed


def _short_id(value: Any) -> str:
    return repr(value)[:12]


_BAD_TIMEOUTS = [
    ("30", "'30'"),
    ("soon", "'soon'"),
    (True, "True"),
    (False, "False"),
    (0, "0"),
    (-1.5, "-1.5"),
    (math.nan, "nan"),
    (-math.inf, "-inf"),
    ([5], "a list"),
    (10**400, "an int of 1329 bits"),
    # The largest int of 1024 bits is past every float too (one of 1024 bits may fit).
    (2**1024 - 1, "an int of 1024 bits"),
]


@pytest.mark.parametrize("kind", ["native", "foreign"])
@pytest.mark.parametrize(("timeout", "said"), _BAD_TIMEOUTS, ids=_short_id)
def test_as_tool_refuses_a_timeout_that_is_no_positive_number_as_a_bad_flag(
    kind: str, timeout: Any, said: str, ctx: PluginContext
) -> None:
    """A timeout no call could use refuses the tool like a bad flag, showing it as written."""
    timed = _timed(kind, timeout)
    name = "weather" if kind == "native" else "quack"
    with pytest.raises(ToolFlagError) as raised:
        as_tool(timed, ctx)
    assert str(raised.value) == (
        f"tool {name!r}: its timeout is {said}, expected a positive number of seconds or None"
    )
    assert raised.value.tool == name


@pytest.mark.parametrize("kind", ["native", "foreign"])
@pytest.mark.parametrize(
    "timeout", [None, 0.05, 1, 600.0, math.inf, 2**1000, 2**1024 - 2**971], ids=_short_id
)
def test_as_tool_accepts_a_positive_timeout_or_none(
    kind: str, timeout: float | None, ctx: PluginContext
) -> None:
    """None (the configured default) and any positive number of seconds (inf: no limit) are kept."""
    built = as_tool(_timed(kind, timeout), ctx)
    assert built is not None and built.timeout == timeout


def test_a_duck_typed_tool_without_a_timeout_has_the_default(ctx: PluginContext) -> None:
    """A foreign tool with no timeout attribute gets None: the configured ``[tools] timeout``."""
    built = as_tool(QuackTool, ctx)
    assert built is not None and built.timeout is None


class ScopedTool(QuackTool):
    """A tool HKUDS/nanobot gives to subagents only."""

    _scopes = {"subagent"}


class OwnRulesTool:
    """Shaped like nanobot-ai's Tool: its own to_schema, cast_params and validate_params."""

    name = "rules"
    description = "Has rules."
    parameters = {"type": "object", "properties": {"n": {"type": "integer"}}}
    config_key = "rules"
    _scopes = {"core", "subagent"}

    def to_schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": "rules", "description": "From to_schema.", "parameters": {}},
        }

    def cast_params(self, params: dict[str, Any]) -> dict[str, Any]:
        return {k: int(v) if isinstance(v, str) and v.isdigit() else v for k, v in params.items()}

    def validate_params(self, params: dict[str, Any]) -> list[str]:
        return [] if params.get("n") == 7 else ["n must be seven"]

    async def execute(self, **kwargs: Any) -> str:
        return f"n={kwargs['n']}"


def test_a_tool_outside_the_main_scope_is_not_loaded(ctx: PluginContext) -> None:
    """A class or instance whose _scopes leaves out "core" is skipped."""
    assert as_tool(ScopedTool, ctx) is None
    assert as_tool(ScopedTool(), ctx) is None
    assert as_tool(OwnRulesTool, ctx) is not None


def test_the_wrapped_tools_own_schema_validation_and_attributes_are_used(
    ctx: PluginContext,
) -> None:
    """to_schema gives the definition; cast_params/validate_params decide; attributes pass."""
    from nanobot_core.tools.registry import ToolRegistry

    adapted: Any = as_tool(OwnRulesTool, ctx)
    assert adapted.description == "From to_schema." and adapted.parameters == {}
    assert adapted.config_key == "rules" and adapted.cast_params({"n": "3"}) == {"n": 3}
    registry = ToolRegistry()
    registry.add(adapted)
    good = registry.prepare_call("rules", '{"n": "7"}')
    assert good.error is None and good.arguments == {"n": 7}
    bad = registry.prepare_call("rules", '{"n": 3}')
    assert bad.error is not None and "n must be seven" in bad.error


@pytest.mark.parametrize(
    ("found", "said"),
    [
        ("n must be seven", "n must be seven"),
        (b"n must be seven", "n must be seven"),
        ({"n": "must be seven", "m": "is unknown"}, "n: must be seven; m: is unknown"),
        (["n must be seven", "m is unknown"], "n must be seven; m is unknown"),
    ],
    ids=["str", "bytes", "dict", "list"],
)
def test_a_foreign_check_that_returns_one_error_text_is_one_error(
    found: Any, said: str, ctx: PluginContext
) -> None:
    """A ``validate_params`` that returns its error as one str (or a dict of them) is read as
    that error; a str was read letter by letter (``n;  ; m; u; s; t; ...``)."""
    from nanobot_core.tools.registry import ToolRegistry

    class OneText:
        name = "one_text"
        description = "Its check returns one error text."
        parameters: dict[str, Any] = {"type": "object"}

        def validate_params(self, params: dict[str, Any]) -> Any:
            return found

        async def execute(self, **kwargs: Any) -> str:
            return "ran"

    registry = ToolRegistry()
    registry.add(as_tool(OneText(), ctx))  # type: ignore[arg-type]
    refused = registry.prepare_call("one_text", "{}")
    assert refused.error == f'Error: invalid arguments for tool "one_text": {said}'


def test_options_become_the_tools_config_under_its_config_key(tmp_path: Path) -> None:
    """Without a package ToolsConfig, [tools.options] reach ctx.config as namespaces."""
    from nanobot_core.config import Config, ToolsConfig

    config = Config(tools=ToolsConfig(options={"rules": {"limit": 3}}))
    context = ForeignToolContext.from_plugin_context(
        PluginContext(workspace=tmp_path, config=config), OwnRulesTool
    )
    assert context.config.rules.limit == 3


def test_function_tool_parameters_cannot_be_changed_from_outside() -> None:
    """Changing the dict `parameters` returns (before or after registration) changes nothing."""
    from nanobot_core.tools.registry import ToolRegistry

    @tool
    def count(n: int) -> str:
        """Count to n."""
        return str(n)

    count.parameters["properties"]["n"]["type"] = "string"
    registry = ToolRegistry()
    registry.add(count)
    count.parameters["required"] = []
    count.parameters.clear()
    assert count.parameters["properties"]["n"]["type"] == "integer"
    assert count.parameters["required"] == ["n"]
    (definition,) = registry.definitions()
    assert definition["function"]["parameters"]["properties"]["n"]["type"] == "integer"
    refused = registry.prepare_call("count", "{}")
    assert refused.error is not None and "n" in refused.error
    assert registry.prepare_call("count", '{"n": "3"}').arguments == {"n": 3}


def test_a_refused_flag_is_caught_as_a_plugin_error_and_as_a_value_error(
    ctx: PluginContext,
) -> None:
    """`except PluginError` catches a tool refused for its flag, as `except ValueError` did."""
    from nanobot_core import NanobotError, PluginError

    class Flagged(Tool):
        name = "flagged"
        description = "A tool whose read_only is no bool."
        parameters: dict[str, Any] = {"type": "object", "properties": {}}
        read_only = "yes"  # type: ignore[assignment]

        async def execute(self) -> str:
            return "ran"

    for caught in (PluginError, NanobotError, ValueError):
        with pytest.raises(caught, match=r"^tool 'flagged': its read_only is 'yes'"):
            as_tool(Flagged(), ctx)


LIMITED_PLUGIN = """
from typing import Any

import pydantic
from nanobot_core import hookimpl


class Limits(pydantic.BaseModel):
    max: int = 3


class LimitedTool:
    name = "limited"
    description = "Has a config model of its own."
    parameters = {"type": "object", "properties": {}}
    config_key = "limited"
    config_cls = Limits

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    async def execute(self, **kwargs: Any) -> str:
        return "ok"


@hookimpl
def nanobot_tools(ctx):
    return [LimitedTool]
"""


@pytest.mark.parametrize("where", ["nanobot.toml", "NANOBOT_TOOLS__OPTIONS__LIMITED__MAX"])
def test_options_a_foreign_tools_config_model_refuses_name_where_they_were_set(
    tmp_path: Path, where: str
) -> None:
    """An option the tool's own config model refuses fails the plugin in ``nanobot-core
    plugins`` with a message beginning with the file or variable that set it."""
    from tests.helpers import install_plugin, plugin_env, run_cli

    site = install_plugin(tmp_path / "site", "limited", LIMITED_PLUGIN)
    work = tmp_path / "work"
    work.mkdir()
    config_file = work / "nanobot.toml"
    env = plugin_env(site, "limited")
    if where == "nanobot.toml":
        config_file.write_text('[tools.options.limited]\nmax = "many"\n', encoding="utf-8")
        source = str(config_file)
    else:
        config_file.write_text("[tools.options.limited]\nmax = 5\n", encoding="utf-8")
        env[where] = "many"
        source = f"environment variable {where}"
    listed = run_cli("plugins", cwd=work, env=env)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    at = lines.index("limited (limited 0.1) [nanobot.plugins] failed")
    assert lines[at + 1] == (
        f"    error: nanobot_tools item 0 (LimitedTool): ValueError: {source}: "
        "tools.options.limited: 1 validation error for Limits"
    )


_JSON_LIKE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=80, deadline=None)
@given(properties=st.dictionaries(st.text(max_size=5), _JSON_LIKE, max_size=5))
def test_the_parameters_read_are_an_equal_copy_sharing_nothing(properties: dict[str, Any]) -> None:
    """Whatever a plugin's schema holds, what is read equals it and shares no dict or list."""
    parameters = {"type": "object", "properties": properties}

    class Held(Tool):
        name = "held"
        description = "Holds a schema."

        @property
        def parameters(self) -> dict[str, Any]:
            return parameters

        async def execute(self, **kwargs: Any) -> str:
            return ""

    read = read_tool(Held()).parameters
    assert read == parameters
    mine = _containers(parameters)
    assert all(id(container) not in mine for container in _containers(read).values())


def _containers(value: Any) -> dict[int, Any]:
    """Every dict and list inside `value`, by id (kept alive by the map)."""
    found: dict[int, Any] = {}
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict | list):
            found[id(item)] = item
            stack.extend(item.values() if isinstance(item, dict) else item)
    return found


def test_a_schema_nested_thousands_deep_is_read_without_recursion() -> None:
    """Reading copies 5,000 levels of lists; the schema's own check then names the depth."""
    deep: Any = 0
    for _ in range(5_000):
        deep = [deep]

    class Deep(Tool):
        name = "deep"
        description = "Deep."
        parameters = {"type": "object", "properties": {"x": {"const": deep}}}

        async def execute(self, **kwargs: Any) -> str:
            return ""

    read = read_tool(Deep()).parameters
    assert read["properties"]["x"]["const"] is not deep
    assert len(_containers(read)) == 5_000 + 3
