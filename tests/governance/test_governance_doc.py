"""docs/governance.md says what the code does: its tables, its numbers, its examples and the
exact lines it quotes are checked here against a governor built as a user builds one."""

from __future__ import annotations

import json
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from nanobot_core import hookimpl
from nanobot_core.config import Config, GovernanceConfig, PluginsConfig, load_config
from nanobot_core.errors import ConfigError
from nanobot_core.governance import (
    STRUCTURAL_KEYS,
    Governor,
    Stage,
    StageContext,
    builtin_stages,
    default_store,
    stages,
)
from nanobot_core.governance.continuity import GovernanceState, latest_state
from nanobot_core.governance.history_file import HistoryFormatError
from nanobot_core.governance.stage import WORK_KINDS
from nanobot_core.governance.stages import BUILTIN_TABLE
from nanobot_core.governance.stages.backfill import INTERRUPTED
from nanobot_core.governance.tokens import count_request
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.testing import govern_and_check
from tests.governance.builders import call, calls, context, result, run_pure, say, turn, user
from tests.helpers import REPO_ROOT

DOC = REPO_ROOT / "docs" / "governance.md"


def _doc() -> str:
    return DOC.read_text(encoding="utf-8")


def _flat() -> str:
    """The prose of the page (no fenced blocks), every run of white space made one space, so
    that lines it quotes read whole however they are wrapped."""
    return " ".join(re.sub(r"```.*?```", " ", _doc(), flags=re.DOTALL).split())


def _quoted(start: str) -> str:
    """The one code span of the page (wrapped or not) that starts with `start`."""
    (found,) = [s for s in re.findall(r"`([^`]+)`", _flat()) if s.startswith(start)]
    return str(found)


def _block(language: str, marker: str) -> str:
    """The one fenced block of `language` on the page that holds `marker`."""
    blocks = re.findall(rf"```{language}\n(.*?)```", _doc(), re.DOTALL)
    (block,) = [b for b in blocks if marker in b]
    return str(block)


def _error_lines(marker: str) -> list[str]:
    """The lines of the page that show a command's error holding `marker`."""
    return [line for line in _doc().splitlines() if line.startswith("Error:") and marker in line]


def _module(marker: str, **names: Any) -> types.ModuleType:
    """The page's Python block holding `marker`, run as a module (with `names` defined)."""
    module = types.ModuleType(f"governance_doc_{abs(hash(marker))}")
    module.__dict__.update(names)
    exec(compile(_block("python", marker), str(DOC), "exec"), module.__dict__)
    return module


def _manager(tmp_path: Path, **tables: dict[str, Any]) -> PluginManager:
    """A plugin manager with the built-ins only, these stage tables configured."""
    config = Config(
        plugins=PluginsConfig(disable_autoload=True),
        governance=GovernanceConfig(stages=dict(tables)),
    )
    return PluginManager(config, workspace=tmp_path).load()


def _manager_from_environment(tmp_path: Path, **environ: str) -> PluginManager:
    """A plugin manager with the built-ins only, configured by `load_config` from `environ`."""
    config = load_config(cwd=tmp_path, environ={"NANOBOT_DISABLE_PLUGIN_AUTOLOAD": "1", **environ})
    return PluginManager(config, workspace=tmp_path).load()


# -- the tables -------------------------------------------------------------------------------


@attrs.frozen
class _DocumentedOption:
    """One option as the pipeline table gives it: ``name`` (``type``, at least N, default D)."""

    type: str
    at_least: float | None
    default: str  # a JSON literal when it was in backquotes, else the words the page uses
    literal: bool


# One option of the options column: `name` (`type`[, at least N], default D): what it does.
_OPTION = re.compile(
    r"`(\w+)` \(`([^`]+)`(?:, at least (-?[0-9.]+))?, default (`[^`]+`|[^)]+)\): [^;]+"
)


def _pipeline_rows() -> list[tuple[str, dict[str, _DocumentedOption]]]:
    """(stage, its documented options) of each row of the pipeline table naming a built-in
    stage; an options cell that is not a run of `_OPTION`s fails here, saying which."""
    text = _doc()
    table = text[text.index("| phase | stage |") : text.index("Options live under")]
    rows = []
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        name = re.fullmatch(r"`(\w+)`", cells[1])
        if not name:
            continue
        options: dict[str, _DocumentedOption] = {}
        for part in [p for p in cells[-1].split("; ") if p]:
            found = _OPTION.fullmatch(part)
            assert found, f"stage {name[1]}: option not as `name` (`type`, default D): {part}"
            default = found[4].strip()
            literal = default.startswith("`")
            options[found[1]] = _DocumentedOption(
                found[2],
                float(found[3]) if found[3] else None,
                default.strip("`"),
                literal,
            )
        rows.append((name[1], options))
    return rows


def _type_name(tp: Any) -> str:
    """A declared option type as the page spells it (``int``, ``list[str]``)."""
    return str(tp).replace("typing.", "") if typing.get_args(tp) else str(tp.__name__)


def test_the_pipeline_table_lists_the_builtins_in_order_with_their_options() -> None:
    """The table's built-in stages are the table of the code, in order, each with its options."""
    documented = _pipeline_rows()
    declared = [(row.stage.name, sorted(row.stage.options or {})) for row in BUILTIN_TABLE]
    assert [(name, sorted(options)) for name, options in documented] == declared


def test_the_pipeline_table_gives_each_option_its_declared_type_and_least_value() -> None:
    """Each documented option's type and least value are those its stage declares."""
    declared = {
        (row.stage.name, name): (_type_name(option.type), option.at_least)
        for row in BUILTIN_TABLE
        for name, option in (row.stage.options or {}).items()
    }
    documented = {
        (stage, name): (option.type, option.at_least)
        for stage, options in _pipeline_rows()
        for name, option in options.items()
    }
    assert documented == declared


def _results(names: list[str], size: int) -> list[dict[str, Any]]:
    """One step per name: a user message, a call of that tool, its result of `size` characters."""
    history: list[dict[str, Any]] = []
    for index, name in enumerate(names):
        history += [
            user(f"step {index}"),
            calls(call(f"c{index}", name)),
            result(f"c{index}", "r" * size),
        ]
    return history


@attrs.frozen
class _Probe:
    """A history and a context on which an option's value shows: `other` gives another outcome
    than the default; `unset_means` is the value the page's words for the default stand for."""

    history: list[dict[str, Any]]
    context: Callable[[dict[str, Any], Path], StageContext]
    other: Any
    unset_means: tuple[str, Any] | None = None


def _over_budget(
    history: list[dict[str, Any]], by: int
) -> Callable[[dict[str, Any], Path], StageContext]:
    budget = count_request(None, history) - by
    return lambda options, _: context(options=options, budget=budget, low_watermark=1.0)


_SIX = _results(["exec", "read"] * 3, 4_000)
_PROBES: dict[tuple[str, str], _Probe] = {
    ("strip_placeholders", "patterns"): _Probe(
        [user("a"), say("(thinking)"), user("b")],
        lambda options, _: context(options=options),
        ["(thinking)"],
    ),
    ("offload_results", "exclude_tools"): _Probe(
        _results(["exec"], 4_000),
        lambda options, folder: context(
            options=options, store=default_store(folder), max_tool_result_chars=1_000
        ),
        ["exec"],
    ),
    # Over by far less than one result: one compaction would do, unless options say more.
    ("compact_results", "keep"): _Probe(_SIX, _over_budget(_SIX, 100_000), 2),
    ("compact_results", "exclude_tools"): _Probe(_SIX, _over_budget(_SIX, 100_000), ["exec"]),
    ("compact_results", "tools"): _Probe(
        _SIX, _over_budget(_SIX, 100_000), [], unset_means=("every tool", ["exec", "read"])
    ),
    ("compact_results", "clear_at_least"): _Probe(_SIX, _over_budget(_SIX, 100), 3_000),
}


def _documented_defaults() -> list[tuple[str, str, _DocumentedOption]]:
    return [
        (stage, name, option)
        for stage, options in _pipeline_rows()
        for name, option in options.items()
    ]


def test_every_documented_option_has_a_probe() -> None:
    """Each option of the table is one whose default the next test checks."""
    assert sorted((stage, name) for stage, name, _ in _documented_defaults()) == sorted(_PROBES)


@pytest.mark.parametrize(
    ("stage", "name", "documented"),
    _documented_defaults(),
    ids=[f"{stage}.{name}" for stage, name, _ in _documented_defaults()],
)
def test_each_documented_default_is_what_the_stage_does_when_the_option_is_unset(
    stage: str, name: str, documented: _DocumentedOption, tmp_path: Path
) -> None:
    """Unset, an option acts as the page's default does, on a history where another value
    would act otherwise."""
    probe = _PROBES[(stage, name)]
    if documented.literal:
        value = json.loads(documented.default)
    else:
        assert probe.unset_means is not None and documented.default == probe.unset_means[0]
        value = probe.unset_means[1]
    (func,) = [getattr(stages, row.stage.name) for row in BUILTIN_TABLE if row.stage.name == stage]

    def outcome(options: dict[str, Any]) -> list[Any]:
        return list(run_pure(func, probe.history, probe.context(options, tmp_path)).messages)

    unset = outcome({})
    assert outcome({name: value}) == unset
    assert outcome({name: probe.other}) != unset


def test_the_kinds_of_work_are_listed_in_their_order() -> None:
    """The kinds of work the page lists are `WORK_KINDS`, in its order."""
    text = _flat()
    start = text.index("The kinds of work (")
    listed = re.findall(
        r"`(\w+)`", text[start : text.index("A stage that declares nothing", start)]
    )
    assert [k for k in listed if k != "max_tool_result_chars"] == list(WORK_KINDS)


def test_the_structural_keys_are_listed() -> None:
    """The keys a prefilter is never asked about are the page's list."""
    text = _flat()
    start = text.index("`STRUCTURAL_KEYS`:")
    listed = re.findall(r"`(\w+)`", text[start : text.index(")", start)])
    assert set(listed[1:]) == STRUCTURAL_KEYS


# -- the numbers ------------------------------------------------------------------------------


def test_the_default_budget_is_the_documented_sum() -> None:
    """Unconfigured, the budget is 128,000 - 8,192 - 1,024 = 118,784 tokens, as the page says."""
    assert "(defaults: 128,000 - 8,192 - 1,024 = 118,784)" in _flat()
    governed = Governor(builtin_stages(), config=GovernanceConfig()).govern([user()])
    assert governed.budget == 118_784
    limited = Governor(builtin_stages(), config=GovernanceConfig(input_limit=5_000))
    assert limited.govern([user()]).budget == 5_000


# -- the examples -----------------------------------------------------------------------------


def test_the_governance_record_example_is_a_state_written_back_as_it_is() -> None:
    """The page's `_meta` line is read as a state, and that state records the very same line."""
    record = json.loads(_block("json", '"kind": "governance"'))
    state = latest_state([user(), record, say()])
    assert state == GovernanceState(412, None, (415, 431), 977, None)
    assert state.to_record() == record


def test_the_first_call_after_restore_is_a_first_request() -> None:
    """After `restore`, the next call's prefix says "first request" whatever was decided."""
    config = GovernanceConfig(input_limit=2_000)
    governor = Governor(builtin_stages(), config=config)
    history = [user("task")] + [m for i in range(12) for m in turn(i, "r" * 600)[1:]]
    first = governor.govern(history)
    assert first.state.to_be_recorded(None)  # it decided something: a later call is no first
    governor.govern(history)
    governor.restore(first.state)
    again = governor.govern(history)
    assert again.prefix.to_json() == {
        "kept": True,
        "changed_at": None,
        "reason": "first request: nothing was sent before",
    }
    assert again.messages == first.messages


def test_the_writing_a_stage_example_runs_before_offload_and_drops_debug_notes(
    nanobot_register: Callable[..., Any], nanobot_manager: PluginManager
) -> None:
    """The page's stage example loads, is placed before `offload_results` and does its work."""
    example = _module("def drop_debug_notes")
    assert nanobot_register(example, "debug-notes").status == "loaded"
    names = nanobot_manager.governor().stage_names()
    assert names.index("drop_debug_notes") < names.index("offload_results")
    (stage,) = example.nanobot_governance_stages(None)
    history = [user("hi"), say("[debug] cache warm"), say("hello"), user("and?")]
    governed = govern_and_check(history, stages=[stage])
    assert [m["content"] for m in governed.messages] == ["hi", "hello", "and?"]
    entry = governed.report.entry("drop_debug_notes")
    assert entry is not None and entry.details == ["dropped 1 debug notes"]
    clean = [user("hi"), say("hello")]
    assert govern_and_check(clean, stages=[stage]).messages is clean


def test_the_per_message_example_is_handed_only_what_its_prefilter_admits() -> None:
    """The page's `hide_tickets` is called once, for the one message with a ticket, by index."""
    example = _module("def hide_tickets")
    (stage,) = example.nanobot_governance_stages(None)
    handed: list[list[Any]] = []

    def counted(messages: list[Any], ctx: Any) -> Any:
        handed.append(messages)
        return example.hide_tickets(messages, ctx)

    history = [user("hi"), say("hello"), user("see TICKET-42 please")]
    governed = govern_and_check(history, stages=[attrs.evolve(stage, func=counted)])
    assert governed.messages[-1]["content"] == "see TICKET-? please"
    entry = governed.report.entry("hide_tickets")
    assert entry is not None and entry.details == ["messages[2]: ticket numbers hidden"]
    # Once as governed, once as `govern_and_check` governs the result again: never "hi".
    assert [m[0]["content"] for m in handed] == ["see TICKET-42 please", "see TICKET-? please"]


def test_the_options_example_is_refused_with_the_documented_line(tmp_path: Path) -> None:
    """The page's options example, `level = 0`, is refused with the error line the page shows."""

    def find_notes(messages: list[Any], ctx: Any) -> list[Any]:
        return messages

    example = _module('StageOption(int, "how many passes"', find_notes=find_notes)
    manager = _manager_from_environment(tmp_path, NANOBOT_GOVERNANCE__STAGES__FIND_NOTES__LEVEL="0")
    manager.register(example, "notes", distribution="nanobot-notes", version="2.1.0")
    with pytest.raises(ConfigError) as caught:
        manager.governor()
    (line,) = _error_lines("find_notes.level")
    assert line == f"Error: configuration: {caught.value}"
    good = _manager(tmp_path, find_notes={"level": 2, "mode": "exact", "skip_tools": ["exec"]})
    good.register(example, "notes", distribution="nanobot-notes", version="2.1.0")
    assert "find_notes" in good.governor().stage_names()


def test_the_typo_example_names_the_builtin_options(tmp_path: Path) -> None:
    """`kep` in `compact_results` gives the page's second error line, this release's version."""
    manager = _manager_from_environment(
        tmp_path, NANOBOT_GOVERNANCE__STAGES__COMPACT_RESULTS__KEP="3"
    )
    with pytest.raises(ConfigError) as caught:
        manager.governor()
    (line,) = _error_lines("compact_results.kep")
    assert line == f"Error: configuration: {caught.value}"


# -- the lines the page quotes ----------------------------------------------------------------


def test_a_message_holding_itself_is_refused_with_the_quoted_line() -> None:
    """A history whose messages[3] holds itself raises the page's `HistoryFormatError` text."""
    looped: dict[str, Any] = {"role": "user", "content": "x"}
    looped["self"] = looped
    with pytest.raises(HistoryFormatError) as caught:
        Governor(builtin_stages(), config=GovernanceConfig()).govern([*turn(1)[:3], looped])
    assert str(caught.value) == _quoted("messages[3] holds")


def test_an_outcome_nested_too_deep_is_ignored_with_the_quoted_line() -> None:
    """A stage handing back messages[2] nested 100001 levels gives the page's `ignored` line."""
    deep: dict[str, Any] = {}
    for _ in range(100_000 - 1):
        deep = {"k": deep}

    def deepen(messages: list[Any], ctx: Any) -> list[Any]:
        return [*messages[:2], {"role": "user", "content": "y", "k": deep}, *messages[2:]]

    stages = [*builtin_stages(), Stage("deepen", deepen)]
    governed = Governor(stages, config=GovernanceConfig()).govern(turn(1))
    entry = governed.report.entry("deepen")
    assert entry is not None and not entry.changed
    assert entry.details == [_quoted("ignored: the stage's outcome holds")]


def test_a_result_moved_back_is_reported_with_the_quoted_line() -> None:
    """A result three messages after its call's run is moved back, reported as the page shows."""
    history = [
        user("a"),
        say("b"),
        user("c"),
        calls(call("call_7")),
        user("d"),
        say("e"),
        result("call_7"),
    ]
    governed = Governor(builtin_stages(), config=GovernanceConfig()).govern(history)
    entry = governed.report.entry("pair_results")
    assert entry is not None and entry.details == [
        json.loads(_block("json", "pair_results"))["details"][0]
    ]
    assert [m["role"] for m in governed.messages[3:5]] == ["assistant", "tool"]


def test_a_call_left_open_is_answered_with_the_quoted_text() -> None:
    """The placeholder `backfill_results` adds reads as the page quotes it, with the tool name."""
    governed = Governor(builtin_stages(), config=GovernanceConfig()).govern(
        [user(), calls(call("a", "lookup"))]
    )
    assert _quoted("[No result:") == INTERRUPTED
    assert governed.messages[-1] == {
        "role": "tool",
        "tool_call_id": "a",
        "name": "lookup",
        "content": INTERRUPTED,
    }


class _Notes:
    """A plugin whose stage raises, returns an int, or returns a non-message."""

    def __init__(self, func: Callable[[list[Any], Any], Any]) -> None:
        self.func = func

    @hookimpl
    def nanobot_governance_stages(self, ctx: object) -> list[Stage]:
        return [Stage("find_notes", self.func)]


def _no_patterns(messages: list[Any], ctx: Any) -> Any:
    raise RuntimeError("no patterns loaded")


def _an_int(messages: list[Any], ctx: Any) -> Any:
    return 3


def _junk_at_the_end(messages: list[Any], ctx: Any) -> Any:
    return [*messages, "junk"]


@pytest.mark.parametrize(
    ("func", "start"),
    [
        (_no_patterns, "skipped (plugin 'notes'"),
        (_an_int, "ignored (...)"),
        (_junk_at_the_end, "returned a non-message (...)"),
    ],
    ids=["raised", "returned-an-int", "returned-a-non-message"],
)
def test_a_failed_plugin_stage_is_reported_as_the_page_quotes(
    tmp_path: Path, func: Callable[[list[Any], Any], Any], start: str
) -> None:
    """The report line of a plugin's stage that raised, returned an int or returned a list
    holding a non-message is the page's."""
    manager = _manager(tmp_path)
    manager.register(_Notes(func), "notes", distribution="nanobot-notes", version="2.1.0")
    governed = manager.governor().govern([*turn(1), user("and now?")])
    entry = governed.report.entry("find_notes")
    quoted = _quoted(start).replace("(...)", "(plugin 'notes' from nanobot-notes 2.1.0)")
    assert entry is not None and entry.details == [quoted]


@pytest.mark.parametrize(("acts_on", "own"), [((), False), (("large_results",), True)])
def test_a_whole_list_stage_is_handed_copies_unless_it_declares_its_work(
    acts_on: tuple[str, ...], own: bool
) -> None:
    """Declaring nothing, a stage reads copies; declaring `acts_on`, the caller's own dicts."""
    seen: list[Any] = []

    def look(messages: list[Any], ctx: Any) -> list[Any]:
        seen.extend(messages)
        return messages

    history = [user("a"), calls(call("c")), result("c", "x" * 20_000), say("d")]
    stage = Stage("look", look, acts_on=acts_on)
    Governor([*builtin_stages(), stage], config=GovernanceConfig()).govern(history)
    assert seen and seen[0] == history[0]
    assert (seen[0] is history[0]) is own
