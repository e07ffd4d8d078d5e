"""Where each stage runs: phases in order, then `before`/`after` inside a phase.

The order is a pure function of the set of stages: whatever order plugins
registered them in, the pipeline comes out the same. Ties are broken by the
built-in default order for built-in stages (which come first) and by name for
the others. A constraint that names no stage of the pipeline, that points
across phases the wrong way, or that closes a cycle is reported and ignored:
a badly placed stage never stops the governor from being built.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

import attrs

from nanobot_core.governance.stage import PHASES, Stage
from nanobot_core.governance.stages import BUILTIN_ORDER

__all__ = ["BUILTIN_ORDER", "Placement", "order_stages", "place_stages"]

_BUILTIN_RANK = {name: rank for rank, name in enumerate(BUILTIN_ORDER)}
_PHASE_RANK = {phase: rank for rank, phase in enumerate(PHASES)}


@attrs.frozen
class Placement:
    """The ordered stages, and every constraint that had to be ignored to get there."""

    stages: list[Stage]
    problems: list[str]
    #: The name of the stage whose constraint each of `problems` is about, in the same order
    #: (so a warning can name the plugin that contributed it).
    problem_stages: list[str] = attrs.field(factory=list)


def _tie_key(stage: Stage) -> tuple[int, int, str]:
    rank = _BUILTIN_RANK.get(stage.name)
    return (0, rank, stage.name) if rank is not None else (1, 0, stage.name)


# (the stage concerned, the problem)
_Problems = list[tuple[str, str]]


def _unique(stages: Iterable[Stage], problems: _Problems) -> dict[str, Stage]:
    by_name: dict[str, Stage] = {}
    for candidate in stages:
        if candidate.name in by_name:
            problems.append(
                (candidate.name, f"stage {candidate.name!r} is given twice; the first one is kept")
            )
            continue
        by_name[candidate.name] = candidate
    return by_name


def _edges(by_name: dict[str, Stage], problems: _Problems) -> set[tuple[str, str]]:
    """(earlier, later) pairs inside one phase; cross-phase pairs are checked, then dropped."""
    edges: set[tuple[str, str]] = set()
    for name, current in sorted(by_name.items()):
        wanted = [(name, other, "before") for other in current.before]
        wanted += [(other, name, "after") for other in current.after]
        for earlier, later, word in wanted:
            other = later if word == "before" else earlier
            if other not in by_name:
                problems.append(
                    (
                        name,
                        f"stage {name!r}: {word}={other!r} names no stage in the pipeline; ignored",
                    )
                )
                continue
            if earlier == later:
                problems.append((name, f"stage {name!r}: {word}={other!r} names itself; ignored"))
                continue
            first, second = _PHASE_RANK[by_name[earlier].phase], _PHASE_RANK[by_name[later].phase]
            if first < second:
                continue  # already guaranteed by the phase order
            if first > second:
                problems.append(
                    (
                        name,
                        f"stage {name!r} ({current.phase}): {word}={other!r} "
                        f"({by_name[other].phase}) contradicts the phase order; ignored",
                    )
                )
                continue
            edges.add((earlier, later))
    return edges


def _topological(
    phase_stages: list[Stage], edges: set[tuple[str, str]], problems: _Problems
) -> list[Stage]:
    """Kahn's algorithm, always taking the ready stage with the smallest rank (see `_ranks`)."""
    names = {s.name for s in phase_stages}
    by_name = {s.name: s for s in phase_stages}
    incoming: dict[str, set[str]] = {name: set() for name in names}
    outgoing: dict[str, set[str]] = {name: set() for name in names}
    for earlier, later in edges:
        if earlier in names and later in names:
            incoming[later].add(earlier)
            outgoing[earlier].add(later)
    rank = _ranks(by_name, outgoing)
    ready = [(rank[n], n) for n in names if not incoming[n]]
    heapq.heapify(ready)
    placed: list[Stage] = []
    remaining = set(names)
    while remaining:
        if not ready:
            # A cycle: take the smallest stage still waiting and drop what it waits for.
            _, name = min((rank[n], n) for n in remaining)
            waited = sorted(incoming[name])
            problems.append(
                (
                    name,
                    f"the constraints among stages {', '.join(sorted(remaining))} form a cycle; "
                    f"ignored those placing {name!r} after {', '.join(waited)}",
                )
            )
            for earlier in waited:
                outgoing[earlier].discard(name)
            incoming[name].clear()
            heapq.heappush(ready, (rank[name], name))
        _, name = heapq.heappop(ready)
        remaining.discard(name)
        placed.append(by_name[name])
        for later in sorted(outgoing[name]):
            incoming[later].discard(name)
            if not incoming[later] and later in remaining:
                heapq.heappush(ready, (rank[later], later))
    return placed


_Rank = tuple[tuple[int, int, str], tuple[int, int, str]]


def _ranks(by_name: dict[str, Stage], outgoing: dict[str, set[str]]) -> dict[str, _Rank]:
    """Each stage's place among the ready ones: the smallest tie key of itself and of every
    stage that must come after it, then its own.

    A stage placed before another takes that one's place in the default order:
    without it, the stage it is waiting for would let every stage with a
    smaller tie key go first (a stage placed before ``compact_results`` must
    not let ``snip_history`` run ahead of both).
    """
    lowest: dict[str, tuple[int, int, str]] = {}

    def low(name: str, visiting: frozenset[str]) -> tuple[int, int, str]:
        known = lowest.get(name)
        if known is not None:
            return known
        key = _tie_key(by_name[name])
        for later in outgoing[name]:
            if later not in visiting:  # a cycle is broken later, by `_topological`
                key = min(key, low(later, visiting | {name}))
        lowest[name] = key
        return key

    return {name: (low(name, frozenset()), _tie_key(by_name[name])) for name in by_name}


def place_stages(stages: Iterable[Stage]) -> Placement:
    """Order `stages` for the pipeline and say which constraints were ignored."""
    problems: _Problems = []
    by_name = _unique(stages, problems)
    edges = _edges(by_name, problems)
    ordered: list[Stage] = []
    for phase in PHASES:
        in_phase = [s for s in by_name.values() if s.phase == phase]
        ordered += _topological(in_phase, edges, problems)
    return Placement(ordered, [text for _, text in problems], [name for name, _ in problems])


def order_stages(stages: Iterable[Stage]) -> list[Stage]:
    """The pipeline order of `stages` (see `place_stages` for the ignored constraints)."""
    return place_stages(stages).stages
