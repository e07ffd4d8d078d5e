"""Start-up benchmarks, timed as whole processes: ``import nanobot_core`` and the CLI.

Commands under comparison alternate within each round (and swap order every
round) so that drift on a shared machine hits both sides alike. Each command
runs once untimed first, so byte-code caches are warm for both.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from envs import VirtualEnv
from report import Measured, Row
from stats import summarize


@dataclass(frozen=True)
class Command:
    """A command line with its environment and working directory."""

    label: str
    argv: Sequence[str]
    environ: Mapping[str, str]
    cwd: Path


def _run_once(command: Command) -> float:
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
    return elapsed


def time_interleaved(commands: Sequence[Command], rounds: int) -> dict[str, list[float]]:
    """Seconds per run of each command, alternating commands within each round."""
    for command in commands:
        _run_once(command)
    samples: dict[str, list[float]] = {command.label: [] for command in commands}
    for index in range(rounds):
        order = commands if index % 2 == 0 else list(reversed(commands))
        for command in order:
            samples[command.label].append(_run_once(command))
    return samples


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
        samples = time_interleaved([ours, base, plugin_like], rounds)
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


def bench_cli(core_env: VirtualEnv, ai_env: VirtualEnv, rounds: int, plugins: int) -> Row:
    """``nanobot-core tools --json`` with plugins installed against ``nanobot --help``."""
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
        samples = time_interleaved([ours, theirs], rounds)
    ours_summary = summarize([s * 1000 for s in samples[ours.label]])
    theirs_summary = summarize([s * 1000 for s in samples[theirs.label]])
    speedup = theirs_summary.median / ours_summary.median
    return Row(
        benchmark=f"CLI: `nanobot-core tools --json` with {plugins} plugins",
        ours=Measured(ours.label, ours_summary, "ms"),
        comparison=Measured(theirs.label, theirs_summary, "ms"),
        figure=speedup,
        figure_label="x speed-up (theirs / ours)",
        target=">= 4x faster",
        passed=speedup >= 4 and listed == plugins,
        notes=[
            f"{rounds} interleaved runs of each, whole process wall time, empty HOME and "
            "workspace.",
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
