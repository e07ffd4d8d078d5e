"""What a stage receives besides the messages: its options, the budget, counter and store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from nanobot_core.config import GovernanceConfig
from nanobot_core.governance.store import ResultStore
from nanobot_core.governance.survey import FactsCache, Survey
from nanobot_core.governance.tokens import EstimateCounter, TokenCounter

if TYPE_CHECKING:
    from nanobot_core.governance.budget_first import HistoryCut

__all__ = ["Budget", "StageContext"]


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
    history the governor left out before the stages because it can never fit
    (see `budget_first`), or None.
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
        """Tokens of the whole request with these messages."""
        return self.fixed_tokens + self.facts.list_tokens(messages)

    def over_budget(self, messages: Sequence[Any]) -> bool:
        """Whether the request with these messages exceeds the budget."""
        return self.request_tokens(messages) > self.budget.limit
