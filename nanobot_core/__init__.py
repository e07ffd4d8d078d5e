"""nanobot-core: tools, context governance and the system prompt of an LLM agent, from plugins.

The names below are the public API. They are imported lazily, so that
``import nanobot_core`` stays cheap: a name's module loads on first access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nanobot_core._clip import clip, quoted
    from nanobot_core._folders import open_folder_without_links
    from nanobot_core._regular_file import open_regular_file
    from nanobot_core._terminal import escape_controls, unescape_controls
    from nanobot_core.config import (
        Config,
        check_config,
        load_config,
        source_prefix,
        variable_source,
    )
    from nanobot_core.errors import (
        ConfigError,
        NanobotError,
        NotRegularFileError,
        PluginError,
        PluginEscapeError,
        ProviderError,
        SessionError,
        SessionLockedError,
        SessionNotFoundError,
        ToolError,
        WorkspaceError,
        WorkspaceEscapeError,
    )
    from nanobot_core.governance import (
        STRUCTURAL_KEYS,
        GovernanceState,
        Governor,
        Stage,
        StageContext,
        StageOption,
        StageOutcome,
        latest_state,
        stage,
    )
    from nanobot_core.hookspecs import hookimpl
    from nanobot_core.kernel.calling import report_problem
    from nanobot_core.kernel.context import PluginContext, ToolCallEvent
    from nanobot_core.kernel.manager import PluginManager
    from nanobot_core.prompt import PromptBuilder, Section, SectionContext
    from nanobot_core.providers.endpoint import is_openai_api
    from nanobot_core.runner import Runner
    from nanobot_core.schema import validate
    from nanobot_core.tools._function import run_in_daemon_thread, tool
    from nanobot_core.tools.base import Tool, ToolResult
    from nanobot_core.tools.executor import Executor
    from nanobot_core.tools.registry import ToolRegistry

__all__ = [
    "STRUCTURAL_KEYS",
    "Config",
    "ConfigError",
    "Executor",
    "GovernanceState",
    "Governor",
    "NanobotError",
    "NotRegularFileError",
    "PluginContext",
    "PluginError",
    "PluginEscapeError",
    "PluginManager",
    "PromptBuilder",
    "ProviderError",
    "Runner",
    "Section",
    "SectionContext",
    "SessionError",
    "SessionLockedError",
    "SessionNotFoundError",
    "Stage",
    "StageContext",
    "StageOption",
    "StageOutcome",
    "Tool",
    "ToolCallEvent",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "WorkspaceError",
    "WorkspaceEscapeError",
    "check_config",
    "clip",
    "escape_controls",
    "hookimpl",
    "is_openai_api",
    "latest_state",
    "load_config",
    "open_folder_without_links",
    "open_regular_file",
    "quoted",
    "report_problem",
    "run_in_daemon_thread",
    "source_prefix",
    "stage",
    "tool",
    "unescape_controls",
    "validate",
    "variable_source",
]

_LOCATIONS: dict[str, str] = {
    "clip": "nanobot_core._clip",
    "quoted": "nanobot_core._clip",
    "open_folder_without_links": "nanobot_core._folders",
    "open_regular_file": "nanobot_core._regular_file",
    "escape_controls": "nanobot_core._terminal",
    "unescape_controls": "nanobot_core._terminal",
    "Config": "nanobot_core.config",
    "check_config": "nanobot_core.config",
    "load_config": "nanobot_core.config",
    "source_prefix": "nanobot_core.config",
    "variable_source": "nanobot_core.config",
    "PluginContext": "nanobot_core.kernel.context",
    "ToolCallEvent": "nanobot_core.kernel.context",
    "ConfigError": "nanobot_core.errors",
    "NanobotError": "nanobot_core.errors",
    "NotRegularFileError": "nanobot_core.errors",
    "PluginError": "nanobot_core.errors",
    "PluginEscapeError": "nanobot_core.errors",
    "ProviderError": "nanobot_core.errors",
    "SessionError": "nanobot_core.errors",
    "SessionLockedError": "nanobot_core.errors",
    "SessionNotFoundError": "nanobot_core.errors",
    "ToolError": "nanobot_core.errors",
    "WorkspaceError": "nanobot_core.errors",
    "WorkspaceEscapeError": "nanobot_core.errors",
    "GovernanceState": "nanobot_core.governance",
    "Governor": "nanobot_core.governance",
    "STRUCTURAL_KEYS": "nanobot_core.governance",
    "Stage": "nanobot_core.governance",
    "StageContext": "nanobot_core.governance",
    "StageOption": "nanobot_core.governance",
    "StageOutcome": "nanobot_core.governance",
    "latest_state": "nanobot_core.governance",
    "stage": "nanobot_core.governance",
    "hookimpl": "nanobot_core.hookspecs",
    "PluginManager": "nanobot_core.kernel.manager",
    "report_problem": "nanobot_core.kernel.calling",
    "PromptBuilder": "nanobot_core.prompt",
    "Section": "nanobot_core.prompt",
    "SectionContext": "nanobot_core.prompt",
    "is_openai_api": "nanobot_core.providers.endpoint",
    "Runner": "nanobot_core.runner",
    "Tool": "nanobot_core.tools.base",
    "ToolResult": "nanobot_core.tools.base",
    "tool": "nanobot_core.tools._function",
    "run_in_daemon_thread": "nanobot_core.tools._function",
    "Executor": "nanobot_core.tools.executor",
    "ToolRegistry": "nanobot_core.tools.registry",
    "validate": "nanobot_core.schema",
}


def __getattr__(name: str) -> Any:
    location = _LOCATIONS.get(name)
    if location is None:
        raise AttributeError(f"module 'nanobot_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(location), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
