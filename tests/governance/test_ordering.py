"""Stages: their validation, and where `order_stages` places them."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from nanobot_core.governance import (
    BUILTIN_ORDER,
    Stage,
    StageOutcome,
    builtin_stages,
    order_stages,
    place_stages,
    stage,
)


def _noop(messages: list[Any], ctx: Any) -> StageOutcome:
    return StageOutcome(messages)


def _stage(name: str, phase: str = "transform", **where: Any) -> Stage:
    return Stage(name=name, func=_noop, phase=phase, **where)  # type: ignore[arg-type]


def _names(stages: list[Stage]) -> list[str]:
    return [s.name for s in stages]


def test_builtins_come_in_the_design_order() -> None:
    """The built-in stages keep the DESIGN names, phases and default order."""
    stages = order_stages(builtin_stages())
    assert _names(stages) == list(BUILTIN_ORDER)
    assert [s.phase for s in stages] == ["repair"] * 7 + ["budget"] * 3


def test_third_party_stages_default_to_the_transform_phase() -> None:
    """An unplaced stage runs after the repairs and before the budget stages."""
    names = _names(order_stages([*builtin_stages(), _stage("redact")]))
    assert names.index("sanitize_content") < names.index("redact") < names.index("offload_results")


def test_before_and_after_order_stages_within_a_phase() -> None:
    """`before` and `after` win over the name order inside a phase."""
    stages = [_stage("a", after=("c",)), _stage("b"), _stage("c", before=("b",))]
    assert _names(order_stages(stages)) == ["c", "a", "b"]


def test_order_does_not_depend_on_the_input_order() -> None:
    """Every permutation of the same stages gives the same pipeline."""
    stages = [
        *builtin_stages()[:3],
        _stage("x", before=("y",)),
        _stage("y"),
        _stage("z", phase="budget", before=("snip_history",)),
    ]
    results = {tuple(_names(order_stages(list(p)))) for p in itertools.permutations(stages)}
    assert len(results) == 1


def test_repair_stage_placed_between_builtins() -> None:
    """A third-party repair stage can sit between two built-in ones."""
    custom = _stage(
        "fix_roles", phase="repair", after=("drop_non_messages",), before=("pair_results",)
    )
    names = _names(order_stages([*builtin_stages(), custom]))
    assert names.index("drop_non_messages") < names.index("fix_roles") < names.index("pair_results")


def test_consistent_cross_phase_constraint_is_accepted_silently() -> None:
    """`before=offload_results` from a transform stage agrees with the phases: no problem."""
    placement = place_stages([*builtin_stages(), _stage("redact", before=("offload_results",))])
    assert placement.problems == []


def test_contradicting_cross_phase_constraint_is_reported_and_ignored() -> None:
    """A transform stage cannot run after a budget stage: reported, phase order kept."""
    placement = place_stages([*builtin_stages(), _stage("late", after=("snip_history",))])
    assert _names(placement.stages).index("late") < _names(placement.stages).index(
        "offload_results"
    )
    assert "contradicts the phase order" in placement.problems[0]


def test_unknown_names_are_reported_and_ignored() -> None:
    """A constraint naming no stage of the pipeline does not stop the governor."""
    placement = place_stages([_stage("a", before=("ghost",))])
    assert _names(placement.stages) == ["a"]
    assert "'ghost' names no stage" in placement.problems[0]


def test_cycles_are_reported_and_broken_deterministically() -> None:
    """A before/after cycle is reported; every stage still runs, in a fixed order."""
    stages = [_stage("a", before=("b",)), _stage("b", before=("c",)), _stage("c", before=("a",))]
    placement = place_stages(stages)
    assert sorted(_names(placement.stages)) == ["a", "b", "c"]
    assert "cycle" in placement.problems[0]
    assert _names(place_stages(list(reversed(stages))).stages) == _names(placement.stages)


def test_duplicate_names_keep_the_first() -> None:
    """Two stages with one name: the first is kept and the other is reported."""
    first, second = _stage("same"), _stage("same", phase="budget")
    placement = place_stages([first, second])
    assert placement.stages == [first]
    assert "given twice" in placement.problems[0]


@pytest.mark.parametrize(
    ("field", "value"),
    [("name", ""), ("name", None), ("phase", "late"), ("func", "not callable")],
)
def test_invalid_stages_are_rejected(field: str, value: Any) -> None:
    """A stage needs a name, a known phase and a callable."""
    arguments: dict[str, Any] = {"name": "ok", "func": _noop, "phase": "transform", field: value}
    with pytest.raises((ValueError, TypeError)):
        Stage(**arguments)


def test_stage_decorator_takes_name_and_description_from_the_function() -> None:
    """`@stage` builds a Stage named after the function, described by its docstring."""

    @stage(phase="repair", before="pair_results")
    def tidy(messages: list[Any], ctx: Any) -> StageOutcome:
        """Tidy things up.

        More words.
        """
        return StageOutcome(messages)

    assert (tidy.name, tidy.phase, tidy.before, tidy.description) == (
        "tidy",
        "repair",
        ("pair_results",),
        "Tidy things up.",
    )


@pytest.mark.parametrize(
    ("placed", "expected"),
    [
        (
            Stage("x", lambda m, c: m, phase="budget", before="compact_results"),
            ["offload_results", "x", "compact_results", "snip_history"],
        ),
        (
            Stage("x", lambda m, c: m, phase="repair", before="strip_placeholders"),
            ["x", *BUILTIN_ORDER[:7]],
        ),
    ],
    ids=["before-compact", "before-the-first"],
)
def test_a_stage_placed_before_a_builtin_takes_its_place_and_keeps_the_rest_in_order(
    placed: Stage, expected: list[str]
) -> None:
    """The stage it must precede does not fall behind the built-ins that follow it."""
    names = [s.name for s in order_stages([*builtin_stages(), placed])]
    phase = [n for n in names if n in expected]
    assert phase == expected
    assert [n for n in names if n != "x"] == list(BUILTIN_ORDER)


def test_the_governor_logs_each_ignored_constraint() -> None:
    """Every constraint the placement ignores is logged as a warning, as the docs promise."""
    from structlog.testing import capture_logs

    from nanobot_core.config import GovernanceConfig
    from nanobot_core.governance import Governor

    with capture_logs() as logs:
        governor = Governor(
            [*builtin_stages(), _stage("a", before=("ghost",))], config=GovernanceConfig()
        )
    warned = [e for e in logs if e["event"] == "governance stage constraint ignored"]
    assert [e["problem"] for e in warned] == governor.placement_problems
    assert "'ghost' names no stage" in warned[0]["problem"]


def test_the_governor_warns_of_config_naming_no_stage() -> None:
    """A typo in governance.disabled or a governance.stages table is a warning naming it."""
    from structlog.testing import capture_logs

    from nanobot_core.config import GovernanceConfig
    from nanobot_core.governance import Governor

    config = GovernanceConfig(
        disabled=["compact_result", "snip_history"],
        stages={"offload_result": {"threshold": 1}, "compact_results": {}},
    )
    with capture_logs() as logs:
        Governor(builtin_stages(), config=config)
    warned = [(e["event"], e["name"]) for e in logs if e["log_level"] == "warning"]
    assert warned == [
        ("unknown stage name in governance.disabled", "compact_result"),
        ("options for an unknown stage in governance.stages", "offload_result"),
    ]


def test_a_governor_whose_config_names_its_stages_warns_of_nothing() -> None:
    """Config naming only stages of the pipeline, with no constraint ignored, logs no warning."""
    from structlog.testing import capture_logs

    from nanobot_core.config import GovernanceConfig
    from nanobot_core.governance import Governor

    config = GovernanceConfig(disabled=["snip_history"], stages={"compact_results": {}})
    with capture_logs() as logs:
        Governor(builtin_stages(), config=config)
    assert [e for e in logs if e["log_level"] == "warning"] == []
