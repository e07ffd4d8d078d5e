"""Run every benchmark against its comparison in the same run and write bench/RESULTS.md.

Usage (the nox ``bench`` session runs this in a venv with nanobot-core installed)::

    python bench/run.py [--quick]
        [--only import,cli,prepare_call,concurrency,governance,tau,redact,repair,
                linear,plugin_stage,session,prefix,tokenizer]

Creates its environments under ``bench/.envs/`` when missing (nanobot-ai 0.3.5
from the package index; nanobot-core and thirty plugin wheels built from this
tree). Needs no network beyond the package index. Exits 1 if a target is
missed or a benchmark could not run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import envs
from governance_bench import rows_for_sizes, rows_for_tau, time_sizes, write_histories
from linear_bench import bench_linear
from plugin_projects import PLUGIN_COUNT
from redact_bench import bench_redact
from repair_bench import bench_repair
from report import Row, kept_sections, render
from session_bench import plugin_stage_rows, prefix_rows, session_rows, tokenizer_rows
from startup import bench_cli, bench_import
from tools_bench import bench_concurrency, bench_prepare_call

BENCH_DIR = Path(__file__).resolve().parent
RESULTS = BENCH_DIR / "RESULTS.md"
HISTORY_SIZES = (2_500, 10_000, 20_000)
BENCHMARKS = (
    "import",
    "cli",
    "prepare_call",
    "concurrency",
    "governance",
    "tau",
    "redact",
    "repair",
    "linear",
    "plugin_stage",
    "session",
    "prefix",
    "tokenizer",
)


@dataclass(frozen=True)
class Effort:
    """How many repetitions each benchmark gets."""

    import_rounds: int = 40
    # Whole processes of a few hundred ms: at least this many rounds, and more (up to
    # cli_max_rounds) while either side's times spread wide.
    cli_rounds: int = 20
    cli_max_rounds: int = 40
    prepare_rounds: int = 4
    prepare_reps: int = 10
    concurrency_reps: int = 10
    # Governing one history takes milliseconds: many short samples per side, in
    # alternating rounds, so that a slow spell of the machine cannot decide a median.
    governance_rounds: int = 6
    governance_reps: int = 4
    tau_reps: int = 40
    # The linearity checks keep each size's least CPU time over rounds taken in turn:
    # enough rounds that one of them falls in a quiet moment of a shared machine.
    repair_reps: int = 11
    linear_rounds: int = 15
    plugin_stage_reps: int = 7


QUICK = Effort(
    import_rounds=10,
    cli_rounds=3,
    cli_max_rounds=3,
    prepare_rounds=2,
    prepare_reps=3,
    concurrency_reps=3,
    governance_rounds=2,
    governance_reps=1,
    tau_reps=5,
    repair_reps=2,
    linear_rounds=3,
    plugin_stage_reps=2,
)


def data_dir() -> Path:
    """The repository's third-party data folder (``tests/data``)."""
    return BENCH_DIR.parent / "tests" / "data"


def _load() -> str:
    """The 1-minute load average, as a note on how shared the machine was."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "unknown"


def _log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Few repetitions (a smoke run).")
    parser.add_argument(
        "--only",
        default=",".join(BENCHMARKS),
        help=f"Comma-separated subset of: {', '.join(BENCHMARKS)}.",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="Where to write the report.")
    options = parser.parse_args()
    selected = {name.strip() for name in options.only.split(",") if name.strip()}
    unknown = selected - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmarks: {', '.join(sorted(unknown))}")
    effort = QUICK if options.quick else Effort()
    data = data_dir()

    started = dt.datetime.now(dt.UTC)
    clock = time.perf_counter()
    load_before = _load()
    if selected & {"cli", "prepare_call", "governance", "plugin_stage", "session", "prefix"}:
        _log("preparing nanobot-ai 0.3.5 (bench/.envs/nanobot-ai)")
        ai_env = envs.ensure_nanobot_ai()
    if selected & {"import", "cli"}:
        _log("building nanobot-core and plugin wheels into bench/.envs/core-plugins")
        core_env = envs.build_core_plugins()

    rows: list[Row] = []
    problems: list[str] = []

    def attempt(name: str, produce: Callable[[], list[Row]]) -> None:
        if name not in selected:
            return
        _log(f"running {name}")
        try:
            produced = produce()
        except Exception as exc:  # one broken benchmark must not hide the others
            traceback.print_exc()
            problems.append(
                f"{name}: not measured: {type(exc).__name__}: "
                f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            )
            return
        for row in produced:
            _log(
                f"  {row.benchmark}: {row.figure:.3g} {row.figure_label} "
                f"({'pass' if row.passed else 'FAIL'})"
            )
        rows.extend(produced)

    attempt("import", lambda: [bench_import(core_env, effort.import_rounds)])
    attempt(
        "cli",
        lambda: [
            bench_cli(core_env, ai_env, effort.cli_rounds, effort.cli_max_rounds, PLUGIN_COUNT)
        ],
    )
    attempt(
        "prepare_call",
        lambda: [
            bench_prepare_call(ai_env, data / "bfcl", effort.prepare_rounds, effort.prepare_reps)
        ],
    )
    attempt("concurrency", lambda: [bench_concurrency(effort.concurrency_reps)])
    with tempfile.TemporaryDirectory() as scratch:

        def governance() -> list[Row]:
            histories = write_histories(HISTORY_SIZES, Path(scratch))
            timings = time_sizes(
                histories, ai_env, effort.governance_rounds, effort.governance_reps
            )
            return rows_for_sizes(timings, effort.governance_rounds, effort.governance_reps)

        attempt("governance", governance)
    # Pairs of samples of about 10 ms each, on a noisy machine: as many pairs as the
    # governance benchmark takes samples a side (six pairs let one slow spell decide).
    attempt(
        "redact",
        lambda: bench_redact(
            effort.governance_rounds * effort.governance_reps, effort.governance_reps + 2
        ),
    )
    tau = data / "tau-bench-airline"
    attempt(
        "tau",
        lambda: rows_for_tau(
            tau / "gpt-4o-airline.json", tau / "airline_tools.json", effort.tau_reps
        ),
    )

    attempt("repair", lambda: bench_repair(effort.repair_reps))
    attempt("linear", lambda: bench_linear(effort.linear_rounds))
    attempt("plugin_stage", lambda: plugin_stage_rows(ai_env, effort.plugin_stage_reps))
    attempt("session", lambda: session_rows(ai_env))
    attempt("prefix", lambda: prefix_rows(ai_env))
    attempt("tokenizer", tokenizer_rows)

    seconds = time.perf_counter() - clock
    command = "python bench/run.py" + (" --quick" if options.quick else "")
    if selected != set(BENCHMARKS):
        command += f" --only {','.join(b for b in BENCHMARKS if b in selected)}"
    old = options.out.read_text(encoding="utf-8") if options.out.is_file() else ""
    options.out.write_text(
        render(
            rows,
            started=started,
            seconds=seconds,
            command=command,
            problems=problems,
            extra_notes=[
                "nanobot-ai 0.3.5 runs in its own environment (`bench/.envs/nanobot-ai`); "
                "ours in the bench session's environment, except the start-up benchmarks, "
                "which use `bench/.envs/core-plugins` (nanobot-core and the plugins "
                "installed from wheels).",
                "Inputs: BFCL v4 and tau-bench airline from the repository's tests/data folder; "
                "synthetic histories from `bench/histories.py` (fixed seed).",
                f"Machine load (1-minute load average) at the start: {load_before}; "
                f"at the end: {_load()}.",
            ],
        )
        + kept_sections(old),
        encoding="utf-8",
    )
    _log(f"wrote {options.out} in {seconds:.0f} s")
    return 0 if not problems and all(row.passed for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
