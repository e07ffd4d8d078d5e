"""nanobot-redact: a governance stage that removes secrets from the model's copy of the history.

Registered through the ``nanobot.plugins`` entry point; this module is the
plugin (it holds the hook implementation).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nanobot_core import ConfigError, hookimpl

from nanobot_redact.patterns import (
    DEFAULT_PATTERNS,
    Rule,
    SecretPattern,
    images_enabled,
    marker,
    patterns_from_options,
)
from nanobot_redact.scanner import Scanner, redact_text, scanner_for
from nanobot_redact.stage import STAGE_NAME, make_stage_func, redact_message, redact_messages

if TYPE_CHECKING:
    from nanobot_core import PluginContext, Stage

__all__ = [
    "DEFAULT_PATTERNS",
    "STAGE_NAME",
    "Rule",
    "Scanner",
    "SecretPattern",
    "make_stage_func",
    "marker",
    "nanobot_governance_stages",
    "redact_message",
    "redact_messages",
    "redact_text",
    "scanner_for",
]


@hookimpl
def nanobot_governance_stages(ctx: PluginContext) -> list[Stage]:
    """Contribute `redact_secrets`, in phase transform, before the budget stages offload results."""
    from nanobot_core import Stage

    options = ctx.config.governance.stages.get(STAGE_NAME, {})
    try:
        patterns = patterns_from_options(options)
    except ValueError as exc:
        raise ConfigError(f"governance.stages.{STAGE_NAME}: {exc}") from exc
    scanner = Scanner.of(patterns, images=images_enabled(options))
    stage = Stage(
        STAGE_NAME,
        make_stage_func(scanner),
        phase="transform",
        before=("offload_results",),
        per_message=True,
        # A message whose texts no rule could match is handed on as it is: the governor
        # neither copies it nor calls the stage for it.
        prefilter=scanner.could_change,
    )
    return [stage]
