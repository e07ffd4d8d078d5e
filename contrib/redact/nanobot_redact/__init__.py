"""nanobot-redact: a governance stage that removes secrets from the model's copy of the history.

Registered through the ``nanobot.plugins`` entry point; this module is the
plugin (it holds the hook implementation).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nanobot_core import ConfigError, StageOption, hookimpl

from nanobot_redact.patterns import (
    DEFAULT_PATTERNS,
    Rule,
    SecretPattern,
    check_disabled_kinds,
    extra_patterns,
    images_enabled,
    marker,
    patterns_from_options,
)
from nanobot_redact.scanner import Scanner, redact_text, scanner_for
from nanobot_redact.stage import STAGE_NAME, make_stage_func, redact_message, redact_messages

if TYPE_CHECKING:
    from nanobot_core import PluginContext, Stage, StageContext, StageOutcome

__all__ = [
    "DEFAULT_PATTERNS",
    "OPTIONS",
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

#: What ``[governance.stages.redact_secrets]`` may hold: the governor refuses anything
#: else when it is built, naming the key, the stage and this plugin.
OPTIONS: dict[str, StageOption] = {
    "disabled_kinds": StageOption(
        list[str],
        "built-in kinds not to redact (image_url: image parts)",
        check=check_disabled_kinds,
    ),
    "extra_patterns": StageOption(
        dict[str, str],
        "more kinds to redact: kind = regular expression (with an optional secret group)",
        check=extra_patterns,
    ),
}


@hookimpl
def nanobot_governance_stages(ctx: PluginContext) -> list[Stage]:
    """Contribute `redact_secrets`, in phase transform, before the budget stages offload results."""
    from nanobot_core import Stage

    options = ctx.config.governance.stages.get(STAGE_NAME, {})
    try:
        patterns = patterns_from_options(options)
    except ValueError as exc:
        # Not raised here, which would only leave the plugin out: the governor refuses these
        # options when it is built (OPTIONS), naming the key; the stage never runs with them.
        return [_refusing_stage(ConfigError(f"governance.stages.{STAGE_NAME}: {exc}"))]
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
        options=OPTIONS,
    )
    return [stage]


def _refusing_stage(error: ConfigError) -> Stage:
    """`redact_secrets` for options it cannot use: a stage that raises `error` if ever run."""
    from nanobot_core import Stage

    def refuse(messages: list[Any], ctx: StageContext) -> StageOutcome:
        raise error

    return Stage(
        STAGE_NAME, refuse, phase="transform", before=("offload_results",), options=OPTIONS
    )
