"""What an embedding program hands `Governor` and `govern` by mistake is refused, saying what."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nanobot_core.config import Config, GovernanceConfig
from nanobot_core.governance import Governor, Stage, StageOutcome, build_governor, builtin_stages
from nanobot_core.governance.continuity import GovernanceState
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.testing import govern_and_check

HISTORY = [{"role": "user", "content": "hi"}]


def _keep(messages: list[Any], ctx: Any) -> StageOutcome:
    return StageOutcome(messages)


@pytest.mark.parametrize(
    ("messages", "said"),
    [
        ({"role": "user", "content": "hi"}, "got dict (one message? pass [message])"),
        ("hi", "got str"),
        (None, "got NoneType"),
        (b"hi", "got bytes"),
    ],
)
def test_messages_that_are_no_list_of_messages_are_refused(messages: Any, said: str) -> None:
    """A single message, a text or None is a TypeError, not a request of `(continue)`."""
    with pytest.raises(TypeError, match=r"Governor\.govern: messages must be a list") as caught:
        build_governor().govern(messages)
    assert said in str(caught.value)


def test_a_tuple_or_a_generator_of_messages_is_governed_as_a_list() -> None:
    """Any iterable of messages but a text or a mapping is what a list of them is."""
    governor = build_governor()
    assert build_governor().govern(tuple(HISTORY)).messages == HISTORY
    assert governor.govern(m for m in HISTORY).messages == HISTORY


def test_a_registry_passed_as_tools_is_refused(nanobot_manager: PluginManager) -> None:
    """`tools=registry` would count each tool's repr: the error says to pass `definitions()`."""
    registry = nanobot_manager.tool_registry()
    with pytest.raises(TypeError, match=r"tools is a ToolRegistry; pass its definitions\(\)"):
        build_governor().govern(HISTORY, tools=registry)
    counted = build_governor().govern(HISTORY, tools=registry.definitions())
    assert counted.tokens > build_governor().govern(HISTORY).tokens


@pytest.mark.parametrize("tools", [{"name": "grep"}, "grep", [{"name": "grep"}, "grep"]])
def test_tools_that_are_no_list_of_definitions_are_refused(tools: Any) -> None:
    """A definition alone, a text, or an entry that is no dict is a TypeError naming it."""
    with pytest.raises(TypeError, match=r"Governor\.govern: tools"):
        build_governor().govern(HISTORY, tools=tools)


def test_a_list_of_tools_edited_between_calls_is_checked_again() -> None:
    """An entry added to the same list after a call is refused, the governor left as it was."""
    governor = build_governor()
    tools: list[Any] = [{"type": "function", "function": {"name": "grep", "parameters": {}}}]
    first = governor.govern(HISTORY, tools=tools)
    tools.append("grep")
    with pytest.raises(TypeError, match=r"tools\[1\] \(str\) is not a tool definition"):
        governor.govern([*HISTORY, {"role": "assistant", "content": "yes"}], tools=tools)
    tools.pop()
    again = governor.govern(HISTORY, tools=tools)
    assert (again.messages, again.tokens, again.prefix.kept) == (first.messages, first.tokens, True)


def test_no_tools_may_be_given_as_none() -> None:
    """`tools=None` is no tools, as `system=None` is no system prompt."""
    governor = build_governor()
    assert governor.govern(HISTORY, tools=None).tokens == build_governor().govern(HISTORY).tokens


def test_the_governor_takes_the_whole_config_as_build_governor_does() -> None:
    """`Governor(stages, config=Config(...))` reads its `governance` table."""
    config = Config(governance=GovernanceConfig(context_window=50_000))
    governor = Governor(builtin_stages(), config=config)
    assert governor.config is config.governance
    assert governor.budget.limit == 50_000 - 8_192 - 1_024


def test_a_config_of_another_type_is_refused_naming_it() -> None:
    """A dict where a config goes is a TypeError, not an AttributeError from the budget."""
    with pytest.raises(TypeError, match="config must be a GovernanceConfig or a Config, got dict"):
        Governor(builtin_stages(), config={"context_window": 1000})  # type: ignore[arg-type]


def test_a_bare_function_among_the_stages_is_refused_naming_its_index() -> None:
    """A stage function not made a `Stage` is named by its index, with how to make one."""
    stages: list[Any] = [*builtin_stages(), _keep]
    with pytest.raises(TypeError, match=r"stages\[10\] is a function, not a Stage \(make one"):
        Governor(stages, config=GovernanceConfig())
    with pytest.raises(TypeError, match=r"govern_and_check: stages\[0\] is a function"):
        govern_and_check(HISTORY, stages=[_keep])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="stages must be a list of Stage, got Stage"):
        Governor(Stage("keep", _keep), config=GovernanceConfig())  # type: ignore[arg-type]


@given(
    st.recursive(
        st.none() | st.text() | st.integers(), lambda inner: st.dictionaries(st.text(), inner)
    )
)
def test_whatever_is_not_a_sequence_of_messages_never_governs_silently(value: Any) -> None:
    """A text, a number, None or a dict handed as the history is always a TypeError."""
    with pytest.raises(TypeError, match=r"Governor\.govern: messages must be a list"):
        build_governor().govern(value)


@pytest.mark.parametrize("state", [{"start": 3}, "state", 412])
def test_a_state_that_is_no_governance_state_is_refused_by_restore(state: Any) -> None:
    """`restore` of a dict or a text is a TypeError at once, not an AttributeError next call."""
    governor = build_governor()
    with pytest.raises(TypeError, match="state must be a GovernanceState or None, got"):
        governor.restore(state)
    assert governor.govern(HISTORY).messages == HISTORY


def test_a_saved_state_read_back_from_its_line_is_restored() -> None:
    """The line `to_record` gives, read with `from_record`, restores the state it records."""
    state = GovernanceState(start=2, length=4)
    governor = build_governor()
    governor.restore(GovernanceState.from_record(state.to_record()))
    assert governor.state == state
