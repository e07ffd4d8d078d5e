"""The governance pipeline: stages that heal and budget a copy of the history before each call.

See docs/governance.md. The names below are the public API of the package.
"""

from __future__ import annotations

from nanobot_core.governance.anthropic import (
    OTHER_BLOCKS_KEY,
    THINKING_KEY,
    MessagesRequest,
    to_messages_api,
)
from nanobot_core.governance.continuity import GovernanceState, latest_state
from nanobot_core.governance.governor import (
    GovernanceReport,
    GovernanceResult,
    Governor,
    ReportEntry,
    build_governor,
)
from nanobot_core.governance.messages import nesting_fault
from nanobot_core.governance.ordering import BUILTIN_ORDER, Placement, order_stages, place_stages
from nanobot_core.governance.stage import (
    PHASES,
    STRUCTURAL_KEYS,
    Budget,
    Stage,
    StageContext,
    StageOption,
    StageOutcome,
    stage,
)
from nanobot_core.governance.stages import builtin_stages
from nanobot_core.governance.store import DirectoryResultStore, ResultStore, default_store
from nanobot_core.governance.tokens import (
    EstimateCounter,
    MemoCounter,
    TokenCounter,
    count_request,
)

__all__ = [
    "BUILTIN_ORDER",
    "OTHER_BLOCKS_KEY",
    "PHASES",
    "STRUCTURAL_KEYS",
    "THINKING_KEY",
    "Budget",
    "DirectoryResultStore",
    "EstimateCounter",
    "GovernanceReport",
    "GovernanceResult",
    "GovernanceState",
    "Governor",
    "MemoCounter",
    "MessagesRequest",
    "Placement",
    "ReportEntry",
    "ResultStore",
    "Stage",
    "StageContext",
    "StageOption",
    "StageOutcome",
    "TokenCounter",
    "build_governor",
    "builtin_stages",
    "count_request",
    "default_store",
    "latest_state",
    "nesting_fault",
    "order_stages",
    "place_stages",
    "stage",
    "to_messages_api",
]
