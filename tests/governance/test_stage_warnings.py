"""A warning about a stage that failed names the plugin that contributed it, with its version."""

from __future__ import annotations

from typing import Any, NoReturn

from structlog.testing import capture_logs

from nanobot_core.config import GovernanceConfig
from nanobot_core.governance import Governor, Stage, StageOutcome
from nanobot_core.governance.stages import builtin_stages
from tests.governance.builders import turn, user

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
