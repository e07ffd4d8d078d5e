"""Governance v2 benchmarks: a plugin stage, a growing session, and prompt-cache reuse.

Each against nanobot-ai 0.3.5 in the same run, measured as the reference
scripts measure (``drivers/governance_sessions.py`` holds both sides), on two
histories: the reference measurements' own (`reference_history`, on which the
targets were set: its 5,000 messages make the 1,052-call session) and our
dirtier, heavier one (`histories.generate_history`, 528 calls). Every target is
judged on both.

- ``plugin_stage``: govern 10,000 and 20,000 synthetic messages with one
  third-party no-op stage registered through a plugin, and with
  contrib/redact's ``redact_secrets`` (a fresh governor per sample);
- ``session``: a growing session of 5,000 messages governed before every model
  call on one governor, per-call median and total, with and without the stage,
  and read from a JSONL session before each call as the runner reads it;
- ``prefix``: over that session at 32k and 128k windows, the mean share of the
  bytes sent that is a byte-identical prefix of the previous call's, how many
  calls reuse under half, and the mean fill of the budget.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from drivers_run import run_driver
from envs import VirtualEnv
from report import Measured, Row
from stats import paired_ratio, summarize

DRIVER = "governance_sessions.py"
SESSION_MESSAGES = 5_000
WINDOWS = (32_000, 128_000)
#: Rounds of the whole-history benchmarks: each side runs once per round, in turn. Six,
#: because on a shared machine a slow spell of a minute can take one of three rounds.
ROUNDS = 6
#: Our sides of the whole-history benchmarks at 10,000 messages, measured in one process.
OUR_SIDES = ("ours-stage", "ours-redact", "ours", "ours-copy", "ours-stage-state")
#: Our sides of the growing session, and how a row names each.
SESSION_SIDES = (
    ("ours", "built-in stages"),
    ("ours-stage", "with a no-op stage"),
    ("ours-session", "read from a JSONL session"),
)
#: The driver's ``--history`` values, and how a row names each.
HISTORIES = {"reference": "reference history", "dirty": "dirty history"}


def _run(
    python: Path | str, which: str, scenario: str, messages: int, history: str, **extra: Any
) -> Any:
    args = ["--which", which, "--scenario", scenario, "--messages", str(messages)]
    args += ["--history", history]
    for key, value in extra.items():
        args += [f"--{key}", str(value)]
    return run_driver(python, DRIVER, args, timeout=1_800)


def _ms(samples: list[float], label: str) -> Measured:
    return Measured(label, summarize([s * 1000 for s in samples]), "ms")


def plugin_stage_rows(ai_env: VirtualEnv, reps: int) -> list[Row]:
    """A third-party no-op stage (and redact_secrets) against nanobot-ai, on each history."""
    return [row for history in HISTORIES for row in _plugin_stage_rows(ai_env, reps, history)]


def _plugin_stage_rows(ai_env: VirtualEnv, reps: int, history: str) -> list[Row]:
    ours = sys.executable
    theirs = ai_env.python
    named = HISTORIES[history]
    # Every side in turn, round after round, so that a slow spell of the machine hits all.
    stage: dict[int, list[float]] = {10_000: [], 20_000: []}
    ai: dict[int, list[float]] = {10_000: [], 20_000: []}
    redact: list[float] = []
    builtin_only: list[float] = []
    copied: list[float] = []
    with_state: list[float] = []  # the no-op stage side, asking for the state as well
    for _ in range(ROUNDS):
        # Our sides at 10,000 in one process, sample by sample in turn: the redact and
        # renamed-copy ratios compare what was measured moments apart.
        mine = _run(ours, ",".join(OUR_SIDES), "whole", 10_000, history, reps=reps)["by_which"]
        stage[10_000] += mine["ours-stage"]
        redact += mine["ours-redact"]
        builtin_only += mine["ours"]  # a renamed copy of a built-in, against the built-ins
        copied += mine["ours-copy"]
        with_state += mine["ours-stage-state"]
        ai[10_000] += _run(theirs, "nanobot", "whole", 10_000, history, reps=reps)["seconds"]
        stage[20_000] += _run(ours, "ours-stage", "whole", 20_000, history, reps=reps)["seconds"]
        ai[20_000] += _run(theirs, "nanobot", "whole", 20_000, history, reps=reps)["seconds"]
    rows = []
    for n in (10_000, 20_000):
        mine, other = _ms(stage[n], "no-op stage"), _ms(ai[n], "nanobot-ai")
        speedup = other.summary.median / mine.summary.median
        notes = [
            f"{ROUNDS} rounds of {reps} samples per side, the sides in turn; a fresh "
            "governor (ours) or ContextGovernor (nanobot-ai) and freshly decoded "
            "messages per sample"
        ]
        if n == 10_000:
            asked = summarize(with_state).median * 1000
            notes.append(
                "the call alone, as the reference measurements time it: on a governor's "
                "first call the state is read back only when asked for. Asking for it in "
                f"the timed call too (as a session's next call does): median {asked:.2f} ms, "
                f"{other.summary.median / asked:.2f}x faster than nanobot-ai"
            )
        rows.append(
            Row(
                f"govern {n:,} messages with a third-party no-op stage, {named}",
                mine,
                speedup,
                "nanobot-ai / ours",
                "≥ 5× faster at 10,000" if n == 10_000 else "(for information)",
                speedup >= 5 if n == 10_000 else True,
                other,
                notes=notes,
            )
        )
    small, large = (summarize(stage[n]).median * 1000 for n in (10_000, 20_000))
    rows.append(
        Row(
            f"the same, 10,000 → 20,000 messages, {named}",
            _ms(stage[20_000], "20,000 messages"),
            large / small,
            "20k / 10k",
            "≤ 2.2×",
            large / small <= 2.2,
            _ms(stage[10_000], "10,000 messages"),
        )
    )
    with_redact = _ms(redact, "redact_secrets")
    redact_ratio = paired_ratio(redact, stage[10_000])
    rows.append(
        Row(
            f"govern 10,000 messages with redact_secrets, {named}",
            with_redact,
            redact_ratio,
            "redact / no-op stage",
            "≤ 1.5×",
            redact_ratio <= 1.5,
            _ms(stage[10_000], "no-op stage"),
            notes=[_paired_note(len(redact), with_redact.summary.median / small)],
        )
    )
    copy, alone = _ms(copied, "renamed copy"), _ms(builtin_only, "built-in stages")
    ratio = paired_ratio(copied, builtin_only)
    rows.append(
        Row(
            f"govern 10,000 messages with a built-in replaced by its renamed copy, {named}",
            copy,
            ratio,
            "copy / built-in",
            "≤ 1.1× (the same cost)",
            ratio <= 1.1,
            alone,
            notes=[
                "the copy (sanitize_content under another name, the same declarations) comes "
                f"from a plugin and the built-in is disabled; {ROUNDS} rounds, the two "
                "sides sample by sample in one process",
                _paired_note(len(copied), copy.summary.median / alone.summary.median),
            ],
        )
    )
    return rows


def _paired_note(pairs: int, of_medians: float) -> str:
    return (
        f"the ratio is the median of {pairs} ratios of samples taken in turn in one process "
        f"(the ratio of the two medians: {of_medians:.2f}x)"
    )


def session_rows(ai_env: VirtualEnv) -> list[Row]:
    """Per-call median over a growing session, with and without the stage, on each history."""
    return [row for history in HISTORIES for row in _session_rows(ai_env, history)]


def _session_rows(ai_env: VirtualEnv, history: str) -> list[Row]:
    ai = _run(ai_env.python, "nanobot", "session", SESSION_MESSAGES, history)
    other = _ms(ai["seconds"], "nanobot-ai")
    rows = []
    for which, label in SESSION_SIDES:
        figures = _run(sys.executable, which, "session", SESSION_MESSAGES, history)
        mine = _ms(figures["seconds"], label)
        share = mine.summary.median / other.summary.median
        notes = [
            f"{figures['calls']} calls; total {figures['total_seconds'] * 1000:,.0f} ms "
            f"(nanobot-ai {ai['total_seconds'] * 1000:,.0f} ms)"
        ]
        if which == "ours-session":
            notes.append(
                "each call reads the messages from a JSONL session (`Session.shared_history`), "
                "governs them and appends the governance record when the state moved, as the "
                "runner does before every model call; appending the turn's messages is not "
                "timed (nanobot-ai's side persists nothing)"
            )
        rows.append(
            Row(
                f"growing session of {SESSION_MESSAGES:,} messages, {label}, per call, "
                f"{HISTORIES[history]}",
                mine,
                share,
                "ours / nanobot-ai",
                "≤ 1/10",
                share <= 0.1,
                other,
                notes=notes,
            )
        )
    return rows


def tokenizer_rows() -> list[Row]:
    """The growing session counted by the tokenizer plugin's exact counter, against the estimate."""
    rows = []
    for history, named in HISTORIES.items():
        figures = _run(sys.executable, "ours-tokenizer,ours", "session", SESSION_MESSAGES, history)
        exact, estimate = figures["by_which"]["ours-tokenizer"], figures["by_which"]["ours"]
        mine = _ms(exact["seconds"], "tokenizer plugin")
        other = _ms(estimate["seconds"], "estimate")
        rows.append(
            Row(
                f"growing session of {SESSION_MESSAGES:,} messages counted by the tokenizer "
                f"plugin, per call, {named}",
                mine,
                mine.summary.median / other.summary.median,
                "tokenizer / estimate",
                "(for information)",
                True,
                other,
                notes=[
                    f"{exact['calls']} calls, the two sides in turn call by call on governors "
                    "of their own, built through the plugin manager; total "
                    f"{exact['total_seconds'] * 1000:,.0f} ms against "
                    f"{estimate['total_seconds'] * 1000:,.0f} ms "
                    f"(x{exact['total_seconds'] / estimate['total_seconds']:.2f})",
                ],
            )
        )
    return rows


def _loss_note(by_cause: dict[str, dict[str, float]]) -> str:
    """Where our side's prefix share went, per cause its results gave (see the driver)."""
    parts = [
        f"{cause} {figures['mean_loss']:.3f} ({figures['calls']:.0f} calls)"
        for cause, figures in sorted(by_cause.items(), key=lambda item: -item[1]["mean_loss"])
    ]
    return "ours, share lost per call by cause (adds up to 1 - mean): " + (
        ", ".join(parts) or "not reported"
    )


def prefix_rows(ai_env: VirtualEnv) -> list[Row]:
    """Prompt-cache reuse over the growing session at each window, on each history."""
    rows = []
    for history, window in ((h, w) for h in HISTORIES for w in WINDOWS):
        mine = _run(sys.executable, "ours", "prefix", SESSION_MESSAGES, history, window=window)
        ai = _run(ai_env.python, "nanobot", "prefix", SESSION_MESSAGES, history, window=window)
        under = mine["calls_under_half"] / mine["compared_calls"]
        passed = mine["mean_reuse"] >= 0.9 and under < 0.05 and mine["mean_fill"] >= 0.6
        rows.append(
            Row(
                f"prompt-cache reuse at a {window // 1000}k window, {HISTORIES[history]}",
                _ms(mine["seconds"], "per call"),
                mine["mean_reuse"],
                "mean prefix share",
                "≥ 0.90, < 5 % of calls under half, fill ≥ 0.6",
                passed,
                _ms(ai["seconds"], "nanobot-ai per call"),
                notes=[
                    f"ours: {mine['calls_under_half']} of {mine['compared_calls']} calls under "
                    f"half ({under:.1%}), mean fill {mine['mean_fill']:.2f}; nanobot-ai: mean "
                    f"{ai['mean_reuse']:.2f}, {ai['calls_under_half']} calls under half",
                    _loss_note(mine.get("loss_by_cause", {})),
                ],
            )
        )
    return rows
