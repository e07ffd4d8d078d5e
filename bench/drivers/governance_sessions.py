"""Either side of the session benchmarks (run with the python of the side it measures).

``--which``: ``ours`` (the built-in stages), ``ours-stage`` (plus one third-party
stage that changes nothing and declares nothing, registered as a plugin),
``ours-copy`` (a built-in stage replaced by a copy of it, with the same
declarations, under another name, registered as a plugin),
``ours-redact`` (plus contrib/redact's plugin, from the source tree),
``ours-tokenizer`` (the built-in stages, counted by plugins/tokenizer's exact counter,
from the source tree: it needs bpe-openai installed),
``ours-session`` (the built-in stages, the history read from a JSONL session before
each call as the runner reads it: see ``_ours_session``), ``nanobot``
(nanobot-ai 0.3.5, stateless: a new ``ContextGovernor`` per call). Any of ours
with ``-state`` appended also asks for the result's state in the timed call.

``--scenario``:

- ``whole``: govern one history of ``--messages``; every sample gets a fresh
  governor and freshly decoded messages, so no memo survives between samples;
- ``session``: grow that history turn by turn (a turn ends before each user
  message) on one governor and time every call; several sides each govern every
  call on a governor of their own, taking turns call by call (``by_which``);
- ``prefix``: the same session; per call, the share of the bytes of the
  messages sent that is a byte-identical prefix of the previous call's
  messages (what a provider's prompt cache reuses), and the fill of the budget.
  Our side also says what each call lost that share to, as its result's
  ``prefix.reason`` tells: messages appended to those sent before, a
  compaction, a cut, or another change (``loss_by_cause``).

``--history``: ``reference`` (`reference_history`, the one the targets were set
on) or ``dirty`` (`histories.generate_history`).

Settings as the reference measurements take them: a ``--window`` token window,
4,096 output tokens, no safety margin, results over 16,000 characters offloaded.
"""

from __future__ import annotations

import contextlib
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from _common import BENCH_DIR, parser, write
from histories import SYSTEM_PROMPT, generate_history
from reference_history import reference_history

MAX_OUTPUT = 4_096
MAX_TOOL_RESULT_CHARS = 16_000
REDACT_SOURCE = BENCH_DIR.parent / "contrib" / "redact"
TOKENIZER_SOURCE = BENCH_DIR.parent / "plugins" / "tokenizer"
#: The built-in stage ``ours-copy`` replaces with a copy under another name (same declarations).
COPIED = "sanitize_content"
#: A side's name ends with this when it asks for the result's state too: on a governor's
#: first call the state is read back only when asked for, as a session's next call does.
ASKS_STATE = "-state"

Messages = list[dict[str, Any]]
#: What a side's ``govern`` returns: the messages sent, the fill of the budget (NaN when
#: not known) and the result's ``prefix.reason`` (None when there is none).
Governed = tuple[Messages, float, str | None]


def _config(window: int, disabled: list[str] | None = None) -> Any:
    """Our settings, as the reference measurements take them."""
    from nanobot_core.config import Config, GovernanceConfig

    return Config(
        governance=GovernanceConfig(
            context_window=window,
            max_output=MAX_OUTPUT,
            safety_margin=0,
            max_tool_result_chars=MAX_TOOL_RESULT_CHARS,
            disabled=disabled or [],
        )
    )


def _ours(which: str, window: int, workspace: Path) -> Any:
    # "-state": the same side, asking for the result's state too (see ``ASKS_STATE``).
    asks_state = which.endswith(ASKS_STATE)
    governor = _governor(which.removesuffix(ASKS_STATE), window, workspace)

    def govern(messages: Messages) -> Governed:
        result = governor.govern(messages[1:], system=messages[0]["content"])
        if asks_state:
            _ = result.state
        sent: Messages = [messages[0], *result.messages]
        prefix = getattr(result, "prefix", None)  # older trees, measured for comparison
        reason = prefix.reason if prefix is not None else None
        return sent, (result.tokens / result.budget if result.budget else 0.0), reason

    return govern


def _governor(which: str, window: int, workspace: Path) -> Any:
    """Our governor for the side `which`, built through the plugin manager."""
    import nanobot_core as nc

    # ours-copy: the built-in is replaced by its copy under another name.
    config = _config(window, disabled=[COPIED] if which == "ours-copy" else [])
    manager = nc.PluginManager(config, workspace=workspace, autoload=False)
    if which == "ours-stage":

        class NoopPlugin:
            @nc.hookimpl
            def nanobot_governance_stages(self, ctx: Any) -> list[Any]:
                return [nc.Stage("noop_third_party", lambda m, c: nc.StageOutcome.unchanged(m))]

        manager.register(NoopPlugin(), "noop-third-party", distribution="noop", version="1.0")
    elif which == "ours-copy":
        import attrs

        from nanobot_core.governance.stages import BUILTIN_TABLE

        builtin = next(row.stage for row in BUILTIN_TABLE if row.stage.name == COPIED)

        class CopyPlugin:
            @nc.hookimpl
            def nanobot_governance_stages(self, ctx: Any) -> list[Any]:
                return [attrs.evolve(builtin, name=f"{COPIED}_copy")]

        manager.register(CopyPlugin(), "stage-copy", distribution="stage-copy", version="1.0")
    elif which == "ours-redact":
        if str(REDACT_SOURCE) not in sys.path:
            sys.path.insert(0, str(REDACT_SOURCE))
        import nanobot_redact

        manager.register(nanobot_redact, "redact_secrets", distribution="nanobot-redact")
    elif which == "ours-tokenizer":
        if str(TOKENIZER_SOURCE) not in sys.path:
            sys.path.insert(0, str(TOKENIZER_SOURCE))
        import nanobot_tokenizer

        manager.register(nanobot_tokenizer, "tokenizer", distribution="nanobot-tokenizer")
    from_plugins = getattr(getattr(nc, "Governor", None), "from_plugins", None)
    governor = from_plugins(manager) if from_plugins else manager.governor()
    names = [stage.name for stage in governor.stages]
    wanted = {
        "ours-stage": "noop_third_party",
        "ours-redact": "redact_secrets",
        "ours-copy": f"{COPIED}_copy",
    }.get(which)
    if wanted and wanted not in names:
        raise SystemExit(f"{wanted} is not in the pipeline: {names}")
    counter = getattr(governor.counter, "counter", governor.counter)  # a plugin's is wrapped
    if which == "ours-tokenizer" and type(counter).__name__ != "BpeTokenCounter":
        raise SystemExit(f"the tokenizer plugin's counter is not in use: {counter!r}")
    return governor


def _ours_session(window: int, workspace: Path) -> Any:
    """``ours``, as the runner calls it: the messages read from a JSONL session, the
    governance record appended when the state moved.

    Before each call, ``feed`` appends what the turn added to the session (untimed, as
    nanobot-ai's side persists nothing); the timed call reads the session's messages,
    governs them, and records the state when it moved, as ``Runner`` does before every
    model call.
    """
    from nanobot_core.jsonl_store import JsonlSessionStore

    governor = _governor("ours", window, workspace)
    session = contextlib.ExitStack().enter_context(JsonlSessionStore(workspace).open("bench"))
    fed = 1  # the system prompt is passed apart, as the runner passes it
    recorded: Any = None

    def feed(messages: Messages) -> None:
        nonlocal fed
        session.append_many([(message, None) for message in messages[fed:]])
        fed = len(messages)

    def govern(messages: Messages) -> Governed:
        nonlocal recorded
        result = governor.govern(session.shared_history(), system=messages[0]["content"])
        state = result.state
        if state.to_be_recorded(recorded):
            session.append({}, state.to_record()["_meta"])
            recorded = state
        sent: Messages = [messages[0], *result.messages]
        return sent, result.tokens / result.budget, result.prefix.reason

    govern.feed = feed  # type: ignore[attr-defined]
    return govern


def _nanobot(window: int, workspace: Path) -> Any:
    import nanobot.utils.helpers as helpers
    from loguru import logger
    from nanobot.agent.context_governance import ContextGovernanceConfig, ContextGovernor
    from nanobot.agent.tools.registry import ToolRegistry

    def offline() -> Any:
        raise RuntimeError("tokenizer disabled for the benchmark: use the offline estimate")

    helpers._get_token_encoding = offline
    logger.remove()
    registry = ToolRegistry()

    def govern(messages: Messages) -> Governed:
        config = ContextGovernanceConfig(
            provider=SimpleNamespace(),
            model="bench",
            tools=registry,
            workspace=workspace,
            session_key="bench",
            max_tool_result_chars=MAX_TOOL_RESULT_CHARS,
            context_window_tokens=window,
            max_tokens=MAX_OUTPUT,
        )
        governor = ContextGovernor()
        out = governor.prepare_for_model(config, messages)
        with contextlib.suppress(Exception):  # its own failure leaves the prepared copy
            out = governor.fit_to_budget(config, out, tool_definitions=[])
        return out, float("nan"), None

    return govern


def _history(count: int, kind: str = "dirty") -> Messages:
    """`count` messages of the `kind` of history, its system prompt first."""
    if kind == "reference":
        return reference_history(count)
    return [{"role": "system", "content": SYSTEM_PROMPT}, *generate_history(count - 1)]


def _cause(reason: str | None) -> str:
    """What a call's `prefix.reason` says the request lost its prefix share to."""
    if reason is None:
        return "unknown"
    if reason.startswith("the messages sent before are unchanged"):
        return "appended"
    if "cut" in reason:
        return "cut"
    if "compacted" in reason:
        return "compaction"
    return "other"


def _turn_ends(history: Messages) -> list[int]:
    """Where the agent calls the model: before each user message after the first, and at the end."""
    users = [i for i, m in enumerate(history) if m.get("role") == "user"]
    return [*users[1:], len(history)]


def main() -> None:
    options = parser(__doc__.splitlines()[0])
    options.add_argument("--which", required=True)
    options.add_argument("--scenario", required=True, choices=["whole", "session", "prefix"])
    options.add_argument("--messages", type=int, required=True)
    options.add_argument("--window", type=int, default=128_000)
    options.add_argument("--history", choices=["reference", "dirty"], default="reference")
    args = options.parse_args()
    workspace = Path(tempfile.mkdtemp())

    sides = args.which.split(",")

    def build(which: str = sides[0]) -> Any:
        if which == "nanobot":
            return _nanobot(args.window, workspace)
        if which == "ours-session":
            return _ours_session(args.window, workspace)
        return _ours(which, args.window, workspace)

    text = json.dumps(_history(args.messages, args.history))
    figures: dict[str, Any] = {"which": args.which, "scenario": args.scenario}
    if args.scenario == "whole":
        # Several sides in one process take their samples in turn, so that a ratio
        # between them is not decided by how busy the machine was in between.
        for which in sides:
            build(which)(json.loads(text))  # warm-up: imports, the offload store
        samples: dict[str, list[float]] = {which: [] for which in sides}
        for _ in range(args.reps):
            for which in sides:
                govern, messages = build(which), json.loads(text)
                gc.collect()
                started = time.perf_counter()
                govern(messages)
                samples[which].append(time.perf_counter() - started)
        figures["seconds"] = samples[sides[0]]
        figures["by_which"] = samples
    elif args.scenario == "session" and len(sides) > 1:
        # Each side governs every call on a governor of its own, in turn call by call, so
        # that a ratio between them is not decided by how busy the machine was meanwhile.
        history = json.loads(text)
        governs = {which: build(which) for which in sides}
        timed: dict[str, list[float]] = {which: [] for which in sides}
        for end in _turn_ends(history):
            for which, govern in governs.items():
                feed = getattr(govern, "feed", None)
                if feed is not None:
                    feed(history[:end])
                started = time.perf_counter()
                govern(history[:end])
                timed[which].append(time.perf_counter() - started)
        figures["by_which"] = {
            which: {
                "calls": len(seconds),
                "seconds": seconds,
                "total_seconds": sum(seconds),
                "median_seconds": statistics.median(seconds),
            }
            for which, seconds in timed.items()
        }
        figures |= figures["by_which"][sides[0]]
    else:
        history = json.loads(text)
        govern = build()
        per_call, shares, fills = [], [], []
        lost: dict[str, float] = {}  # cause -> the prefix share the calls lost to it
        caused: dict[str, int] = {}  # cause -> how many calls
        previous: list[str] | None = None
        feed = getattr(govern, "feed", None)
        for end in _turn_ends(history):
            if feed is not None:
                feed(history[:end])
            started = time.perf_counter()
            sent, fill, reason = govern(history[:end])
            per_call.append(time.perf_counter() - started)
            if args.scenario != "prefix":
                continue
            encoded = [json.dumps(m, sort_keys=True) for m in sent]
            total = sum(map(len, encoded))
            if previous is not None:
                same = 0
                while same < min(len(encoded), len(previous)) and encoded[same] == previous[same]:
                    same += 1
                shares.append(sum(map(len, encoded[:same])) / total if total else 1.0)
                cause = _cause(reason)
                lost[cause] = lost.get(cause, 0.0) + 1.0 - shares[-1]
                caused[cause] = caused.get(cause, 0) + 1
            previous = encoded
            fills.append(fill)
        figures |= {
            "calls": len(per_call),
            "seconds": per_call,
            "total_seconds": sum(per_call),
            "median_seconds": statistics.median(per_call),
        }
        if args.scenario == "prefix":
            figures |= {
                "mean_reuse": statistics.fmean(shares),
                "calls_under_half": sum(share < 0.5 for share in shares),
                "compared_calls": len(shares),
                "mean_fill": statistics.fmean(fills) if args.which != "nanobot" else None,
                # Per cause, the mean over all compared calls of the share lost to it (they
                # add up to 1 - mean_reuse) and how many calls it was.
                "loss_by_cause": {
                    cause: {"mean_loss": share / len(shares), "calls": caused[cause]}
                    for cause, share in sorted(lost.items())
                }
                if shares
                else {},
            }
    write(args.out, figures)


if __name__ == "__main__":
    main()
