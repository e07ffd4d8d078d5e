"""The stage author's API: a stage (`Stage`, `StageOutcome`) and what it gets (`StageContext`).

A governance stage is a named pure function over messages, placed by phase.

A stage function takes ``(messages, ctx)`` and returns a `StageOutcome` (or just
the list of messages, in which case the governor compares it with the input).
It should not mutate what it is given (it returns new dicts for the messages it
changes and shares the others); the governor hands it a copy all the same, so
the caller's history is safe from any stage. With nothing to do it returns the
very list it received.

What makes a stage cheap is declared on it, the same way for a built-in and a
plugin (see docs/governance.md, "Declarations"):

- `acts_on`: the kinds of work it has (`WORK_KINDS`): it changes nothing
  unless the history holds one of them, and then only the messages that do
  (plus results of calls it drops, and messages it adds). The governor skips
  it when none is present, may recognise a clean history without running it,
  and may leave out history that cannot fit before it runs.
- `widened_by`: options that widen its work beyond `acts_on` (when one is
  configured, the stage always runs).
- `per_message`: its output for a message depends on that message alone
  (and its options). The governor applies it one message at a time, to a copy
  of that message, only to the messages its `acts_on` kinds are found in, and
  remembers the outcome per message object for the governor's lifetime.
- `prefilter` (with `per_message`): a pure test of one text, true of every
  text the stage could act on. The governor asks it of the string values of a
  message at any depth, except those under the keys of `STRUCTURAL_KEYS`
  (roles, types, names, ids); a message (a dict) it is false of throughout,
  one without any text included, is one the stage hands on as it is with
  nothing to report, and the governor neither copies it nor calls the stage
  for it.
- `whole_list_with`: options that make a `per_message` stage need other
  messages than the one it works on (when one is configured, it is handed
  the whole history instead).
- `local` (with `acts_on`, before the budget phase): messages appended after
  a history that bring none of the kinds of work and leave the work found in
  it as it was (no stray result's call, no answer to an open call, no user
  message right after one that ends what the stages made of the history,
  whatever a repair dropped after it) leave what the stage makes of that
  history as it was. A governor then reuses, for the history it governed on
  its last call, what the leading local stages made of it, and hands on only
  what was appended.
- `cuts_to_watermark` (with ``acts_on=("over_budget",)``, in the budget
  phase): once over budget it keeps, of the history after the leading system
  messages, only the newest part within the cut watermark
  (`watermark.cut_watermark_tokens`): whole turns from a user message, or the
  newest turn cut between its steps, chosen by what that part holds alone.
  When the last budget stage declares it, the budget-first cut leaves out
  everything older than the cut watermark could hold, not only what the
  whole budget could.

What a stage may be configured with is declared on it too: `options`, a
mapping of each option's name to a `StageOption` (its type, a one-line
description, and optionally a least value or a check). When a governor is
built, the ``[governance.stages.<name>]`` table of every stage that declares
its options is checked against them once (`Stage.check_options`): an unknown
key, a value of the wrong type or out of range is a `ConfigError` naming the
key's path, the stage and the plugin that contributed it. A stage that
declares no options (``options=None``, the default) accepts any table.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import attrs

from nanobot_core._containment import contained
from nanobot_core.config import GovernanceConfig, is_option_type, type_problem
from nanobot_core.errors import ConfigError
from nanobot_core.governance.messages import STRUCTURAL_KEYS
from nanobot_core.governance.store import ResultStore
from nanobot_core.governance.survey import FactsCache, Survey
from nanobot_core.governance.tokens import EstimateCounter, TokenCounter
from nanobot_core.kernel.records import name_problem

if TYPE_CHECKING:
    from nanobot_core.governance.budget_first import HistoryCut

__all__ = [
    "PHASES",
    "STRUCTURAL_KEYS",
    "WORK_KINDS",
    "Budget",
    "Phase",
    "Stage",
    "StageContext",
    "StageFunc",
    "StageOption",
    "StageOutcome",
    "stage",
]

Phase: TypeAlias = Literal["repair", "transform", "budget"]

#: The phases, in the order the pipeline runs them.
PHASES: tuple[Phase, ...] = ("repair", "transform", "budget")

#: The kinds of work a stage may declare in `Stage.acts_on`, and what each means.
#: The first ones are defects a message has on its own (a per-message stage is
#: applied only to the messages that have one); the others concern the history
#: as a whole.
WORK_KINDS: Mapping[str, str] = {
    "non_messages": "entries that are not dicts, or have a role no provider knows",
    "meta": "messages holding session bookkeeping (`_meta`)",
    "placeholders": "assistant messages that only say a placeholder",
    "malformed_calls": "assistant messages with calls a provider would reject",
    "dirty_text": "lone surrogates, or content of a type providers reject",
    "empty_results": "tool results that are empty or whitespace only",
    "result_links": "tool results naming their call by `tool_call_ids`",
    "large_results": "tool results longer than `max_tool_result_chars`",
    "stray_results": "tool results outside their call's run, or repeated in it",
    "unanswered_calls": "calls without a result in the run after them",
    "user_start": "a history that does not start at a user message",
    "consecutive_users": "two user messages in a row",
    "over_budget": "a request over the budget",
}


@attrs.frozen
class StageOutcome:
    """What a stage did: the messages to hand on, whether it changed anything, and why.

    `details` become the stage's lines in the governance report; with
    ``changed=False`` the governor hands on the stage's *input* and ignores
    `messages`.
    """

    messages: list[Any]
    changed: bool = False
    details: list[str] = attrs.field(factory=list)

    @classmethod
    def unchanged(cls, messages: list[Any], *details: str) -> StageOutcome:
        """Nothing to do: hand `messages` on as they are."""
        return cls(messages=messages, changed=False, details=list(details))


StageFunc: TypeAlias = Callable[[list[Any], "StageContext"], "StageOutcome | list[Any]"]


def _names(value: Iterable[str] | str) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _check_name(_instance: Any, _attribute: Any, value: Any) -> None:
    problem = name_problem("stage", value)
    if problem is not None:
        raise ValueError(problem)


def _check_phase(_instance: Any, _attribute: Any, value: Any) -> None:
    if value not in PHASES:
        raise ValueError(f"unknown phase {value!r}; expected one of {', '.join(PHASES)}")


def _check_func(_instance: Any, _attribute: Any, value: Any) -> None:
    if not callable(value):
        raise TypeError(f"a stage function must be callable, got {type(value).__name__}")


def _check_prefilter(_instance: Any, _attribute: Any, value: Any) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"a stage's prefilter must be callable, got {type(value).__name__}")


def _check_kinds(_instance: Any, _attribute: Any, value: tuple[str, ...]) -> None:
    unknown = [kind for kind in value if kind not in WORK_KINDS]
    if unknown:
        raise ValueError(
            f"unknown kind of work {', '.join(map(repr, unknown))} in acts_on; "
            f"expected some of {', '.join(WORK_KINDS)}"
        )


# What TOML writes without quotes in a dotted key.
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _check_description(_instance: Any, _attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or not value.strip() or "\n" in value.strip():
        raise ValueError(f"an option's description must be one non-empty line, got {value!r}")


def _check_option_type(_instance: Any, _attribute: Any, value: Any) -> None:
    if not is_option_type(value):
        raise TypeError(
            f"an option's type must be one config keys have (bool, int, float, str, Any, a "
            f"Literal, list[T], dict[str, T] or T | None of these), got {value!r}"
        )


def _check_least(_instance: Any, _attribute: Any, value: Any) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
    ):
        raise TypeError(f"an option's at_least must be a finite number or None, got {value!r}")


def _check_callable(_instance: Any, _attribute: Any, value: Any) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"an option's check must be callable, got {type(value).__name__}")


@attrs.frozen
class StageOption:
    """One option a stage reads from its ``[governance.stages.<name>]`` table.

    `type` is a type as config keys have them (``bool``, ``int``, ``float``,
    ``str``, ``Any``, a ``Literal`` of choices, ``list[T]``, ``dict[str, T]``,
    ``T | None``); `description` says in one line what the option does.
    `at_least` refuses a smaller number (and NaN or infinity). `check`, called
    with a value of the right type, raises ValueError (or TypeError) saying why
    it refuses it; its message follows the key's path in the error.
    """

    type: Any = attrs.field(validator=_check_option_type)
    description: str = attrs.field(validator=_check_description)
    at_least: float | None = attrs.field(default=None, validator=_check_least)
    check: Callable[[Any], object] | None = attrs.field(default=None, validator=_check_callable)

    def problem(self, value: Any, path: str) -> str | None:
        """Why `value`, configured for the key `path`, is refused, or None when it is accepted."""
        problem = type_problem(value, self.type, path)
        if problem is not None:
            return problem
        least = self.at_least
        number = isinstance(value, int | float) and not isinstance(value, bool)
        # An integer of any size is finite (math.isfinite cannot take one too large for a float).
        finite = not isinstance(value, float) or math.isfinite(value)
        if least is not None and number and not (value >= least and finite):
            note = " (a finite number)" if isinstance(value, float) else ""
            return f"{path}: must be at least {least:g}{note}, got {value!r}"
        if self.check is not None:
            try:
                self.check(value)
            except (ValueError, TypeError) as exc:
                return f"{path}: {exc}"
            except BaseException as exc:  # a broken check is the stage's fault, said as such
                return f"{path}: the stage's check of this option failed: {contained(exc)}"
        return None


def _toml_key(name: str) -> str:
    """`name` as one part of a dotted TOML key: bare when it can be, else quoted."""
    return name if _BARE_KEY.fullmatch(name) else json.dumps(name, ensure_ascii=False)


def _declared_options(value: Any) -> Mapping[str, StageOption] | None:
    """The `Stage.options` declared, as a read-only mapping (None: nothing declared)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(
            "a stage's options must be a mapping of names to StageOption, "
            f"got {type(value).__name__}"
        )
    for name, option in value.items():
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"an option name must be a non-empty string, got {name!r}")
        if not isinstance(option, StageOption):
            raise TypeError(
                f"option {name!r} must be declared with a StageOption, got {type(option).__name__}"
            )
    return MappingProxyType(dict(value))


@attrs.frozen
class Stage:
    """A named governance stage, placed by `phase` and optional `before`/`after` stage names.

    Phases run in the order of `PHASES`; inside a phase, `before` and `after`
    order stages topologically (see `order_stages`). Third-party stages
    belong in ``transform`` unless they have a reason to sit elsewhere.
    `acts_on`, `widened_by` and `per_message` are the declarations described
    in the module docstring; a stage that declares nothing runs on every call,
    over the whole history. `options` declares what its
    ``[governance.stages.<name>]`` table may hold (None: anything; ``{}``:
    nothing), checked once when a governor is built.
    """

    name: str = attrs.field(validator=_check_name)
    func: StageFunc = attrs.field(validator=_check_func)
    phase: Phase = attrs.field(default="transform", validator=_check_phase)
    before: tuple[str, ...] = attrs.field(default=(), converter=_names)
    after: tuple[str, ...] = attrs.field(default=(), converter=_names)
    description: str = ""
    acts_on: tuple[str, ...] = attrs.field(default=(), converter=_names, validator=_check_kinds)
    widened_by: tuple[str, ...] = attrs.field(default=(), converter=_names)
    per_message: bool = attrs.field(default=False, converter=bool)
    local: bool = attrs.field(default=False, converter=bool)
    whole_list_with: tuple[str, ...] = attrs.field(default=(), converter=_names)
    cuts_to_watermark: bool = attrs.field(default=False, converter=bool)
    prefilter: Callable[[str], object] | None = attrs.field(
        default=None, validator=_check_prefilter
    )
    options: Mapping[str, StageOption] | None = attrs.field(
        default=None, converter=_declared_options, hash=False
    )

    def __attrs_post_init__(self) -> None:
        if self.prefilter is not None and not self.per_message:
            raise ValueError(
                f"stage {self.name!r}: a prefilter needs per_message=True (it tells, from one "
                "message's texts, that the stage has nothing to do with that message)"
            )
        if self.cuts_to_watermark and (self.phase != "budget" or "over_budget" not in self.acts_on):
            raise ValueError(
                f"stage {self.name!r}: cuts_to_watermark needs phase='budget' and "
                "'over_budget' in acts_on (it says what the stage keeps once over budget)"
            )

    def work(self, options: Mapping[str, Any]) -> tuple[str, ...] | None:
        """The kinds of work the stage has with these options, or None when it always has work."""
        if not self.acts_on or any(options.get(name) for name in self.widened_by):
            return None
        return self.acts_on

    def check_options(self, table: Any, *, origin: str | None = None) -> None:
        """Refuse a ``[governance.stages.<name>]`` table that the declared `options` do not allow.

        Raises `ConfigError` naming the key's path, the stage and `origin` (the
        plugin that contributed it, when known). A stage that declares no
        options accepts any table.
        """
        declared = self.options
        if declared is None:
            return
        prefix = f"governance.stages.{_toml_key(self.name)}"
        whose = f"stage {self.name!r}" + (f" ({origin})" if origin else "")
        if not isinstance(table, Mapping):
            raise ConfigError(
                f"{prefix}: expected a table, got {type(table).__name__} {table!r}; "
                f"the options of {whose}"
            )
        for key, value in table.items():
            path = f"{prefix}.{_toml_key(str(key))}"
            option = declared.get(key) if isinstance(key, str) else None
            if option is None:
                known = (
                    f"its options: {', '.join(sorted(declared))}"
                    if declared
                    else "it takes no options"
                )
                raise ConfigError(f"{path}: unknown option of {whose}; {known}")
            problem = option.problem(value, path)
            if problem is not None:
                raise ConfigError(f"{problem}; an option of {whose}: {option.description}")

    def __call__(self, messages: list[Any], ctx: StageContext) -> StageOutcome | list[Any]:
        """Run the stage function."""
        return self.func(messages, ctx)


def stage(
    name: str | None = None,
    *,
    phase: Phase = "transform",
    before: Iterable[str] | str = (),
    after: Iterable[str] | str = (),
    description: str | None = None,
    acts_on: Iterable[str] | str = (),
    widened_by: Iterable[str] | str = (),
    per_message: bool = False,
    local: bool = False,
    whole_list_with: Iterable[str] | str = (),
    cuts_to_watermark: bool = False,
    prefilter: Callable[[str], object] | None = None,
    options: Mapping[str, StageOption] | None = None,
) -> Callable[[StageFunc], Stage]:
    """Decorate a stage function into a `Stage` (name and description default to the function's)."""

    def wrap(func: StageFunc) -> Stage:
        doc = (getattr(func, "__doc__", None) or "").strip().splitlines()
        default_name: str = getattr(func, "__name__", "")
        return Stage(
            name=name or default_name,
            func=func,
            phase=phase,
            before=_names(before),
            after=_names(after),
            description=description if description is not None else (doc[0] if doc else ""),
            acts_on=_names(acts_on),
            widened_by=_names(widened_by),
            per_message=per_message,
            local=local,
            whole_list_with=_names(whole_list_with),
            cuts_to_watermark=cuts_to_watermark,
            prefilter=prefilter,
            options=options,
        )

    return wrap


@attrs.frozen
class Budget:
    """The input budget in tokens: what system prompt, tool definitions and messages may use."""

    limit: int = 128_000 - 8_192 - 1_024

    @classmethod
    def from_config(cls, config: GovernanceConfig) -> Budget:
        """``input_limit`` when set, else ``context_window - max_output - safety_margin``."""
        if config.input_limit is not None:
            return cls(max(0, config.input_limit))
        return cls(max(0, config.context_window - config.max_output - config.safety_margin))


@attrs.define
class StageContext:
    """Everything a stage may use besides the messages.

    `options` come from ``config.governance.stages[<stage name>]``. The token
    figures (`system_tokens`, `tools_tokens`) are those of the request being
    governed; `survey`, `message_tokens` and `request_tokens` are memoised for
    the run, so stages can ask for them freely. Build one with no arguments in
    a test: the defaults are the default configuration. `cut` is the oldest
    history the governor left out before the stages because it can never be
    sent (see `budget_first`), or None. `view_shift` is how many of the
    history's entries that the session's earlier decisions leave out (an
    older cut kept) the stages would still see if they had been handed the
    whole history: what makes a message's index in the list handed on its
    index in the whole (as generated call ids need, see `index_shift`).
    """

    options: Mapping[str, Any] = attrs.field(factory=dict)
    budget: Budget = attrs.field(factory=Budget)
    counter: TokenCounter = attrs.field(factory=EstimateCounter)
    store: ResultStore | None = None
    workspace: Path | None = None
    config: GovernanceConfig = attrs.field(factory=GovernanceConfig)
    system_tokens: int = 0
    tools_tokens: int = 0
    facts: FactsCache = attrs.field(
        default=attrs.Factory(lambda self: FactsCache(self.counter), takes_self=True)
    )
    cut: HistoryCut | None = None
    view_shift: int = 0

    def index_shift(self) -> int:
        """How many entries before the list handed on the whole history's pipeline would still
        hold here: those the session's view and the budget-first cut left out."""
        return self.view_shift + (self.cut.index_shift() if self.cut is not None else 0)

    def option(self, name: str, default: Any) -> Any:
        """One option of this stage, or `default` when it is not configured."""
        return self.options.get(name, default)

    @property
    def fixed_tokens(self) -> int:
        """Tokens of the parts the stages cannot shrink: system prompt and tool definitions."""
        return self.system_tokens + self.tools_tokens

    def survey(self, messages: Sequence[Any]) -> Survey:
        """The defects and size of `messages` (one pass, memoised)."""
        return self.facts.survey(messages)

    def message_tokens(self, message: Any) -> int:
        """Tokens of one message (memoised)."""
        return self.facts.tokens(message)

    def with_content(self, message: dict[str, Any], content: str) -> dict[str, Any]:
        """A new dict: `message` with its content replaced, counted without reading it again."""
        return self.facts.with_content(message, content)

    def request_tokens(self, messages: Sequence[Any]) -> int:
        """Tokens of the whole request these messages stand for.

        With history left out before the stages (`cut`) down to the cut
        watermark, that includes the least the part left out costs
        (`HistoryCut.floor`): a stage deciding by the request's size decides
        as it would on the whole history.
        """
        cut = self.cut
        floor = cut.floor if cut is not None else 0
        return self.fixed_tokens + self.facts.list_tokens(messages) + floor

    def over_budget(self, messages: Sequence[Any]) -> bool:
        """Whether the request with these messages exceeds the budget."""
        return self.request_tokens(messages) > self.budget.limit
