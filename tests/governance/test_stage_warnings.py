"""A warning and the report about a stage that failed name its plugin, with the version."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from nanobot_core._containment import contained
from nanobot_core.config import Config, GovernanceConfig
from nanobot_core.governance import Governor, Stage, StageOutcome, place_stages
from nanobot_core.governance.stages import builtin_stages
from nanobot_core.hookspecs import hookimpl
from nanobot_core.kernel.manager import PluginManager
from tests.governance.builders import turn, user
from tests.helpers import install_plugin, plugin_env, run_cli

_ORIGIN = "plugin 'shaky' from nanobot-shaky 1.2.3"


def _raising(*_args: Any) -> NoReturn:
    raise RuntimeError("broken")


def _warnings(stage: Stage, origins: dict[str, str] | None) -> list[dict[str, Any]]:
    governor = Governor([*builtin_stages(), stage], config=GovernanceConfig(), origins=origins)
    with capture_logs() as logs:
        governor.govern([*turn(1), *turn(2, "some text"), user("and now?")])
    return [e for e in logs if e["log_level"] == "warning" and e.get("stage") == stage.name]


def test_a_stage_that_raises_is_logged_with_its_plugin() -> None:
    """The warning of a stage that raised names the stage, its plugin and version, and the error."""
    (warned,) = _warnings(Stage("shaky", _raising), {"shaky": _ORIGIN})
    assert warned["event"] == "governance stage raised; skipped"
    assert warned["plugin"] == _ORIGIN
    assert warned["error"] == "RuntimeError: broken"


def test_a_per_message_stage_that_raises_is_logged_with_its_plugin() -> None:
    """A per-message stage's failure is logged naming its plugin too."""
    warned = _warnings(Stage("shaky", _raising, per_message=True), {"shaky": _ORIGIN})
    assert warned and all(e["plugin"] == _ORIGIN for e in warned)


def test_a_prefilter_that_raises_is_logged_with_its_plugin() -> None:
    """The warning of a prefilter that raised names the stage's plugin and version."""
    stage = Stage(
        "shaky", lambda m, c: StageOutcome.unchanged(m), per_message=True, prefilter=_raising
    )
    warned = _warnings(stage, {"shaky": _ORIGIN})
    assert warned and warned[0]["event"] == "governance stage's prefilter raised; skipped"
    assert all(e["plugin"] == _ORIGIN for e in warned)


def test_a_stage_that_returns_garbage_is_logged_with_its_plugin() -> None:
    """The warning of a stage whose return value is ignored names its plugin and version."""
    (warned,) = _warnings(Stage("shaky", lambda m, c: 42), {"shaky": _ORIGIN})
    assert warned["event"] == "governance stage returned garbage; ignored"
    assert warned["plugin"] == _ORIGIN


def test_a_stage_of_unknown_origin_is_logged_with_its_name_only() -> None:
    """A governor built without origins names the stage alone, as before."""
    (warned,) = _warnings(Stage("shaky", _raising), None)
    assert "plugin" not in warned and warned["stage"] == "shaky"


def _details(stage: Stage, origins: dict[str, str] | None) -> list[str]:
    governor = Governor([*builtin_stages(), stage], config=GovernanceConfig(), origins=origins)
    entry = governor.govern([*turn(1), *turn(2, "some text"), user("and now?")]).report.entry(
        stage.name
    )
    assert entry is not None and not entry.changed
    return entry.details


def test_the_report_of_a_stage_that_raises_names_its_plugin_version() -> None:
    """The report entry of a stage that raised says which plugin, and which version, it is."""
    assert _details(Stage("shaky", _raising), {"shaky": _ORIGIN}) == [
        f"skipped ({_ORIGIN}): the stage raised RuntimeError: broken"
    ]


def test_the_report_of_a_per_message_stage_that_raises_names_its_plugin_version() -> None:
    """A per-message stage's failure is reported naming its plugin and version too."""
    assert _details(Stage("shaky", _raising, per_message=True), {"shaky": _ORIGIN}) == [
        f"skipped ({_ORIGIN}): the stage raised RuntimeError: broken"
    ]


def test_the_report_of_a_prefilter_that_raises_names_its_plugin_version() -> None:
    """The report of a stage whose prefilter raised names the stage's plugin and version."""
    stage = Stage(
        "shaky", lambda m, c: StageOutcome.unchanged(m), per_message=True, prefilter=_raising
    )
    assert _details(stage, {"shaky": _ORIGIN}) == [
        f"skipped ({_ORIGIN}): the stage's prefilter raised RuntimeError: broken"
    ]


def test_the_report_of_a_stage_that_returns_garbage_names_its_plugin_version() -> None:
    """The report of a stage whose return value is ignored names its plugin and version."""
    assert _details(Stage("shaky", lambda m, c: 42), {"shaky": _ORIGIN}) == [
        f"ignored ({_ORIGIN}): the stage returned an int, not a StageOutcome or a list of messages"
    ]


@pytest.mark.parametrize(
    ("returned", "said"), [(None, "None"), ({"role": "user"}, "a dict"), ((), "a tuple")]
)
def test_the_report_of_a_stage_that_forgot_its_outcome_says_what_it_returned(
    returned: Any, said: str
) -> None:
    """A stage returning nothing, one message or a tuple is told what a stage returns."""
    assert _details(Stage("shaky", lambda m, c: returned), {"shaky": _ORIGIN}) == [
        f"ignored ({_ORIGIN}): the stage returned {said}, not a StageOutcome or a list of messages"
    ]


def test_the_report_of_an_unreadable_outcome_names_its_plugin_version() -> None:
    """An outcome holding a message no JSON can hold is ignored, naming the plugin's version."""
    looped: dict[str, Any] = {"role": "user", "content": "x"}
    looped["self"] = looped
    (line,) = _details(Stage("shaky", lambda m, c: [*m, looped]), {"shaky": _ORIGIN})
    assert line.startswith(f"ignored ({_ORIGIN}): the stage's outcome holds messages[")


def test_the_report_of_a_stage_of_unknown_origin_is_as_before() -> None:
    """A governor built without origins reports the failure without a plugin."""
    assert _details(Stage("shaky", _raising), None) == [
        "skipped: the stage raised RuntimeError: broken"
    ]


@given(
    origin=st.text(min_size=1, max_size=40),
    message=st.text(max_size=40),
)
def test_any_origin_and_error_are_reported_whole(origin: str, message: str) -> None:
    """Whatever a plugin's label and error say, the report line holds both, the label first."""

    def raising(*_args: Any) -> NoReturn:
        raise RuntimeError(message)

    (line,) = _details(Stage("shaky", raising), {"shaky": origin})
    said = contained(RuntimeError(message))  # how the governor says what a stage raised
    assert line == f"skipped ({origin}): the stage raised {said}"


class _Notes:
    @hookimpl
    def nanobot_governance_stages(self, ctx: object) -> list[Stage]:
        return [Stage("find_notes", _raising)]


def test_a_registered_plugin_stage_is_reported_with_its_version(tmp_path: Path) -> None:
    """Through the plugin manager, the report and the warning name the plugin's dist and version."""
    manager = PluginManager(Config(), workspace=tmp_path, autoload=False).load()
    manager.register(_Notes(), "notes", distribution="nanobot-notes", version="2.1.0")
    with capture_logs() as logs:
        governed = manager.governor().govern([*turn(1), user("and now?")])
    entry = governed.report.entry("find_notes")
    assert entry is not None
    notes = "plugin 'notes' from nanobot-notes 2.1.0"
    assert entry.details == [f"skipped ({notes}): the stage raised RuntimeError: broken"]
    assert [e["plugin"] for e in logs if e.get("stage") == "find_notes"] == [notes]


# An installed plugin (distribution "shaky", version 0.1) whose stage raises.
SHAKY = """
from nanobot_core import hookimpl
from nanobot_core.governance import Stage

def broken(messages, ctx):
    raise RuntimeError("broken")

@hookimpl
def nanobot_governance_stages(ctx):
    return [Stage("shaky", broken)]
"""


def test_govern_prints_the_plugin_version_of_a_stage_that_raised(tmp_path: Path) -> None:
    """`govern` and `govern --json` give the failed stage's plugin with its version."""
    site = install_plugin(tmp_path / "site", "shaky", SHAKY)
    history = tmp_path / "history.jsonl"
    history.write_text("".join(json.dumps(m) + "\n" for m in [*turn(1), user("and now?")]))
    env = plugin_env(site, "shaky")
    line = "skipped (plugin 'shaky' from shaky 0.1): the stage raised RuntimeError: broken"
    readable = run_cli("govern", str(history), cwd=tmp_path, env=env, timeout=60)
    assert readable.returncode == 0, readable.stderr
    assert f"    - {line}\n" in readable.stdout
    as_json = run_cli("govern", str(history), "--json", cwd=tmp_path, env=env, timeout=60)
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)["report"]
    assert next(e for e in report if e["stage"] == "shaky")["details"] == [line]


def test_an_ignored_constraint_is_logged_once_naming_the_plugin_version() -> None:
    """A stage's constraint that names no stage is warned of once, with its plugin's version."""
    stage = Stage("shaky", lambda m, c: StageOutcome.unchanged(m), before=("ghost",))
    with capture_logs() as logs:
        governor = Governor(
            [*builtin_stages(), stage], config=GovernanceConfig(), origins={"shaky": _ORIGIN}
        )
    warned = [e for e in logs if "problem" in e]
    assert [(e["event"], e["plugin"]) for e in warned] == [
        ("governance stage constraint ignored", _ORIGIN)
    ]
    assert [e["problem"] for e in warned] == governor.placement_problems


def test_each_ignored_constraint_names_the_stage_it_belongs_to() -> None:
    """`Placement.problem_stages` gives, per problem, the stage whose constraint was ignored."""
    stages = [
        Stage("a", lambda m, c: StageOutcome.unchanged(m), before=("ghost",)),
        Stage("b", lambda m, c: StageOutcome.unchanged(m), after=("b",)),
    ]
    placement = place_stages([*builtin_stages(), *stages])
    assert placement.problem_stages == ["a", "b"]
    assert len(placement.problems) == 2


def _junk(messages: list[Any], ctx: Any) -> list[Any]:
    return [*messages, "junk", 42]


def _governed_with(stage: Stage, history: list[Any], disabled: tuple[str, ...] = ()) -> Any:
    governor = Governor(
        [*builtin_stages(), stage],
        config=GovernanceConfig(disabled=list(disabled)),
        origins={stage.name: _ORIGIN},
    )
    return governor.govern(history)


def test_a_stage_returning_non_messages_says_so_in_its_own_entry() -> None:
    """The entry of a stage whose list holds non-messages names them and its plugin's version;
    the final step still drops them."""
    history = [*turn(1), user("and now?")]
    with capture_logs() as logs:
        governed = _governed_with(Stage("shaky", _junk), history)
    entry = governed.report.entry("shaky")
    assert entry is not None and entry.changed
    assert entry.details == [
        f"returned non-messages ({_ORIGIN}): 2 of the {len(history) + 2} entries of its "
        f"outcome are not messages, the first messages[{len(history)}], a str, not a message: "
        "'junk'; the final step drops them"
    ]
    final = governed.report.entry("final")
    assert final is not None and any("dropped a int" in line for line in final.details)
    assert all(isinstance(message, dict) for message in governed.messages)
    (warned,) = [e for e in logs if e["log_level"] == "warning"]
    assert warned["stage"] == "shaky" and warned["plugin"] == _ORIGIN
    assert warned["count"] == 2


def test_a_per_message_stage_returning_a_non_message_says_so_in_its_line() -> None:
    """A per-message stage's outcome holding a non-message is named in that message's line."""

    def add_junk(messages: list[Any], ctx: Any) -> list[Any]:
        return [*messages, {"content": "no role"}] if messages[0]["role"] == "user" else messages

    history = [user("hello")]
    entry = _governed_with(Stage("shaky", add_junk, per_message=True), history).report.entry(
        "shaky"
    )
    assert entry is not None and entry.changed
    assert entry.details == [
        f"messages[0]: returned a non-message ({_ORIGIN}): messages[1] of its outcome is "
        "a message with unknown role None; the final step drops it"
    ]


def test_a_non_message_the_stage_was_handed_is_not_its_fault() -> None:
    """With drop_non_messages disabled, a stray entry a stage passes on is not blamed on it."""

    def append(messages: list[Any], ctx: Any) -> list[Any]:
        return [*messages, user("more")]

    def shout(messages: list[Any], ctx: Any) -> list[Any]:
        return [{**m, "content": "X"} if isinstance(m, dict) else m for m in messages]

    history: list[Any] = [*turn(1), "stray", {"role": "critic", "content": "x"}, user("now?")]
    for stage in (Stage("shaky", append), Stage("shaky", shout, per_message=True)):
        governed = _governed_with(stage, history, disabled=("drop_non_messages",))
        entry = governed.report.entry("shaky")
        assert entry is not None and entry.changed and entry.details == []


JUNK = """
from nanobot_core import hookimpl
from nanobot_core.governance import Stage

def junk(messages, ctx):
    return [*messages, "junk"]

@hookimpl
def nanobot_governance_stages(ctx):
    return [Stage("junk", junk)]
"""


def test_govern_json_names_the_non_message_a_stage_returned(tmp_path: Path) -> None:
    """`govern --json` gives, in the stage's own entry, the non-message and its plugin version."""
    site = install_plugin(tmp_path / "site", "junky", JUNK)
    history = tmp_path / "history.jsonl"
    messages = [*turn(1), user("and now?")]
    history.write_text("".join(json.dumps(m) + "\n" for m in messages))
    env = plugin_env(site, "junky")
    as_json = run_cli("govern", str(history), "--json", cwd=tmp_path, env=env, timeout=60)
    assert as_json.returncode == 0, as_json.stderr
    governed = json.loads(as_json.stdout)
    entry = next(e for e in governed["report"] if e["stage"] == "junk")
    assert entry["changed"] is True
    assert entry["details"] == [
        "returned a non-message (plugin 'junky' from junky 0.1): "
        f"messages[{len(messages)}] of its outcome is a str, not a message: 'junk'; "
        "the final step drops it"
    ]
    assert "junk" not in [m.get("content") for m in governed["messages"]]
