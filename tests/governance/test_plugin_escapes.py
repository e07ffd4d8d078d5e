"""Plugin code in governance (stages, prefilters, stores, option checks) is contained.

A stage is plugin code called without `plugin_code` (per message, that would
cost more than most stages), so the governor contains what escapes it itself:
``SystemExit``, ``GeneratorExit`` and a plugin's own ``BaseException`` are the
stage's failure, reported like any exception; cancellation and a real Ctrl-C
go on to the caller.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any, NoReturn

import pytest

from nanobot_core._containment import _on_sigint
from nanobot_core.config import GovernanceConfig
from nanobot_core.errors import ConfigError
from nanobot_core.governance import Stage, StageOption, StageOutcome, build_governor
from nanobot_core.governance.invariants import check_invariants
from nanobot_core.governance.stages import builtin_stages
from tests.governance.builders import call, calls, result, turn, user


class _PluginsOwn(BaseException):
    """A plugin's own exception outside the ``Exception`` tree."""


_ESCAPES: list[tuple[BaseException, str]] = [
    (SystemExit(3), "SystemExit(3)"),
    (GeneratorExit(), "GeneratorExit"),
    (_PluginsOwn("left the stage"), "_PluginsOwn: left the stage"),
    (KeyboardInterrupt(), "KeyboardInterrupt"),  # raised by the plugin, not by a Ctrl-C
]


def _governor(*extra: Stage, **settings: Any) -> Any:
    config = GovernanceConfig(**settings)
    return build_governor(config, None, [*builtin_stages(), *extra])


def _history() -> list[Any]:
    return [*turn(1), *turn(2, "SECRET in here"), user("and now?")]


def _raiser(escape: BaseException) -> Any:
    def raising(*_args: Any) -> NoReturn:
        raise escape

    return raising


@pytest.mark.parametrize(("escape", "said"), _ESCAPES)
def test_a_whole_list_stage_that_escapes_is_skipped_and_reported(
    escape: BaseException, said: str
) -> None:
    """A stage raising a BaseException that is not an Exception is skipped, like one that raises."""
    history = _history()
    snapshot = copy.deepcopy(history)
    governed = _governor(Stage("escapes", _raiser(escape))).govern(history)
    entry = governed.report.entry("escapes")
    assert entry is not None and not entry.changed
    assert entry.details == [f"skipped: the stage raised {said}"]
    assert history == snapshot
    assert check_invariants(governed.messages) == []


@pytest.mark.parametrize(("escape", "said"), _ESCAPES)
def test_a_per_message_stage_that_escapes_is_skipped_and_reported(
    escape: BaseException, said: str
) -> None:
    """A per-message stage's escape skips it for the call, with the same report."""
    stage = Stage("escapes", _raiser(escape), per_message=True)
    governed = _governor(stage).govern(_history())
    entry = governed.report.entry("escapes")
    assert entry is not None and entry.details == [f"skipped: the stage raised {said}"]


@pytest.mark.parametrize(("escape", "said"), _ESCAPES)
def test_a_prefilter_that_escapes_skips_its_stage(escape: BaseException, said: str) -> None:
    """A prefilter raising SystemExit and the like is the stage's failure, named in the report."""
    stage = Stage(
        "filtered",
        lambda m, c: StageOutcome.unchanged(m),
        per_message=True,
        prefilter=_raiser(escape),
    )
    governed = _governor(stage).govern(_history())
    entry = governed.report.entry("filtered")
    assert entry is not None
    assert entry.details == [f"skipped: the stage's prefilter raised {said}"]


def test_a_prefilter_that_escapes_past_the_cut_watermark_is_contained() -> None:
    """The budget-first walk, which asks prefilters of what it leaves out, contains them too."""
    history = [message for n in range(400) for message in turn(n, "x" * 200)]
    history.append(user("the newest question"))
    stage = Stage(
        "filtered",
        lambda m, c: StageOutcome.unchanged(m),
        per_message=True,
        prefilter=_raiser(SystemExit(7)),
    )
    governed = _governor(stage, input_limit=2_000).govern(history)
    assert governed.fits and len(governed.messages) < len(history)
    entry = governed.report.entry("filtered")
    assert entry is not None
    assert entry.details == ["skipped: the stage's prefilter raised SystemExit(7)"]


class _EscapingStore:
    def put(self, content: str) -> str:
        raise SystemExit(5)


def test_a_store_that_escapes_means_truncation(tmp_path: Path) -> None:
    """A result store raising SystemExit is a failed store: the result is cut, the call goes on."""
    config = GovernanceConfig(max_tool_result_chars=1_000)
    big = "START" + "y" * 5_000 + "END"
    history = [user(), calls(call("c")), result("c", big)]
    governor = build_governor(config, tmp_path, store=_EscapingStore())
    governed = governor.govern(history)
    text = governed.messages[2]["content"]
    assert text.startswith("START") and text.endswith("END") and len(text) <= 1_000
    entry = governed.report.entry("offload_results")
    assert entry is not None and "the store failed: SystemExit(5)" in entry.details[0]


def test_an_option_check_that_escapes_is_a_config_error() -> None:
    """A plugin's option check raising SystemExit refuses the table, naming the key."""
    options = {"level": StageOption(int, "how hard to try", check=_raiser(SystemExit(9)))}
    stage = Stage("checked", lambda m, c: StageOutcome.unchanged(m), options=options)
    config = GovernanceConfig(stages={"checked": {"level": 2}})
    with pytest.raises(ConfigError, match=r"checked\.level: .*failed: SystemExit\(9\)"):
        build_governor(config, None, [*builtin_stages(), stage])


def test_cancellation_raised_in_a_stage_reaches_the_caller() -> None:
    """``asyncio.CancelledError`` is how a caller stops work: the governor lets it through."""
    with pytest.raises(asyncio.CancelledError):
        _governor(Stage("cancelled", _raiser(asyncio.CancelledError()))).govern(_history())


def test_a_real_ctrl_c_in_a_stage_reaches_the_caller() -> None:
    """The KeyboardInterrupt of the CLI's SIGINT handler stops the command, not just the stage."""

    def interrupted(messages: list[Any], ctx: Any) -> NoReturn:
        _on_sigint(2, None)
        raise AssertionError("the handler raises")

    with pytest.raises(KeyboardInterrupt):
        _governor(Stage("interrupted", interrupted)).govern(_history())
