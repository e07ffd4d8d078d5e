"""The registry: argument forms, validate-before-cast, unknown tools, and definitions order."""

from __future__ import annotations

import json
import os
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core import Tool, clip, tool
from nanobot_core.kernel.records import PluginInfo
from nanobot_core.schema import InvalidSchemaError, format_instance_path
from nanobot_core.schema import casting as casting_module
from nanobot_core.schema.casting import CastNote
from nanobot_core.testing import make_config
from nanobot_core.tools import registry as registry_module
from nanobot_core.tools.executor import Executor, ToolCallRequest
from nanobot_core.tools.registry import ToolRegistry, suggest_name
from tests.helpers import REPO_ROOT, run_python
from tests.tools.support import run


class SchemaTool(Tool):
    """A tool that records its calls and has whatever schema the test gives it."""

    def __init__(self, name: str, parameters: dict[str, Any] | None = None) -> None:
        self._name = name
        self._parameters = parameters or {"type": "object", "properties": {}}
        self.calls: list[dict[str, Any]] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return f"The {self._name} tool."

    @property
    def parameters(self) -> dict[str, Any]:
        return self._parameters

    async def execute(self, **kwargs: Any) -> str:
        self.calls.append(kwargs)
        return "ran"


COUNTER_SCHEMA = {
    "type": "object",
    "properties": {"label": {"type": "string"}, "count": {"type": "integer"}},
    "required": ["label"],
}


def _registry(*tools: Tool) -> ToolRegistry:
    registry = ToolRegistry()
    for item in tools:
        registry.add(item)
    return registry


# -- raw argument forms ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "repaired"),
    [
        ({"label": "a", "count": 2}, False),
        ('{"label": "a", "count": 2}', False),
        (json.dumps(json.dumps({"label": "a", "count": 2})), True),
        ({"arguments": {"label": "a", "count": 2}}, True),
        ({"arguments": '{"label": "a", "count": 2}'}, True),
        ('{"arguments": {"label": "a", "count": 2}}', True),
        ('{"label": "a", "count": 2,}', True),
        ("{'label': 'a', 'count': 2}", True),
        ('{"label": "a", "count": 2', True),
    ],
    ids=[
        "object", "json", "double-encoded", "wrapper", "wrapper-json", "wrapper-in-json",
        "trailing-comma", "single-quotes", "truncated",
    ],
)  # fmt: skip
def test_accepted_argument_forms(raw: Any, repaired: bool) -> None:
    """Every accepted raw form becomes the same object; anything but a plain one is noted."""
    prepared = _registry(SchemaTool("count", COUNTER_SCHEMA)).prepare_call("count", raw)
    assert prepared.error is None
    assert prepared.arguments == {"label": "a", "count": 2}
    assert bool(prepared.repairs) is repaired


@pytest.mark.parametrize("raw", [None, "", "   ", {}])
def test_empty_arguments_mean_no_arguments(raw: Any) -> None:
    """None, "" and {} all mean a call without arguments."""
    prepared = _registry(SchemaTool("noargs")).prepare_call("noargs", raw)
    assert (prepared.error, prepared.arguments) == (None, {})


def test_wrapper_is_kept_when_the_tool_has_an_arguments_parameter() -> None:
    """A tool with a parameter named `arguments` receives the wrapper as its argument."""
    schema = {"type": "object", "properties": {"arguments": {"type": "object"}}}
    prepared = _registry(SchemaTool("proxy", schema)).prepare_call("proxy", {"arguments": {"x": 1}})
    assert prepared.arguments == {"arguments": {"x": 1}}
    assert prepared.repairs == []


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        ("[1, 2]", "an array"),
        ([1, 2], "an array"),
        ("42", "a number"),
        ("null", "null"),
        ('"just text"', "a string"),
        ("hello there", "text that is not JSON"),
        ({"arguments": "[1]"}, "an array"),
    ],
)
def test_non_objects_are_errors(raw: Any, kind: str) -> None:
    """Arguments that are not a JSON object give an Error result naming what they were."""
    prepared = _registry(SchemaTool("count", COUNTER_SCHEMA)).prepare_call("count", raw)
    assert prepared.error == f'Error: arguments for tool "count" must be a JSON object, got {kind}'


# -- validation and casting -----------------------------------------------------------------


def test_valid_arguments_are_never_cast(monkeypatch: pytest.MonkeyPatch) -> None:
    """Valid arguments are returned as given, and the caster is not even consulted."""
    consulted: list[Any] = []
    monkeypatch.setattr(registry_module, "cast_value_noted", lambda *a: consulted.append(a))
    schema = {"type": "object", "properties": {"code": {"type": ["string", "integer"]}}}
    raw = {"code": "007"}
    prepared = _registry(SchemaTool("lookup", schema)).prepare_call("lookup", raw)
    assert prepared.arguments is raw and prepared.arguments == {"code": "007"}
    assert prepared.repairs == [] and consulted == []


def test_invalid_arguments_are_cast_then_validated_again() -> None:
    """A loosely typed value is cast to the schema's type, and the cast is noted."""
    prepared = _registry(SchemaTool("count", COUNTER_SCHEMA)).prepare_call(
        "count", '{"label": "a", "count": "3"}'
    )
    assert prepared.error is None
    assert prepared.arguments == {"label": "a", "count": 3}
    assert prepared.repairs == ['cast $.count: "3" -> 3']


def test_cast_result_is_validated_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the caster returns is checked again, and its errors are what the model sees."""
    cast = ({"label": 5}, [CastNote(("label",), 1, 5)])
    monkeypatch.setattr(registry_module, "cast_value_noted", lambda s, v: cast)
    prepared = _registry(SchemaTool("count", COUNTER_SCHEMA)).prepare_call("count", {"label": 1})
    assert (
        prepared.error
        == 'Error: invalid arguments for tool "count": $.label: 5 is not of type "string"'
    )


def test_integer_beyond_float_range_is_cast_to_its_digits() -> None:
    """A 400-digit JSON integer for a string parameter reaches the tool as its digits."""
    digits = "9" * 400
    prepared = _registry(SchemaTool("count", COUNTER_SCHEMA)).prepare_call(
        "count", '{"label": ' + digits + "}"
    )
    assert (prepared.error, prepared.arguments) == (None, {"label": digits})


VERSION_SCHEMA = {
    "type": "object",
    "properties": {
        "version": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "ratio": {"type": "number"},
        "count": {"type": "integer"},
    },
}


def _version_call(raw: Any) -> Any:
    prepared = _registry(SchemaTool("pin", VERSION_SCHEMA)).prepare_call("pin", raw)
    assert prepared.error is None
    return prepared


@pytest.mark.parametrize(
    "literal", ["3.10", "1e2", "0.30000000000000001", "1.0E+2", "-0", "-0.0", "2.50e-3"]
)
def test_number_for_a_string_is_cast_as_the_model_wrote_it(literal: str) -> None:
    """A JSON number for a string parameter reaches the tool with the digits the model wrote."""
    target = SchemaTool("pin", VERSION_SCHEMA)
    executor = Executor(_registry(target), default_timeout=5)
    (outcome,) = run(executor.run([ToolCallRequest("c1", "pin", f'{{"version": {literal}}}')]))
    assert not outcome.result.is_error
    assert target.calls == [{"version": literal}]
    assert outcome.repairs == [f'cast $.version: {literal} -> "{literal}"']


@pytest.mark.parametrize(
    "raw",
    [
        '"{\\"version\\": 3.10}"',
        '{"version": 3.10',
        '{"version": 3.10,',
        '{"arguments": {"version": 3.10}}',
        {"arguments": '{"version": 3.10}'},
    ],
    ids=["double-encoded", "truncated", "truncated-comma", "wrapper-in-json", "wrapper-json"],
)
def test_written_form_survives_every_text_form(raw: Any) -> None:
    """Double-encoded, cut-off and wrapped argument text keep a number's written form too."""
    assert _version_call(raw).arguments == {"version": "3.10"}


def test_numbers_in_a_json_string_for_an_array_keep_their_text() -> None:
    """A JSON string cast to an array of strings writes its numbers as the model wrote them."""
    arguments = _version_call('{"tags": "[3.10, 1e2, 7]"}').arguments
    assert arguments == {"tags": ["3.10", "1e2", "7"]}


def test_numbers_reaching_the_tool_are_plain_floats_and_ints() -> None:
    """A cast call gives the tool plain floats, ints and strings: no number remembering its text."""
    arguments = _version_call(
        '{"version": 3.10, "ratio": 0.50, "count": 2, "extra": [1.5, {"x": -0}]}'
    ).arguments
    assert arguments == {"version": "3.10", "ratio": 0.5, "count": 2, "extra": [1.5, {"x": 0}]}
    assert type(arguments["ratio"]) is float and type(arguments["count"]) is int
    assert type(arguments["extra"][0]) is float and type(arguments["extra"][1]["x"]) is int


def test_a_decoded_object_has_no_written_form() -> None:
    """Arguments that arrive as an object are cast as JSON writes the number (3.10 is 3.1)."""
    assert _version_call({"version": 3.10}).arguments == {"version": "3.1"}


def test_json_repair_rewrites_numbers_before_casting() -> None:
    """Broken JSON that json-repair rewrites loses the written form: 3.10 arrives as "3.1"."""
    assert _version_call("{'version': 3.10}").arguments == {"version": "3.1"}


def test_a_written_form_that_does_not_decode_to_the_arguments_is_not_used() -> None:
    """A tool's own check that changes the arguments in place is kept over the text."""

    class Rewriting(SchemaTool):
        def validate_arguments(self, arguments: dict[str, Any]) -> None:
            arguments["version"] = 4.25

    registry = _registry(Rewriting("pin", VERSION_SCHEMA))
    prepared = registry.prepare_call("pin", '{"version": 3.10}')
    assert (prepared.error, prepared.arguments) == (None, {"version": "4.25"})


def _float_literals() -> st.SearchStrategy[str]:
    digits = st.text("0123456789", min_size=1, max_size=25)
    whole = st.just("0") | st.builds(lambda d, r: d + r, st.sampled_from("123456789"), digits)
    fraction = st.none() | digits.map(lambda d: "." + d)
    exponent = st.none() | st.builds(
        lambda e, sign, d: e + sign + d,
        st.sampled_from("eE"),
        st.sampled_from(["", "+", "-"]),
        st.text("0123456789", min_size=1, max_size=3),
    )
    literal = st.builds(
        lambda sign, w, f, e: sign + w + (f or "") + (e or ""),
        st.sampled_from(["", "-"]),
        whole,
        fraction,
        exponent,
    )
    return literal.filter(lambda text: ("." in text or "e" in text.lower()) and _finite(text))


def _finite(text: str) -> bool:
    return float(text) not in (float("inf"), float("-inf"))


@settings(max_examples=300, deadline=None)
@given(literal=_float_literals(), form=st.sampled_from(["plain", "double", "truncated"]))
def test_any_finite_float_literal_reaches_a_string_parameter_as_written(
    literal: str, form: str
) -> None:
    """Any finite JSON float literal sent for a string parameter is exactly that text."""
    text = f'{{"version": {literal}}}'
    raw = {"plain": text, "double": json.dumps(text), "truncated": text[:-1] + ","}[form]
    assert _version_call(raw).arguments == {"version": literal}


def test_uncastable_arguments_are_an_error_with_paths() -> None:
    """Arguments that stay invalid after casting give every problem with its path."""
    prepared = _registry(SchemaTool("count", COUNTER_SCHEMA)).prepare_call(
        "count", {"count": "three"}
    )
    assert prepared.error is not None
    assert prepared.error.startswith('Error: invalid arguments for tool "count": ')
    assert '$.count: "three" is not of type "integer"' in prepared.error
    assert '$: "label" is a required property' in prepared.error


def test_schema_is_normalised_on_add_with_warnings_kept() -> None:
    """A schema in a foreign dialect is normalised when added; the warnings are kept."""
    schema = {"type": "dict", "properties": {"n": {"type": "int"}}}
    registry = _registry(SchemaTool("legacy", schema))
    assert registry.definitions()[0]["function"]["parameters"] == {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
    }
    assert len(registry.warnings) == 2 and all(w.startswith("legacy: ") for w in registry.warnings)
    assert registry.prepare_call("legacy", {"n": "4"}).arguments == {"n": 4}


def test_an_invalid_schema_is_refused_when_the_tool_is_added() -> None:
    """A tool whose schema cannot compile is refused by `add`, not listed to fail at each call."""
    schema = {"type": "object", "properties": {"x": {"minimum": "low"}}}
    registry = ToolRegistry()
    with pytest.raises(InvalidSchemaError) as raised:
        registry.add(SchemaTool("broken", schema))
    assert str(raised.value) == (
        'tool "broken" cannot be added: its parameters schema is invalid (invalid JSON Schema '
        'at #/properties/x/minimum: "low" is not of type "number")'
    )
    assert isinstance(raised.value, ValueError) and "broken" not in registry
    assert registry.definitions() == []


def test_a_registry_built_of_given_tools_leaves_out_an_invalid_schema_alone() -> None:
    """`ToolRegistry.build` of tools given as they are leaves out the one whose schema cannot
    compile, as the plugin manager does, and keeps the others."""
    told: list[tuple[str | PluginInfo, str]] = []
    broken = SchemaTool("broken", {"type": "object", "properties": {"x": {"pattern": "("}}})
    registry = ToolRegistry.build(
        [(broken, False, "given"), (SchemaTool("fine"), False, "given")],
        config=make_config(),
        left_out=lambda plugin, problem: told.append((plugin, problem)),
    )
    assert registry.names() == ["fine"]
    assert told == [
        (
            "given",
            "tool 'broken' left out: its parameters schema is invalid (invalid JSON Schema at "
            '#/properties/x/pattern: "(" is not a "regex")',
        )
    ]


def test_the_errors_of_a_call_are_listed_up_to_the_limit_and_the_rest_counted() -> None:
    """50,000 wrong items: the first 8 errors are listed, the others counted, not 2 MB of text."""
    items = {"xs": {"type": "array", "items": {"type": "integer"}}}
    registry = _registry(SchemaTool("t", {"type": "object", "properties": items}))
    prepared = registry.prepare_call("t", {"xs": ["x"] * 50_000})
    listed = "; ".join(f'$.xs[{n}]: "x" is not of type "integer"' for n in range(8))
    assert prepared.error == f'Error: invalid arguments for tool "t": {listed}; and 49,992 more'
    assert registry_module.MAX_LISTED_ERRORS == 8
    few = registry.prepare_call("t", {"xs": ["x"] * 8}).error
    assert few == f'Error: invalid arguments for tool "t": {listed}'


def test_the_notes_of_a_cast_that_leaves_the_call_invalid_are_never_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """50,000 items cast but still invalid: no note of theirs is written; a fixing cast's is."""
    shown: list[Any] = []
    show = casting_module._show

    def counted_show(value: Any) -> str:
        shown.append(value)
        return show(value)

    monkeypatch.setattr(casting_module, "_show", counted_show)
    item = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    items = {"xs": {"type": "array", "items": item}}
    registry = _registry(SchemaTool("t", {"type": "object", "properties": items}))
    refused = registry.prepare_call("t", {"xs": [{"n": "1", "m": 0}, {}] * 25_000})
    assert refused.error is not None and refused.error.endswith("; and 24,992 more")
    assert shown == []
    cast = registry.prepare_call("t", {"xs": [{"n": "1"}]})
    assert cast.repairs == ['cast $.xs[0].n: "1" -> 1'] and shown == ["1", 1]


def test_a_cast_of_many_values_lists_eight_notes_and_counts_the_rest() -> None:
    """50,000 numbers written as strings: eight cast notes, then one saying how many more."""
    items = {"xs": {"type": "array", "items": {"type": "integer"}}}
    registry = _registry(SchemaTool("t", {"type": "object", "properties": items}))
    prepared = registry.prepare_call("t", {"xs": ["3"] * 50_000})
    assert prepared.error is None and prepared.arguments == {"xs": [3] * 50_000}
    assert prepared.repairs == [
        *(f'cast $.xs[{i}]: "3" -> 3' for i in range(8)),
        "cast 49,992 more values, not listed",
    ]
    nine = registry.prepare_call("t", {"xs": ["3"] * 9}).repairs
    assert nine[-1] == "cast 1 more value, not listed" and len(nine) == 9
    eight = registry.prepare_call("t", {"xs": ["3"] * 8}).repairs
    assert eight == [f'cast $.xs[{i}]: "3" -> 3' for i in range(8)]


def test_a_huge_key_is_cut_in_the_errors_and_the_cast_notes() -> None:
    """A 100 KB key names its argument by its ends, in an error and in a note of a cast."""
    key = "k" * 100_000 + "END"
    nested = {"m": {"type": "object", "additionalProperties": {"type": "integer"}}}
    registry = _registry(SchemaTool("t", {"type": "object", "properties": nested}))
    refused = registry.prepare_call("t", {"m": {key: "x"}})
    assert refused.error is not None and len(refused.error) < 400
    assert refused.error.endswith('kkEND: "x" is not of type "integer"')
    cast = registry.prepare_call("t", {"m": {key: "7"}})
    assert cast.error is None and cast.arguments == {"m": {key: 7}}
    [note] = cast.repairs
    assert len(note) < 300 and note.endswith('kEND: "7" -> 7')


# -- unknown tools --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("asked", "suggested"),
    [
        ("Read_File", "read_file"),
        ("read-file", "read_file"),
        ("readfile", "read_file"),
        ("reed_file", "read_file"),
        ("write_fiel", "write_file"),
        ("launch_rocket", None),
    ],
)
def test_unknown_tool_suggestions(asked: str, suggested: str | None) -> None:
    """An unknown name gets "did you mean" only when one registered name is the close match."""
    registry = _registry(SchemaTool("read_file"), SchemaTool("write_file"), SchemaTool("grep"))
    prepared = registry.prepare_call(asked, {})
    assert prepared.error is not None and prepared.tool is None
    assert prepared.error.startswith(f'Error: unknown tool "{asked}".')
    assert prepared.error.endswith("Available tools: grep, read_file, write_file.")
    assert ("Did you mean" in prepared.error) is (suggested is not None)
    if suggested:
        assert f'Did you mean "{suggested}"?' in prepared.error


def test_no_suggestion_when_two_names_fit_equally() -> None:
    """Two equally close names give no guess at all."""
    assert suggest_name("ReadFile", ["read_file", "read-file"]) is None
    assert suggest_name("tool_c", ["tool_a", "tool_b"]) is None


def test_a_huge_unknown_name_is_quoted_by_its_ends_and_not_compared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 100 KB tool name is cut in the error, and no edit distance is worked out for it."""
    compared: list[tuple[str, str]] = []
    distance = registry_module._edit_distance
    monkeypatch.setattr(
        registry_module,
        "_edit_distance",
        lambda a, b: compared.append((a, b)) or distance(a, b),
    )
    registry = _registry(*(SchemaTool(f"tool_{n}") for n in range(40)))
    huge = "tool_1" + "x" * 100_000 + "END"
    prepared = registry.prepare_call(huge, {})
    assert prepared.error is not None
    assert prepared.error.startswith('Error: unknown tool "tool_1xxx')
    assert 'xxxEND". Available tools: tool_0, tool_1,' in prepared.error
    assert "characters omitted" in prepared.error
    assert len(prepared.error) < 1_000
    assert compared == []
    # The name the result is kept under: the head and tail the error quotes, not 100 KB.
    assert prepared.name == clip(huge) and len(prepared.name) <= 200
    assert prepared.name.startswith("tool_1xxx") and prepared.name.endswith("xxxEND")
    assert registry.prepare_call("launch_rocket", {}).name == "launch_rocket"


_NAME_PIECES = st.text(alphabet="abcd_-AB", max_size=8)


def _suggest_by_every_distance(name: str, candidates: list[str]) -> str | None:
    """`suggest_name` as it was, comparing every candidate: what the faster one must agree with."""
    wanted = registry_module._normalised_name(name)
    normalised = [registry_module._normalised_name(c) for c in candidates]
    exact = [c for c, n in zip(candidates, normalised, strict=True) if n == wanted]
    if exact:
        return exact[0] if len(exact) == 1 else None
    limit = 1 if len(wanted) <= 4 else 2
    scored = [
        (registry_module._edit_distance(wanted, n), c)
        for c, n in zip(candidates, normalised, strict=True)
    ]
    close = sorted((d, c) for d, c in scored if d <= limit)
    if not close or (len(close) > 1 and close[0][0] == close[1][0]):
        return None
    return close[0][1]


@settings(max_examples=500, deadline=None)
@given(_NAME_PIECES, st.lists(_NAME_PIECES.filter(bool), max_size=6, unique=True))
def test_skipping_names_of_another_length_guesses_as_comparing_all_did(
    name: str, candidates: list[str]
) -> None:
    """Names whose length differs by more than the limit are never the guess: same answers."""
    assert suggest_name(name, candidates) == _suggest_by_every_distance(name, candidates)


def test_the_guess_is_never_executed() -> None:
    """A call to a misspelt tool runs nothing, not even the suggested tool."""
    target = SchemaTool("read_file")
    executor = Executor(_registry(target), default_timeout=5)
    (outcome,) = run(executor.run([ToolCallRequest("c1", "Read_File", {})]))
    assert outcome.result.is_error and "Did you mean" in outcome.result
    assert target.calls == []


# -- definitions ----------------------------------------------------------------------------


def test_definitions_order_builtins_plugins_then_mcp() -> None:
    """Built-ins by name, then plugin tools by name, then mcp_ tools, whatever the add order."""
    registry = ToolRegistry()
    registry.add(SchemaTool("mcp_github_search"))
    registry.add(SchemaTool("zeta"))
    registry.add(SchemaTool("write_file"), builtin=True)
    registry.add(SchemaTool("mcp_a_list"))
    registry.add(SchemaTool("alpha"))
    registry.add(SchemaTool("read_file"), builtin=True)
    names = [d["function"]["name"] for d in registry.definitions()]
    assert names == ["read_file", "write_file", "alpha", "zeta", "mcp_a_list", "mcp_github_search"]
    assert registry.names() == names
    assert [t.name for t in registry] == names


def test_definitions_are_cached_until_the_tools_change() -> None:
    """definitions() is computed once, and again after an add or a remove."""
    registry = _registry(SchemaTool("one"))
    first = registry.definitions()
    assert registry.definitions() is first
    registry.add(SchemaTool("two"))
    second = registry.definitions()
    assert second is not first and len(second) == 2
    registry.remove("one")
    assert [d["function"]["name"] for d in registry.definitions()] == ["two"]
    assert "one" not in registry and registry.get("one") is None


def test_duplicate_names_are_refused() -> None:
    """Adding a second tool with a taken name raises instead of replacing the first."""
    registry = _registry(SchemaTool("one"))
    with pytest.raises(ValueError, match="already registered"):
        registry.add(SchemaTool("one"))


_STABILITY_SCRIPT = """
import hashlib, json, sys
from nanobot_core.builtins.workspace_tools import nanobot_tools
from nanobot_core.kernel.context import PluginContext
from nanobot_core.tools import ToolRegistry, tool
from tests.tools.test_registry import SchemaTool

@tool
def planner(goal: str, steps: int = 3, tags: list[str] | None = None) -> str:
    '''Plan.

    Args:
        goal: What to reach.
    '''
    return goal

registry = ToolRegistry()
for item in nanobot_tools(PluginContext.default(sys.argv[1])):
    registry.add(item, builtin=True)
registry.add(planner)
names = {"zeta", "alpha", "mu", "beta"}
registry.add(SchemaTool("from_set", {
    "type": "object",
    "properties": {name: {"type": "string"} for name in sorted(names)},
    "required": list(names),
}))
text = json.dumps(registry.definitions(), ensure_ascii=False)
print(hashlib.sha256(text.encode()).hexdigest(), len(text))
"""


def test_definitions_are_byte_identical_across_hash_seeds(tmp_path: Path) -> None:
    """Two processes with different PYTHONHASHSEED serialise identical definitions."""
    digests = set()
    for seed in ("1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        completed = run_python(_STABILITY_SCRIPT, str(tmp_path), cwd=REPO_ROOT, env=env, check=True)
        digests.add(completed.stdout.split()[0])
    assert len(digests) == 1


def test_required_from_a_set_is_sorted_in_definitions() -> None:
    """`required` (a set in meaning) is sorted in definitions, so hash order cannot leak."""
    schema = {
        "type": "object",
        "properties": {"b": {"type": "string"}, "a": {"type": "string"}},
        "required": ["b", "a"],
    }
    parameters = _registry(SchemaTool("t", schema)).definitions()[0]["function"]["parameters"]
    assert parameters["required"] == ["a", "b"]
    assert list(parameters["properties"]) == ["b", "a"]


def test_definitions_use_the_tool_definition_shape() -> None:
    """Each definition is the OpenAI function shape with the tool's description."""

    @tool(read_only=True)
    def echo(text: str) -> str:
        """Echo the text."""
        return text

    (definition,) = _registry(echo).definitions()
    assert definition == echo.definition()
    assert json.loads(json.dumps(definition)) == definition


# -- OpenAPI's "nullable" and numbers JSON cannot carry -------------------------------------


def _cassette_tool_parameters(name: str) -> dict[str, Any]:
    """The parameters of tool `name` as a real request to OpenRouter (Gemini) sent them."""
    import json as _json

    from tests.helpers import data_dir

    path = data_dir() / "pydantic-ai-cassettes" / "interactions.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines():
        for entry in _json.loads(line)["request_body"].get("tools") or []:
            if entry.get("function", {}).get("name") == name:
                parameters: dict[str, Any] = entry["function"]["parameters"]
                return parameters
    raise AssertionError(f"no tool {name!r} in the cassettes")


class _Level(Tool):
    """A tool with the real nested schema that uses OpenAPI's "nullable": true."""

    name = "insert_level_with_spaces"
    description = "Insert a level with its spaces."
    parameters = _cassette_tool_parameters("insert_level_with_spaces")

    async def execute(self, **kwargs: Any) -> str:
        return "ok"


def test_nullable_true_accepts_null_and_still_checks_the_object() -> None:
    """'"nullable": true' on the real schema admits null; a non-object is still refused."""
    assert _Level.parameters["properties"]["level"]["nullable"] is True
    registry = ToolRegistry()
    registry.add(_Level())
    spaces = [{"space_name": "hall", "space_type": "entryway"}]
    accepted = registry.prepare_call("insert_level_with_spaces", {"level": None, "spaces": spaces})
    assert accepted.error is None, accepted.error
    level = {"level_name": "ground", "level_type": "ground"}
    given = registry.prepare_call("insert_level_with_spaces", {"level": level, "spaces": spaces})
    assert given.error is None and given.arguments["level"] == level
    refused = registry.prepare_call("insert_level_with_spaces", {"level": 3, "spaces": spaces})
    assert refused.error is not None and "level" in refused.error
    assert any("nullable" in warning for warning in registry.warnings)


def test_nullable_values_are_cast_like_their_type() -> None:
    """A nullable integer given as "5" is cast to 5; a stringified nullable object is parsed."""
    registry = ToolRegistry()
    registry.add(_Level())

    class Count(Tool):
        name = "count"
        description = "Count."
        parameters = {
            "type": "object",
            "properties": {"n": {"type": "integer", "nullable": True}},
            "required": ["n"],
        }

        async def execute(self, **kwargs: Any) -> str:
            return "ok"

    registry.add(Count())
    assert registry.prepare_call("count", {"n": "5"}).arguments == {"n": 5}
    assert registry.prepare_call("count", {"n": None}).error is None
    spaces = [{"space_name": "hall", "space_type": "entryway"}]
    text = '{"level_name": "top", "level_type": "attic"}'
    cast = registry.prepare_call("insert_level_with_spaces", {"level": text, "spaces": spaces})
    assert cast.error is None and cast.arguments["level"]["level_type"] == "attic"


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ('{"n": NaN}', "$.n"),
        ('{"n": Infinity}', "$.n"),
        ('{"n": -Infinity}', "$.n"),
        ('{"n": 1e999}', "$.n"),
        ({"n": float("nan")}, "$.n"),
    ],
)
def test_nan_and_infinity_are_refused_as_not_finite(raw: Any, where: str) -> None:
    """NaN and the infinities reach validation and are refused by name, not reported as null."""
    registry = ToolRegistry()

    class Scale(Tool):
        name = "scale"
        description = "Scale."
        parameters = {"type": "object", "properties": {"n": {"type": "number"}}}

        async def execute(self, **kwargs: Any) -> str:
            return "ok"

    registry.add(Scale())
    prepared = registry.prepare_call("scale", raw)
    assert prepared.error is not None
    assert f"{where}: must be a finite number" in prepared.error
    assert "null" not in prepared.error


@pytest.mark.parametrize("depth", [101, 100_000])
def test_deeply_nested_json_text_for_an_array_is_an_error_not_an_exception(depth: int) -> None:
    """A string holding JSON nested past the boundary's limit is refused like any invalid value."""
    schema = {"type": "object", "properties": {"items": {"type": "array"}}}
    registry = _registry(SchemaTool("collect", schema))
    raw = json.dumps({"items": "[" * depth + "]" * depth})
    prepared = registry.prepare_call("collect", raw)
    assert prepared.error is not None
    assert prepared.error.startswith('Error: invalid arguments for tool "collect": $.items: "[[[')
    assert 'is not of type "array"' in prepared.error


class _OwnCheck(SchemaTool):
    """A tool whose own argument check does what the test gives it."""

    def __init__(self, check: Any) -> None:
        super().__init__("checked", COUNTER_SCHEMA)
        self._check = check

    def validate_arguments(self, arguments: dict[str, Any]) -> Any:
        return self._check(arguments)


def _exit(arguments: dict[str, Any]) -> Any:
    raise SystemExit(3)


def _prints(arguments: dict[str, Any]) -> Any:
    print("checking the arguments")
    return None


class _Unprintable:
    """An error object (or exception) whose text cannot be read: its ``__str__`` raises."""

    def __str__(self) -> str:
        raise RuntimeError("no text")


class _UnprintableError(_Unprintable, ValueError):
    pass


def _unprintable_errors(arguments: dict[str, Any]) -> Any:
    return arguments, [_Unprintable()]


def _raises_unprintable(arguments: dict[str, Any]) -> Any:
    raise _UnprintableError


@pytest.mark.parametrize(
    ("check", "said"),
    [
        (_exit, "raised SystemExit(3)"),
        (lambda arguments: {"label": "a"}, "returned a dict"),
        (lambda arguments: ({"label": "a"},), "returned a tuple"),
        (lambda arguments: (["label"], []), "returned a tuple"),
        (lambda arguments: ({"label": "a"}, "bad"), "returned a tuple"),
        (_unprintable_errors, "failed: RuntimeError: no text"),
        (
            _raises_unprintable,
            "failed: _UnprintableError (its message could not be read: RuntimeError)",
        ),
    ],
    ids=[
        "system-exit",
        "dict",
        "short-tuple",
        "arguments-not-object",
        "errors-not-list",
        "unprintable-errors",
        "unprintable-exception",
    ],
)
def test_a_broken_own_argument_check_is_an_error_result(check: Any, said: str) -> None:
    """A tool's own check that escapes or returns the wrong shape refuses the call, never raises."""
    checked = _OwnCheck(check)
    executor = Executor(_registry(checked), default_timeout=5)
    [outcome] = run(executor.run([ToolCallRequest("1", "checked", {"label": "a"})]))
    assert outcome.is_error
    assert 'invalid arguments for tool "checked"' in outcome.result
    assert "own argument check" in outcome.result and said in outcome.result
    assert checked.calls == []


def test_an_argument_check_attribute_that_raises_refuses_the_call() -> None:
    """A ``validate_arguments`` that raises when looked up is the tool's failure, not ours."""

    class Escaping(SchemaTool):
        @property
        def validate_arguments(self) -> Any:  # type: ignore[override]
            raise SystemExit(5)

    registry = _registry(Escaping("checked", COUNTER_SCHEMA))
    prepared = registry.prepare_call("checked", {"label": "a"})
    assert prepared.error == (
        'Error: invalid arguments for tool "checked": the tool\'s own argument check '
        "raised SystemExit(5)"
    )


def test_what_an_own_argument_check_prints_stays_off_stdout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A tool's own argument check is plugin code: what it prints goes to the log."""
    registry = _registry(_OwnCheck(_prints))
    prepared = registry.prepare_call("checked", {"label": "a"})
    assert prepared.ok
    assert "checking the arguments" not in capsys.readouterr().out


# -- what the definitions give: read once, at registration -----------------------------------


class _Fickle(Tool):
    """A tool whose description (and parameters) work for `reads` reads, then raise `escape`."""

    name = "fickle"

    def __init__(self, reads: int, escape: BaseException, parameter_reads: int = 1) -> None:
        self.reads = {"description": reads, "parameters": parameter_reads}
        self.escape = escape

    def _read(self, what: str, value: Any) -> Any:
        if self.reads[what] <= 0:
            raise self.escape
        self.reads[what] -= 1
        return value

    @property
    def description(self) -> str:
        return typing.cast(str, self._read("description", "Fickle."))

    @property
    def parameters(self) -> dict[str, Any]:
        return typing.cast(dict[str, Any], self._read("parameters", {"type": "object"}))

    async def execute(self, **kwargs: Any) -> str:
        return "ran"


_FICKLE_OWNER = PluginInfo("fickle", "nanobot.plugins", "nb-fickle", "0.3")


@pytest.mark.parametrize("escape", [RuntimeError("gone"), SystemExit(3)])
def test_the_definitions_give_what_was_read_at_registration(escape: BaseException) -> None:
    """A description or parameters property that raises later breaks no definitions."""
    registry = ToolRegistry()
    registry.add(_Fickle(1, escape), plugin=_FICKLE_OWNER)
    (definition,) = registry.definitions()
    registry.add(SchemaTool("other"))  # the definitions are built again
    definitions = {d["function"]["name"]: d["function"] for d in registry.definitions()}
    assert definitions["fickle"] == definition["function"]
    assert definitions["fickle"]["description"] == "Fickle."
    assert definitions["fickle"]["parameters"] == {"type": "object"}


def test_a_schema_its_tool_changes_after_registration_changes_nothing_offered() -> None:
    """The definitions and the validation keep the parameters as read at registration, when
    the tool changes its own dict later: a set put in it made the definitions no JSON, and a
    "required" added reached the model but not the validation (compiled before)."""
    schema: dict[str, Any] = {"type": "object", "properties": {"q": {"type": "string"}}}
    changing = SchemaTool("changing", schema)
    registry = ToolRegistry()
    registry.add(changing)
    before = json.dumps(registry.definitions())
    assert registry.prepare_call("changing", '{"q": "x"}').error is None
    schema["properties"]["q"]["enum"] = {"a", "b"}  # the tool's own dict, changed in place
    schema["required"] = ["other"]
    registry.add(SchemaTool("next"))  # the definitions are built again
    definitions = {d["function"]["name"]: d for d in registry.definitions()}
    assert json.dumps([definitions["changing"]]) == before
    assert registry.prepare_call("changing", '{"q": "x"}').error is None


@pytest.mark.parametrize(
    ("escape", "said"),
    [(RuntimeError("gone"), "RuntimeError: gone"), (SystemExit(3), "SystemExit(3)")],
)
def test_a_tool_that_raises_when_loaded_is_left_out_under_its_plugin(
    tmp_path: Path, escape: BaseException, said: str
) -> None:
    """A tool whose description raises when loaded is left out alone, the attribute named."""
    from nanobot_core.config import Config, PluginsConfig
    from nanobot_core.hookspecs import hookimpl
    from nanobot_core.kernel.manager import PluginManager

    fickle = _Fickle(0, escape)  # its description raises at its first read

    class Plugin:
        @hookimpl
        def nanobot_tools(self, ctx: Any) -> list[Any]:
            return [fickle, SchemaTool("steady")]

    config = Config(plugins=PluginsConfig(disable_autoload=True))
    manager = PluginManager(config, workspace=tmp_path).load()
    manager.register(Plugin(), "fickle", distribution="nb-fickle", version="0.3")
    registry = manager.tool_registry()
    assert "steady" in registry and "fickle" not in registry
    assert [d["function"]["name"] for d in registry.definitions()][-1] == "steady"
    (record,) = [r for r in manager.records() if r.info.name == "fickle"]
    assert record.status == "loaded"
    assert record.problems == [f"tool 'fickle' left out: reading its description raised {said}"]


def test_a_tool_read_once_at_load_is_not_read_again_by_its_registry(tmp_path: Path) -> None:
    """A description that raises from its second read on changes nothing: nothing reads it again."""
    from nanobot_core.config import Config, PluginsConfig
    from nanobot_core.hookspecs import hookimpl
    from nanobot_core.kernel.manager import PluginManager

    fickle = _Fickle(1, RuntimeError("read twice"))

    class Plugin:
        @hookimpl
        def nanobot_tools(self, ctx: Any) -> list[Any]:
            return [fickle]

    config = Config(plugins=PluginsConfig(disable_autoload=True))
    manager = PluginManager(config, workspace=tmp_path).load()
    manager.register(Plugin(), "fickle", distribution="nb-fickle", version="0.3")
    registry = manager.tool_registry()
    assert registry.definitions()[-1]["function"]["description"] == "Fickle."
    assert fickle.reads == {"description": 0, "parameters": 0}  # each read once
    (record,) = [r for r in manager.records() if r.info.name == "fickle"]
    assert record.problems == []


@pytest.mark.parametrize(
    ("count", "listed_last"), [(40, "tool_39."), (41, "tool_39, ... (1 more).")]
)
def test_an_unknown_tool_error_lists_up_to_forty_tools_then_counts_the_rest(
    count: int, listed_last: str
) -> None:
    """Forty registered tools are all listed by name; past forty, the rest are counted."""
    registry = _registry(*(SchemaTool(f"tool_{n:02d}") for n in range(count)))
    error = registry.prepare_call("launch_rocket", {}).error
    assert error is not None
    names = ", ".join(f"tool_{n:02d}" for n in range(39))
    assert error.endswith(f"Available tools: {names}, {listed_last}")


def test_an_arguments_key_beside_other_keys_is_no_wrapper() -> None:
    """Only an object whose one key is ``arguments`` is unwrapped; beside others it is kept."""
    raw = {"arguments": {"label": "inner", "count": 1}, "label": "outer", "count": 2}
    prepared = _registry(SchemaTool("count", COUNTER_SCHEMA)).prepare_call("count", raw)
    assert prepared.arguments == raw
    assert not any("unwrapped" in repair for repair in prepared.repairs)


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ('{"label": "x", "label": "y"}', "$.label"),
        ('{"label": "x", "count": {"n": 1, "n": 2}}', "$.count.n"),
        ('{"label": [{"a": 1}, {"b": {"odd key": 1, "odd key": 2}}]}', '$.label[1].b["odd key"]'),
        ('{"label": "x", "label": "y"', "$.label"),  # cut off: closed, then refused
        ('"{\\"label\\": 1, \\"label\\": 2}"', "$.label"),  # double-encoded
        ('{"arguments": "{\\"label\\": 1, \\"label\\": 2}"}', "$.label"),  # in a wrapper
    ],
)
def test_a_key_given_twice_refuses_the_call_naming_its_path(raw: str, where: str) -> None:
    """Arguments that give one key twice are refused at its path, not run with the last value."""
    registry = _registry(SchemaTool("counter", COUNTER_SCHEMA))
    prepared = registry.prepare_call("counter", raw)
    assert prepared.error == (
        f'Error: arguments for tool "counter" cannot be used: {where} is given twice; '
        "give each key once"
    )
    assert registry.get("counter").calls == []  # type: ignore[union-attr]


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=5, unique=True),
    twice=st.integers(min_value=0, max_value=4),
    depth=st.integers(min_value=0, max_value=4),
)
def test_any_repeated_key_at_any_depth_is_named(keys: list[str], twice: int, depth: int) -> None:
    """Whatever the keys and however deep the object, the repeated key's path is named."""
    repeated = keys[twice % len(keys)]
    members = [f"{json.dumps(key)}: {n}" for n, key in enumerate(keys)]
    text = "{" + ", ".join([*members, f"{json.dumps(repeated)}: true"]) + "}"
    for _ in range(depth):
        text = '{"wrap": [' + text + "]}"
    registry = _registry(SchemaTool("free", {"type": "object"}))
    error = registry.prepare_call("free", text).error
    path = format_instance_path([*(["wrap", 0] * depth), repeated])
    assert error == (
        f'Error: arguments for tool "free" cannot be used: {clip(path)} is given twice; '
        "give each key once"
    )


def test_keys_given_once_each_are_read_as_before() -> None:
    """The same key in two objects is no repeat: each object gives it once."""
    registry = _registry(SchemaTool("free", {"type": "object"}))
    prepared = registry.prepare_call("free", '{"a": {"k": 1}, "b": {"k": 2}, "k": 3}')
    assert prepared.ok and prepared.arguments == {"a": {"k": 1}, "b": {"k": 2}, "k": 3}


def test_a_schema_refused_at_add_names_its_plugin_and_version() -> None:
    """The error of adding a tool whose schema cannot compile names the plugin to fix."""
    registry = ToolRegistry()
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": "("}}}
    plugin = PluginInfo("search", "nanobot.plugins", "search-tools", "1.2")
    with pytest.raises(InvalidSchemaError) as raised:
        registry.add(SchemaTool("broken", schema), plugin=plugin)
    assert str(raised.value) == (
        "tool \"broken\" of plugin 'search' from search-tools 1.2 cannot be added: "
        'its parameters schema is invalid (invalid JSON Schema at #/properties/x/pattern: "(" '
        'is not a "regex")'
    )


@pytest.mark.parametrize("name", ["", "   ", None])
def test_a_call_without_a_name_is_told_to_call_a_tool_by_its_name(name: Any) -> None:
    """A nameless (or blank-named) call's error says what to do, name one of the tools listed,
    not only that the name is missing; with no tools, to answer without calling one."""
    error = _registry(SchemaTool("read_file"), SchemaTool("grep")).prepare_call(name, {}).error
    assert error == (
        "Error: the tool call has no tool name: call a tool by its name, one of the available "
        "tools. Available tools: grep, read_file."
    )
    assert _registry().prepare_call(name, {}).error == (
        "Error: the tool call has no tool name, and no tools are available: answer without "
        "calling a tool."
    )


def _wide(properties: int) -> dict[str, Any]:
    """An object schema of `properties` string properties: 2 + 2 values each, 4 around."""
    return {
        "type": "object",
        "properties": {f"p{n}": {"type": "string"} for n in range(properties)},
    }


def test_a_schema_of_more_values_than_any_arguments_is_refused_before_it_is_read() -> None:
    """A schema of 100,000 properties (5 s to normalise and compile, megabytes sent with every
    request) is refused by its size, naming the tool and the limit; one within it loads."""
    registry = ToolRegistry()
    with pytest.raises(InvalidSchemaError) as raised:
        registry.add(SchemaTool("wide", _wide(100_000)))
    assert str(raised.value) == (
        'tool "wide" cannot be added: its parameters schema holds more than 100,000 values '
        "(MAX_SCHEMA_VALUES), more than a call's arguments may; it would be sent with every "
        "request"
    )
    assert registry_module.MAX_SCHEMA_VALUES == 100_000 and "wide" not in registry
    # The root, its type, properties, x, the enum's list, and its items: 5 + n values.
    registry.add(SchemaTool("most", _enum(100_000 - 5)))
    assert registry.prepare_call("most", {"x": 7}).ok
    with pytest.raises(InvalidSchemaError):
        registry.add(SchemaTool("over", _enum(100_000 - 4)))


def _enum(items: int) -> dict[str, Any]:
    """An object schema whose property `x` is one of `items` integers."""
    return {"type": "object", "properties": {"x": {"enum": list(range(items))}}}
