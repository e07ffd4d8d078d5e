"""The Tool API: the `Tool` base class, `ToolResult`, `check_tool` and `as_tool`.

There are three ways to write a tool: subclass `Tool`; decorate a typed
function with `@tool` (see `nanobot_core.tools._function`); or, for tools
written for HKUDS/nanobot, any class with ``name``, ``description``,
``parameters`` and an async ``execute``, which `as_tool` wraps in a
`ForeignTool` (see `nanobot_core.tools._foreign`). The public names are
exported from `nanobot_core`.
"""

from __future__ import annotations

import abc
import copy
import inspect
import re
import types
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Self

from nanobot_core._clip import a_type
from nanobot_core._numbers import fits_float
from nanobot_core.errors import PluginError

if TYPE_CHECKING:
    from nanobot_core.kernel.context import PluginContext

__all__ = [
    "Tool",
    "ToolAttributeError",
    "ToolFlagError",
    "ToolResult",
    "as_tool",
    "check_tool",
    "read_result",
    "usable_timeout",
]

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

    def validate_arguments(
        self, arguments: dict[str, Any]
    ) -> tuple[dict[str, Any], list[str]] | None:
        """The tool's own check of parsed arguments: (arguments to run with, errors).

        None (the default) means the registry validates against ``parameters``
        and casts only what is invalid. A tool with rules of its own overrides
        this; the adapter of HKUDS/nanobot tools uses their ``validate_params``.
        """
        return None

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
        ToolResult) keeps its flag; bytes (a bytearray, a memoryview) holding
        UTF-8 text are read as that text's str, other bytes are an error saying
        where they stop being UTF-8; dicts and lists become JSON text; a list of
        content blocks is kept in ``blocks`` with a text rendering; None means
        no output. Anything else is an error result saying what was returned.

        The result is always a plain `ToolResult`: the text of a str (or
        bytes) subclass is read as plain text, so its own methods (a
        ``startswith`` or ``__str__`` of its own) are not called. What is
        still the value's own code (an ``is_error`` property, a dict
        subclass's methods) may raise; the executor reports that as an error
        of the tool.
        """
        read = read_result(value)
        return read if isinstance(read, ToolResult) else cls.error(f"the tool {read}")


def read_result(value: Any) -> ToolResult | str:
    """`ToolResult.of` of `value`, or the plain str (``returned a ...``) saying why it is no result.

    The executor words that phrase with the tool and its plugin.
    """
    if type(value) is ToolResult and _plain_flags(value):
        return value
    if isinstance(value, str):
        text = str.__str__(value)
        flag = getattr(value, "is_error", None)
        if isinstance(value, ToolResult):  # a subclass: its flag and blocks, in a plain one
            return ToolResult(text, is_error=flag is True, blocks=value.blocks)
        if isinstance(flag, bool):
            return ToolResult.error(text) if flag else ToolResult(text)
        return ToolResult(text, is_error=text.startswith("Error"))
    if value is None:
        return ToolResult(NO_OUTPUT)
    if isinstance(value, bytes | bytearray | memoryview):
        return _read_bytes(value)
    if _is_content_blocks(value):
        return ToolResult(_render_blocks(value), blocks=value)
    if isinstance(value, bool | int | float | dict | list | tuple):
        from nanobot_core._json_boundary import dumps

        try:  # the boundary: NaN becomes null, lone surrogates U+FFFD, depth is limited
            return ToolResult(dumps(value))
        except (TypeError, ValueError) as exc:
            return f"returned {a_type(value)} that is not JSON: {exc}"
    return (
        f"returned {a_type(value)}, which cannot be turned into text "
        "(return a str, a dict or list, or content blocks)"
    )


def _read_bytes(value: bytes | bytearray | memoryview) -> ToolResult | str:
    """Bytes a tool returned read as the str of their UTF-8 text, or why they cannot be.

    Read as that str would be (one beginning with "Error" is an error). Bytes that
    are not UTF-8 are not guessed at: decoded with replacements they would reach the
    model as text it cannot tell from the tool's, so the tool is named with the
    first byte that is not, for its author to decode them (knowing their encoding).
    """
    # A bytes subclass is read by its bytes, not by methods of its own (as a str's text).
    if type(value) is bytes:
        data = value
    else:
        with memoryview(value) as view:  # released at once: a bytearray can grow again
            data = view.tobytes()
    try:
        text = bytes.decode(data, "utf-8")
    except UnicodeDecodeError as exc:
        held = "" if isinstance(value, bytes) else f" (a {type(value).__name__})"
        return (
            f"returned {len(data):,} bytes{held} that are not UTF-8 text: byte {exc.start:,} "
            f"is 0x{data[exc.start]:02x}. A tool returns text: it decodes bytes of another "
            "encoding itself, and returns an image or a file as content blocks"
        )
    return read_result(text)


def _plain_flags(result: ToolResult) -> bool:
    """Whether a `ToolResult` still holds what its constructor made: a bool flag, dict blocks.

    Both are plain attributes a tool may have set to anything after building it.
    """
    blocks = result.blocks
    return (
        type(result.is_error) is bool
        and type(blocks) is tuple
        and all(type(block) is dict for block in blocks)
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


#: The flags that decide how a call is scheduled (see `Tool`); ``timeout`` is checked apart.
TOOL_FLAGS = ("read_only", "exclusive", "concurrency_safe")


class ToolFacts(NamedTuple):
    """What the core keeps of a tool, read once when it is registered (see `read_tool`)."""

    name: str
    description: str
    parameters: dict[str, Any]
    #: ``read_only``, ``exclusive`` and ``concurrency_safe`` as they were then (`flag_value`).
    flags: Mapping[str, bool] = types.MappingProxyType({})


class ToolFlagError(PluginError, ValueError):
    """A tool's flag or timeout holds what none may: the tool is refused when it is loaded.

    A `PluginError` (a plugin's tool is malformed), and still the `ValueError` that
    `as_tool` raised for it before, so an ``except ValueError`` that caught it still does.
    """

    def __init__(self, tool: str, problem: str) -> None:
        super().__init__(f"tool {tool!r}: {problem}")
        self.tool = tool
        self.problem = problem  # ``its read_only is 'yes', expected True or False``


class ToolAttributeError(PluginError):
    """Reading one of a tool's attributes raised: the tool is refused when it is loaded.

    Its plugin's other tools still load. ``tool`` is the tool's name when it was
    read before (else None), ``attribute`` the one whose reading raised, ``problem``
    what it raised, and ``label`` the tool as a message names it.
    """

    def __init__(self, tool: str | None, cls: str, attribute: str, raised: str) -> None:
        self.tool = tool
        self.attribute = attribute
        self.problem = f"reading its {attribute} raised {raised}"
        # Its class names a tool whose name could not be read: the author knows it.
        self.label = f"tool {tool!r}" if tool is not None else f"tool of class {cls}"
        super().__init__(f"{self.label}: {self.problem}")


def check_tool(candidate: Tool) -> Tool:
    """`candidate`, once `read_tool` found it usable; raises as `read_tool` does."""
    read_tool(candidate)
    return candidate


def read_tool(candidate: Tool) -> ToolFacts:
    """Name, description, parameters and flags, checked with the timeout, each read once.

    A property may cost, raise, or answer differently on each read: what is read
    here is what the core keeps, so the name the model sees is the name calls are
    routed by and the flags listed are those the calls are scheduled by. A
    ``concurrency_safe`` that is `Tool.concurrency_safe` is made of the
    ``read_only`` and ``exclusive`` read, not read again through that property.

    The parameters are a deep copy of the tool's. Raises `ToolAttributeError`
    naming the attribute whose reading raised (a real Ctrl-C goes on), ValueError
    for a name that cannot be used, `ToolFlagError` (a ValueError) for a timeout
    that is no timeout (`usable_timeout`) or a flag that holds no flag
    (`flag_value`), TypeError for a description or parameters of the wrong type.
    """
    name = _attribute(candidate, "name", None)
    # fullmatch: `$` alone also matches before a final line break ("grep\n").
    if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
        raise ValueError(f"tool name {name!r} is invalid: use 1 to 64 letters, digits, '_' or '-'")
    description = _attribute(candidate, "description", name)
    if not isinstance(description, str):
        raise TypeError(f"tool {name!r}: description must be a str")
    parameters = _attribute(candidate, "parameters", name)
    if not isinstance(parameters, dict):
        raise TypeError(f"tool {name!r}: parameters must be a JSON Schema dict")
    # A copy: the tool's own dict, changed later in place (an enum filled in on first
    # use), must not change what was read: the definitions, and the validation.
    parameters = _copied(parameters)
    timeout = _attribute(candidate, "timeout", name)
    if not usable_timeout(timeout):
        raise ToolFlagError(name, timeout_problem(timeout))
    flags: dict[str, bool] = {}
    for flag in TOOL_FLAGS:
        if flag == "concurrency_safe" and default_concurrency_safe(type(candidate)):
            flags[flag] = flags["read_only"] and not flags["exclusive"]
            continue
        value = _attribute(candidate, flag, name)
        meant = flag_value(value)
        if meant is None:
            raise ToolFlagError(name, flag_problem(flag, value))
        flags[flag] = meant
    return ToolFacts(name, description, parameters, types.MappingProxyType(flags))


def _copied(value: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of `value` whose dicts and lists are copied without recursion.

    `copy.deepcopy` recurses once a level: a schema nested a thousand levels deep raised
    `RecursionError` here, failing its plugin with all its tools, where the schema's
    check leaves out that tool alone, saying it is nested too deep. Other values are
    copied by `copy.deepcopy`, and a dict or list met twice is copied once, as it does.
    """
    copies: dict[int, Any] = {}

    def copy_of(item: Any) -> Any:
        if type(item) is dict:
            made: Any = {}
        elif type(item) is list:
            made = []
        else:
            return copy.deepcopy(item)
        copies[id(item)] = made
        pending.append((item, made))
        return made

    pending: list[tuple[Any, Any]] = []
    root = copy_of(value)
    while pending:
        original, made = pending.pop()
        members = original.items() if isinstance(original, dict) else enumerate(original)
        for key, item in members:
            child = copies[id(item)] if id(item) in copies else copy_of(item)
            if isinstance(made, dict):
                made[key] = child
            else:
                made.append(child)
    copied: dict[str, Any] = root
    return copied


def _attribute(candidate: Tool, attribute: str, name: str | None) -> Any:
    """`candidate`'s `attribute`, or `ToolAttributeError` saying what reading it raised."""
    try:
        return getattr(candidate, attribute)
    except BaseException as exc:  # a real Ctrl-C goes on (`contained`)
        from nanobot_core._containment import contained

        raised = contained(exc)
        raise ToolAttributeError(name, type(candidate).__name__, attribute, raised) from None


def default_concurrency_safe(cls: type) -> bool:
    """Whether `cls`'s ``concurrency_safe`` is `Tool.concurrency_safe`, made of its other flags.

    That property is a data descriptor, so no instance attribute hides it; a class
    with an attribute lookup of its own may answer anything, and is read.
    """
    if vars(object)["__getattribute__"] is not cls.__getattribute__:
        return False
    owner = next((o for o in cls.__mro__ if "concurrency_safe" in vars(o)), None)
    return owner is not None and vars(owner)["concurrency_safe"] is vars(Tool)["concurrency_safe"]


def flag_value(value: object) -> bool | None:
    """What a flag's value stands for, or None when it is no flag.

    A bool; an int for its truth (0 and 1 as they always were). A str, None
    or anything else is refused: ``"no"`` is true, and an object's truth is its code.
    """
    if type(value) is bool:
        return value
    if type(value) is int:
        return bool(value)
    return None


def flag_problem(flag: str, value: object) -> str:
    """Why `value`, which `flag_value` refused, is no value of `flag`."""
    return f"its {flag} is {shown(value)}, expected True or False"


def shown(value: object) -> str:
    """A flag's value in a message: repr of plain values, else its type (its repr is its code)."""
    if type(value) is int and not fits_float(value):
        # Its repr may run to pages, or be refused (sys.set_int_max_str_digits); and shown
        # in full, a timeout refused as too large reads like the positive number it asks for.
        return f"an int of {value.bit_length()} bits"
    if type(value) in (str, int, float, bool) or value is None:
        return repr(value)
    return a_type(value)


def usable_timeout(timeout: object) -> bool:
    """Whether `timeout` is a tool's timeout: a positive number of seconds (inf: no limit), or None.

    A bool is no number of seconds (``True`` is not 1 s), nor is NaN, nor an int
    too large for a float (the executor waits a float of seconds).
    """
    if timeout is None:
        return True
    if not isinstance(timeout, int | float) or isinstance(timeout, bool):
        return False
    if isinstance(timeout, int) and not fits_float(timeout):
        return False
    return float(timeout) > 0  # NaN is not


def timeout_problem(timeout: object) -> str:
    """Why `timeout`, which `usable_timeout` refused, is no timeout of a tool."""
    return f"its timeout is {shown(timeout)}, expected a positive number of seconds or None"


def as_tool(obj: Any, ctx: PluginContext) -> Tool | None:
    """Turn one item contributed by a plugin into a Tool, or None when it is not enabled.

    Accepts a `Tool` subclass (``enabled(ctx)`` is honoured, then it is built
    with ``create(ctx)``), a `Tool` instance, a function decorated with
    `@tool`, or a duck-typed class or instance with ``name``, ``description``,
    ``parameters`` and an async ``execute`` (wrapped in a `ForeignTool`).
    Raises TypeError for anything else, and what `read_tool` raises for a tool
    that cannot be used.
    """
    loaded = load_tool(obj, ctx)
    return None if loaded is None else loaded[0]


def load_tool(obj: Any, ctx: PluginContext) -> tuple[Tool, ToolFacts] | None:
    """`as_tool` of `obj`, with what `read_tool` read of the tool: nothing reads it again."""
    if isinstance(obj, Tool):
        return obj, read_tool(obj)
    if isinstance(obj, type) and issubclass(obj, Tool):
        refuse_abstract(obj)
        if not obj.enabled(ctx):
            return None
        built = obj.create(ctx)
        if not isinstance(built, Tool):
            raise TypeError(f"{obj.__qualname__}.create(ctx) returned {type(built).__name__}")
        return built, read_tool(built)
    missing = missing_tool_members(obj)
    if not missing:
        from nanobot_core.tools._foreign import ForeignTool

        foreign = ForeignTool.from_object(obj, ctx)
        return None if foreign is None else (foreign, foreign.facts)
    if inspect.isfunction(obj) or inspect.ismethod(obj):
        raise TypeError(
            f"{obj.__qualname__} is a plain function: decorate it with @nanobot_core.tool"
        )
    label = obj.__qualname__ if isinstance(obj, type) else f"a {type(obj).__name__} instance"
    raise TypeError(
        f"{label} is not a tool: a tool needs name, description, parameters and an async "
        f"execute (missing or wrong: {', '.join(missing)})"
    )


def refuse_abstract(cls: type) -> None:
    """Raise TypeError when a tool class leaves abstract members undefined."""
    abstract = sorted(getattr(cls, "__abstractmethods__", ()))
    if abstract:
        raise TypeError(f"{cls.__qualname__} is abstract: it does not define {', '.join(abstract)}")


def missing_tool_members(obj: Any) -> list[str]:
    """What a duck-typed tool lacks (or has wrong) of name, description, parameters, execute.

    A member its class defines (a property too) is there without being read: the
    adapter reads it once, after (`ForeignTool`). Only one an attribute lookup of
    the object's own may answer is asked for (`hasattr`).
    """
    missing = [attr for attr in ("name", "description", "parameters") if not _has(obj, attr)]
    if not inspect.iscoroutinefunction(getattr(obj, "execute", None)):
        missing.append("async execute")
    return missing


_ABSENT = object()


def _has(obj: Any, attr: str) -> bool:
    """Whether `obj` has `attr`, without running a property of its class to know."""
    if inspect.getattr_static(obj, attr, _ABSENT) is not _ABSENT:
        return True
    return hasattr(obj, attr)
