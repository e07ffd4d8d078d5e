"""Start-up benchmarks, timed as whole processes: ``import nanobot_core`` and the CLI.

Commands under comparison alternate within each round (and swap order every
round) so that drift on a shared machine hits both sides alike. Each command
runs once untimed first, so byte-code caches are warm for both. Each run's wall
time is the figure; its CPU time (user and system, from the child's resource
usage) is kept for information.
"""

from __future__ import annotations

import resource
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from envs import VirtualEnv
from report import Measured, Row
from stats import relative_spread, summarize

#: The CLI benchmark takes rounds beyond its first ones, a few at a time, while either
#: side's interquartile range is over this share of its median.
WIDE_SPREAD = 0.1


@dataclass(frozen=True)
class Command:
    """A command line with its environment and working directory."""

    label: str
    argv: Sequence[str]
    environ: Mapping[str, str]
    cwd: Path


@dataclass(frozen=True)
class Timings:
    """Seconds per run of each command, by label: wall time and CPU time (user + system)."""

    wall: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)

    @property
    def rounds(self) -> int:
        return min((len(samples) for samples in self.wall.values()), default=0)


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run_once(command: Command) -> tuple[float, float]:
    """Wall and CPU seconds of one run (the CPU time of the child, once it was waited for)."""
    cpu = _cpu_of_children()
    start = time.perf_counter()
    result = subprocess.run(
        list(command.argv),
        env=dict(command.environ),
        cwd=command.cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(
            f"{command.label} failed ({result.returncode}):\n"
            f"{result.stderr.decode(errors='replace')[-3000:]}"
        )
    return elapsed, _cpu_of_children() - cpu


def time_interleaved(
    commands: Sequence[Command], rounds: int, more: Timings | None = None
) -> Timings:
    """Seconds per run of each command, alternating commands within each round.

    Given the timings of earlier rounds (`more`), adds `rounds` rounds to them, the
    alternation carrying on where it stopped; else warms every command up first.
    """
    timings = (
        more
        if more is not None
        else Timings(
            {command.label: [] for command in commands}, {command.label: [] for command in commands}
        )
    )
    if more is None:
        for command in commands:
            _run_once(command)
    done = timings.rounds
    for index in range(done, done + rounds):
        order = commands if index % 2 == 0 else list(reversed(commands))
        for command in order:
            wall, cpu = _run_once(command)
            timings.wall[command.label].append(wall)
            timings.cpu[command.label].append(cpu)
    return timings


def bench_import(env: VirtualEnv, rounds: int) -> Row:
    """``python -c "import nanobot_core"`` against ``python -c "import pluggy, attrs"``."""
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch)
        environ = env.clean_environ(home)
        ours = Command(
            'python -c "import nanobot_core"',
            [str(env.python), "-c", "import nanobot_core"],
            environ,
            home,
        )
        base = Command(
            'python -c "import pluggy, attrs"',
            [str(env.python), "-c", "import pluggy, attrs"],
            environ,
            home,
        )
        # For information: what a plugin module pays to subclass our Tool.
        plugin_like = Command(
            'python -c "from nanobot_core import Tool"',
            [str(env.python), "-c", "from nanobot_core import Tool"],
            environ,
            home,
        )
        samples = time_interleaved([ours, base, plugin_like], rounds).wall
    plugin_like_ms = summarize([s * 1000 for s in samples[plugin_like.label]]).median
    ours_summary = summarize([s * 1000 for s in samples[ours.label]])
    base_summary = summarize([s * 1000 for s in samples[base.label]])
    figure = ours_summary.median / base_summary.median
    return Row(
        benchmark="import nanobot_core",
        ours=Measured(ours.label, ours_summary, "ms"),
        comparison=Measured(base.label, base_summary, "ms"),
        figure=figure,
        figure_label="x (ours / baseline)",
        target="<= 1.5x",
        passed=figure <= 1.5,
        notes=[
            f"{rounds} interleaved runs of each, whole process wall time, same interpreter "
            "and environment (nanobot-core installed from a wheel of this tree).",
            f"for information, `{plugin_like.label}` (what a tool plugin imports): median "
            f"{plugin_like_ms:.1f} ms.",
        ],
    )


def bench_cli(
    core_env: VirtualEnv, ai_env: VirtualEnv, rounds: int, max_rounds: int, plugins: int
) -> Row:
    """``nanobot-core tools --json`` with plugins installed against ``nanobot --help``.

    At least `rounds` rounds; while either side's samples spread wide (a noisy machine),
    a few more at a time, up to `max_rounds`.
    """
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch)
        workspace = home / "workspace"
        workspace.mkdir()
        ours = Command(
            "nanobot-core tools --json",
            [str(core_env.bin / "nanobot-core"), "tools", "--json"],
            core_env.clean_environ(home),
            workspace,
        )
        theirs = Command(
            "nanobot --help (nanobot-ai 0.3.5)",
            [str(ai_env.bin / "nanobot"), "--help"],
            ai_env.clean_environ(home),
            workspace,
        )
        listed = _listed_plugin_tools(ours)
        timings = time_interleaved([ours, theirs], rounds)
        step = max(2, rounds // 4)
        while timings.rounds < max_rounds and any(
            relative_spread(samples) > WIDE_SPREAD for samples in timings.wall.values()
        ):
            time_interleaved([ours, theirs], min(step, max_rounds - timings.rounds), timings)
    ours_summary = summarize([s * 1000 for s in timings.wall[ours.label]])
    theirs_summary = summarize([s * 1000 for s in timings.wall[theirs.label]])
    # The ratio of the medians, not the median of per-round ratios: a run takes long
    # enough that a slow spell rarely lands on both runs of a round, and a ratio of two
    # independently noisy runs spreads wider than either median moves.
    speedup = theirs_summary.median / ours_summary.median
    cpu_ours = summarize([s * 1000 for s in timings.cpu[ours.label]]).median
    cpu_theirs = summarize([s * 1000 for s in timings.cpu[theirs.label]]).median
    return Row(
        benchmark=f"CLI: `nanobot-core tools --json` with {plugins} plugins",
        ours=Measured(ours.label, ours_summary, "ms"),
        comparison=Measured(theirs.label, theirs_summary, "ms"),
        figure=speedup,
        figure_label="x speed-up (theirs / ours)",
        target=">= 4x faster",
        passed=speedup >= 4 and listed == plugins,
        notes=[
            f"{timings.rounds} interleaved runs of each ({rounds} at least, more while "
            f"either side's IQR was over {WIDE_SPREAD:.0%} of its median, {max_rounds} at "
            "most), whole process wall time, empty HOME and workspace; the figure is the "
            "ratio of the two medians.",
            f"for information, CPU time (user + system) of each process: median "
            f"{cpu_ours:.0f} ms ours, {cpu_theirs:.0f} ms nanobot-ai "
            f"({cpu_theirs / cpu_ours:.2f}x).",
            f"{listed} of the {plugins} installed plugin tools were listed "
            "(each plugin is its own wheel with one `nanobot.tools` entry point).",
        ],
    )


def _listed_plugin_tools(command: Command) -> int:
    import json

    result = subprocess.run(
        list(command.argv),
        env=dict(command.environ),
        cwd=command.cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{command.label} failed ({result.returncode}):\n{result.stderr}")
    rows = json.loads(result.stdout)
    return sum(1 for row in rows if str(row.get("name", "")).startswith("bench_tool_"))
