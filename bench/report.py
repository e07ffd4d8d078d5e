"""The benchmark report: result rows, the machine they ran on, and bench/RESULTS.md."""

from __future__ import annotations

import datetime as dt
import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stats import Summary


@dataclass(frozen=True)
class Measured:
    """One side of a comparison: what ran, and its samples summarised in `unit`."""

    label: str
    summary: Summary
    unit: str


@dataclass(frozen=True)
class Row:
    """One checked target: our figure, the comparison from the same run, the verdict."""

    benchmark: str
    ours: Measured
    figure: float
    figure_label: str  # what `figure` is, e.g. "ours / nanobot-ai" or "µs per message"
    target: str
    passed: bool
    comparison: Measured | None = None
    notes: list[str] = field(default_factory=list)


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo, else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_lines() -> list[str]:
    """What the figures depend on: platform, CPU, cores, Python."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return [
        f"- Platform: `{platform.platform()}`",
        f"- CPU: {cpu_model()}; {os.cpu_count()} logical cores, {usable} usable by this process",
        f"- Python: {platform.python_implementation()} {platform.python_version()}",
    ]


def _number(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _median(measured: Measured | None) -> str:
    if measured is None:
        return "-"
    return f"{_number(measured.summary.median)} {measured.unit}"


def _spread(measured: Measured) -> str:
    summary = measured.summary
    return (
        f"IQR {_number(summary.q1)}–{_number(summary.q3)}, "
        f"min–max {_number(summary.low)}–{_number(summary.high)} (n={summary.n})"
    )


def render(
    rows: Sequence[Row],
    *,
    started: dt.datetime,
    seconds: float,
    command: str,
    problems: Sequence[str] = (),
    extra_notes: Sequence[str] = (),
) -> str:
    """The whole RESULTS.md text."""
    passed = sum(row.passed for row in rows)
    lines = [
        "# Benchmark results",
        "",
        f"Written by `{command}` on {started:%Y-%m-%d %H:%M} UTC in {seconds:.0f} s. "
        "Do not edit by hand: run the bench again.",
        "",
        *machine_lines(),
        "",
        "Every comparison was measured in the same run, interleaved where the benchmark allows, "
        "on a shared machine: read medians and ratios, not single samples.",
        "",
        f"**{passed} of {len(rows)} targets met"
        + (f"; {len(problems)} benchmark(s) could not run.**" if problems else ".**"),
        "",
        "| benchmark | ours (median) | comparison (median) | figure | target | result |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        comparison = (
            f"{_median(row.comparison)} ({row.comparison.label})" if row.comparison else "-"
        )
        lines.append(
            f"| {row.benchmark} | {_median(row.ours)} | {comparison} | "
            f"{_number(row.figure)} {row.figure_label} | {row.target} | "
            f"{'pass' if row.passed else '**FAIL**'} |"
        )
    if problems:
        lines += ["", "## Not measured", "", *(f"- {problem}" for problem in problems)]
    lines += ["", "## Details", ""]
    for row in rows:
        lines.append(f"### {row.benchmark}")
        lines.append("")
        lines.append(f"- ours: {row.ours.label}: median {_median(row.ours)}; {_spread(row.ours)}")
        if row.comparison is not None:
            lines.append(
                f"- comparison: {row.comparison.label}: median "
                f"{_median(row.comparison)}; {_spread(row.comparison)}"
            )
        lines.append(
            f"- figure: {_number(row.figure)} {row.figure_label}; target {row.target}: "
            f"{'pass' if row.passed else 'FAIL'}"
        )
        lines.extend(f"- {note}" for note in row.notes)
        lines.append("")
    if extra_notes:
        lines += ["## Notes", "", *(f"- {note}" for note in extra_notes), ""]
    return "\n".join(lines)


#: The sections of RESULTS.md that other scripts write and `run.py` keeps as they are.
SESSIONS_START = "<!-- sessions-bench:start -->"
SESSIONS_END = "<!-- sessions-bench:end -->"
ANTHROPIC_HEADING = "## Anthropic prompt caching: cost of a 200-turn agent session"


def kept_sections(old: str) -> str:
    """What `sessions_bench.py` and `anthropic_cost.py` wrote in RESULTS.md text `old`."""
    kept: list[str] = []
    start = old.find(SESSIONS_START)
    end = old.find(SESSIONS_END, start)
    if start >= 0 and end >= 0:
        kept.append(old[start : end + len(SESSIONS_END)])
    start = old.find(ANTHROPIC_HEADING)
    if start >= 0:
        end = old.find("\n## ", start + len(ANTHROPIC_HEADING))
        kept.append(old[start : end if end >= 0 else len(old)].rstrip("\n"))
    return "".join(f"\n{section}\n" for section in kept)
