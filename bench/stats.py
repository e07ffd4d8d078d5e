"""Summaries of timing samples: median and spread, robust on a shared, noisy machine."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Summary:
    """Median, quartiles and extremes of one series of samples (all in the same unit)."""

    n: int
    median: float
    q1: float
    q3: float
    low: float
    high: float

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1


def summarize(samples: Sequence[float]) -> Summary:
    """Summarise samples; quartiles use the inclusive method so small series stay in range."""
    if not samples:
        raise ValueError("no samples to summarise")
    ordered = sorted(samples)
    if len(ordered) == 1:
        only = ordered[0]
        return Summary(1, only, only, only, only, only)
    q1, median, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    return Summary(len(ordered), median, q1, q3, ordered[0], ordered[-1])


def relative_spread(samples: Sequence[float]) -> float:
    """The interquartile range over the median: how far apart the middle half of a
    series lies, whatever its unit (0 when every sample is the same)."""
    summary = summarize(samples)
    if summary.median <= 0:
        raise ValueError(f"a relative spread needs a positive median, not {summary.median}")
    return summary.iqr / summary.median


def ratio(ours: Summary, theirs: Summary) -> float:
    """Ours over theirs, by medians (below 1 means ours is faster)."""
    return ours.median / theirs.median if theirs.median else float("inf")


def paired_ratio(ours: Sequence[float], theirs: Sequence[float]) -> float:
    """The median of ours[i] / theirs[i]: for sides sampled in turn, a slow spell cancels out."""
    if not ours or len(ours) != len(theirs):
        sizes = f"{len(ours)} and {len(theirs)}"
        raise ValueError(f"paired samples need equal, non-empty series, not {sizes}")
    return statistics.median(a / b for a, b in zip(ours, theirs, strict=True))


def best_cpu_time(function: Callable[[], object], reps: int) -> float:
    """The least CPU time of `reps` calls of `function` (seconds): the call's own cost, the
    machine's other work left out as far as it can be."""
    best = float("inf")
    for _ in range(reps):
        started = time.process_time()
        function()
        best = min(best, time.process_time() - started)
    return best


def best_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    """The least of `numerators` over the least of `denominators`.

    For CPU times of two sides measured in turn: a shared machine only ever adds time to
    a sample, so each side's least sample is the nearest to its own cost, and the ratio
    of those is what a slow spell (or a steady load) moves least.
    """
    if not numerators or not denominators:
        raise ValueError("a best ratio needs samples on both sides")
    least = min(denominators)
    if least <= 0:
        raise ValueError(f"a best ratio needs positive denominators, not {least}")
    return min(numerators) / least


def cpu_times_interleaved(
    functions: Mapping[str, Callable[[], object]], rounds: int
) -> dict[str, list[float]]:
    """CPU seconds of each function, called once per round, the functions in turn.

    The order is reversed every other round, so that neither function always follows
    the other; a function's samples then span the same moments as every other's, and
    a slow spell lands on all of them rather than on one.
    """
    if rounds < 1:
        raise ValueError(f"at least one round is needed, not {rounds}")
    names = list(functions)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        for name in names if index % 2 == 0 else reversed(names):
            started = time.process_time()
            functions[name]()
            samples[name].append(time.process_time() - started)
    return samples
