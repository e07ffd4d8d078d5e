"""The headless agent loop: one user turn, as many model rounds as it takes.

Each round: the system prompt from the sections; the persisted history,
governed (on a copy) into what the model sees; one model call with the tool
definitions; the reply persisted; its tool calls run by the executor (at most
``max_calls_per_reply`` of them: each one past it is answered with an error,
not run); their results persisted in full. The turn ends when the model
answers without tool calls, or after ``max_iterations`` rounds
(``TurnResult.max_iterations_reached``; the CLI exits 1 on it).

The runtime block (time, channel, plugin lines) is appended to the user's
message once, when the message is persisted. What the model sends is never
trusted to be well formed: an empty reply ends the turn, a malformed or
unknown call or a failing tool gets an ``Error...`` result like any other,
and the loop goes on. Only the provider failing for good ends a turn early
(:class:`~nanobot_core.errors.ProviderError`); whatever was persisted until
then stays, and the next turn's governance heals the history.

:class:`Runner` takes every part explicitly; :meth:`Runner.from_plugins`
builds them from a plugin manager.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import attrs

from nanobot_core._clip import a_type, clip
from nanobot_core._containment import describe, plugin_code
from nanobot_core._json_boundary import (
    MAX_ARGUMENT_VALUES,
    JSONLimitError,
    JSONSyntaxError,
    loads,
    viewable,
)
from nanobot_core._logging import get_logger
from nanobot_core.config import (
    DEFAULT_MAX_CALLS_PER_REPLY,
    ProviderConfig,
    reply_room_warning,
    source_prefix,
)
from nanobot_core.errors import (
    ConfigError,
    NanobotError,
    PluginError,
    PluginEscapeError,
    ProviderError,
    SessionError,
    SessionLockedError,
    WorkspaceError,
)
from nanobot_core.governance.continuity import (
    RECORD_VERSION,
    GovernanceState,
    is_governance_record,
    newest_state,
)
from nanobot_core.governance.messages import container_copy
from nanobot_core.kernel.context import workspace_problem
from nanobot_core.prompt import SectionContext, append_runtime_block, build_runtime_block
from nanobot_core.providers.base import ProgressCallback, Provider, ProviderReply, Usage
from nanobot_core.tools._repeats import RepeatedCalls
from nanobot_core.tools.base import ToolResult
from nanobot_core.tools.executor import (
    ERROR_HINT,
    Executor,
    ToolCallOutcome,
    ToolCallRequest,
    run_calls,
    stop_task,
)

if TYPE_CHECKING:
    from nanobot_core.kernel.manager import PluginManager

__all__ = [
    "CallRecord",
    "EmptyReply",
    "IterationLimitReached",
    "ModelReplied",
    "ModelWaiting",
    "ReplyCutOff",
    "ReplyRefused",
    "RequestTooLarge",
    "RoundReport",
    "Runner",
    "TooManyCalls",
    "ToolCallRecord",
    "ToolFinished",
    "ToolStarted",
    "TurnResult",
]

log = get_logger("nanobot_core.runner")

Message = dict[str, Any]
StopReason = Literal["answer", "empty_reply", "max_iterations"]

#: The finish reasons that say the reply was cut off at the output limit (OpenAI, Anthropic),
#: or where the request and the reply filled the model's context window (Anthropic's
#: ``model_context_window_exceeded``): its text, or the call it ends with, is incomplete.
CUT_OFF = frozenset({"length", "max_tokens", "model_context_window_exceeded"})
#: The finish reasons that say the provider's safety system stopped or withheld the reply
#: (Anthropic's ``refusal``, OpenAI's ``content_filter``): what text it has may be partial.
REFUSED = frozenset({"refusal", "content_filter"})
#: The finish reasons of `CUT_OFF` that the context window, not the output limit, set.
_WINDOW_FULL = frozenset({"model_context_window_exceeded"})


def _cut_by(finish_reason: str | None, *, settings: bool = True) -> str:
    """What cut a reply off, as the notices name it; for the user, with the `settings` that
    move it (the model has no use for those)."""
    if finish_reason in _WINDOW_FULL:
        said = f"the model's context window (finish_reason {finish_reason!r}"
        more = (
            ": the request and the reply filled it; a smaller governance.context_window or "
            "provider.max_tokens leaves more room"
        )
    else:
        said = f"the output limit (finish_reason {finish_reason!r}"
        more = "; provider.max_tokens or the server's own"
    return f"{said}{more if settings else ''})"


# -- the parts, as the loop needs them -------------------------------------------------------


class ToolDefinitions(Protocol):
    """The tool registry, as the loop sees it."""

    def definitions(self) -> list[dict[str, Any]]: ...


class ToolRunner(Protocol):
    """The executor, as the loop sees it: never raises, one outcome per call."""

    async def run(
        self, calls: Sequence[ToolCallRequest], *, repeats: RepeatedCalls | None = None
    ) -> list[ToolCallOutcome]: ...


class Governed(Protocol):
    """What governance hands back for one round (a ``GovernanceResult``)."""

    @property
    def messages(self) -> list[Message]: ...

    @property
    def report(self) -> Iterable[Any]: ...

    @property
    def tokens(self) -> int: ...

    @property
    def budget(self) -> int: ...

    @property
    def fits(self) -> bool: ...


class HistoryGovernor(Protocol):
    """The governor, as the loop sees it: works on a copy, never changes its input."""

    def govern(
        self, messages: Sequence[Mapping[str, Any]], *, system: str | None, tools: Sequence[Any]
    ) -> Governed: ...


class BuiltText(Protocol):
    """A built system prompt."""

    @property
    def text(self) -> str: ...


class SystemPromptBuilder(Protocol):
    """The prompt builder, as the loop sees it."""

    def build(self, ctx: SectionContext) -> BuiltText: ...


class SessionLike(Protocol):
    """Where the turn is persisted (a :class:`nanobot_core.sessions.Session`, over any store).

    Before each model call the runner reads the history with ``shared_history()``
    when the session has it (a `Session` does: the same message objects every
    call, never changed), else with ``history()``; and, just before the request,
    calls ``check_held()`` when the session has it (a `Session` does: it asks its
    store's lease), which raises SessionError when the reply could not be stored.
    """

    name: str

    def history(self) -> list[Message]: ...

    def append(self, message: Mapping[str, Any], meta: Mapping[str, Any] | None = None) -> None: ...

    def append_many(
        self, items: Sequence[tuple[Mapping[str, Any], Mapping[str, Any] | None]]
    ) -> None: ...


# -- progress events --------------------------------------------------------------------------


@attrs.frozen
class ToolStarted:
    """A tool call is about to run."""

    name: str
    call_id: str

    def describe(self) -> str:
        return f"tool {clip(self.name) or '(no name)'}: running"


@attrs.frozen
class ToolFinished:
    """A tool call has finished (or failed), after `duration` seconds."""

    name: str
    call_id: str
    duration: float
    is_error: bool

    def describe(self) -> str:
        outcome = "failed" if self.is_error else "done"
        return f"tool {clip(self.name) or '(no name)'}: {outcome} in {self.duration:.2f}s"


@attrs.frozen
class ModelWaiting:
    """A request for round `round` has gone to the model; the reply has not come yet."""

    round: int

    def describe(self) -> str:
        return f"model: waiting for the reply to round {self.round}"


@attrs.frozen
class ModelReplied:
    """The model's reply for round `round` came after `seconds` (retries included)."""

    round: int
    seconds: float

    def describe(self) -> str:
        return f"model: replied to round {self.round} in {self.seconds:.1f}s"


@attrs.frozen
class EmptyReply:
    """The model answered with neither text nor tool calls."""

    def describe(self) -> str:
        return "model: empty reply (no text, no tool calls); the turn ends without an answer"


@attrs.frozen
class ReplyRefused:
    """The provider stopped or withheld the model's reply to round `round` (`finish_reason`,
    one of `REFUSED`): its text, if any, may be partial, and it is the turn's answer all the
    same when it made no tool call."""

    round: int
    finish_reason: str

    def describe(self) -> str:
        return (
            f"model: the reply to round {self.round} was stopped by the provider's safety "
            f"system (finish_reason {self.finish_reason!r}); what text it has may be partial"
        )


@attrs.frozen
class ReplyCutOff:
    """The model's reply to round `round` was cut off (`finish_reason`, one of `CUT_OFF`).

    `answer` says the reply made no tool call, so it ends the turn and its text
    (the answer) is incomplete.
    """

    round: int
    finish_reason: str
    answer: bool = False

    def describe(self) -> str:
        limit = (
            f"model: the reply to round {self.round} was cut off at {_cut_by(self.finish_reason)}"
        )
        if self.answer:
            return f"{limit}; the answer is incomplete"
        return f"{limit}; a call whose arguments it cut short is not run"


@attrs.frozen
class RequestTooLarge:
    """Governance could not bring the request within the input budget; it is sent anyway."""

    tokens: int
    budget: int

    def describe(self) -> str:
        return (
            f"warning: the request takes {self.tokens} tokens, more than the input budget of "
            f"{self.budget} (governance.context_window - max_output - safety_margin, or "
            "governance.input_limit); the model may refuse it or cut it"
        )


@attrs.frozen
class TooManyCalls:
    """The reply to round `round` asked for `asked` tool calls: only the first `limit` run."""

    round: int
    asked: int
    limit: int

    def describe(self) -> str:
        return (
            f"warning: the reply to round {self.round} asked for {self.asked} tool calls, "
            f"more than tools.max_calls_per_reply ({self.limit}): the first {self.limit} run, "
            f"the other {self.asked - self.limit} are answered with an error and not run"
        )


@attrs.frozen
class IterationLimitReached:
    """The turn stopped after `max_iterations` rounds with tool calls still coming."""

    max_iterations: int

    def describe(self) -> str:
        return (
            f"stopped after {self.max_iterations} round(s) (runner.max_iterations); "
            "the model had not finished"
        )


# -- the result of a turn ---------------------------------------------------------------------


@attrs.frozen
class ToolCallRecord:
    """One tool call of the turn, with its timing."""

    round: int
    call_id: str
    name: str
    arguments: dict[str, Any]
    is_error: bool
    duration: float
    repairs: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "id": self.call_id,
            "name": self.name,
            # As a tool's own check returned them, they may hold what JSON cannot.
            "arguments": viewable(self.arguments),
            "error": self.is_error,
            "duration": round(self.duration, 6),
            "repairs": list(self.repairs),
        }


@attrs.frozen
class RoundReport:
    """What governance did before one model call, and the size of the request."""

    round: int
    entries: list[Any]
    tokens: int
    budget: int
    fits: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "tokens": self.tokens,
            "budget": self.budget,
            "fits": self.fits,
            "report": [_report_json(entry) for entry in self.entries],
        }


@attrs.frozen
class CallRecord:
    """One model call of the turn: which model answered, why it stopped, what it cost."""

    round: int
    model: str | None
    finish_reason: str | None
    usage: Usage

    def to_json(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "model": self.model,
            "finish_reason": self.finish_reason,
            "usage": self.usage.to_json(),
        }


@attrs.frozen
class TurnResult:
    """Everything about one turn: the answer, what was persisted, what ran, what it cost."""

    session: str
    answer: str
    messages: list[Message]
    tool_calls: list[ToolCallRecord]
    governance: list[RoundReport]
    usage: Usage
    iterations: int
    stop_reason: StopReason
    calls: list[CallRecord] = attrs.field(factory=list)
    #: Whether the reply that ended the turn stopped at the output limit: its text is incomplete.
    cut_off: bool = False

    @property
    def max_iterations_reached(self) -> bool:
        """Whether the turn was cut off by ``max_iterations``."""
        return self.stop_reason == "max_iterations"

    def to_json(self) -> dict[str, Any]:
        """The object ``nanobot-core run --json`` prints."""
        return {
            "session": self.session,
            "answer": self.answer,
            "stop_reason": self.stop_reason,
            "iterations": self.iterations,
            "max_iterations_reached": self.max_iterations_reached,
            "cut_off": self.cut_off,
            "usage": self.usage.to_json(),
            "calls": [call.to_json() for call in self.calls],
            "messages": self.messages,
            "tool_calls": [call.to_json() for call in self.tool_calls],
            "governance": [report.to_json() for report in self.governance],
        }


def _report_json(entry: Any) -> Any:
    to_json = getattr(entry, "to_json", None)
    return to_json() if callable(to_json) else entry


# -- the loop ---------------------------------------------------------------------------------


def _local_now() -> datetime:
    return datetime.now().astimezone()


def _no_lines() -> list[str]:
    return []


class Runner:
    """Runs agent turns against one session.

    `runtime_lines` is called once per turn for the plugin lines of the
    runtime block; `progress` receives :class:`ToolStarted`,
    :class:`ToolFinished`, :class:`EmptyReply`, :class:`ReplyCutOff`, :class:`ReplyRefused`,
    :class:`RequestTooLarge`,
    :class:`TooManyCalls` and :class:`IterationLimitReached` (the provider reports its
    retries to its own callback). `prompt_context` is what the sections render from.

    Of one reply's tool calls the first `max_calls_per_reply` run (0: all); each
    one past them is answered with an error result saying why, not run.
    """

    def __init__(
        self,
        provider: Provider,
        registry: ToolDefinitions,
        executor: ToolRunner,
        governor: HistoryGovernor,
        prompt_builder: SystemPromptBuilder,
        session: SessionLike,
        *,
        prompt_context: SectionContext | None = None,
        runtime_lines: Callable[[], Iterable[str]] = _no_lines,
        max_iterations: int = 20,
        max_identical_calls: int = 2,
        max_calls_per_reply: int = DEFAULT_MAX_CALLS_PER_REPLY,
        progress: ProgressCallback | None = None,
        channel: str | None = None,
        chat_id: str | None = None,
        clock: Callable[[], datetime] = _local_now,
        provider_owner: str | None = None,
        provider_deadline: float | None = None,
    ) -> None:
        if max_iterations < 1:
            raise ValueError(f"max_iterations must be at least 1, got {max_iterations}")
        if max_calls_per_reply < 0:
            raise ValueError(
                f"max_calls_per_reply must be at least 0 (0: no limit), got {max_calls_per_reply}"
            )
        if prompt_context is not None:
            _check_workspace(prompt_context.workspace, "prompt_context.workspace")
        for argument, value in (("channel", channel), ("chat_id", chat_id)):
            # Written into every user message's runtime block, where each value is a JSON string.
            if value is not None and not isinstance(value, str):
                raise TypeError(
                    f"Runner: {argument} must be a str or None, got {type(value).__name__}"
                )
        self.provider = provider
        self.registry = registry
        self.executor = executor
        self.governor = governor
        self.prompt_builder = prompt_builder
        self.session = session
        self.prompt_context = prompt_context or _default_prompt_context(session.name)
        self.runtime_lines = runtime_lines
        self.max_iterations = max_iterations
        self.max_identical_calls = max_identical_calls
        self.max_calls_per_reply = max_calls_per_reply
        self.progress = progress
        self.channel = channel
        self.chat_id = chat_id
        self.clock = clock
        # Who contributed the provider (``plugin 'x' from dist 1.0``), named when it raises.
        self.provider_owner = provider_owner
        # The longest one model call may take (None: no limit); a provider past it is stopped.
        self.provider_deadline = provider_deadline
        self._governance_state = _restore_governance(governor, session)
        self._turn_lock = threading.Lock()  # held by the turn running, if any

    @classmethod
    def from_plugins(
        cls,
        pm: PluginManager,
        provider_name: str | None = None,
        *,
        session: SessionLike,
        max_iterations: int | None = None,
        progress: ProgressCallback | None = None,
        channel: str | None = "cli",
    ) -> Runner:
        """A runner whose every part comes from the plugin manager and its config.

        Raises ConfigError when no plugin provides `provider_name`
        (default: ``config.provider.name``). Same as
        ``prepare_from_plugins(...)(session)``.
        """
        build = cls.prepare_from_plugins(
            pm, provider_name, max_iterations=max_iterations, progress=progress, channel=channel
        )
        return build(session)

    @classmethod
    def prepare_from_plugins(
        cls,
        pm: PluginManager,
        provider_name: str | None = None,
        *,
        max_iterations: int | None = None,
        progress: ProgressCallback | None = None,
        channel: str | None = "cli",
    ) -> Callable[[SessionLike], Runner]:
        """Every part of `from_plugins` built now; the runner when given its session.

        Whatever a bad config fails (the provider, its base URL, a stage's options)
        fails here, so a caller can check it all before it opens (and so creates)
        the session. Call the result once: its parts, the governor among them,
        are one runner's (a governor remembers one session's history from call to
        call). A second call raises RuntimeError, building nothing: call
        `prepare_from_plugins` again for another session, or another runner.
        """
        config = pm.config
        _check_workspace(pm.context.workspace, "the plugin manager's workspace")
        name = provider_name or config.provider.name
        contributions = {c.name: c for c in pm.contributions("provider")}
        if name not in contributions:
            known = ", ".join(sorted(contributions)) or "none"
            raise ConfigError(
                f"{source_prefix(name)}provider.name: no provider named {name!r} "
                f"(available: {known})"
            )
        owner = contributions[name].plugin.describe()
        try:
            with plugin_code(owner):
                provider = contributions[name].item(config.provider, progress=progress)
        except Exception as exc:
            # The factory's own NanobotError (a ConfigError about its settings) goes on as
            # it is; a PluginEscapeError says only what was raised, so it is named here.
            if isinstance(exc, NanobotError) and not isinstance(exc, PluginEscapeError):
                raise
            raise PluginError(
                f"{owner} failed: provider {name!r} could not be created: {describe(exc)}"
            ) from None
        room = reply_room_warning(config)
        if room is not None:  # said once per runner built, before any request
            log.warning(room)
        registry = pm.tool_registry()
        executor = Executor(
            registry, default_timeout=config.tools.timeout, hooks=pm.tool_call_hooks()
        )
        governor = pm.governor()
        prompt_builder = pm.prompt_builder()
        deadline = provider_deadline(config.provider)
        unused = threading.Lock()  # taken by the one call of `build`, never given back

        def build(session: SessionLike) -> Runner:
            if not unused.acquire(blocking=False):
                raise RuntimeError(
                    "the build function of Runner.prepare_from_plugins was called already: "
                    "its parts (the governor among them) belong to one runner of one session; "
                    "call prepare_from_plugins again for another session"
                )
            return cls(
                provider,
                registry,
                executor,
                governor,
                prompt_builder,
                session,
                prompt_context=SectionContext(
                    workspace=pm.context.workspace,
                    channel=channel,
                    session=session.name,
                    config=config,
                ),
                runtime_lines=pm.runtime_lines,
                max_iterations=max_iterations or config.runner.max_iterations,
                max_identical_calls=config.tools.max_identical_calls,
                max_calls_per_reply=config.tools.max_calls_per_reply,
                progress=progress,
                channel=channel,
                provider_owner=owner,
                provider_deadline=deadline,
            )

        return build

    def run_turn(self, user_text: str) -> TurnResult:
        """Run one turn to its end (blocking); see :meth:`run_turn_async`.

        Runs on an event loop of its own, so it raises RuntimeError where a loop
        already runs in this thread: await `run_turn_async` there.
        """
        return run_calls(self.run_turn_async(user_text))

    async def run_turn_async(self, user_text: str) -> TurnResult:
        """Persist the user's message, then call the model and run tools until it answers.

        A runner runs one turn at a time: called while one of its turns runs (on
        this loop or in another thread), it raises `SessionLockedError` at once,
        storing nothing, since the two turns' messages would interleave in the
        session. `user_text` that is not a str (content parts, say) is a
        `TypeError`, storing nothing: the runtime block is appended to the text.
        """
        if not isinstance(user_text, str):
            raise TypeError(
                f"Runner.run_turn: user_text must be a str, got {type(user_text).__name__}"
            )
        if not self._turn_lock.acquire(blocking=False):
            raise SessionLockedError(
                f"session {self.session.name!r} is in use by another turn of this Runner; "
                "a Runner runs one turn at a time (wait for it, or use a Runner per session)"
            )
        try:
            return await self._run_turn(user_text)
        finally:
            self._turn_lock.release()

    async def aclose(self) -> None:
        """Close what the provider keeps open on this event loop, when it has an ``aclose``.

        The built-in provider keeps its connections from call to call, one set per event
        loop, and closes them when the loop ends (as the loop of `run_turn` does after each
        turn); a host that runs turns on a loop of its own awaits this when it is done with
        the runner. A provider without ``aclose`` is left as it is. What its ``aclose``
        raises is a ProviderError naming it, as for ``complete``.
        """
        close = getattr(self.provider, "aclose", None)
        if close is None:
            return
        try:
            with plugin_code(self.provider_owner or f"provider {self._provider_name()!r}"):
                await close()
        except PluginEscapeError as exc:
            raise ProviderError(f"{self._provider_label()} {exc}") from None
        except NanobotError:
            raise
        except Exception as exc:
            raise ProviderError(f"{self._provider_label()} raised {describe(exc)}") from exc

    async def _run_turn(self, user_text: str) -> TurnResult:
        turn = _Turn(self.session, RepeatedCalls(self.max_identical_calls))
        system = self.prompt_builder.build(self.prompt_context).text
        tools = self.registry.definitions()
        now = self.clock()
        turn.append(self._user_message(user_text, now), {"time": now.isoformat()})
        for iteration in range(1, self.max_iterations + 1):
            turn.iterations = iteration
            reply = await self._model_round(turn, iteration, system, tools)
            if not reply.tool_calls:
                cut_off = reply.finish_reason in CUT_OFF
                if reply.content.strip():
                    return turn.result(reply.content, "answer", cut_off=cut_off)
                self._emit(EmptyReply())
                return turn.result(reply.content, "empty_reply", cut_off=cut_off)
            await self._run_tools(turn, iteration, reply.tool_calls, reply.finish_reason)
        self._emit(IterationLimitReached(self.max_iterations))
        log.info(
            "turn stopped at max_iterations",
            session=self.session.name,
            max_iterations=self.max_iterations,
        )
        return turn.result("", "max_iterations")

    def _user_message(self, user_text: str, now: datetime) -> Message:
        block = build_runtime_block(
            now=now, channel=self.channel, chat_id=self.chat_id, lines=list(self.runtime_lines())
        )
        return {"role": "user", "content": append_runtime_block(user_text, block)}

    async def _model_round(
        self, turn: _Turn, iteration: int, system: str, tools: list[dict[str, Any]]
    ) -> ProviderReply:
        governed = self.governor.govern(self._history(), system=system, tools=tools)
        self._record_governance(getattr(governed, "state", None))
        turn.governance.append(
            RoundReport(
                iteration, list(governed.report), governed.tokens, governed.budget, governed.fits
            )
        )
        if not governed.fits:
            self._warn(RequestTooLarge(governed.tokens, governed.budget))
        self._check_held(iteration)
        started = time.monotonic()
        self._emit(ModelWaiting(iteration))
        reply = await self._complete(_with_system(system, governed.messages), tools, governed)
        self._emit(ModelReplied(iteration, time.monotonic() - started))
        if reply.finish_reason in CUT_OFF:
            self._emit(ReplyCutOff(iteration, reply.finish_reason, answer=not reply.tool_calls))
        elif reply.finish_reason in REFUSED:
            self._emit(ReplyRefused(iteration, reply.finish_reason))
        turn.usage += reply.usage
        turn.calls.append(CallRecord(iteration, reply.model, reply.finish_reason, reply.usage))
        turn.append(
            reply.message,
            {
                "time": self.clock().isoformat(),
                "round": iteration,
                "model": reply.model,
                "finish_reason": reply.finish_reason,
                "usage": reply.usage.to_json(),
                "seconds": round(time.monotonic() - started, 3),
            },
        )
        # A record line, not a message: what the call cost, prompt-cache figures included.
        self.session.append(
            {},
            {
                "kind": "usage",
                "round": iteration,
                "model": reply.model,
                "usage": reply.usage.to_json(),
                "turn": turn.usage.to_json(),
            },
        )
        return reply

    def _check_held(self, iteration: int) -> None:
        """End the turn before model request `iteration` when the session's lease is lost.

        Its reply could not be stored: a paid call would be wasted, and the turn would
        end on the append anyway. Asked last, after governance, which may have waited on
        the store. A session without ``check_held`` is not asked.
        """
        check = getattr(self.session, "check_held", None)
        if check is None:
            return
        try:
            check()
        except SessionError as exc:
            raise SessionError(
                f"{exc}; the model request of round {iteration} was not sent"
            ) from None

    def _history(self) -> Sequence[Mapping[str, Any]]:
        """The history to govern: the session's shared messages when it gives them out.

        Not a copy per call: a copy costs the whole session, and the governor, which
        remembers what it learned of each message by the object, would learn it all again.
        """
        shared = getattr(self.session, "shared_history", None)
        if callable(shared):
            messages: Sequence[Mapping[str, Any]] = shared()
            return messages
        return self.session.history()

    async def _complete(
        self, messages: list[Mapping[str, Any]], tools: list[dict[str, Any]], governed: Governed
    ) -> ProviderReply:
        """One provider call, ended with a ProviderError at `provider_deadline`."""
        deadline = self.provider_deadline
        if deadline is None:
            return await self._call_provider(messages, tools, governed)
        task = asyncio.create_task(self._call_provider(messages, tools, governed))
        name, owner = f"provider {self._provider_name()!r}", self.provider_owner or ""
        try:
            await asyncio.wait((task,), timeout=deadline)
        except asyncio.CancelledError:  # our caller is being cancelled: stop the call, go on
            await stop_task(task, name, owner, "its caller was cancelled")
            raise
        if task.done():
            return task.result()
        await stop_task(task, name, owner, "it did not answer")
        raise ProviderError(
            f"{self._provider_label()} did not answer within {deadline:g}s (provider.timeout "
            "for each of 1 + provider.max_retries attempts, provider.retry_after_cap "
            f"between them, and {PROVIDER_DEADLINE_MARGIN:g}s more)"
        )

    def _provider_name(self) -> str:
        return str(getattr(self.provider, "name", None) or type(self.provider).__name__)

    def _provider_label(self) -> str:
        """``provider 'openai'``, and ``of <its plugin>`` when that is known: for its errors."""
        owner = f" of {self.provider_owner}" if self.provider_owner else ""
        return f"provider {self._provider_name()!r}{owner}"

    async def _call_provider(
        self, messages: list[Mapping[str, Any]], tools: list[dict[str, Any]], governed: Governed
    ) -> ProviderReply:
        """One provider call; a provider that declares ``accepts_prefix`` hears where it changed.

        It is handed copies of `messages` and `tools`, unless it declares
        ``leaves_input_unchanged`` (it only reads them), as the built-in one does.

        ``prefix`` is the index, in `messages`, of the first message that differs
        from the previous call's (None when the prefix was kept or nothing says):
        what a provider with an explicit prompt cache needs to place its marks.
        """
        try:
            # A provider's SystemExit (or other BaseException) must not end the process.
            with plugin_code(self.provider_owner or f"provider {self._provider_name()!r}"):
                if not _leaves_input_unchanged(self.provider):
                    # Copies (every dict and list; strings are shared), costing what is sent:
                    # where governance left a message alone it hands back the session's own
                    # object, and what it made it keeps for the next call, so a provider
                    # that edited what it was given would change every later request.
                    messages, tools = container_copy(messages), container_copy(tools)
                complete: Any = self.provider.complete
                if not getattr(self.provider, "accepts_prefix", False):
                    reply: object = await complete(messages, tools)
                else:
                    changed_at = _changed_at(governed)
                    if changed_at is not None and len(messages) > len(governed.messages):
                        changed_at += 1  # the system prompt goes first
                    reply = await complete(messages, tools, prefix=changed_at)
        except PluginEscapeError as exc:  # said only what was raised: named here
            raise ProviderError(f"{self._provider_label()} {exc}") from None
        except ProviderError as exc:
            named = self._named_provider_error(exc)
            if named is exc:
                raise
            raise named from exc
        except NanobotError:
            raise
        except Exception as exc:  # a provider's own bug: named, not a traceback
            raise ProviderError(f"{self._provider_label()} raised {describe(exc)}") from exc
        if not isinstance(reply, ProviderReply):
            # Read further on (`reply.tool_calls`), anything else would end the turn in an
            # AttributeError traceback that names neither the provider nor its plugin.
            raise ProviderError(
                f"{self._provider_label()} returned {a_type(reply)} from complete, not a "
                "nanobot_core.providers.ProviderReply"
            )
        if reply.finish_reason is not None and type(reply.finish_reason) is not str:
            # Compared with the known reasons and stored: a list would raise a TypeError.
            raise ProviderError(
                f"{self._provider_label()} returned a finish_reason of "
                f"{a_type(reply.finish_reason)}, not a str or None"
            )
        return reply

    def _named_provider_error(self, exc: ProviderError) -> ProviderError:
        """`exc` worded so that the user is told which provider failed, and whose it is.

        Whatever the provider's own message names (most name the URL they sent to), the
        provider is said once, at the one place every call goes through; a plugin's
        provider is named with its plugin and version, as its other failures are, while the
        built-in one keeps its short ``provider 'openai': ...``.
        """
        name = self._provider_name()
        text, short, label = str(exc), f"provider {name!r}", self._provider_label()
        owner = self.provider_owner or ""
        if owner.startswith(_BUILTIN_OWNER) or label == short:
            return exc if text.startswith(short) else ProviderError(f"{short}: {text}")
        if text.startswith(label):
            return exc
        if text.startswith(short):  # "provider 'x': ..." or "provider 'x' did not ..."
            return ProviderError(label + text[len(short) :])
        # A message that begins by naming the plugin's distribution and version (as a
        # provider used on its own must) goes on from the label that ends with them.
        release = owner.rpartition(" from ")[2] if " from " in owner else ""
        if release and text.startswith(release + " "):
            return ProviderError(label + text[len(release) :])
        return ProviderError(f"{label}: {text}")

    async def _run_tools(
        self,
        turn: _Turn,
        iteration: int,
        calls: list[dict[str, Any]],
        finish_reason: str | None = None,
    ) -> None:
        requests = [_request(call) for call in calls]
        limit = self.max_calls_per_reply
        # Past the limit a call is answered, so that the session stays paired, but not run:
        # a reply of thousands of calls would otherwise have them all run at once.
        over = requests[limit:] if limit else []
        if over:
            requests = requests[:limit]
            self._warn(TooManyCalls(iteration, len(calls), limit))
        # A reply cut off at the output limit may end inside a call's arguments: repaired,
        # they would run with a guess (a file written half), so such a call is not run.
        cut = {
            request.id: _cut_off_outcome(request, finish_reason)
            for request in requests
            if finish_reason in CUT_OFF and not _complete_arguments(request.arguments)
        }
        runnable = [request for request in requests if request.id not in cut]
        # Only what runs is shown running and finished: `ReplyCutOff` says a cut call is not.
        for request in runnable:
            self._emit(ToolStarted(request.name, request.id))
        done = await self.executor.run(runnable, repeats=turn.repeats) if runnable else []
        outcomes = {**cut, **{outcome.call_id: outcome for outcome in done}}
        # One result per call, in call order, even if the executor broke its contract; the
        # results of a round are persisted as one batch, so a turn cut off here leaves either
        # all of them or none (the next call's governance backfills the missing ones).
        results: list[tuple[Message, Mapping[str, Any]]] = []
        finished: list[ToolCallOutcome] = []
        for request in requests:
            outcome = outcomes.get(request.id)
            if outcome is None:
                log.error("executor returned no outcome for a call", call_id=request.id)
                results.append((_missing_result(request), {"round": iteration}))
                continue
            results.append(
                (
                    _result_message(outcome),
                    {
                        "round": iteration,
                        "duration": round(outcome.duration, 6),
                        "error": outcome.is_error,
                        "repairs": list(outcome.repairs),
                    },
                )
            )
            finished.append(outcome)
        refused = [_over_limit_outcome(request, len(calls), limit) for request in over]
        results.extend(
            (
                _result_message(outcome),
                {"round": iteration, "duration": 0.0, "error": True, "repairs": []},
            )
            for outcome in refused
        )
        turn.append_many(results)
        for outcome in finished:
            turn.tool_calls.append(
                ToolCallRecord(
                    iteration,
                    outcome.call_id,
                    outcome.name,
                    dict(outcome.arguments),
                    outcome.is_error,
                    outcome.duration,
                    list(outcome.repairs),
                )
            )
            if outcome.call_id not in cut:
                self._emit(
                    ToolFinished(outcome.name, outcome.call_id, outcome.duration, outcome.is_error)
                )
        # Shown once for them all (`TooManyCalls`), not as a finished tool each: none ran.
        turn.tool_calls.extend(
            ToolCallRecord(iteration, outcome.call_id, outcome.name, {}, True, 0.0, [])
            for outcome in refused
        )

    def _record_governance(self, state: GovernanceState | None) -> None:
        """Append a governance record when the governor's decisions moved (never rewriting)."""
        if not isinstance(state, GovernanceState):
            return
        if not state.to_be_recorded(self._governance_state):
            return  # nothing decided yet, or nothing new: nothing a restart needs
        record = state.to_record()
        self.session.append({}, record["_meta"])
        self._governance_state = state

    def _warn(self, event: RequestTooLarge | TooManyCalls) -> None:
        """A warning: to the progress callback, or, with nobody watching, to the log (stderr)."""
        if self.progress is None:
            log.warning(event.describe())
        else:
            self._emit(event)

    def _emit(self, event: Any) -> None:
        if self.progress is not None:
            self.progress(event)


class _Turn:
    """What one turn has appended and measured so far."""

    def __init__(self, session: SessionLike, repeats: RepeatedCalls) -> None:
        self.session = session
        self.repeats = repeats
        self.messages: list[Message] = []
        self.tool_calls: list[ToolCallRecord] = []
        self.governance: list[RoundReport] = []
        self.usage = Usage()
        self.calls: list[CallRecord] = []
        self.iterations = 0

    def append(self, message: Message, meta: Mapping[str, Any]) -> None:
        self.session.append(message, meta)
        self.messages.append(message)

    def append_many(self, items: Sequence[tuple[Message, Mapping[str, Any]]]) -> None:
        self.session.append_many(items)
        self.messages.extend(message for message, _ in items)

    def result(self, answer: str, stop_reason: StopReason, *, cut_off: bool = False) -> TurnResult:
        return TurnResult(
            session=self.session.name,
            answer=answer,
            messages=list(self.messages),
            tool_calls=list(self.tool_calls),
            governance=list(self.governance),
            usage=self.usage,
            iterations=self.iterations,
            stop_reason=stop_reason,
            calls=list(self.calls),
            cut_off=cut_off,
        )


#: Seconds past the built-in provider's own limits before a model call is stopped: a
#: provider that keeps to them (its last attempt times out right at the sum) must end
#: first, with its own error ("gave up after N attempt(s)"), not be cut off at the same time.
PROVIDER_DEADLINE_MARGIN = 2.0


def provider_deadline(config: ProviderConfig) -> float | None:
    """The longest one model call may take: what the built-in provider's own limits allow.

    ``provider.timeout`` for each of ``1 + provider.max_retries`` attempts, and
    ``provider.retry_after_cap`` before each retry, and `PROVIDER_DEADLINE_MARGIN`.
    The built-in provider ends within it on its own, with its own error; it
    bounds a plugin's provider that never answers. None (no limit) when
    ``provider.timeout`` is infinite.
    """
    retries = max(config.max_retries, 0)
    deadline = config.timeout * (retries + 1) + config.retry_after_cap * retries
    return deadline + PROVIDER_DEADLINE_MARGIN if math.isfinite(deadline) else None


def _leaves_input_unchanged(provider: object) -> bool:
    """Whether `provider` declares ``leaves_input_unchanged = True`` itself: on its own
    class or on the object, not inherited. A subclass of a provider that declares it (of
    ``OpenAIProvider``, say) may change what the parent only read: it is handed copies
    unless it declares it again."""
    key = "leaves_input_unchanged"
    own = getattr(provider, "__dict__", {})
    declared = own[key] if key in own else vars(type(provider)).get(key)
    return declared is True


def _changed_at(governed: Governed) -> int | None:
    """``governed.prefix.changed_at`` when governance says the prefix sent before was not kept."""
    prefix = getattr(governed, "prefix", None)
    if prefix is None or getattr(prefix, "kept", True):
        return None
    changed_at = getattr(prefix, "changed_at", None)
    return changed_at if type(changed_at) is int and changed_at >= 0 else None


def _restore_governance(governor: Any, session: Any) -> GovernanceState | None:
    """Hand the governor the newest valid governance record of the session, if any.

    Found with the session's ``newest_lines`` when it has one (a `Session` does:
    only the records looked at are copied), else among its ``records``. A damaged
    record newer than the one restored (it says it is one, but its fields are
    not a state: a line edited by hand, or cut) is warned about, naming the
    session, its file and line and what is wrong, and passed over; so is one a
    newer nanobot-core wrote (its ``version`` above `RECORD_VERSION`), the
    warning naming the version found and the one known. The session is never
    rewritten, and the record, only ``_meta``, is never sent.
    """
    restore = getattr(governor, "restore", None)
    if not callable(restore):
        return None
    lines = getattr(session, "newest_lines", None)
    if callable(lines):
        found: Iterable[tuple[int, Any]] = lines(is_governance_record)
    elif callable(newest := getattr(session, "newest_record", None)):
        # It gives the newest valid record alone: none is passed over, so none is numbered.
        record = newest(_is_governance_record)
        found = [] if record is None else [(0, record)]
    else:
        records = getattr(session, "records", None)
        if not isinstance(records, list):
            return None
        found = (
            (number, record)
            for number, record in reversed(list(enumerate(records, start=1)))
            if is_governance_record(record)
        )
    state, line, passed = newest_state(found)
    restored = (
        "none: the history is governed whole"
        if state is None
        else f"the older record on line {line}"
    )
    location = getattr(session, "location", None)
    where = {
        "session": getattr(session, "name", None),
        **({"location": location} if isinstance(location, str) else {}),
    }
    for record in passed:
        if record.newer_version is not None:
            # Not damage: a newer nanobot-core wrote it, in a format this one does not know.
            log.warning(
                "governance record written by a newer nanobot-core passed over",
                **where,
                line=record.line,
                version=record.newer_version,
                known_version=RECORD_VERSION,
                restored=restored,
            )
        else:
            log.warning(
                "damaged governance record passed over",
                **where,
                line=record.line,
                problem=record.problem,
                restored=restored,
            )
    if state is not None:
        restore(state)
    return state


def _is_governance_record(record: Mapping[str, Any]) -> bool:
    return GovernanceState.from_record(record) is not None


# How `PluginRecord.describe` begins for a built-in plugin: its provider's errors stay short.
_BUILTIN_OWNER = "built-in plugin "


def _with_system(system: str, governed: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The request messages: the system prompt first, then the governed history."""
    return [{"role": "system", "content": system}, *governed] if system else list(governed)


def _request(call: Mapping[str, Any]) -> ToolCallRequest:
    """The executor's view of a (normalised) call; a missing name becomes "" (an unknown tool)."""
    function = call.get("function")
    function = function if isinstance(function, Mapping) else {}
    name = function.get("name")
    arguments = function.get("arguments")
    return ToolCallRequest(str(call["id"]), name if isinstance(name, str) else "", arguments)


def _result_message(outcome: ToolCallOutcome) -> Message:
    message: Message = {
        "role": "tool",
        "tool_call_id": outcome.call_id,
        "content": str(outcome.result),
    }
    if outcome.name:
        # Gemini-backed endpoints reject a function response without its name.
        message["name"] = outcome.name
    return message


def _complete_arguments(arguments: object) -> bool:
    """Whether a call's arguments are whole: not text that stops short of a JSON document.

    Read within the core's JSON limits, as the executor reads them: text nested too
    deep for Python's parser (a model looping on brackets until the output limit)
    is no RecursionError here, and arguments of more than `MAX_ARGUMENT_VALUES`
    values are not decoded. Whole JSON outside the limits counts as whole: the
    executor refuses it, saying why.
    """
    if not isinstance(arguments, str):
        return True
    try:
        loads(arguments, keep_nonfinite=True, max_values=MAX_ARGUMENT_VALUES)
    except JSONSyntaxError:
        return False
    except JSONLimitError:
        return True
    return True


def _cut_off_outcome(request: ToolCallRequest, finish_reason: str | None) -> ToolCallOutcome:
    """The answer to a call whose arguments the output limit cut short: not run, and why."""
    return _not_run(
        request,
        f"the reply was cut off at {_cut_by(finish_reason, settings=False)} "
        f"before the arguments of this call {_to_tool(request)}were complete, so it was not "
        "run. Make the call again with shorter arguments, or split the work into smaller calls.",
    )


def _over_limit_outcome(request: ToolCallRequest, asked: int, limit: int) -> ToolCallOutcome:
    """The answer to a call past ``max_calls_per_reply``: not run, and why."""
    return _not_run(
        request,
        f"this call {_to_tool(request)}was not run: the reply asked for {asked} tool calls, "
        f"and at most {limit} run per reply (tools.max_calls_per_reply). Ask for fewer calls "
        "at once: make this call again in a later reply if it is still needed.",
    )


def _to_tool(request: ToolCallRequest) -> str:
    """``to tool "NAME" `` for a call that names its tool, else nothing."""
    return f'to tool "{clip(request.name)}" ' if request.name else ""


def _not_run(request: ToolCallRequest, why: str) -> ToolCallOutcome:
    """The error result of a call the runner did not run, saying `why`."""
    text = str(ToolResult.error(why))
    # The name the result is kept under, clipped as the registry clips an unknown one.
    return ToolCallOutcome(
        request.id, clip(request.name), {}, ToolResult(text + ERROR_HINT, is_error=True)
    )


def _missing_result(request: ToolCallRequest) -> Message:
    return {
        "role": "tool",
        "tool_call_id": request.id,
        "content": "Error: the tool call produced no result.",
    }


def _check_workspace(workspace: Path, what: str) -> None:
    """Refuse to build a runner for a workspace that is no folder (yet): `WorkspaceError`.

    A plugin manager accepts a folder not made yet (a program may make it after
    building one); by the time a runner is built it must be there, or the file
    tools would fail at their first call, each with a system error.
    """
    problem = workspace_problem(workspace)
    if problem is None:
        return
    todo = (
        "make the folder before building the runner, or give the folder the agent works in"
        if problem == "does not exist"
        else "give the folder the agent works in"
    )
    raise WorkspaceError(f"Runner: {what} {str(workspace)!r} {problem}: {todo}")


def _default_prompt_context(session_name: str) -> SectionContext:
    return SectionContext(workspace=Path.cwd().resolve(), session=session_name)
