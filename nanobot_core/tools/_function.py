"""Tools from typed functions: `FunctionTool`, the `@tool` decorator and the schema it derives.

The JSON Schema of the arguments comes from the type hints and the
descriptions from the Google-style docstring.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import enum
import functools
import inspect
import re
import threading
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar, overload

import attrs

from nanobot_core.tools.base import Tool, check_tool

__all__ = [
    "Converter",
    "FunctionTool",
    "parse_docstring",
    "run_in_daemon_thread",
    "signature_schema",
    "tool",
    "type_schema",
]

T = TypeVar("T")

# Turns a JSON argument into the Python value the function expects (an Enum, an attrs class...).
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
        self._parameters = copy.deepcopy(parameters)
        self._converters = dict(converters)
        self.read_only = read_only
        self.exclusive = exclusive
        self.timeout = timeout
        self.blocking = not inspect.iscoroutinefunction(_defining(func))
        self.__wrapped__ = func
        self.__doc__ = _defining(func).__doc__

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @property
    def parameters(self) -> dict[str, Any]:
        """A fresh copy of the schema, so what the registry validates cannot change from outside."""
        return copy.deepcopy(self._parameters)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<FunctionTool {self._name!r} from {_qualname(self.func)}>"

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
    # Here, not at import: a loop runs already (so asyncio is loaded), and what only lists
    # or checks tools (`nanobot-core tools`) never loads asyncio and the ssl it imports.
    import asyncio

    from nanobot_core._containment import escape_error  # and what `@tool` loads stays small
    from nanobot_core.tools._threads import counted

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
            error = escape_error(exc)
            report = functools.partial(settle, functools.partial(future.set_exception, error))
        else:
            report = functools.partial(settle, functools.partial(future.set_result, value))
        # The loop may have closed while an abandoned thread was still working.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(report)

    # Counted under the tool call, which can then tell that its thread outlived it.
    threading.Thread(target=counted(work), name=f"nanobot-tool-{name}", daemon=True).start()
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
        defining = _defining(function)
        if inspect.isasyncgenfunction(defining) or inspect.isgeneratorfunction(defining):
            raise TypeError(
                f"{_qualname(function)} is a generator function: a tool returns its whole "
                "result once (collect what it yields, and return that)"
            )
        if not callable(function):
            raise TypeError(f"@tool takes a function, got {type(function).__name__}")
        tool_name = name or _default_name(function)
        if tool_name is None:
            raise TypeError(
                f"{_qualname(function)} has no name of its own: give one, tool(name=...)(callable)"
            )
        summary, documented = parse_docstring(defining.__doc__)
        parameters, converters = signature_schema(function, documented)
        built = FunctionTool(
            function,
            name=tool_name,
            description=summary if description is None else description,
            parameters=parameters,
            converters=converters,
            read_only=read_only,
            exclusive=exclusive,
            timeout=timeout,
        )
        return typing.cast(FunctionTool, check_tool(built))

    return build if func is None else build(func)


def _defining(func: Callable[..., Any]) -> Callable[..., Any]:
    """The function whose hints, docstring and kind a tool of `func` has: a partial's
    function (however deep), a callable object's ``__call__``, else `func` itself."""
    while isinstance(func, functools.partial):
        func = func.func
    if inspect.isroutine(func) or inspect.isclass(func):
        return func
    return type(func).__call__ if callable(func) else func


def _default_name(func: Callable[..., Any]) -> str | None:
    """The name a tool of `func` gets unless given one: a function's (a partial's function's);
    None for a callable object, whose class names a kind of thing, not this tool."""
    while isinstance(func, functools.partial):
        func = func.func
    name = getattr(func, "__name__", None)
    if name == "<lambda>":  # a lambda names no tool either: the error asks for a name
        return None
    return name if isinstance(name, str) and inspect.isroutine(func) else None


def _qualname(func: Callable[..., Any]) -> str:
    """How errors name `func`: its qualified name, a partial's as ``partial(name)``, an
    object's by its class."""
    if isinstance(func, functools.partial):
        return f"partial({_qualname(func.func)})"
    name = getattr(func, "__qualname__", None)
    return name if isinstance(name, str) else f"{type(func).__qualname__} object"


_SECTION_HEADER = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword Args|Returns?|Yields?|Raises|Examples?|"
    r"Notes?|Attributes|See Also|Warnings?|Todo|References):\s*$"
)
_ARG_SECTIONS = frozenset({"Args", "Arguments", "Parameters", "Params", "Keyword Args"})
# The first run of spaces is possessive: with two runs that may both take it, a long run
# and no colon was tried every way of splitting it (quadratic in the line).
_ARG_LINE = re.compile(r"^\**(\w+)\s*+(?:\([^)]*\))?\s*:\s*(.*)$")


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
        hints = typing.get_type_hints(_defining(func), include_extras=True)
    except NameError as exc:
        raise TypeError(
            f"{_qualname(func)}: cannot resolve the type hints ({exc}); "
            "the types must be importable where the function is defined"
        ) from exc
    # What a partial binds by keyword is the program's, not the model's to set.
    bound = set(func.keywords) if isinstance(func, functools.partial) else set()
    properties: dict[str, Any] = {}
    required: list[str] = []
    converters: dict[str, Converter] = {}
    open_ended = False
    for parameter in inspect.signature(func).parameters.values():
        if parameter.name in bound:
            continue
        where = f"{_qualname(func)}({parameter.name})"
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
        return {"type": _PRIMITIVES[hint]}, (_whole if hint is int else None)
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
        value_converter: Converter | None = None
        if len(args) == 2 and args[1] is not Any:
            mapping["additionalProperties"], value_converter = type_schema(args[1], where)
        if value_converter is None:
            return mapping, None
        convert_value = value_converter
        return mapping, lambda value: {key: convert_value(item) for key, item in value.items()}
    if typing.is_typeddict(hint):
        return _typeddict_schema(hint, where), None
    if isinstance(hint, type) and attrs.has(hint):
        return _attrs_schema(hint, where)
    raise TypeError(f"{where}: cannot describe the type {hint!r} in JSON Schema")


def _whole(value: Any) -> Any:
    """The int of a whole number written with a fraction (3.0, 1e3), which validation let
    through as an integer (JSON Schema's integer admits it); anything else as it is."""
    return int(value) if type(value) is float and value.is_integer() else value


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
