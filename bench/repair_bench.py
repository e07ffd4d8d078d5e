"""Argument repair on adversarial input: time per MB at 1 MB and 2 MB, which must be linear."""

from __future__ import annotations

import statistics
import sys

from drivers_run import run_driver
from report import Measured, Row
from stats import best_ratio, summarize

#: 2 MB may take at most this many times as long as 1 MB (2.0 is linear).
LINEAR_LIMIT = 2.5


def bench_repair(reps: int) -> list[Row]:
    """One row: the worst 2 MB / 1 MB ratio over the adversarial kinds, with s/MB of each."""
    figures = run_driver(sys.executable, "core_repair.py", ["--reps", str(reps)])
    small, large = (str(size) for size in figures["sizes"])
    ratios: dict[str, float] = {}
    notes: list[str] = []
    for kind, by_size in figures["seconds"].items():
        one, two = min(by_size[small]), min(by_size[large])
        # Both sizes are timed in each repetition, in CPU time: a shared machine only adds
        # to a sample, so each size's least time is its own cost, from the same stretch.
        ratios[kind] = best_ratio(by_size[large], by_size[small])
        medians = statistics.median(by_size[large]) / statistics.median(by_size[small])
        notes.append(
            f"{kind}: {one:.3g} s/MB at 1 MB, {two / 2:.3g} s/MB at 2 MB "
            f"(x{ratios[kind]:.2f}; ratio of the medians x{medians:.2f}); "
            f"{figures['outcomes'][kind]}"
        )
    worst = max(ratios, key=ratios.__getitem__)
    per_mb_large = [s / 2 for s in figures["seconds"][worst][large]]
    per_mb_small = figures["seconds"][worst][small]
    return [
        Row(
            benchmark="Argument repair on adversarial input",
            ours=Measured(f"parse_arguments, 2 MB, {worst}", summarize(per_mb_large), "s/MB"),
            comparison=Measured("the same at 1 MB", summarize(per_mb_small), "s/MB"),
            figure=ratios[worst],
            figure_label="x (2 MB time / 1 MB time, worst kind)",
            target=f"<= {LINEAR_LIMIT}x (linear)",
            passed=ratios[worst] <= LINEAR_LIMIT,
            notes=[
                f"{reps} alternating repetitions per size and kind, CPU time "
                "(`time.process_time`); a kind's figure is its least time at 2 MB over its "
                "least time at 1 MB (a shared machine only adds time), and the s/MB figures "
                "below are those least times.",
                *notes,
            ],
        )
    ]
