"""contrib/redact's benchmarks: the redact_secrets stage on adversarial input and on histories.

``bench_redact(rounds, reps)`` gives three rows for ``run.py``:

- adversarial input (the issue's cases and others of the same kind) at three
  lengths: the time per character must not grow with the length;
- the stage alone over the synthetic 10,000-message history, one message per
  call as a governor makes it, in MB/s (with `json.dumps` of each message for scale);
- governing that history (and the 20,000-message one) with ``redact_secrets``
  against the same governor with a third-party stage that does nothing, each
  sample with a fresh governor and freshly decoded messages.

nanobot-redact is imported from the source tree (``contrib/redact``), so the
bench environment needs nothing beyond nanobot-core; ``redact_stage`` is there
for other benchmarks that want the stage. Times are the CPU time of this
process (``time.process_time``): on a machine shared with other work, a
wall-clock sample longer than a scheduler slice also counts the time others
ran, which would make longer inputs look slower per character.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from histories import SYSTEM_PROMPT, TOOL_DEFINITIONS, generate_history, json_size
from report import Measured, Row
from stats import best_cpu_time, paired_ratio, summarize

REDACT_SOURCE = Path(__file__).resolve().parent.parent / "contrib" / "redact"
MB = 1_000_000
LENGTHS = (25_000, 50_000, 100_000)
SIZES = (10_000, 20_000)

#: (name, input of about n characters). The first two took 34 s and 3.7 s before.
ADVERSARIAL: tuple[tuple[str, Callable[[int], str]], ...] = (
    ('"Authorization:" + spaces + "x"', lambda n: "Authorization:" + " " * n + "x"),
    ('"a." repeated', lambda n: "a." * (n // 2)),
    ('"sk-" repeated', lambda n: "sk-" * (n // 3)),
    ('"?token=" repeated', lambda n: "?token=" * (n // 7)),
    ('"://a:" repeated', lambda n: "://a:" * (n // 5)),
    ('"curl -u " repeated', lambda n: "curl -u " * (n // 8)),
    ("BEGIN lines without END", lambda n: "-----BEGIN PRIVATE KEY-----" * (n // 27)),
    ('"eyJaaaaa." repeated (JWTs)', lambda n: "eyJaaaaa." * (n // 9)),
    ('"aws_secret_access_key=" repeated', lambda n: "aws_secret_access_key=" * (n // 22)),
    ('"Bearer " + letters + " x"', lambda n: "Bearer " + "a" * n + " x"),
    ('"sk_live_" repeated', lambda n: "sk_live_" * (n // 8)),
    ('"glpat-" repeated', lambda n: "glpat-" * (n // 6)),
    ('"hf_" repeated', lambda n: "hf_" * (n // 3)),
    ('"npm_" repeated', lambda n: "npm_" * (n // 4)),
    ('"_authToken" + spaces + "x"', lambda n: "_authToken" + " " * n + "x"),
    ('"hooks.slack.com/services/T" repeated', lambda n: "hooks.slack.com/services/T" * (n // 26)),
    ('"gldt- glrtr- glagent- " repeated', lambda n: "gldt- glrtr- glagent- " * (n // 22)),
    (
        '"://hooks.slack.com/triggers/T" repeated',
        lambda n: "://hooks.slack.com/triggers/T" * (n // 29),
    ),
    ('"aUTHORIZATION:" + spaces + "x"', lambda n: "aUTHORIZATION:" + " " * n + "x"),
    ('"SecretAccessKey=" repeated', lambda n: "SecretAccessKey=" * (n // 16)),
    ('"x://a:" + "b/" repeated', lambda n: "x://a:" + "b/" * (n // 2)),
    ('"://a:@" repeated', lambda n: "://a:@" * (n // 6)),
)


def _import_redact() -> Any:
    if str(REDACT_SOURCE) not in sys.path:
        sys.path.insert(0, str(REDACT_SOURCE))
    import nanobot_redact

    return nanobot_redact


def redact_stage(workspace: Path) -> Any:
    """The `redact_secrets` stage as its plugin contributes it (default options)."""
    from nanobot_core import PluginContext

    (stage,) = _import_redact().nanobot_governance_stages(PluginContext(workspace=workspace))
    return stage


def adversarial_row(reps: int) -> Row:
    """Seconds per character at each length; the worst growth from the shortest to the longest."""
    redact = _import_redact()
    scanner = redact.scanner_for(redact.DEFAULT_PATTERNS)
    growths: list[float] = []
    notes: list[str] = []
    full: list[float] = []
    for name, make in ADVERSARIAL:
        per_char = []
        for length in LENGTHS:
            text = make(length)
            seconds = best_cpu_time(lambda text=text: scanner.redact(text), reps)
            per_char.append(seconds / len(text))
            if length == LENGTHS[-1]:
                full.append(seconds * 1000)
        growth = per_char[-1] / per_char[0]
        growths.append(growth)
        notes.append(
            f"{name}: {full[-1]:.2f} ms at {LENGTHS[-1]:,} characters; time per character "
            f"x{growth:.2f} from {LENGTHS[0]:,} to {LENGTHS[-1]:,}"
        )
    worst = max(growths)
    return Row(
        benchmark="Redaction: adversarial input stays linear",
        ours=Measured(
            f"Scanner.redact, {LENGTHS[-1]:,} characters, each case", summarize(full), "ms"
        ),
        figure=worst,
        figure_label=f"x time per character, {LENGTHS[-1]:,} vs {LENGTHS[0]:,} (worst case)",
        target="<= 2x (linear; a quadratic scan gives 4x)",
        passed=worst <= 2.0,
        notes=[f"CPU time, best of {reps} calls per case and length.", *notes],
    )


def _history_json(size: int) -> str:
    return json.dumps(generate_history(size), ensure_ascii=False)


def throughput_row(history_text: str, reps: int) -> Row:
    """The stage alone over a whole history, one message per call: megabytes of JSON per second.

    The stage is called as a governor calls a per-message stage (a one-message
    list and a `StageContext`); a plain ``json.dumps`` of each message gives
    the scale (the cheapest thing that reads every byte).
    """
    from nanobot_core import StageContext

    redact = _import_redact()
    stage = redact.make_stage_func(redact.DEFAULT_PATTERNS)
    ctx = StageContext()
    size = len(history_text.encode("utf-8"))
    history = json.loads(history_text)

    def scan() -> None:
        for message in history:
            stage([message], ctx)

    def encode() -> None:
        for message in history:
            json.dumps(message, ensure_ascii=False)

    samples = []
    scale = []
    for _ in range(reps):
        samples.append(size / MB / best_cpu_time(scan, 1))
        scale.append(size / MB / best_cpu_time(encode, 1))
    summary, dumps = summarize(samples), summarize(scale)
    return Row(
        benchmark="Redaction: throughput over a whole history",
        ours=Measured("redact_secrets, one message per call, 10,000 messages", summary, "MB/s"),
        comparison=Measured("json.dumps of each message", dumps, "MB/s"),
        figure=summary.median,
        figure_label="MB of history JSON per second",
        target="for information",
        passed=True,
        notes=[
            f"{size / MB:.1f} MB of JSON (bench/histories.py, no secrets in it), {reps} passes, "
            "CPU time; this is the cost when every message is scanned. "
            f"x{summary.median / dumps.median:.1f} the speed of json.dumps on the same messages."
        ],
    )


def _govern_seconds(history_text: str, stage: Any, workspace: Path) -> float:
    from nanobot_core import Config
    from nanobot_core.config import GovernanceConfig
    from nanobot_core.governance import build_governor, builtin_stages

    config = Config(
        governance=GovernanceConfig(
            context_window=128_000,
            max_output=8_192,
            safety_margin=1_024,
            max_tool_result_chars=16_000,
        )
    )
    history = json.loads(history_text)
    governor = build_governor(config, workspace, stages=[*builtin_stages(), stage])
    started = time.process_time()
    governor.govern(history, system=SYSTEM_PROMPT, tools=TOOL_DEFINITIONS)
    return time.process_time() - started


def governance_row(histories: Sequence[tuple[int, str]], rounds: int) -> Row:
    """Governing with redact_secrets over governing with a no-op third-party stage."""
    from nanobot_core import Stage

    noop = Stage("bench_noop", lambda messages, ctx: messages)
    notes = []
    first: tuple[Any, Any, float] | None = None
    with tempfile.TemporaryDirectory() as scratch:
        workspace = Path(scratch)
        redact = redact_stage(workspace)
        for size, text in histories:
            seconds: dict[str, list[float]] = {"redact": [], "noop": []}
            _govern_seconds(text, redact, workspace)  # warm-up; fills the result store
            for index in range(rounds):
                order = [("redact", redact), ("noop", noop)]
                for side, stage in order if index % 2 == 0 else order[::-1]:
                    seconds[side].append(_govern_seconds(text, stage, workspace) * 1000)
            with_redact, without = summarize(seconds["redact"]), summarize(seconds["noop"])
            paired = paired_ratio(seconds["redact"], seconds["noop"])
            notes.append(
                f"{size:,} messages ({json_size(json.loads(text)) / MB:.1f} MB): with "
                f"redact_secrets {with_redact.median:.1f} ms, with the no-op stage "
                f"{without.median:.1f} ms, x{paired:.2f} (ratio of the medians "
                f"x{with_redact.median / without.median:.2f})"
            )
            if first is None:
                first = (with_redact, without, paired)
    assert first is not None
    with_redact, without, ratio = first
    return Row(
        benchmark="Redaction: governing with redact_secrets",
        ours=Measured("Governor.govern with redact_secrets", with_redact, "ms"),
        comparison=Measured("the same governor with a no-op third-party stage", without, "ms"),
        figure=ratio,
        figure_label="x (with redact_secrets / with the no-op stage), 10,000 messages",
        target="<= 1.5x",
        passed=ratio <= 1.5,
        notes=[
            f"{rounds} rounds alternating the two sides, CPU time, the ratio the median of the "
            "ratios of the pairs of one round; each sample builds a fresh "
            "governor "
            "(built-in stages plus the one third-party stage) and decodes the history afresh. "
            "Same settings as the governance benchmark (128,000-token window).",
            *notes,
        ],
    )


def bench_redact(rounds: int, reps: int) -> list[Row]:
    """Every redaction row: adversarial input, throughput, governing with the stage."""
    histories = [(size, _history_json(size)) for size in SIZES]
    return [
        adversarial_row(reps),
        throughput_row(histories[0][1], reps),
        governance_row(histories, rounds),
    ]
