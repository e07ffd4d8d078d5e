"""The Tool API: the `Tool` base class, `ToolResult`, the `@tool` decorator and `as_tool`.

There are three ways to write a tool: subclass `Tool`; decorate a typed
function with `@tool` (the JSON Schema comes from the type hints, the
descriptions from the Google-style docstring); or, for tools written for
HKUDS/nanobot, any class with ``name``, ``description``, ``parameters`` and an
async ``execute``, which `as_tool` wraps in a `ForeignTool`.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import contextvars
import copy
import enum
import functools
import inspect
import json
import re
import threading
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar, overload

import attrs

if TYPE_CHECKING:
    from nanobot_core.context import PluginContext

__all__ = [
    "ForeignTool",
    "ForeignToolContext",
    "FunctionTool",
    "Tool",
    "ToolResult",
    "as_tool",
    "check_tool",
    "tool",
]

T = TypeVar("T")

# What OpenAI-compatible APIs accept as a function name.
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class Tool(abc.ABC):
    """A capability the model can call.

    Subclasses give ``name``, ``description``, ``parameters`` (a JSON Schema
    object) and ``async execute(**arguments)``; plain class attributes and
    properties both work. ``execute`` may return a str (one starting with
    "Error" counts as a failure), a `ToolResult`, a dict or list (sent as JSON)
    or a list of content blocks.

    The flags decide how the executor schedules a call: ``read_only`` tools
    have no side effects, ``exclusive`` tools always run alone, and
    ``concurrency_safe`` tools (by default: read-only and not exclusive) run
    together with their concurrency-safe neighbours. ``timeout`` is in seconds;
    None means the configured default.
    """

    read_only: bool = False
    exclusive: bool = False
    timeout: float | None = None

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The name the model calls the tool by."""

    @property
    @abc.abstractmethod
    def description(self) -> str:
        """What the tool does, for the model."""

    @property
    @abc.abstractmethod
    def parameters(self) -> dict[str, Any]:
        """The JSON Schema (type object) of the arguments."""

    @abc.abstractmethod
    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        """Run the tool with validated keyword arguments."""

    @property
    def concurrency_safe(self) -> bool:
        """Whether the call may run at the same time as other concurrency-safe calls."""
        return bool(self.read_only) and not bool(self.exclusive)

    @classmethod
    def enabled(cls, ctx: PluginContext) -> bool:
        """Whether the tool is offered at all in this context (default: yes)."""
        return True

    @classmethod
    def create(cls, ctx: PluginContext) -> Tool:
        """Build the tool for this context (default: call the class with no arguments)."""
        return cls()

    def definition(self) -> dict[str, Any]:
        """The OpenAI tool definition of this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": copy.deepcopy(self.parameters),
            },
        }


# -- results ------------------------------------------------------------------------------


class ToolResult(str):
    """The text a tool call gives back to the model, flagged as success or error.

    A `ToolResult` is a str, so it can be used wherever text is expected.
    ``blocks`` keeps rich content blocks (text, images, ...) when the tool
    returned them; the string is then their text rendering.
    """

    is_error: bool
    blocks: tuple[dict[str, Any], ...]

    def __new__(
        cls, text: str = "", *, is_error: bool = False, blocks: Sequence[Mapping[str, Any]] = ()
    ) -> Self:
        result = super().__new__(cls, text)
        result.is_error = is_error
        result.blocks = tuple(dict(block) for block in blocks)
        return result

    def __repr__(self) -> str:
        flags = ", is_error=True" if self.is_error else ""
        return f"ToolResult({str.__repr__(self)}{flags})"

    @classmethod
    def error(cls, message: str) -> Self:
        """A failed result; the text is prefixed with "Error: " unless it already says Error."""
        text = message if message.startswith("Error") else f"Error: {message}"
        return cls(text, is_error=True)

    @classmethod
    def of(cls, value: Any) -> ToolResult:
        """Turn whatever a tool returned into a result.

        A str starting with "Error" is an error (the nanobot convention); a
        str subclass with a boolean ``is_error`` (such as HKUDS/nanobot's own
        ToolResult) keeps its flag; dicts and lists become JSON text; a list of
        content blocks is kept in ``blocks`` with a text rendering; None means
        no output. Anything else is an error result saying what was returned.
        """
        if isinstance(value, ToolResult):
            return value
        if isinstance(value, str):
            flag = getattr(value, "is_error", None)
            if isinstance(flag, bool):
                return cls.error(str(value)) if flag else cls(str(value))
            return cls(str(value), is_error=value.startswith("Error"))
        if value is None:
            return cls(NO_OUTPUT)
        if isinstance(value, bytes):
            try:
                return cls(value.decode("utf-8"))
            except UnicodeDecodeError:
                return cls.error("the tool returned bytes that are not UTF-8 text")
        if _is_content_blocks(value):
            return cls(_render_blocks(value), blocks=value)
        if isinstance(value, bool | int | float | dict | list | tuple):
            try:
                return cls(json.dumps(value, ensure_ascii=False))
            except (TypeError, ValueError) as exc:
                return cls.error(
                    f"the tool returned a {type(value).__name__} that is not JSON: {exc}"
                )
        return cls.error(
            f"the tool returned a {type(value).__name__}, which cannot be turned into text "
            "(return a str, a dict or list, or content blocks)"
        )


NO_OUTPUT = "(no output)"

_BLOCK_TYPES = frozenset(
    {"text", "image", "image_url", "input_audio", "audio", "file", "document", "resource"}
)


def _is_content_blocks(value: Any) -> bool:
    return (
        isinstance(value, list | tuple)
        and bool(value)
        and all(isinstance(b, dict) and b.get("type") in _BLOCK_TYPES for b in value)
    )


def _render_blocks(blocks: Sequence[Mapping[str, Any]]) -> str:
    parts = [
        str(block.get("text", "")) if block["type"] == "text" else f"[{block['type']}]"
        for block in blocks
    ]
    return "\n".join(parts)


# -- validation of what plugins hand in ------------------------------------------------------


def check_tool(candidate: Tool) -> Tool:
    """Raise TypeError/ValueError unless the tool's name, description and parameters are usable."""
    name = candidate.name
    if not isinstance(name, str) or not _TOOL_NAME.match(name):
        raise ValueError(f"tool name {name!r} is invalid: use 1 to 64 letters, digits, '_' or '-'")
    if not isinstance(candidate.description, str):
        raise TypeError(f"tool {name!r}: description must be a str")
    if not isinstance(candidate.parameters, dict):
        raise TypeError(f"tool {name!r}: parameters must be a JSON Schema dict")
    return candidate


def as_tool(obj: Any, ctx: PluginContext) -> Tool | None:
    """Turn one item contributed by a plugin into a Tool, or None when it is not enabled.

    Accepts a `Tool` subclass (``enabled(ctx)`` is honoured, then it is built
    with ``create(ctx)``), a `Tool` instance, a function decorated with
    `@tool`, or a duck-typed class or instance with ``name``, ``description``,
    ``parameters`` and an async ``execute`` (wrapped in a `ForeignTool`).
    Raises TypeError for anything else.
    """
    if isinstance(obj, Tool):
        return check_tool(obj)
    if isinstance(obj, type) and issubclass(obj, Tool):
        _refuse_abstract(obj)
        if not obj.enabled(ctx):
            return None
        built = obj.create(ctx)
        if not isinstance(built, Tool):
            raise TypeError(f"{obj.__qualname__}.create(ctx) returned {type(built).__name__}")
        return check_tool(built)
    missing = _missing_tool_members(obj)
    if not missing:
        return ForeignTool.from_object(obj, ctx)
    if inspect.isfunction(obj) or inspect.ismethod(obj):
        raise TypeError(
            f"{obj.__qualname__} is a plain function: decorate it with @nanobot_core.tool"
        )
    label = obj.__qualname__ if isinstance(obj, type) else f"a {type(obj).__name__} instance"
    raise TypeError(
        f"{label} is not a tool: a tool needs name, description, parameters and an async "
        f"execute (missing or wrong: {', '.join(missing)})"
    )


def _refuse_abstract(cls: type) -> None:
    abstract = sorted(getattr(cls, "__abstractmethods__", ()))
    if abstract:
        raise TypeError(f"{cls.__qualname__} is abstract: it does not define {', '.join(abstract)}")


def _missing_tool_members(obj: Any) -> list[str]:
    missing = [attr for attr in ("name", "description", "parameters") if not hasattr(obj, attr)]
    if not inspect.iscoroutinefunction(getattr(obj, "execute", None)):
        missing.append("async execute")
    return missing


# -- tools written for HKUDS/nanobot --------------------------------------------------------

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
        _refuse_abstract(obj)
        enabled = getattr(obj, "enabled", None)
        if callable(enabled) and not enabled(context):
            return None
        create = getattr(obj, "create", None)
        instance = create(context) if callable(create) else obj()
        missing = _missing_tool_members(instance)
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


# -- tools from typed functions -------------------------------------------------------------

Converter = Callable[[Any], Any]


class FunctionTool(Tool):
    """A tool built by `@tool` from a typed function; calling it calls the function.

    Async functions are awaited. Sync functions run in a daemon worker thread,
    so a sync tool that overruns its timeout is abandoned (it may finish in the
    background) without blocking the event loop or interpreter shutdown.
    """

    __wrapped__: Callable[..., Any]

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str,
        description: str,
        parameters: dict[str, Any],
        converters: Mapping[str, Converter],
        read_only: bool = False,
        exclusive: bool = False,
        timeout: float | None = None,
    ) -> None:
        self.func = func
        self._name = name
        self._description = description
        self._parameters = parameters
        self._converters = dict(converters)
        self.read_only = read_only
        self.exclusive = exclusive
        self.timeout = timeout
        self.blocking = not inspect.iscoroutinefunction(func)
        self.__wrapped__ = func
        self.__doc__ = func.__doc__

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @property
    def parameters(self) -> dict[str, Any]:
        return self._parameters

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<FunctionTool {self._name!r} from {self.func.__qualname__}>"

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        arguments = {
            key: self._converters[key](value) if key in self._converters else value
            for key, value in kwargs.items()
        }
        if self.blocking:
            result = await run_in_daemon_thread(
                functools.partial(self.func, *args, **arguments), name=self._name
            )
        else:
            result = self.func(*args, **arguments)
        return await result if inspect.isawaitable(result) else result


async def run_in_daemon_thread(func: Callable[[], T], *, name: str = "tool") -> T:
    """Run a blocking callable in a new daemon thread and await its result.

    Unlike ``asyncio.to_thread`` the thread is not part of the loop's default
    executor, so an abandoned call (cancelled or timed out) blocks neither
    ``asyncio.run`` nor interpreter shutdown.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def work() -> None:
        try:
            value = context.run(func)
        except Exception as exc:  # handed to the awaiting coroutine
            report = functools.partial(settle, functools.partial(future.set_exception, exc))
        except BaseException as exc:  # SystemExit and friends must not escape a worker thread
            error = RuntimeError(f"{type(exc).__name__}: {exc}")
            report = functools.partial(settle, functools.partial(future.set_exception, error))
        else:
            report = functools.partial(settle, functools.partial(future.set_result, value))
        # The loop may have closed while an abandoned thread was still working.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(report)

    threading.Thread(target=work, name=f"nanobot-tool-{name}", daemon=True).start()
    return await future


@overload
def tool(func: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    exclusive: bool = False,
    timeout: float | None = None,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    exclusive: bool = False,
    timeout: float | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a tool from a typed function: ``@tool`` or ``@tool(name=..., read_only=True)``.

    The parameters' JSON Schema comes from the type hints (str, int, float,
    bool, list[X], dict[str, X], X | None, Literal[...], Enum, Annotated[X,
    "description"], TypedDict and attrs classes); parameters with defaults are
    optional. The description and per-parameter descriptions come from the
    docstring (Google style, ``Args:`` section).
    """

    def build(function: Callable[..., Any]) -> FunctionTool:
        summary, documented = parse_docstring(function.__doc__)
        parameters, converters = signature_schema(function, documented)
        built = FunctionTool(
            function,
            name=name or function.__name__,
            description=summary if description is None else description,
            parameters=parameters,
            converters=converters,
            read_only=read_only,
            exclusive=exclusive,
            timeout=timeout,
        )
        return typing.cast(FunctionTool, check_tool(built))

    return build if func is None else build(func)


_SECTION_HEADER = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword Args|Returns?|Yields?|Raises|Examples?|"
    r"Notes?|Attributes|See Also|Warnings?|Todo|References):\s*$"
)
_ARG_SECTIONS = frozenset({"Args", "Arguments", "Parameters", "Params", "Keyword Args"})
_ARG_LINE = re.compile(r"^\**(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {parameter: description})."""
    lines = inspect.cleandoc(doc or "").splitlines()
    summary: list[str] = []
    documented: dict[str, list[str]] = {}
    section: str | None = None
    current: str | None = None
    entry_indent: int | None = None
    for line in lines:
        header = _SECTION_HEADER.match(line)
        if header and not line[:1].isspace():
            section, current, entry_indent = header.group(1), None, None
            continue
        if section is None:
            summary.append(line)
            continue
        if section not in _ARG_SECTIONS or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        entry = _ARG_LINE.match(line.strip())
        if entry and (entry_indent is None or indent <= entry_indent):
            entry_indent = indent
            current = entry.group(1)
            documented[current] = [entry.group(2).strip()]
        elif current is not None:
            documented[current].append(line.strip())
    description = "\n".join(summary).strip()
    return description, {k: " ".join(p for p in v if p) for k, v in documented.items()}


def signature_schema(
    func: Callable[..., Any], documented: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, Converter]]:
    """The JSON Schema of a function's parameters, and converters for Enum/attrs arguments."""
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except NameError as exc:
        raise TypeError(
            f"{func.__qualname__}: cannot resolve the type hints ({exc}); "
            "the types must be importable where the function is defined"
        ) from exc
    properties: dict[str, Any] = {}
    required: list[str] = []
    converters: dict[str, Converter] = {}
    open_ended = False
    for parameter in inspect.signature(func).parameters.values():
        where = f"{func.__qualname__}({parameter.name})"
        if parameter.kind is parameter.VAR_KEYWORD:
            open_ended = True
            continue
        if parameter.kind is parameter.VAR_POSITIONAL:
            continue
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise TypeError(f"{where}: positional-only parameters cannot be tool arguments")
        schema, converter = type_schema(hints.get(parameter.name, Any), where)
        if parameter.name in documented and "description" not in schema:
            schema = {**schema, "description": documented[parameter.name]}
        if parameter.default is parameter.empty:
            required.append(parameter.name)
        elif _json_default(parameter.default) is not None:
            schema = {**schema, "default": _json_default(parameter.default)}
        properties[parameter.name] = schema
        if converter is not None:
            converters[parameter.name] = converter
    schema_object: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema_object["required"] = required
    if not open_ended:
        schema_object["additionalProperties"] = False
    return schema_object, converters


def _json_default(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, str | int | float | bool | list | dict):
        return value
    return None


_PRIMITIVES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_NONE_TYPE = type(None)


def type_schema(hint: Any, where: str) -> tuple[dict[str, Any], Converter | None]:
    """The JSON Schema of one type hint, and a converter from JSON to that type when needed."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is inspect.Parameter.empty:
        return {}, None
    if hint in _PRIMITIVES:
        return {"type": _PRIMITIVES[hint]}, None
    if hint is _NONE_TYPE:
        return {"type": "null"}, None
    if origin is typing.Annotated:
        schema, converter = type_schema(args[0], where)
        notes = [note for note in hint.__metadata__ if isinstance(note, str)]
        return ({**schema, "description": notes[0]} if notes else schema), converter
    if origin is typing.Union or origin is types.UnionType:
        return _union_schema(args, where)
    if origin is Literal:
        return _enum_schema(list(args)), None
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum_schema([member.value for member in hint]), hint
    if hint in (list, tuple, set, frozenset) or origin in (
        list,
        tuple,
        set,
        frozenset,
        Sequence,
        typing.Sequence,
    ):
        return _array_schema(origin or hint, args, where)
    if hint in (dict, Mapping) or origin in (dict, Mapping, typing.Mapping):
        if args and args[0] is not str:
            raise TypeError(f"{where}: JSON object keys are strings, not {args[0]!r}")
        mapping: dict[str, Any] = {"type": "object"}
        if len(args) == 2 and args[1] is not Any:
            mapping["additionalProperties"] = type_schema(args[1], where)[0]
        return mapping, None
    if typing.is_typeddict(hint):
        return _typeddict_schema(hint, where), None
    if isinstance(hint, type) and attrs.has(hint):
        return _attrs_schema(hint, where)
    raise TypeError(f"{where}: cannot describe the type {hint!r} in JSON Schema")


def _union_schema(args: tuple[Any, ...], where: str) -> tuple[dict[str, Any], Converter | None]:
    members = [arg for arg in args if arg is not _NONE_TYPE]
    nullable = len(members) < len(args)
    if len(members) == 1:
        schema, converter = type_schema(members[0], where)
    else:
        schema, converter = {"anyOf": [type_schema(m, where)[0] for m in members]}, None
    if not nullable:
        return schema, converter
    guarded = None if converter is None else _skip_none(converter)
    if isinstance(schema.get("type"), str):
        nulled = {**schema, "type": [schema["type"], "null"]}
        if "enum" in nulled:
            nulled["enum"] = [*nulled["enum"], None]
        return nulled, guarded
    return {"anyOf": [schema, {"type": "null"}]}, guarded


def _skip_none(converter: Converter) -> Converter:
    return lambda value: None if value is None else converter(value)


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    kinds: list[str] = []
    for value in values:
        kind = "null" if value is None else _PRIMITIVES.get(type(value), "string")
        if kind not in kinds:
            kinds.append(kind)
    return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": values}


def _array_schema(
    container: Any, args: tuple[Any, ...], where: str
) -> tuple[dict[str, Any], Converter | None]:
    schema: dict[str, Any] = {"type": "array"}
    item_converter: Converter | None = None
    if container is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        items = [type_schema(arg, where)[0] for arg in args]
        schema.update(prefixItems=items, minItems=len(items), maxItems=len(items))
    elif args:
        schema["items"], item_converter = type_schema(args[0], where)
    if container in (set, frozenset):
        schema["uniqueItems"] = True
    build: Callable[[Any], Any] = container if container in (tuple, set, frozenset) else list
    if item_converter is None and build is list:
        return schema, None
    convert_item = item_converter or (lambda item: item)
    return schema, lambda value: build(convert_item(item) for item in value)


def _typeddict_schema(hint: Any, where: str) -> dict[str, Any]:
    hints = typing.get_type_hints(hint, include_extras=True)
    properties = {key: type_schema(value, f"{where}.{key}")[0] for key, value in hints.items()}
    required = [key for key in hints if key in hint.__required_keys__]
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _attrs_schema(hint: type, where: str) -> tuple[dict[str, Any], Converter]:
    attrs.resolve_types(hint)
    properties: dict[str, Any] = {}
    required: list[str] = []
    converters: dict[str, Converter] = {}
    for field in attrs.fields(hint):
        if not field.init:
            continue
        schema, converter = type_schema(field.type or Any, f"{where}.{field.name}")
        properties[field.alias] = schema
        if field.default is attrs.NOTHING:
            required.append(field.alias)
        if converter is not None:
            converters[field.alias] = converter

    def convert(value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        return hint(**{k: converters[k](v) if k in converters else v for k, v in value.items()})

    schema_object: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema_object["required"] = required
    return schema_object, convert
