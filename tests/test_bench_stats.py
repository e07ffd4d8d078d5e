"""The benchmarks' statistics and timing loops: what a shared, noisy machine is measured by."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import REPO_ROOT

BENCH = REPO_ROOT / "bench"


def _bench_module(name: str) -> ModuleType:
    """A module of bench/, which imports its siblings by their bare names."""
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))


stats = _bench_module("stats")
startup = _bench_module("startup")

positive = st.floats(min_value=1e-6, max_value=1e3, allow_nan=False)


class FakeClock:
    """A CPU clock that moves only when a timed function says it spent time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def spend(self, seconds: float) -> Callable[[], None]:
        def spent() -> None:
            self.now += seconds

        return spent


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClock]:
    """stats' CPU clock replaced by one the test moves."""
    fake = FakeClock()
    monkeypatch.setattr(stats.time, "process_time", fake)
    yield fake


def test_best_ratio_divides_the_least_samples() -> None:
    """The best ratio is the least numerator over the least denominator."""
    assert stats.best_ratio([4.0, 2.5, 3.0], [2.0, 1.0, 1.5]) == 2.5


@given(st.lists(positive, min_size=1), st.lists(positive, min_size=1), st.lists(positive))
def test_best_ratio_ignores_samples_a_slow_spell_only_made_longer(
    large: list[float], small: list[float], extra: list[float]
) -> None:
    """Samples no shorter than a side's least, added to that side, leave the ratio as it was."""
    before = stats.best_ratio(large, small)
    slower = [min(small) + e for e in extra]
    assert stats.best_ratio([*large, *[min(large) + e for e in extra]], [*small, *slower]) == before


@pytest.mark.parametrize(
    ("numerators", "denominators", "message"),
    [([], [1.0], "samples on both sides"), ([1.0], [], "samples on both sides")],
)
def test_best_ratio_refuses_an_empty_side(
    numerators: list[float], denominators: list[float], message: str
) -> None:
    """A side without samples is an error that says so."""
    with pytest.raises(ValueError, match=message):
        stats.best_ratio(numerators, denominators)


def test_best_ratio_refuses_a_zero_denominator() -> None:
    """A least denominator of zero is an error naming it, not a division by zero."""
    with pytest.raises(ValueError, match=r"positive denominators, not 0\.0"):
        stats.best_ratio([1.0], [0.0, 2.0])


def test_relative_spread_is_the_iqr_over_the_median() -> None:
    """1 to 5: quartiles 2 and 4 (inclusive), median 3, so a spread of 2/3."""
    assert stats.relative_spread([5.0, 1.0, 4.0, 2.0, 3.0]) == pytest.approx(2 / 3)


def test_relative_spread_of_equal_samples_is_zero() -> None:
    """Samples that all agree have no spread."""
    assert stats.relative_spread([0.3, 0.3, 0.3]) == 0


@given(st.lists(positive, min_size=1, max_size=30), st.floats(min_value=1e-3, max_value=1e3))
def test_relative_spread_does_not_depend_on_the_unit(samples: list[float], scale: float) -> None:
    """The same samples in another unit (scaled) spread the same."""
    scaled = [s * scale for s in samples]
    assert stats.relative_spread(scaled) == pytest.approx(stats.relative_spread(samples))


def test_relative_spread_refuses_a_median_of_zero() -> None:
    """A median of zero is an error naming it."""
    with pytest.raises(ValueError, match="positive median, not 0"):
        stats.relative_spread([0.0, 0.0, 1.0])


def test_cpu_times_interleaved_times_each_function_on_the_cpu_clock(clock: FakeClock) -> None:
    """Each sample is the CPU time that function's own call spent, once per round."""
    samples = stats.cpu_times_interleaved(
        {"small": clock.spend(0.25), "large": clock.spend(1.0)}, 3
    )
    assert samples == {"small": [0.25] * 3, "large": [1.0] * 3}


def test_cpu_times_interleaved_reverses_the_order_every_other_round(clock: FakeClock) -> None:
    """Round by round the functions take turns, neither always after the other."""
    calls: list[str] = []
    stats.cpu_times_interleaved({name: lambda n=name: calls.append(n) for name in "abc"}, 3)
    assert calls == [*"abc", *"cba", *"abc"]


def test_cpu_times_interleaved_refuses_no_rounds() -> None:
    """Zero rounds is an error that names the count."""
    with pytest.raises(ValueError, match="at least one round is needed, not 0"):
        stats.cpu_times_interleaved({"a": lambda: None}, 0)


def _command(label: str) -> Any:
    return startup.Command(label, ["true"], {}, Path("."))


def test_time_interleaved_adds_rounds_where_the_alternation_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """More rounds continue the alternation, with no second warm-up, and keep CPU beside wall."""
    runs: list[str] = []

    def run_once(command: Any) -> tuple[float, float]:
        runs.append(command.label)
        return float(len(runs)), 0.5

    monkeypatch.setattr(startup, "_run_once", run_once)
    commands = [_command("ours"), _command("theirs")]
    timings = startup.time_interleaved(commands, 3)
    startup.time_interleaved(commands, 2, timings)
    assert runs[:2] == ["ours", "theirs"]  # the warm-up, once
    pairs = [tuple(runs[i : i + 2]) for i in range(2, len(runs), 2)]
    assert pairs == [("ours", "theirs"), ("theirs", "ours")] * 2 + [("ours", "theirs")]
    assert timings.rounds == 5
    assert timings.wall["ours"] == [3.0, 6.0, 7.0, 10.0, 11.0]
    assert timings.cpu["theirs"] == [0.5] * 5
