"""What every driver shares: argument parsing, timing, peak memory, JSON output.

Drivers run in different environments (ours, nanobot-ai's), so this is stdlib-only.
Each driver writes its figures as JSON to ``--out`` rather than stdout, so that
library logging on stdout can never corrupt them.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

BENCH_DIR = Path(__file__).resolve().parent.parent
T = TypeVar("T")

if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))


def parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the options every driver takes."""
    result = argparse.ArgumentParser(description=description)
    result.add_argument("--out", type=Path, required=True, help="Where to write the JSON figures.")
    result.add_argument("--reps", type=int, default=5, help="Timed repetitions.")
    return result


def time_on_fresh_inputs(
    make_input: Callable[[], T],
    function: Callable[[T], object],
    reps: int,
    clock: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """Seconds per call of `function`, each call on a new input from `make_input` (untimed).

    Fresh objects every call: no identity-keyed memo can carry over from one call
    to the next, on either side. The collector stays on, as it is in an agent
    process, and runs before each call so that no call pays for its predecessor.
    `clock` is wall time unless a benchmark asks for CPU time (`time.process_time`).
    """
    samples: list[float] = []
    for _ in range(reps):
        data = make_input()
        gc.collect()
        start = clock()
        function(data)
        samples.append(clock() - start)
        del data
    return samples


def time_alternating(
    make_input: Callable[[], T],
    functions: dict[str, Callable[[T], object]],
    reps: int,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, list[float]]:
    """`time_on_fresh_inputs` for several functions, taking turns rep by rep.

    Used to time a reference on the same inputs in the same moments, so that a
    slow spell of a shared machine shows in both.
    """
    samples: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(reps):
        for name, function in functions.items():
            samples[name] += time_on_fresh_inputs(make_input, function, 1, clock)
    return samples


def peak_extra_bytes(function: Callable[[], object]) -> int:
    """Peak bytes allocated by one call of `function` beyond what existed before (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        baseline, _ = tracemalloc.get_traced_memory()
        result = function()
        _, peak = tracemalloc.get_traced_memory()
        del result
    finally:
        tracemalloc.stop()
    return peak - baseline


def write(out: Path, payload: dict[str, Any]) -> None:
    out.write_text(json.dumps(payload), encoding="utf-8")


def load_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def silence_structlog() -> None:
    """Drop every structlog event, as the nanobot-ai drivers drop every loguru event.

    Unconfigured structlog prints debug lines to stdout; an application embedding
    the library configures it, and logging cost is not what these benchmarks compare.
    """
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
