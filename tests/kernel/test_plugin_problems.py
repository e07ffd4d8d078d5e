"""Problems of loaded plugins: what the core leaves out and what plugins report, on one path."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanobot_core import Tool, report_problem, tool
from nanobot_core.cli import cli
from nanobot_core.config import Config, PluginsConfig
from nanobot_core.hookspecs import hookimpl
from nanobot_core.kernel import manager as manager_module
from nanobot_core.kernel.discovery import Candidate
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.kernel.records import PluginInfo

BAD_SCHEMA = "tool 'bad_pattern' left out: its parameters schema is invalid"


@tool
def kept(text: str) -> str:
    """Answer with the text."""
    return text


class _BadPattern:
    """A tool whose parameters schema holds a pattern that is not a regular expression."""

    name = "bad_pattern"
    description = "Never offered."
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"x": {"type": "string", "pattern": "("}},
    }

    async def execute(self, **kwargs: Any) -> str:
        return "never"


class _Reporter:
    """A plugin that offers one tool, reports one it leaves out, and has a bad one."""

    def __init__(self, *problems: str) -> None:
        self.problems = problems
        self.calls = 0

    @hookimpl
    def nanobot_tools(self, ctx: Any) -> list[Any]:
        self.calls += 1
        for problem in self.problems:
            report_problem(problem)
        return [kept, _BadPattern()]


def _manager(tmp_path: Path, *, strict: bool = False) -> PluginManager:
    config = Config(plugins=PluginsConfig(disable_autoload=True, strict=strict))
    return PluginManager(config, workspace=tmp_path).load()


def _problems(manager: PluginManager, name: str) -> list[str]:
    (record,) = [r for r in manager.records() if r.info.name == name]
    assert record.status == "loaded"
    return record.to_json()["problems"]  # type: ignore[no-any-return]


def test_a_reported_problem_is_listed_under_the_calling_plugin(tmp_path: Path) -> None:
    """What a hook reports joins the core's own problem of that plugin; its good tool stays."""
    manager = _manager(tmp_path)
    manager.register(_Reporter("remote tool 'x' left out: no name"), "reporter", version="1.2")
    problems = _problems(manager, "reporter")
    assert problems[0] == "remote tool 'x' left out: no name"
    assert problems[1].startswith(BAD_SCHEMA)
    assert [c.name for c in manager.contributions("tool") if c.plugin.name == "reporter"] == [
        "kept"
    ]


def test_a_problem_reported_again_is_listed_once(tmp_path: Path) -> None:
    """The same line reported twice, and again when tools are collected anew, is listed once."""
    manager = _manager(tmp_path)
    reporter = _Reporter("left out: a", "left out: a", "left out: b")
    manager.register(reporter, "reporter")
    manager.records()
    manager.register(_Reporter(), "other")  # the contributions are collected again
    problems = _problems(manager, "reporter")
    assert reporter.calls == 2
    assert [p for p in problems if p.startswith("left out")] == ["left out: a", "left out: b"]


def test_each_problem_is_logged_naming_the_plugin_and_its_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reported problem and a schema the core refuses give the same warning, with the version."""
    manager = _manager(tmp_path)
    manager.register(_Reporter("left out: a"), "reporter", distribution="nb-rep", version="1.2")
    manager.records()
    warnings = [line for line in capsys.readouterr().err.splitlines() if "plugin problem" in line]
    assert len(warnings) == 2
    assert all("plugin 'reporter' from nb-rep 1.2" in line for line in warnings)
    assert "left out: a" in warnings[0] and "bad_pattern" in warnings[1]


def test_a_problem_is_one_line_of_text(tmp_path: Path) -> None:
    """Line breaks become spaces; an empty problem or one that is not text is refused."""
    manager = _manager(tmp_path)
    manager.register(_Reporter("tool 'x'\n  left out:\tbroken "), "reporter")
    assert _problems(manager, "reporter")[0] == "tool 'x' left out: broken"
    with pytest.raises(ValueError, match="empty"):
        report_problem(" \n ")
    with pytest.raises(TypeError, match="not int"):
        report_problem(3)  # type: ignore[arg-type]


def test_outside_a_hook_a_problem_is_only_logged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With no hook running, nothing is attributed: the answer is False and a warning says it."""
    manager = _manager(tmp_path)
    manager.register(_Reporter(), "reporter")
    assert report_problem("left out: stray") is False
    assert "left out: stray" in capsys.readouterr().err
    assert all("left out: stray" not in p for r in manager.records() for p in r.problems)


def test_strict_mode_treats_a_reported_problem_like_the_cores_own(tmp_path: Path) -> None:
    """In strict mode neither a reported problem nor a refused schema fails the plugin."""
    manager = _manager(tmp_path, strict=True)
    manager.register(_Reporter("left out: a"), "reporter")
    assert len(_problems(manager, "reporter")) == 2
    assert manager.failures() == []


@pytest.fixture
def reporter_installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CLI discovers `_Reporter` as if it were an installed ``nanobot.plugins`` entry point."""
    info = PluginInfo(
        name="reporter", source="nanobot.plugins", distribution="nb-rep", version="1.2"
    )

    def candidates(settings: Any, *, autoload: bool) -> Iterator[Candidate]:
        yield Candidate(info, lambda: _Reporter("remote tool 'x' left out: no name"))

    monkeypatch.setattr(manager_module, "entry_point_candidates", candidates)
    yield


@pytest.mark.usefixtures("reporter_installed")
@pytest.mark.parametrize("strict", [[], ["--strict"]])
def test_the_plugins_command_lists_problems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, strict: list[str]
) -> None:
    """``plugins`` prints each problem under its plugin, ``--json`` lists them, both exit 0."""
    monkeypatch.chdir(tmp_path)
    text = CliRunner().invoke(cli, [*strict, "plugins"])
    assert text.exit_code == 0, text.output
    block = text.stdout.split("reporter (nb-rep 1.2) [nanobot.plugins] loaded\n", 1)[1]
    lines = block.splitlines()
    assert lines[:2] == ["    tool kept", "    problem: remote tool 'x' left out: no name"]
    assert lines[2].startswith(f"    problem: {BAD_SCHEMA} (")
    listed = CliRunner().invoke(cli, [*strict, "plugins", "--json"])
    assert listed.exit_code == 0, listed.output
    (row,) = [row for row in json.loads(listed.stdout) if row["name"] == "reporter"]
    assert row["version"] == "1.2" and row["status"] == "loaded"
    assert row["problems"][0] == "remote tool 'x' left out: no name"
    assert row["problems"][1].startswith(BAD_SCHEMA)


# -- a tool flag that holds no flag -----------------------------------------------------------


class _Flagged:
    """A Tool whose ``read_only``, ``exclusive`` or ``concurrency_safe`` is set per test."""

    @staticmethod
    def make(flag: str, value: Any) -> Any:
        from nanobot_core import Tool

        class Flagged(Tool):
            name = "flagged"
            description = "Its flag is what the test says."
            parameters: dict[str, Any] = {"type": "object", "properties": {}}

            async def execute(self) -> str:
                return "ran"

        setattr(Flagged, flag, value)  # a class attribute, as plugins write their flags
        return Flagged()


class _FlagPlugin:
    """A plugin offering `kept` and one tool whose flag holds `value`."""

    def __init__(self, flag: str, value: Any) -> None:
        self.tool = _Flagged.make(flag, value)

    @hookimpl
    def nanobot_tools(self, ctx: Any) -> list[Any]:
        return [kept, self.tool]


_FLAGS = ["read_only", "exclusive", "concurrency_safe"]
_NO_FLAGS = st.one_of(
    st.text(max_size=8),
    st.none(),
    st.floats(allow_nan=False),
    st.lists(st.booleans(), max_size=2),
)


@given(flag=st.sampled_from(_FLAGS), value=_NO_FLAGS)
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_a_tool_flag_that_holds_no_flag_leaves_that_tool_out_at_load(
    tmp_path: Path, flag: str, value: Any
) -> None:
    """A flag of ``"yes"``, None, a float or a list is refused at load, named under its plugin."""
    manager = _manager(tmp_path)
    manager.register(_FlagPlugin(flag, value), "flagger", distribution="nb-flags", version="3.1")
    shown = repr(value) if isinstance(value, str | float) or value is None else "a list"
    assert _problems(manager, "flagger") == [
        f"tool 'flagged' left out: its {flag} is {shown}, expected True or False"
    ]
    assert manager.failures() == []
    assert "flagged" not in manager.tool_registry()
    assert "kept" in manager.tool_registry()


def test_a_disabled_tool_left_out_at_load_is_no_unknown_name(tmp_path: Path) -> None:
    """A `tools.disabled` name of a tool left out for its flag or schema is not warned unknown."""
    from structlog.testing import capture_logs

    from nanobot_core.config import ToolsConfig

    config = Config(
        plugins=PluginsConfig(disable_autoload=True),
        tools=ToolsConfig(disabled=["flagged", "bad_pattern", "gone_tool"]),
    )
    manager = PluginManager(config, workspace=tmp_path).load()
    manager.register(_FlagPlugin("read_only", "yes"), "flagger")
    manager.register(_Reporter(), "reporter")
    with capture_logs() as logs:
        registry = manager.tool_registry()
    unknown = [e["name"] for e in logs if e["event"] == "unknown tool name in tools.disabled"]
    assert unknown == ["gone_tool"]  # a name no plugin gave is still said
    assert "flagged" not in registry and "bad_pattern" not in registry
    # Each is said once, as its plugin's problem, not again as a config mistake.
    assert _problems(manager, "flagger") == [
        "tool 'flagged' left out: its read_only is 'yes', expected True or False"
    ]
    assert _problems(manager, "reporter")[0].startswith(BAD_SCHEMA)


@given(flag=st.sampled_from(_FLAGS), value=st.sampled_from([True, False, 0, 1]))
@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_a_bool_flag_or_0_or_1_is_a_flag(tmp_path: Path, flag: str, value: Any) -> None:
    """True, False, 0 and 1 are flags, at load as at each call: the tool is kept."""
    manager = _manager(tmp_path)
    manager.register(_FlagPlugin(flag, value), "flagger")
    assert _problems(manager, "flagger") == []
    assert "flagged" in manager.tool_registry()


def test_a_tool_added_directly_with_a_flag_that_holds_no_flag_is_refused() -> None:
    """ToolRegistry.add refuses the tool with a ValueError naming the tool, flag and value."""
    from nanobot_core.tools.registry import ToolRegistry

    with pytest.raises(ValueError, match=r"^tool 'flagged': its exclusive is 'yes', expected"):
        ToolRegistry().add(_Flagged.make("exclusive", "yes"))


@pytest.fixture
def flagger_installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CLI discovers a plugin whose tool's ``read_only`` is ``"yes"``."""
    info = PluginInfo(
        name="flagger", source="nanobot.plugins", distribution="nb-flags", version="3.1"
    )

    def candidates(settings: Any, *, autoload: bool) -> Iterator[Candidate]:
        yield Candidate(info, lambda: _FlagPlugin("read_only", "yes"))

    monkeypatch.setattr(manager_module, "entry_point_candidates", candidates)
    yield


@pytest.mark.usefixtures("flagger_installed")
def test_the_tools_and_plugins_commands_leave_out_a_tool_whose_flag_is_no_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tools --json`` lists the plugin's other tool; ``plugins --json`` says why one is out."""
    monkeypatch.chdir(tmp_path)
    tools = CliRunner().invoke(cli, ["tools", "--json"])
    assert tools.exit_code == 0, tools.output
    mine = [row["name"] for row in json.loads(tools.stdout) if row["plugin"] == "flagger"]
    assert mine == ["kept"]
    listed = CliRunner().invoke(cli, ["plugins", "--json"])
    assert listed.exit_code == 0, listed.output
    (row,) = [row for row in json.loads(listed.stdout) if row["name"] == "flagger"]
    assert row["status"] == "loaded" and row["version"] == "3.1"
    assert row["problems"] == [
        "tool 'flagged' left out: its read_only is 'yes', expected True or False"
    ]


# -- a flag of a duck-typed (HKUDS/nanobot) tool ----------------------------------------------


class _Quack:
    """A duck-typed tool, as HKUDS/nanobot writes them: no `Tool` base, its flags set per test."""

    name = "quack"
    description = "Its flag is what the test says."
    parameters: dict[str, Any] = {"type": "object", "properties": {}}

    async def execute(self) -> str:
        return "ran"


class _QuackPlugin:
    """A plugin offering `kept` and a duck-typed tool whose `flag` holds `value`."""

    def __init__(self, flag: str, value: Any) -> None:
        self.tool = _Quack()
        setattr(self.tool, flag, value)

    @hookimpl
    def nanobot_tools(self, ctx: Any) -> list[Any]:
        return [kept, self.tool]


@pytest.mark.parametrize("flag", _FLAGS)
@pytest.mark.parametrize(("value", "shown"), [("no", "'no'"), (None, "None"), ([], "a list")])
def test_a_duck_typed_tool_whose_flag_holds_no_flag_is_left_out_at_load(
    tmp_path: Path, flag: str, value: Any, shown: str
) -> None:
    """A foreign tool's ``read_only = "no"`` is no flag, as for native tools: out, named."""
    manager = _manager(tmp_path)
    manager.register(_QuackPlugin(flag, value), "quacker", distribution="nb-quack", version="2.0")
    assert _problems(manager, "quacker") == [
        f"tool 'quack' left out: its {flag} is {shown}, expected True or False"
    ]
    assert manager.failures() == []
    assert "quack" not in manager.tool_registry()
    assert "kept" in manager.tool_registry()


@pytest.mark.parametrize(("value", "meant"), [(True, True), (False, False), (1, True), (0, False)])
def test_a_duck_typed_tools_bool_or_0_or_1_flag_is_kept_as_it_says(
    tmp_path: Path, value: Any, meant: bool
) -> None:
    """True, False, 1 and 0 are flags of a foreign tool too, standing for what they say."""
    manager = _manager(tmp_path)
    manager.register(_QuackPlugin("read_only", value), "quacker")
    assert _problems(manager, "quacker") == []
    registered = manager.tool_registry().get("quack")
    assert registered is not None and registered.read_only is meant


# -- a tool timeout that is no timeout --------------------------------------------------------


_NO_TIMEOUTS = st.one_of(
    st.text(max_size=8),
    st.booleans(),
    st.floats().filter(lambda seconds: not seconds > 0),  # NaN, -inf, 0.0, -0.0, below
    st.integers(max_value=0),
    # Past any float: from the first int float() rounds up beyond the largest float.
    st.integers(min_value=2**1024 - 2**970, max_value=2**1100),
    st.lists(st.integers(), max_size=2),
)
_TIMEOUTS = st.one_of(
    st.none(),
    st.floats(min_value=0, exclude_min=True),  # inf too: no limit
    st.integers(min_value=1, max_value=2**1024 - 2**970 - 1),  # the largest float's too
)


def _timed_plugin(kind: str, timeout: Any) -> Any:
    """A plugin offering `kept` and a native or duck-typed tool whose timeout is `timeout`."""
    return _FlagPlugin("timeout", timeout) if kind == "native" else _QuackPlugin("timeout", timeout)


def _timeout_shown(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if type(value) is int and value >= 2**1024 - 2**970:
        return f"an int of {value.bit_length()} bits"
    return repr(value)


@given(kind=st.sampled_from(["native", "foreign"]), timeout=_NO_TIMEOUTS)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_a_timeout_that_is_no_timeout_leaves_that_tool_out_at_load(
    tmp_path: Path, kind: str, timeout: Any
) -> None:
    """``"30"``, True, NaN, 0, -1 or a list as a timeout leave the tool out like a bad flag."""
    manager = _manager(tmp_path)
    manager.register(_timed_plugin(kind, timeout), "timer", distribution="nb-timer", version="1.4")
    name = "flagged" if kind == "native" else "quack"
    assert _problems(manager, "timer") == [
        f"tool {name!r} left out: its timeout is {_timeout_shown(timeout)}, expected a positive "
        "number of seconds or None"
    ]
    assert manager.failures() == []
    assert name not in manager.tool_registry()
    assert "kept" in manager.tool_registry()


@pytest.mark.parametrize("kind", ["native", "foreign"])
def test_a_tool_left_out_for_its_timeout_is_logged_with_its_plugin_and_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """The warning of a timeout of ``"soon"`` names the plugin, its version and the tool."""
    manager = _manager(tmp_path)
    manager.register(_timed_plugin(kind, "soon"), "timer", distribution="nb-timer", version="1.4")
    manager.records()
    err = capsys.readouterr().err
    (warning,) = [line for line in err.splitlines() if "plugin problem" in line]
    assert "plugin 'timer' from nb-timer 1.4" in warning
    assert "left out: its timeout is 'soon'" in warning
    assert "Traceback" not in err


@given(kind=st.sampled_from(["native", "foreign"]), timeout=_TIMEOUTS)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_a_positive_timeout_or_none_is_kept_and_used(
    tmp_path: Path, kind: str, timeout: Any
) -> None:
    """None and any positive int or float (inf: no limit) load the tool with that timeout."""
    manager = _manager(tmp_path)
    manager.register(_timed_plugin(kind, timeout), "timer")
    assert _problems(manager, "timer") == []
    registered = manager.tool_registry().get("flagged" if kind == "native" else "quack")
    assert registered is not None
    if timeout is None:
        assert registered.timeout is None
    else:  # the adapter keeps a float, as the executor waits one
        assert registered.timeout is not None and float(registered.timeout) == float(timeout)


class _ToolsThenFailingStages:
    """A plugin whose tool is fine and whose governance-stages hook raises; it notes each call."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    @hookimpl
    def nanobot_tools(self, ctx: Any) -> list[Any]:
        self.asked.append("tools")

        @tool
        def doomed(text: str) -> str:
            """Answer with the text."""
            return text

        return [doomed]

    @hookimpl
    def nanobot_governance_stages(self, ctx: Any) -> list[Any]:
        self.asked.append("stages")
        raise RuntimeError("stages broke")


class _Fickle(Tool):
    """A tool whose description raises when read."""

    name = "fickle"
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    def __init__(self) -> None:
        self.reads = 0

    @property  # type: ignore[override]
    def description(self) -> str:
        self.reads += 1
        raise RuntimeError("unreadable")

    async def execute(self, **kwargs: Any) -> str:
        return "never"


class _FicklePlugin:
    @hookimpl
    def nanobot_tools(self, ctx: Any) -> list[Any]:
        return [_Fickle()]


def test_building_the_tools_asks_no_other_hook(tmp_path: Path) -> None:
    """Noting the problem of a tool left out as the tools are collected and the registry built
    asks no other hook of any plugin, so none can fail, and take back its tools, meanwhile."""
    manager = _manager(tmp_path)
    manager.register(_FicklePlugin(), "fickle", distribution="nb-fickle", version="1.0")
    breaker = _ToolsThenFailingStages()
    manager.register(breaker, "breaker", distribution="nb-breaker", version="2.0")
    registry = manager.tool_registry()
    assert breaker.asked == ["tools"]
    assert "fickle" not in registry and "doomed" in registry
    assert [r.info.name for r in manager.failures()] == ["breaker"]
    assert "doomed" not in manager.tool_registry()
    assert _problems(manager, "fickle") == [
        "tool 'fickle' left out: reading its description raised RuntimeError: unreadable"
    ]


# -- a schema normalised at load --------------------------------------------------------------

_TYPO = (
    "tool 'typo_echo' kept, its parameters schema changed: #/properties/text: "
    'type "strng" is not a type we know: type constraint dropped'
)


class _TypoSchema(Tool):
    """A tool with a misspelt type ("strng", a loss) and an alias ("dict", a translation)."""

    name = "typo_echo"
    description = "Echo the text."
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"text": {"type": "strng"}, "extra": {"type": "dict"}},
    }

    async def execute(self, text: str = "", extra: Any = None) -> str:
        return text


class _TypoPlugin:
    @hookimpl
    def nanobot_tools(self, ctx: Any) -> list[Any]:
        return [_TypoSchema()]


def test_a_schema_that_lost_a_constraint_is_a_problem_of_its_plugin_logged_once(
    tmp_path: Path,
) -> None:
    """A misspelt type is listed under the plugin and logged once naming its version; the tool
    still loads, and an alias ("dict") is only the usual warning, not a problem."""
    from structlog.testing import capture_logs

    manager = _manager(tmp_path)
    manager.register(_TypoPlugin(), "typo", distribution="nb-typo", version="0.3")
    with capture_logs() as logs:
        assert _problems(manager, "typo") == [_TYPO]
        registry = manager.tool_registry()
        _ = manager.records()
    assert "typo_echo" in registry
    (offered,) = [d for d in registry.definitions() if d["function"]["name"] == "typo_echo"]
    assert offered["function"]["parameters"]["properties"]["text"] == {}
    warned = [(e["event"], e.get("problem", e.get("change"))) for e in logs]
    assert warned == [
        ("plugin problem", _TYPO),
        ("tool schema normalised", '#/properties/extra: type "dict" -> "object"'),
    ]
    assert [e["plugin"] for e in logs] == ["plugin 'typo' from nb-typo 0.3"] * 2


def test_a_registry_built_alone_still_warns_of_a_lost_constraint() -> None:
    """Without a plugin manager to list it under, the change is the usual warning."""
    from structlog.testing import capture_logs

    from nanobot_core.tools.registry import ToolRegistry

    with capture_logs() as logs:
        ToolRegistry().add(_TypoSchema(), plugin="typo")
    assert sorted(e["change"] for e in logs if e["event"] == "tool schema normalised") == [
        '#/properties/extra: type "dict" -> "object"',
        '#/properties/text: type "strng" is not a type we know: type constraint dropped',
    ]


class _IntName:
    """A tool whose parameters name a property with an int, as a Python dict lets one."""

    name = "int_name"
    description = "Never offered."
    parameters: dict[Any, Any] = {"type": "object", "properties": {1: {"type": "string"}}}

    async def execute(self, **kwargs: Any) -> str:
        return "never"


class _GivesIntName:
    @hookimpl
    def nanobot_tools(self, ctx: Any) -> list[Any]:
        return [kept, _IntName()]


def test_a_schema_name_that_is_no_string_is_listed_saying_where(tmp_path: Path) -> None:
    """The tool is left out under its plugin's problems with the place of the name, not
    ``AttributeError: 'int' object has no attribute 'replace'``; the plugin's other tool stays."""
    manager = _manager(tmp_path)
    manager.register(_GivesIntName(), "intnames", version="2.0")
    assert _problems(manager, "intnames") == [
        "tool 'int_name' left out: its parameters schema is invalid (invalid JSON Schema at "
        "#/properties: the name 1 is an int, not a string)"
    ]
    assert [c.name for c in manager.contributions("tool") if c.plugin.name == "intnames"] == [
        "kept"
    ]


def _nested(levels: int, leaf: Any) -> Any:
    """`leaf` inside `levels` lists."""
    for _ in range(levels):
        leaf = [leaf]
    return leaf


def _item_levels(levels: int) -> dict[str, Any]:
    """A schema of arrays of arrays, `levels` deep."""
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return schema


class _GivesDeepSchema:
    """A plugin whose second tool, "deep", has the parameters it is given."""

    def __init__(self, parameters: dict[str, Any]) -> None:
        self.parameters = parameters

    @hookimpl
    def nanobot_tools(self, ctx: Any) -> list[Any]:
        deep = _BadPattern()
        deep.name = "deep"
        deep.parameters = self.parameters
        return [kept, deep]


@pytest.mark.parametrize(
    "parameters",
    [
        {"type": "object", "properties": {"x": {"const": _nested(5_000, 0)}}},
        {"type": "object", "properties": {"x": _item_levels(1_000)}},
        {"type": "object", "properties": {"x": _item_levels(300)}},
    ],
    ids=["const-5000-levels", "items-1000-levels", "items-300-levels"],
)
def test_a_schema_nested_too_deep_leaves_out_its_tool_alone(
    tmp_path: Path, parameters: dict[str, Any]
) -> None:
    """The tool is left out saying it is nested too deep; the plugin, and its other tool, stay.

    Reading the tool copied its schema by recursion, whose RecursionError failed the plugin.
    """
    manager = _manager(tmp_path)
    manager.register(_GivesDeepSchema(parameters), "deep", version="0.3")
    assert _problems(manager, "deep") == [
        "tool 'deep' left out: its parameters schema is invalid "
        "(invalid JSON Schema: nested too deep to be read)"
    ]
    assert [c.name for c in manager.contributions("tool") if c.plugin.name == "deep"] == ["kept"]


def test_an_integer_too_long_to_write_is_named_by_its_place(tmp_path: Path) -> None:
    """A bound of 5,001 digits is named at its pointer, not with Python's int-conversion words."""
    parameters = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 10**5000}}}
    manager = _manager(tmp_path)
    manager.register(_GivesDeepSchema(parameters), "huge", version="0.3")
    assert _problems(manager, "huge") == [
        "tool 'deep' left out: its parameters schema is invalid (invalid JSON Schema at "
        "#/properties/n/maximum: an integer of more than 4,300 digits)"
    ]
