"""Timing of ``prepare_call`` over BFCL cases, shared by both sides' drivers (stdlib-only)."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from bfcl_cases import Case

RegistryBuilder = Callable[[tuple[dict[str, Any], ...]], Any]


def time_prepare_calls(
    cases: Sequence[Case],
    build: RegistryBuilder,
    accepted: Callable[[Any], bool],
    reps: int,
) -> dict[str, Any]:
    """Per-call nanoseconds (median over `reps` passes) and how many calls were accepted.

    Registries are built before timing; each pass calls every case's calls in order,
    each call timed on its own so the figure is per call, not per batch.
    """
    work = [
        (build(case.functions), call.name, call.arguments) for case in cases for call in case.calls
    ]
    accepted_calls = sum(accepted(registry.prepare_call(name, raw)) for registry, name, raw in work)
    per_call: list[list[int]] = [[] for _ in work]
    pass_seconds: list[float] = []
    clock = time.perf_counter_ns
    for _ in range(reps):
        gc.collect()
        gc.disable()
        try:
            start = clock()
            for index, (registry, name, raw) in enumerate(work):
                before = clock()
                registry.prepare_call(name, raw)
                per_call[index].append(clock() - before)
            pass_seconds.append((clock() - start) / 1e9)
        finally:
            gc.enable()
    return {
        "calls": len(work),
        "accepted": accepted_calls,
        "per_call_ns": [statistics.median(samples) for samples in per_call],
        "pass_seconds": pass_seconds,
    }
