"""The adapter for tools written for HKUDS/nanobot: `ForeignTool` and its `ForeignToolContext`.

Such a tool is any class or instance with ``name``, ``description``,
``parameters`` and an async ``execute``; the adapter gives it the Tool API.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from nanobot_core.tools.base import Tool, check_tool, missing_tool_members, refuse_abstract

if TYPE_CHECKING:
    from nanobot_core.context import PluginContext

__all__ = ["ForeignTool", "ForeignToolContext"]

# Services HKUDS/nanobot's ToolContext may carry; none exist here, so they read as None.
_FOREIGN_SERVICES = frozenset(
    {
        "bus",
        "subagent_manager",
        "cron_service",
        "exec_session_manager",
        "sessions",
        "file_state_store",
        "provider_snapshot_loader",
        "image_generation_provider_configs",
        "workspace_sandbox",
        "runtime_events",
        "runtime_control",
        "memory",
    }
)


@attrs.frozen
class ForeignToolContext:
    """The ``ctx`` handed to tools written for HKUDS/nanobot.

    It mirrors the fields of their ToolContext: ``workspace`` (a str),
    ``config`` (the ``[tools.options]`` table as attribute namespaces),
    ``timezone``, the request fields ``channel``/``chat_id``/``agent_name``,
    and their optional services, which are all None here.
    """

    workspace: str
    config: Any
    plugin_context: PluginContext
    timezone: str = "UTC"
    channel: str = ""
    chat_id: str = ""
    agent_name: str = "nanobot"

    def __getattr__(self, name: str) -> None:
        if name in _FOREIGN_SERVICES:
            return None
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    @classmethod
    def from_plugin_context(cls, ctx: PluginContext) -> ForeignToolContext:
        """Build the foreign context for a plugin context."""
        return cls(
            workspace=str(ctx.workspace),
            config=_namespace(ctx.config.tools.options),
            plugin_context=ctx,
        )


def _namespace(value: Any) -> Any:
    if isinstance(value, Mapping):
        return types.SimpleNamespace(**{str(k): _namespace(v) for k, v in value.items()})
    return value


_CONTEXT_PARAMETER_NAMES = frozenset({"ctx", "context", "tool_context"})


class ForeignTool(Tool):
    """Adapts a duck-typed tool (e.g. one written for HKUDS/nanobot) to the Tool API.

    Name, description and parameters are read once, when the adapter is
    built. The flags ``read_only``, ``exclusive``, ``concurrency_safe`` and
    ``timeout`` are taken from the wrapped object when it has them. When its
    ``execute`` takes a leading ``ctx`` argument (older HKUDS/nanobot tools),
    it receives the `ForeignToolContext`.
    """

    def __init__(self, wrapped: Any, context: ForeignToolContext) -> None:
        self.wrapped = wrapped
        self.context = context
        self._name = wrapped.name
        self._description = wrapped.description
        self._parameters = wrapped.parameters
        self.read_only = bool(getattr(wrapped, "read_only", False))
        self.exclusive = bool(getattr(wrapped, "exclusive", False))
        self._concurrency_safe = bool(
            getattr(wrapped, "concurrency_safe", self.read_only and not self.exclusive)
        )
        timeout = getattr(wrapped, "timeout", None)
        numeric = isinstance(timeout, int | float) and not isinstance(timeout, bool)
        self.timeout = float(timeout) if numeric and timeout is not None else None
        properties = (
            self._parameters.get("properties", {}) if isinstance(self._parameters, dict) else {}
        )
        self._passes_context = _takes_leading_context(wrapped.execute, properties)
        check_tool(self)

    @classmethod
    def from_object(cls, obj: Any, ctx: PluginContext) -> ForeignTool | None:
        """Build the adapter from a duck-typed class (honouring enabled/create) or instance."""
        context = ForeignToolContext.from_plugin_context(ctx)
        if not isinstance(obj, type):
            return cls(obj, context)
        if getattr(obj, "_plugin_discoverable", True) is False:
            return None  # HKUDS/nanobot marks its internal helper classes this way
        refuse_abstract(obj)
        enabled = getattr(obj, "enabled", None)
        if callable(enabled) and not enabled(context):
            return None
        create = getattr(obj, "create", None)
        instance = create(context) if callable(create) else obj()
        missing = missing_tool_members(instance)
        if missing:
            raise TypeError(
                f"{obj.__qualname__} built a {type(instance).__name__}, which is not a tool "
                f"(missing or wrong: {', '.join(missing)})"
            )
        return cls(instance, context)

    # The wrapped values are returned as they are, so check_tool sees their real types.
    @property
    def name(self) -> str:
        return typing.cast(str, self._name)

    @property
    def description(self) -> str:
        return typing.cast(str, self._description)

    @property
    def parameters(self) -> dict[str, Any]:
        return typing.cast(dict[str, Any], self._parameters)

    @property
    def concurrency_safe(self) -> bool:
        return self._concurrency_safe and not self.exclusive

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        prefix = (self.context,) if self._passes_context else ()
        result = self.wrapped.execute(*prefix, *args, **kwargs)
        return await result if inspect.isawaitable(result) else result


def _takes_leading_context(execute: Callable[..., Any], properties: Mapping[str, Any]) -> bool:
    try:
        parameters = list(inspect.signature(execute).parameters.values())
    except (TypeError, ValueError):
        return False
    if not parameters:
        return False
    first = parameters[0]
    return (
        first.kind in (first.POSITIONAL_ONLY, first.POSITIONAL_OR_KEYWORD)
        and first.name in _CONTEXT_PARAMETER_NAMES
        and first.name not in properties
    )
