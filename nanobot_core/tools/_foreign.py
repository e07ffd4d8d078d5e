"""The adapter for tools written for HKUDS/nanobot: `ForeignTool` and its `ForeignToolContext`.

Such a tool is any class or instance with ``name``, ``description``,
``parameters`` and an async ``execute``; the adapter gives it the Tool API.

Tools of the nanobot-ai package itself (``ReadFileTool``, ``ExecTool``, ...)
expect more: ``ctx.config`` must be their package's ``ToolsConfig`` (they
read ``ctx.config.exec.timeout``, ``ctx.config.restrict_to_workspace``...).
When the tool's package has one (``<package>.config.schema.ToolsConfig``, a
pydantic model), the context's config is that model's defaults with the
``[tools.options]`` tables that name its fields merged over them
(``[tools.options.exec] timeout = 5``); otherwise it is the tool's own
``config_cls()`` under its ``config_key``, or else the options as attribute
namespaces. Only tools whose ``_scopes`` (when they have one) include the
main scope ``"core"`` are loaded. The tool's own ``to_schema()``,
``cast_params()`` and ``validate_params()`` are used when it defines them,
and every attribute of the wrapped tool stays reachable through the adapter.
"""

from __future__ import annotations

import importlib
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from nanobot_core._containment import contained
from nanobot_core.tools.base import (
    Tool,
    ToolAttributeError,
    ToolFlagError,
    flag_problem,
    flag_value,
    missing_tool_members,
    read_tool,
    refuse_abstract,
    timeout_problem,
    usable_timeout,
)

if TYPE_CHECKING:
    from nanobot_core.config import Config
    from nanobot_core.kernel.context import PluginContext

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
    def from_plugin_context(
        cls, ctx: PluginContext, tool_class: type | None = None
    ) -> ForeignToolContext:
        """Build the foreign context for a plugin context (configured for `tool_class`)."""
        options = ctx.config.tools.options
        return cls(
            workspace=str(ctx.workspace),
            config=(
                foreign_config(tool_class, options, config=ctx.config)
                if tool_class
                else _namespace(options)
            ),
            plugin_context=ctx,
        )


#: The scope a tool must name in its ``_scopes`` to be loaded (HKUDS/nanobot's main agent).
MAIN_SCOPE = "core"


def foreign_config(
    tool_class: type, options: Mapping[str, Mapping[str, Any]], *, config: Config | None = None
) -> Any:
    """The ``ctx.config`` a foreign tool class expects, built from ``[tools.options]``.

    Raises ValueError naming the ``tools.options`` key when the options do not
    fit the tool package's own config model, after the source that set them when
    `config` (the loaded configuration they come from) knows it.
    """
    model = _package_tools_config(tool_class)
    if model is not None:
        fields = getattr(model, "model_fields", {})
        chosen = {key: dict(value) for key, value in options.items() if key in fields}
        return _validated(model, chosen, "tools.options", config)
    key = getattr(tool_class, "config_key", "")
    config_cls = getattr(tool_class, "config_cls", None)
    own = config_cls() if callable(config_cls) else None
    namespace = _namespace(options)
    if isinstance(key, str) and key and hasattr(own, "model_validate"):
        given = dict(options.get(key, {}))
        setattr(namespace, key, _validated(own, given, f"tools.options.{key}", config))
    return namespace


def _package_tools_config(tool_class: type) -> Any:
    """``<top package>.config.schema.ToolsConfig`` of the tool's package, if it is a model."""
    top = (getattr(tool_class, "__module__", "") or "").split(".")[0]
    if not top:
        return None
    try:
        schema = importlib.import_module(f"{top}.config.schema")
    except ImportError:
        return None
    model = getattr(schema, "ToolsConfig", None)
    return model if isinstance(model, type) and hasattr(model, "model_validate") else None


def _validated(model: Any, data: dict[str, Any], where: str, config: Config | None) -> Any:
    from nanobot_core.config import source_prefix

    try:
        return model.model_validate(data)
    except Exception as exc:  # pydantic's ValidationError, without importing pydantic
        # The keys the errors point at name their sources; an error at a key nobody set
        # (a missing field) falls back to the tables given.
        sources = source_prefix(config=config, keys=_error_keys(exc, where)) or source_prefix(
            config=config, keys=[f"{where}.{key}" for key in data] or [where]
        )
        raise ValueError(f"{sources}{where}: {exc}") from None


def _error_keys(exc: Exception, where: str) -> list[str]:
    """The dotted config keys under `where` a pydantic error's locations point at."""
    errors = getattr(exc, "errors", None)
    try:
        located = errors() if callable(errors) else []
    except Exception:  # not pydantic's: no locations to read
        located = []
    keys: list[str] = []
    for error in located if isinstance(located, list) else []:
        place = error.get("loc") if isinstance(error, Mapping) else None
        if isinstance(place, tuple | list):
            keys.append(".".join([where, *map(str, place)]))
    return keys


def _namespace(value: Any) -> Any:
    if isinstance(value, Mapping):
        return types.SimpleNamespace(**{str(k): _namespace(v) for k, v in value.items()})
    return value


def _in_main_scope(obj: Any) -> bool:
    scopes = getattr(obj, "_scopes", None)
    if scopes is None:
        return True
    return isinstance(scopes, set | frozenset | list | tuple) and MAIN_SCOPE in scopes


_CONTEXT_PARAMETER_NAMES = frozenset({"ctx", "context", "tool_context"})

_REQUIRED = object()  # `ForeignTool._read` without a default: the attribute must be there


class ForeignTool(Tool):
    """Adapts a duck-typed tool (e.g. one written for HKUDS/nanobot) to the Tool API.

    Name, description and parameters are read once, when the adapter is
    built. The flags ``read_only``, ``exclusive``, ``concurrency_safe`` and
    ``timeout`` are taken from the wrapped object when it has them; a flag holding
    what no flag may (``"no"``, None: see `flag_value`), or a timeout that is no
    positive number of seconds or None (``"30"``, True, NaN, 0: see
    `usable_timeout`), refuses the tool with a `ToolFlagError`, which leaves it
    out at load as it does a native tool. When its ``execute`` takes a leading
    ``ctx`` argument (older HKUDS/nanobot tools), it receives the
    `ForeignToolContext`.
    """

    def __init__(self, wrapped: Any, context: ForeignToolContext) -> None:
        self.wrapped = wrapped
        self.context = context
        function = _own_definition(wrapped)
        # Each read once, and only when its own definition does not say it.
        self._name = self._member(function, "name")
        self._description = self._member(function, "description")
        self._parameters = self._member(function, "parameters")
        self.read_only = self._own_flag("read_only", False)
        self.exclusive = self._own_flag("exclusive", False)
        self._concurrency_safe = self._own_flag(
            "concurrency_safe", self.read_only and not self.exclusive
        )
        timeout = self._read("timeout", None)
        # Checked before converting, so the problem shows the value the tool's author wrote.
        if not usable_timeout(timeout):
            raise ToolFlagError(str(self._name), timeout_problem(timeout))
        self.timeout = None if timeout is None else float(timeout)
        properties = (
            self._parameters.get("properties", {}) if isinstance(self._parameters, dict) else {}
        )
        self._passes_context = _takes_leading_context(wrapped.execute, properties)
        #: What the core read of the adapter (`read_tool`), kept: loading it reads it once.
        self.facts = read_tool(self)

    def _member(self, function: Mapping[str, Any], member: str) -> Any:
        """`member` of the wrapped tool's own definition, else read from the tool."""
        return function[member] if member in function else self._read(member)

    def _read(self, attribute: str, default: Any = _REQUIRED) -> Any:
        """The wrapped tool's `attribute` (`default` when it has none, if given), read once.

        What reading it raises is a `ToolAttributeError` naming it, which leaves this tool
        alone out at load, as for a native tool (a real Ctrl-C goes on).
        """
        try:
            if default is _REQUIRED:
                return getattr(self.wrapped, attribute)
            return getattr(self.wrapped, attribute, default)
        except BaseException as exc:
            # Not `getattr`: the adapter's own lookup would ask the wrapped tool for it.
            name = vars(self).get("_name")
            raised = contained(exc)
            known = name if isinstance(name, str) else None
            cls = type(self.wrapped).__name__
            raise ToolAttributeError(known, cls, attribute, raised) from None

    def _own_flag(self, flag: str, default: bool) -> bool:
        """The wrapped tool's `flag` (`default` without one), by the rule of native tools.

        Raises `ToolFlagError` for a value that is no flag (``"no"``, None...), so the
        tool is left out at load, named under its plugin, as a native tool would be.
        """
        value = self._read(flag, default)
        flag_bool = flag_value(value)
        if flag_bool is None:
            raise ToolFlagError(str(self._name), flag_problem(flag, value))
        return flag_bool

    @classmethod
    def from_object(cls, obj: Any, ctx: PluginContext) -> ForeignTool | None:
        """Build the adapter from a duck-typed class (honouring enabled/create) or instance."""
        if not _in_main_scope(obj):
            return None  # a tool HKUDS/nanobot gives only to subagents or memory
        if not isinstance(obj, type):
            return cls(obj, ForeignToolContext.from_plugin_context(ctx, type(obj)))
        if getattr(obj, "_plugin_discoverable", True) is False:
            return None  # HKUDS/nanobot marks its internal helper classes this way
        context = ForeignToolContext.from_plugin_context(ctx, obj)
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

    def validate_arguments(
        self, arguments: dict[str, Any]
    ) -> tuple[dict[str, Any], list[str]] | None:
        """The wrapped tool's own ``cast_params`` and ``validate_params``, when it has them."""
        validate = getattr(self.wrapped, "validate_params", None)
        if not callable(validate):
            return None
        cast = getattr(self.wrapped, "cast_params", None)
        prepared = cast(arguments) if callable(cast) else arguments
        return prepared, _error_texts(validate(prepared))

    def __getattr__(self, name: str) -> Any:
        # Only reached for what the adapter itself lacks: the wrapped tool's own
        # attributes and methods (config_key, cast_params, ...) stay reachable.
        if name in ("wrapped", "context") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        prefix = (self.context,) if self._passes_context else ()
        result = self.wrapped.execute(*prefix, *args, **kwargs)
        return await result if inspect.isawaitable(result) else result


def _error_texts(errors: Any) -> list[str]:
    """What a ``validate_params`` returned as a list of error texts.

    A list of them, as nanobot-ai's own tools return; one text (a str, or UTF-8 bytes) is
    one error, not one a letter; a dict is one error an entry, ``key: text``.
    """
    if not errors:
        return []
    if isinstance(errors, str):
        return [str.__str__(errors)]
    if isinstance(errors, bytes | bytearray):
        return [bytes(errors).decode("utf-8", "replace")]
    if isinstance(errors, Mapping):
        return [f"{key}: {text}" for key, text in errors.items()]
    return [str(error) for error in errors]


def _own_definition(wrapped: Any) -> dict[str, Any]:
    """The ``function`` part of the wrapped tool's own ``to_schema()``, or {} without one."""
    to_schema = getattr(wrapped, "to_schema", None)
    if not callable(to_schema):
        return {}
    schema = to_schema()
    function = schema.get("function") if isinstance(schema, Mapping) else None
    return dict(function) if isinstance(function, Mapping) else {}


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
