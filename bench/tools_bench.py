"""Tool benchmarks: ``prepare_call`` over BFCL against nanobot-ai, and concurrent execution."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from drivers_run import run_driver
from envs import VirtualEnv
from report import Measured, Row
from stats import summarize


def bench_prepare_call(ai_env: VirtualEnv, bfcl: Path, rounds: int, reps: int) -> Row:
    """Median µs per call of ours against nanobot-ai 0.3.5, the drivers alternating by round."""
    per_round: dict[str, list[float]] = {"ours": [], "theirs": []}
    per_call: dict[str, list[list[float]]] = {"ours": [], "theirs": []}
    accepted: dict[str, int] = {}
    calls = 0
    sides = [
        ("ours", sys.executable, "core_prepare_call.py"),
        ("theirs", str(ai_env.python), "ai_prepare_call.py"),
    ]
    for index in range(rounds):
        for side, python, script in sides if index % 2 == 0 else list(reversed(sides)):
            figures = run_driver(python, script, ["--bfcl", bfcl, "--reps", str(reps)])
            micros = [ns / 1000 for ns in figures["per_call_ns"]]
            per_round[side].append(statistics.median(micros))
            per_call[side].append(micros)
            accepted[side] = figures["accepted"]
            calls = figures["calls"]
    ours = summarize(per_round["ours"])
    theirs = summarize(per_round["theirs"])
    figure = ours.median / theirs.median
    slower_calls = _share_slower(per_call["ours"], per_call["theirs"])
    return Row(
        benchmark="Tools: `prepare_call` on BFCL schemas and answers",
        ours=Measured("nanobot_core ToolRegistry.prepare_call", ours, "µs/call"),
        comparison=Measured("nanobot-ai 0.3.5 ToolRegistry.prepare_call", theirs, "µs/call"),
        figure=figure,
        figure_label="x (ours / theirs)",
        target="<= 1.0x (no slower)",
        passed=figure <= 1.0,
        notes=[
            f"{calls} calls from {len(_categories())} BFCL v4 categories, raw JSON arguments "
            f"strings; {rounds} rounds x {reps} passes per side, each call timed on its own; "
            "the figure per round is the median over calls of each call's median.",
            f"accepted as valid: ours {accepted['ours']}, nanobot-ai {accepted['theirs']} of "
            f"{calls} (the rest are real data quirks; both sides return an error for them).",
            f"ours was slower than nanobot-ai on {slower_calls:.0%} of the calls (per-call "
            "medians over all rounds).",
        ],
    )


def _categories() -> tuple[str, ...]:
    from bfcl_cases import CATEGORIES

    return CATEGORIES


def _share_slower(ours: list[list[float]], theirs: list[list[float]]) -> float:
    ours_by_call = [statistics.median(values) for values in zip(*ours, strict=True)]
    theirs_by_call = [statistics.median(values) for values in zip(*theirs, strict=True)]
    slower = sum(o > t for o, t in zip(ours_by_call, theirs_by_call, strict=True))
    return slower / len(ours_by_call) if ours_by_call else 0.0


def bench_concurrency(reps: int) -> Row:
    """Ten concurrency-safe 100 ms tools in one reply against a single call."""
    figures = run_driver(sys.executable, "core_concurrency.py", ["--reps", str(reps)])
    ten = summarize([s * 1000 for s in figures["ten_calls_seconds"]])
    one = summarize([s * 1000 for s in figures["one_call_seconds"]])
    figure = ten.median / one.median
    return Row(
        benchmark="Tools: ten concurrency-safe 100 ms calls",
        ours=Measured("Executor.run, ten calls", ten, "ms"),
        comparison=Measured("Executor.run, one call", one, "ms"),
        figure=figure,
        figure_label="x (ten / one)",
        target="<= 1.3x",
        passed=figure <= 1.3,
        notes=[f"{reps} alternating repetitions, each on a fresh event loop."],
    )
