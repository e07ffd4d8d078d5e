"""Configuration: TOML and environment, loaded into attrs classes with cattrs.

Precedence, highest first: CLI flags, ``NANOBOT_*`` environment variables
(nested keys joined by ``__``), ``--config FILE``, ``nanobot.toml`` in the
working directory, ``[tool.nanobot]`` in ``pyproject.toml`` in the working
directory, defaults.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import attrs

from nanobot_core._clip import quoted
from nanobot_core._numbers import fits_float
from nanobot_core._reading import read_up_to
from nanobot_core._regular_file import open_regular_file
from nanobot_core._session_names import validate_session_name
from nanobot_core.errors import ConfigError, NotRegularFileError, SessionError

__all__ = [
    "Config",
    "GovernanceConfig",
    "PluginsConfig",
    "PostgresConfig",
    "PromptConfig",
    "ProviderConfig",
    "RunnerConfig",
    "SessionsConfig",
    "StoreConfig",
    "ToolsConfig",
    "check_budget",
    "check_config",
    "is_option_type",
    "load_config",
    "source_prefix",
    "type_problem",
    "variable_source",
]


@attrs.define
class PluginsConfig:
    """Which plugins load, and who may override a built-in name."""

    block: list[str] = attrs.field(factory=list)
    allow: list[str] | None = None
    disable_autoload: bool = False
    strict: bool = False
    disabled_builtins: list[str] = attrs.field(factory=list)
    overrides: dict[str, list[str]] = attrs.field(factory=dict)
    #: Seconds one call into a plugin's code may hold the command's thread before a
    #: warning names it (0: never); such code has no time limit (see `_stall`).
    stall_warning: float = 30.0
    #: Seconds after which such a call ends the command (exit 1, naming it; 0: never).
    stall_timeout: float = 0.0


#: The default ``tools.max_calls_per_reply``: no provider documents a limit on the calls of
#: one reply, but OpenAI's chat completions take at most 128 tool definitions a request
#: (Vertex AI's Gemini 64), so a reply calling every tool it was offered once fits; models
#: ask for a handful at once. Past it, a broken or hostile server's reply of thousands of
#: calls would have them all run together.
DEFAULT_MAX_CALLS_PER_REPLY = 128


@attrs.define
class ToolsConfig:
    """Tool switches and execution limits."""

    disabled: list[str] = attrs.field(factory=list)
    timeout: float = 60.0
    options: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    # identical read-only calls run per turn; more are refused (0: no limit)
    max_identical_calls: int = 2
    # tool calls run per model reply; each one past it is answered with an error, not run
    # (0: no limit)
    max_calls_per_reply: int = DEFAULT_MAX_CALLS_PER_REPLY


#: The smallest ``max_tool_result_chars``: below it the notice that replaces an offloaded
#: result (its path and size) no longer fits, so whole results would be lost.
MIN_TOOL_RESULT_CHARS = 500


@attrs.define
class StoreConfig:
    """``[governance.store]``: how much the offload cache keeps (age since last use, bytes)."""

    max_age_days: float = 30.0
    max_bytes: int = 1 << 30


@attrs.define
class GovernanceConfig:
    """The token budget and the stage switches of the governance pipeline."""

    context_window: int = 128_000
    max_output: int = 8_192
    safety_margin: int = 1_024
    input_limit: int | None = None
    max_tool_result_chars: int = 16_000
    disabled: list[str] = attrs.field(factory=list)
    stages: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    store: StoreConfig = attrs.field(factory=StoreConfig)
    #: When a compaction is needed, the request goes down to this share of the budget, so
    #: that the next turns append without compacting again (prompt caches keep hitting); a
    #: needed cut, which changes the whole request, goes down to its square.
    low_watermark: float = 0.7


#: The default ``prompt.max_file_bytes`` (1 MiB): well above a long hand-written AGENTS.md
#: or memory file (a few hundred KB at most, already more than many context windows),
#: far below a file put there by mistake (a log, a dump), which would go into every request.
DEFAULT_PROMPT_FILE_BYTES = 1024 * 1024

#: The default ``prompt.max_section_chars``: four default-sized files, above what the
#: built-in sections render at the default ``prompt.max_file_bytes`` (the workspace
#: files section holds at most three of them), far below a plugin section gone wrong.
DEFAULT_PROMPT_SECTION_CHARS = 4 * DEFAULT_PROMPT_FILE_BYTES


@attrs.define
class PromptConfig:
    """Which sections make the system prompt, in which order, and how much of a file it takes."""

    disabled: list[str] = attrs.field(factory=list)
    order: dict[str, float] = attrs.field(factory=dict)
    # The most bytes of one workspace file (AGENTS.md, SOUL.md, USER.md, memory/MEMORY.md,
    # a SKILL.md) the prompt reads; a longer file is cut there, with a notice.
    max_file_bytes: int = DEFAULT_PROMPT_FILE_BYTES
    # The most characters one section puts in the prompt, a built-in's or a plugin's; a
    # longer section is cut there, with a notice and a warning naming its plugin.
    max_section_chars: int = DEFAULT_PROMPT_SECTION_CHARS


@attrs.define
class ProviderConfig:
    """How to reach the model."""

    name: str = "openai"
    base_url: str = "https://api.openai.com/v1"
    model: str = "gpt-4o-mini"
    api_key: str | None = attrs.field(default=None, repr=False)
    timeout: float = 120.0
    max_retries: int = 4
    backoff_base: float = 0.5
    retry_after_cap: float = 60.0
    temperature: float | None = None
    # Prompt caching, for providers that opt in per request (``anthropic``): the TTL of
    # the cache entries, or "off". OpenAI-compatible servers cache on their own.
    cache: Literal["off", "5m", "1h"] = "5m"
    # The most output tokens a reply may take (what a paid model may bill for one reply):
    # sent by the built-in provider when set, and by providers whose API requires it.
    max_tokens: int | None = None
    # The request field the built-in provider sends max_tokens in: "auto" is
    # max_completion_tokens to OpenAI's API (its reasoning models refuse max_tokens) and
    # max_tokens to any other server (what Ollama, llama.cpp, OpenRouter document).
    max_tokens_field: Literal["auto", "max_tokens", "max_completion_tokens"] = "auto"
    # The most bytes a reply body may hold, as sent and once decompressed (64 MiB): a reply
    # with a long answer and tool calls is a few MB; beyond this it is refused, not read.
    max_reply_bytes: int = 64 * 1024 * 1024
    # Where each key a source gave was set, as `load_config` read them (the same record as
    # `Config`'s): a provider is built from this table alone, and names a setting it
    # refuses with `source_prefix(config=...)`. No key, and not part of equality.
    _key_sources: dict[str, str] = attrs.field(factory=dict, init=False, eq=False, repr=False)


@attrs.define
class RunnerConfig:
    """The headless agent loop."""

    max_iterations: int = 20
    session: str = "default"


@attrs.define
class PostgresConfig:
    """``[sessions.postgres]``: the ``postgres`` store of the ``nanobot-postgres`` plugin."""

    # A libpq connection string or URL; it may hold a password, so it never shows in a repr.
    dsn: str | None = attrs.field(default=None, repr=False)
    pool_size: int = 4
    connect_timeout: float = 10.0
    # Seconds the store waits for the server's answer to one statement: what bounds a cut
    # network, which neither the server's statement_timeout nor TCP (minutes) bound.
    query_timeout: float = 30.0
    results: bool = True


@attrs.define
class SessionsConfig:
    """Where sessions live, and how long a writer waits for a session another one holds."""

    store: str = "jsonl"
    lease_wait: float = 0.0
    postgres: PostgresConfig = attrs.field(factory=PostgresConfig)


@attrs.define
class Config:
    """The whole configuration of nanobot-core."""

    plugins: PluginsConfig = attrs.field(factory=PluginsConfig)
    tools: ToolsConfig = attrs.field(factory=ToolsConfig)
    governance: GovernanceConfig = attrs.field(factory=GovernanceConfig)
    prompt: PromptConfig = attrs.field(factory=PromptConfig)
    provider: ProviderConfig = attrs.field(factory=ProviderConfig)
    runner: RunnerConfig = attrs.field(factory=RunnerConfig)
    sessions: SessionsConfig = attrs.field(factory=SessionsConfig)
    # Where each key a source gave was set (dotted key: the last source giving it), as
    # `load_config` read them: for `source_prefix` to name. No key of its own, and left out
    # of equality, so that a loaded config equals one made from the same values.
    _key_sources: dict[str, str] = attrs.field(factory=dict, init=False, eq=False, repr=False)


# Environment variables with names of their own, mapped onto config keys.
_NAMED_ENV: dict[str, tuple[str, ...]] = {
    "NANOBOT_BLOCK": ("plugins", "block"),
    "NANOBOT_PLUGINS": ("plugins", "allow"),
    "NANOBOT_DISABLE_PLUGIN_AUTOLOAD": ("plugins", "disable_autoload"),
    "NANOBOT_STRICT_PLUGINS": ("plugins", "strict"),
    "NANOBOT_BASE_URL": ("provider", "base_url"),
    "NANOBOT_MODEL": ("provider", "model"),
    "NANOBOT_API_KEY": ("provider", "api_key"),
    "NANOBOT_PROVIDER": ("provider", "name"),
    "NANOBOT_POSTGRES_DSN": ("sessions", "postgres", "dsn"),
}
_LIST_ENV = {"NANOBOT_BLOCK", "NANOBOT_PLUGINS"}
_BOOL_ENV = {"NANOBOT_DISABLE_PLUGIN_AUTOLOAD", "NANOBOT_STRICT_PLUGINS"}


def variable_source(name: str) -> str:
    """How a config error or warning names the environment variable `name` as the source
    of a value (``environment variable NAME``): one wording, so that a message says which
    variable to fix, whether the core or a plugin read it (`check_endpoint`'s
    ``base_url_source``, say; `source_prefix` puts it at the start of an error)."""
    return f"environment variable {name}"


def _env_bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"", "0", "false", "no", "off"}:
        return False
    raise ConfigError(
        f"{variable_source(name)}: expected a boolean (1/0, true/false), got {value!r}"
    )


def _env_value(value: str, path: tuple[str, ...]) -> Any:
    """Read an environment value as a TOML literal when it is one, else as a string.

    For a key that takes a string (``runner.session``, ``provider.model``) a literal of
    another type (``2024-01-01``, ``123``, ``true``, ``inf``) is the string as written.
    """
    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except ValueError:  # TOMLDecodeError, or a decimal integer too long to read (`_read_toml`)
        return value
    if not isinstance(parsed, str) and _takes_string(path):
        return value
    return parsed


def _takes_string(path: tuple[str, ...]) -> bool:
    """Whether the config key at `path` accepts a string (False for an unknown key)."""
    import types
    import typing

    cls: Any = Config
    tp: Any = None
    for part in path:
        if not attrs.has(cls):
            return False
        hints = typing.get_type_hints(cls)
        if part not in hints:
            return False
        tp = cls = hints[part]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return str in typing.get_args(tp)
    if typing.get_origin(tp) is Literal:
        return all(isinstance(choice, str) for choice in typing.get_args(tp))
    return tp is str


def _env_settings(environ: Mapping[str, str]) -> Iterator[tuple[str, tuple[str, ...], Any]]:
    """Each ``NANOBOT_*`` variable of `environ` that sets a key: (its name, the key, the value)."""
    for name, value in sorted(environ.items()):
        if name in _NAMED_ENV:
            if name in _LIST_ENV:
                yield name, _NAMED_ENV[name], [p.strip() for p in value.split(",") if p.strip()]
            elif name in _BOOL_ENV:
                yield name, _NAMED_ENV[name], _env_bool(name, value)
            else:
                yield name, _NAMED_ENV[name], value
        elif name.startswith("NANOBOT_") and "__" in name:
            path = tuple(part.lower() for part in name[len("NANOBOT_") :].split("__"))
            if not all(path):
                raise ConfigError(f"{variable_source(name)}: empty key segment")
            yield name, path, _env_value(value, path)


def _put(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = tree
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """Turn ``NANOBOT_*`` variables (and ``OPENAI_API_KEY`` below them) into a nested mapping."""
    tree: dict[str, Any] = {}
    for _, layer in [*_fallback_layers(environ), *_env_layers(environ)]:
        tree = deep_merge(tree, layer)
    return tree


def _fallback_layers(environ: Mapping[str, str]) -> list[tuple[str, dict[str, Any]]]:
    """The settings other programs' variables give, below every source of nanobot's own.

    ``OPENAI_API_KEY`` is the key for whatever else reads it too: a
    ``provider.api_key`` a config file sets, or a ``NANOBOT_*`` variable, is
    meant for nanobot and wins over it.
    """
    key = environ.get("OPENAI_API_KEY")
    if not key:
        return []
    return [(variable_source("OPENAI_API_KEY"), {"provider": {"api_key": key}})]


def _env_layers(environ: Mapping[str, str]) -> list[tuple[str, dict[str, Any]]]:
    """The ``NANOBOT_*`` variables' config, one layer per variable (`variable_source`): an
    error or warning about a value it set names the variable to fix."""
    layers: list[tuple[str, dict[str, Any]]] = []
    for name, path, value in _env_settings(environ):
        tree: dict[str, Any] = {}
        _put(tree, path, value)
        layers.append((variable_source(name), tree))
    return layers


def deep_merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """Merge `top` over `base`, recursing into tables; lists and scalars are replaced."""
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


#: The most read of one config file: far more than any configuration holds, so that a
#: path to an endless input (``--config /dev/zero``) fails at once instead of filling memory.
MAX_CONFIG_BYTES = 16 * 1024 * 1024


def _found(path: Path) -> bool:
    """Whether a config file looked for by name is there to read.

    Something else under that name (a folder, a link to nothing, a pipe) is a
    `ConfigError`, not a file silently passed over: it was meant as one.
    Nothing is opened to tell, so a pipe is never waited on.
    """
    if path.is_file():
        return True
    if os.path.lexists(path):
        raise ConfigError(f"{path}: not a regular file, so it cannot be read as config")
    return False


def _read_toml(path: Path, *, table: tuple[str, ...] = ()) -> dict[str, Any]:
    """The TOML of the config file `path` (its `table`), opened as a regular file only.

    A named pipe would wait for a writer for ever, a device (``/dev/zero``) give bytes
    without end, and either may have been put where a file was found by name: the open
    does not wait, and anything but a regular file (a link to one) is refused, naming it.
    """
    try:
        with os.fdopen(open_regular_file(path), "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            # Too large by its size is refused unread; one that grows as it is read, at the limit.
            raw = (
                b"" if size > MAX_CONFIG_BYTES else read_up_to(handle, MAX_CONFIG_BYTES, size=size)
            )
        if max(size, len(raw)) > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"{path}: larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MiB, the most read "
                "of a config file: not a config file"
            )
        data: Any = tomllib.loads(raw.decode("utf-8"))
    except NotRegularFileError as exc:
        raise ConfigError(f"{path}: {exc.strerror}, so it cannot be read as config") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    except ValueError:
        # tomllib lets through int()'s refusal of a decimal integer longer than Python reads.
        raise ConfigError(
            f"{path}: not valid TOML: an integer of more than {sys.get_int_max_str_digits()} "
            "digits (a TOML integer has 19 at most)"
        ) from None
    for key in table:
        data = data.get(key, {}) if isinstance(data, dict) else {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: [{'.'.join(table)}] must be a table")
    return data


def _converter() -> Any:
    import cattrs

    return cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)


def structure_config(data: Mapping[str, Any], *, source: str = "config") -> Config:
    """Build a `Config` from a nested mapping, with errors that name the key path."""
    import cattrs

    _check_types(data, Config, "")
    try:
        config: Config = _converter().structure(dict(data), Config)
    except cattrs.BaseValidationError as exc:
        messages = cattrs.transform_error(exc, path="")
        raise ConfigError(f"{source}: " + "; ".join(messages)) from exc
    _check_ranges(config)
    return config


class _RangeError(ConfigError):
    """A value of the right type outside its range; `path` is the key it was given for."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


# The numbers that must be finite and at least (">=") or more than (">") a bound, by key path:
# values that type-check but stop the core at use (every tool call timing out, a request with
# a NaN deadline, a turn of no rounds) or make the budget larger than the window.
_BOUNDS: tuple[tuple[str, str, float], ...] = (
    ("tools.timeout", ">", 0),
    ("tools.max_identical_calls", ">=", 0),
    ("tools.max_calls_per_reply", ">=", 0),
    ("governance.max_output", ">=", 0),
    ("governance.safety_margin", ">=", 0),
    ("provider.timeout", ">", 0),
    ("provider.max_retries", ">=", 0),
    ("provider.backoff_base", ">=", 0),
    ("provider.retry_after_cap", ">=", 0),
    ("provider.temperature", ">=", 0),
    ("provider.max_reply_bytes", ">", 0),
    ("runner.max_iterations", ">", 0),
    ("plugins.stall_warning", ">=", 0),
    ("plugins.stall_timeout", ">=", 0),
    ("prompt.max_file_bytes", ">", 0),
    ("prompt.max_section_chars", ">", 0),
    ("sessions.lease_wait", ">=", 0),
    ("sessions.postgres.pool_size", ">", 0),
    ("sessions.postgres.connect_timeout", ">", 0),
    ("sessions.postgres.query_timeout", ">", 0),
)


def _check_bounds(config: Config) -> None:
    """Refuse a number of `_BOUNDS` that is NaN, infinite or on the wrong side of its bound."""
    for path, relation, bound in _BOUNDS:
        value: Any = config
        for part in path.split("."):
            value = getattr(value, part)
        if value is None:  # an optional key left unset
            continue
        inside = value > bound if relation == ">" else value >= bound
        if not inside or (isinstance(value, float) and not math.isfinite(value)):
            what = "more than" if relation == ">" else "at least"
            finite = " (a finite number)" if isinstance(value, float) else ""
            shown = _int_shown(value) if type(value) is int else value
            raise _RangeError(path, f"must be {what} {bound:g}{finite}, got {shown}")
    for name, position in config.prompt.order.items():
        if not math.isfinite(position):
            raise _RangeError(f"prompt.order.{name}", f"must be a finite number, got {position}")


#: The largest ``provider.max_tokens``: a 64-bit integer, the most TOML (and the servers'
#: JSON parsers) take; a variable or a program may give a larger one.
_MAX_REPLY_TOKENS = 2**63 - 1


def _check_reply_limit(provider: ProviderConfig) -> None:
    """Refuse a ``provider.max_tokens`` (an int, unless unset) outside 1 to `_MAX_REPLY_TOKENS`."""
    limit = provider.max_tokens
    if limit is not None and not 1 <= limit <= _MAX_REPLY_TOKENS:
        raise _RangeError(
            "provider.max_tokens",
            f"must be a whole number from 1 to {_MAX_REPLY_TOKENS} (or unset, for the "
            f"server's own limit or the provider's default), got {_int_shown(limit)}",
        )


def _int_shown(value: int) -> str:
    """An int as a message shows it: its digits, or past a float's range its size in bits (a
    TOML hex literal may have thousands of digits, more than Python writes in decimal)."""
    if fits_float(value):
        return str(value)
    return f"{'a negative' if value < 0 else 'an'} int of {value.bit_length()} bits"


def check_reply_limit(provider: ProviderConfig) -> None:
    """Refuse, as `load_config` refuses them, the ``provider.max_tokens`` and
    ``provider.max_tokens_field`` of a `ProviderConfig` built in code, the message beginning
    with where they were set: a provider sending them checks its table with this."""
    hints = dict(_init_hints(ProviderConfig))
    for key in ("max_tokens", "max_tokens_field"):
        problem = type_problem(getattr(provider, key), hints[key], f"provider.{key}")
        if problem is not None:
            raise ConfigError(source_prefix(config=provider, keys=[f"provider.{key}"]) + problem)
    try:
        _check_reply_limit(provider)
    except _RangeError as exc:
        raise ConfigError(source_prefix(config=provider, keys=[exc.path]) + str(exc)) from None


def _check_ranges(config: Config) -> None:
    """Refuse values that type-check but would make the core lose data or fail at use."""
    _check_bounds(config)
    _check_reply_limit(config.provider)
    governance = config.governance
    if governance.max_tool_result_chars < MIN_TOOL_RESULT_CHARS:
        raise _RangeError(
            "governance.max_tool_result_chars",
            f"{governance.max_tool_result_chars} is below "
            f"{MIN_TOOL_RESULT_CHARS}, where tool results would be lost entirely",
        )
    if not 0 < governance.low_watermark <= 1:
        raise _RangeError(
            "governance.low_watermark",
            f"expected a share of the budget above 0 and at most 1, got {governance.low_watermark}",
        )
    if not config.provider.model.strip():
        # Every provider sends the model by name: a blank one would only be refused by the
        # server, after the first request.
        raise _RangeError("provider.model", f"must name a model, got {config.provider.model!r}")
    if config.runner.session != attrs.fields(RunnerConfig).session.default:
        try:
            validate_session_name(config.runner.session)
        except SessionError as exc:
            raise _RangeError("runner.session", str(exc)) from None
    store = governance.store
    if not store.max_age_days > 0:
        raise _RangeError(
            "governance.store.max_age_days", f"must be more than 0, got {store.max_age_days}"
        )
    if store.max_bytes <= 0:
        raise _RangeError(
            "governance.store.max_bytes", f"must be more than 0, got {store.max_bytes}"
        )


def _describe_type(tp: Any) -> str:
    """What a config value of type `tp` must be, in words (``a table of numbers``)."""
    import types
    import typing

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return " or ".join(_describe_type(a) for a in rest)
    if origin is Literal:
        return "one of " + ", ".join(repr(choice) for choice in args)
    if origin is list:
        return f"a list of {_plural(args[0])}" if args else "a list"
    if origin is dict:
        return f"a table of {_plural(args[1])}" if args else "a table"
    if attrs.has(tp):
        return "a table"
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    return names.get(tp, "any value")


def _plural(tp: Any) -> str:
    """The plural of `_describe_type` (``strings``, ``lists of strings``, ``tables``)."""
    import typing

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is list:
        return f"lists of {_plural(args[0])}" if args else "lists"
    if origin is dict:
        return "tables"
    names = {bool: "booleans", int: "integers", float: "numbers", str: "strings"}
    return names.get(tp, "values")


def _mismatch(value: Any, tp: Any, path: str) -> tuple[str, Any, Any] | None:
    """Where `value` first fails to be a `tp`: (path, the value there, the type expected)."""
    import types
    import typing

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        tp = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        ok = value in args
    elif tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, float) or (
            isinstance(value, int) and not isinstance(value, bool) and fits_float(value)
        )
    elif tp is str:
        ok = isinstance(value, str)
    elif origin is list:
        if not isinstance(value, list):
            return path, value, tp
        for index, item in enumerate(value):
            found = _mismatch(item, args[0], f"{path}[{index}]") if args else None
            if found:
                return found
        return None
    elif origin is dict:
        if not isinstance(value, Mapping):
            return path, value, tp
        for key, item in value.items():
            found = _mismatch(item, args[1], f"{path}.{key}") if args else None
            if found:
                return found
        return None
    else:
        ok = True
    return None if ok else (path, value, tp)


def is_option_type(tp: Any) -> bool:
    """Whether `type_problem` can check values against `tp`: the types config keys have.

    ``bool``, ``int``, ``float``, ``str``, ``Any`` (every value), a ``Literal`` of choices,
    ``list[T]``, ``dict[str, T]`` and ``T | None`` of these.
    """
    import types
    import typing

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return len(rest) == 1 and len(args) == 2 and is_option_type(rest[0])
    if origin is Literal:
        return all(isinstance(choice, bool | int | float | str) for choice in args)
    if origin is list:
        return len(args) == 1 and is_option_type(args[0])
    if origin is dict:
        return len(args) == 2 and args[0] is str and is_option_type(args[1])
    return tp in (bool, int, float, str, Any)


def _check_types(data: Mapping[str, Any], cls: type, prefix: str) -> None:
    """Check keys and scalar types strictly, so a string never silently becomes a number."""
    import typing

    fields = {f.name: f for f in attrs.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"unknown key {path!r} (known keys here: {known})")
        tp = hints[key]
        if attrs.has(tp):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{path}: expected a table, got {type(value).__name__}")
            _check_types(value, tp, path + ".")
            continue
        problem = type_problem(value, tp, path)
        if problem is not None:
            raise ConfigError(problem)


def type_problem(value: Any, tp: Any, path: str) -> str | None:
    """Why `value`, given for the key `path`, is not a `tp`, as a config error says it, or None.

    The message names the key or the entry inside it that is wrong and the type
    expected there (``prompt.order.memory: expected a number (float), got str 'late'``).
    """
    import typing

    found = _mismatch(value, tp, path)
    if found is None:
        return None
    where, bad, expected = found
    # The Python spelling adds nothing to a list of choices.
    spelling = "" if typing.get_origin(expected) is Literal else f" ({_type_name(expected)})"
    return f"{where}: expected {_describe_type(expected)}{spelling}, got {_got(bad)}"


def _got(value: Any) -> str:
    """What a type refusal says it got: the value's type and repr, or an int past a float's
    range by its size (a TOML hex literal may have more digits than Python writes)."""
    if type(value) is int and not fits_float(value):
        return _int_shown(value)
    try:
        # Cut by its ends: a value (a long string, a list of thousands) is quoted, not echoed.
        return f"{type(value).__name__} {quoted(value)}"
    except ValueError:  # a list or a table holding such an int
        return f"{type(value).__name__} holding an int too long to write"


def _type_name(tp: Any) -> str:
    """The Python spelling of a type (``dict[str, float]``), for the curious."""
    import typing

    if typing.get_args(tp):
        return str(tp).replace("typing.", "")
    return getattr(tp, "__name__", None) or str(tp)


def check_config(config: Config | GovernanceConfig) -> None:
    """Refuse, as `load_config` refuses it, a value of a configuration built in code.

    Attrs classes check nothing when built, so ``GovernanceConfig(context_window="1k")``
    would otherwise fail far from where it was made. Raises `ConfigError` naming the
    dotted key and what it expected; a tuple is taken where a list is. The
    `PluginManager` and the `Governor` check what they are given with it.
    """
    if isinstance(config, GovernanceConfig):
        _check_built(config, GovernanceConfig, "governance.")
        config = Config(governance=config)
    elif isinstance(config, Config):
        _check_built(config, Config, "")
    else:
        raise TypeError(
            f"check_config: expected a Config or a GovernanceConfig, got {type(config).__name__}"
        )
    try:
        _check_ranges(config)
    except _RangeError as exc:
        raise ConfigError(str(exc)) from None
    check_budget(config.governance)


@functools.cache
def _init_hints(cls: type) -> tuple[tuple[str, Any], ...]:
    """(name, type) of each field of the attrs class `cls` that its constructor takes."""
    import typing

    hints = typing.get_type_hints(cls)
    return tuple((field.name, hints[field.name]) for field in attrs.fields(cls) if field.init)


def _check_built(value: Any, cls: type, prefix: str) -> None:
    """`_check_types` of an attrs object (`cls`) built in code, its tables included."""
    import typing

    if not isinstance(value, cls):
        where = prefix.rstrip(".") or "config"
        raise ConfigError(f"{where}: expected a {cls.__name__}, got {type(value).__name__}")
    for name, tp in _init_hints(cls):
        item = getattr(value, name)
        if attrs.has(tp):
            _check_built(item, tp, f"{prefix}{name}.")
            continue
        if type(item) is tuple and typing.get_origin(tp) is list:
            item = list(item)  # code may pass a tuple where TOML gives a list: both work
        problem = type_problem(item, tp, prefix + name)
        if problem is not None:
            raise ConfigError(problem)


#: The least input budget (tokens) a window must leave after the reply and the margin.
MIN_INPUT_TOKENS = 1


#: The keys `check_budget` reads: the values it may refuse, each from a source of its own.
_BUDGET_KEYS = (
    "governance.input_limit",
    "governance.context_window",
    "governance.max_output",
    "governance.safety_margin",
)


def check_budget(governance: GovernanceConfig, *, sources: Mapping[str, str] | None = None) -> None:
    """Refuse a budget that leaves no room for the conversation (it would wipe the history).

    `sources` gives, for each dotted key a config source set, where (a file by its path,
    ``environment variable NANOBOT_...``, ``command line``), as `load_config` knows it:
    the message then begins with the source of each value it refuses, as every config
    error does, and says of each value which source set it, or that it is the default.
    """
    if governance.input_limit is not None:
        if governance.input_limit < MIN_INPUT_TOKENS:
            raise ConfigError(
                _sourced(sources, ["governance.input_limit"])
                + f"governance.input_limit is {governance.input_limit}: it must be at "
                f"least {MIN_INPUT_TOKENS} (or left out to use context_window)"
            )
        return
    reserved = governance.max_output + governance.safety_margin
    if governance.context_window - reserved < MIN_INPUT_TOKENS:
        keys = ["governance.context_window", "governance.max_output", "governance.safety_margin"]
        window, output, margin = (
            _valued(sources, keys, key, getattr(governance, key.split(".")[1])) for key in keys
        )
        raise ConfigError(
            _sourced(sources, keys)
            + f"{window} leaves no room for the conversation after {output} and {margin}; "
            f"the smallest window that works with them is {reserved + MIN_INPUT_TOKENS} "
            "(or lower max_output, or set governance.input_limit)"
        )


#: The keys `reply_room_warning` compares: the reply limit sent, the room kept for it.
_REPLY_KEYS = ("provider.max_tokens", "governance.max_output")


def reply_room_warning(config: Config) -> str | None:
    """The warning for a ``provider.max_tokens`` above ``governance.max_output``, or None.

    The governor keeps ``max_output`` (and ``safety_margin``) of the window for the
    reply: a request governed to the budget then leaves the reply less room than the
    limit sent allows, so the server may refuse the request (prompt and limit past the
    window) or cut the reply off at the window. Neither value follows the other: the
    limit is what a reply may cost, the room what the history gives up for it, and a
    user may mean either. With ``governance.input_limit`` set, the budget is the user's
    own: nothing is said. The message names where each value was set, as config errors do.
    """
    governance, limit = config.governance, config.provider.max_tokens
    if limit is None or governance.input_limit is not None or limit <= governance.max_output:
        return None
    sources = config._key_sources
    given = {key: sources[key] for key in _REPLY_KEYS if key in sources}
    limit_said = _valued(given, _REPLY_KEYS, "provider.max_tokens", limit)
    room_said = _valued(given, _REPLY_KEYS, "governance.max_output", governance.max_output)
    return (
        f"{_sourced(given, _REPLY_KEYS)}{limit_said} is more than {room_said}, the room the "
        "governor keeps in governance.context_window for the reply: a request governed to "
        "its budget may leave the reply less than provider.max_tokens, and the server may "
        "refuse the request or cut the reply off at the window; set governance.max_output "
        f"to {limit} to keep that room"
    )


def _sourced(sources: Mapping[str, str] | None, keys: Sequence[str]) -> str:
    """The start of an error about the values of `keys`: the sources that set them
    (``nanobot.toml, environment variable NANOBOT_...: ``), or nothing when none is known."""
    return named_sources(sources[key] for key in keys if sources and key in sources)


def named_sources(sources: Iterable[str]) -> str:
    """How every config error begins: the `sources` that set the values it refuses, each
    once in the order given (``nanobot.toml, environment variable NANOBOT_...: ``), or
    nothing when there are none (a default, a value the program set)."""
    named = dict.fromkeys(sources)
    return f"{', '.join(named)}: " if named else ""


def _valued(sources: Mapping[str, str] | None, keys: Sequence[str], key: str, value: Any) -> str:
    """`key` and its value as an error about the values of `keys` names them: with the
    source that set it when they come from several, or ``the default`` when none set it."""
    if not sources:
        return f"{key} ({value})"
    if key not in sources:
        return f"{key} ({value}, the default)"
    if len({sources[k] for k in keys if k in sources}) > 1:
        return f"{key} ({value}, from {sources[key]})"
    return f"{key} ({value})"


def _gives(layer: Mapping[str, Any], parts: Sequence[str]) -> bool:
    """Whether `layer` gives a value for the key made of `parts` (which may hold dots)."""
    node: Any = layer
    for part in parts:
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


_V = TypeVar("_V")


class _SourcedTable(dict[str, _V]):
    """A config table that knows the source (or sources) that set each of its keys.

    Equal to a plain dict of the same items, so `Config` equality is unchanged.
    """

    sources: dict[str, str]


class _SourcedList(list[str]):
    """A config list of names that knows the source that set it: a list is set whole.

    Equal to a plain list of the same items, so `Config` equality is unchanged.
    """

    def __init__(self, items: Iterable[str], source: str) -> None:
        super().__init__(items)
        self.source = source


class _SourcedStr(str):
    """A config string that knows the source that set it (`source_of`).

    Equal to, and hashed as, the plain string, so `Config` equality is unchanged.
    """

    source: str

    def __new__(cls, text: str, source: str) -> _SourcedStr:
        made = super().__new__(cls, text)
        made.source = source
        return made

    def __getnewargs__(self) -> tuple[str, str]:  # type: ignore[override]
        return str(self), self.source


def option_source(table: Mapping[str, Any], key: str) -> str | None:
    """The config source that set `key` of a stage's options table, when `load_config` knows."""
    sources = getattr(table, "sources", None)
    return sources.get(key) if isinstance(sources, dict) else None


def source_of(value: object, key: str | None = None) -> dict[str, str]:
    """``{"source": ...}``: where a config list of names, the `key` of a config table of
    names, or a config string checked after loading was set (a file by its path, the
    environment variable, or the command line), for a warning to name; empty when
    `load_config` did not read it.

    The lists and tables are those a name in which may match nothing (``tools.disabled``,
    ``plugins.block``, ``prompt.order``, ``governance.stages``: `_NAME_LISTS`, `_NAME_TABLES`);
    the strings are `_CHECKED_STRINGS` (``provider.name``, ``sessions.store``, ...).
    """
    if key is None:
        source = getattr(value, "source", None)
    elif isinstance(value, Mapping):
        source = option_source(value, key)
    else:
        source = None
    return {"source": source} if isinstance(source, str) else {}


def source_prefix(
    *values: object,
    config: Config | ProviderConfig | None = None,
    keys: Iterable[str] = (),
    variables: Iterable[str] = (),
) -> str:
    """The start of a config error about `values`, about the `keys` of `config`, or about
    the environment `variables` a plugin read itself, as every config error begins: the
    sources that set them (``nanobot.toml: ``, ``environment variable NANOBOT_...: ``,
    ``command line: ``), or nothing when `load_config` set none of them (a default, a value
    the program set) and no variable is given.

    The values are those `source_of` knows the source of: a check made after loading
    (an unknown ``sessions.store``, say) names where its value came from with this. A
    key is dotted, entries of tables included (``sessions.postgres.pool_size``,
    ``tools.options.web_fetch.timeout``): a plugin checking a number or an option of the
    configuration it was given names where it was set with this. `config` may be the
    ``provider`` table alone, as a provider is built from it: its keys are named in full
    (``provider.temperature``).
    """
    given = [source_of(value)["source"] for value in values if source_of(value)]
    known = config._key_sources if config is not None else {}
    read = [variable_source(name) for name in variables]
    return named_sources([*given, *(known[key] for key in keys if key in known), *read])


def _note_stage_sources(
    governance: GovernanceConfig, layers: Sequence[tuple[str, Mapping[str, Any]]]
) -> None:
    """Make each stage table of `governance` name the source that set each of its keys."""
    for name, table in governance.stages.items():
        if not isinstance(table, dict):
            continue
        sourced = _SourcedTable[Any](table)
        sourced.sources = {}
        for source, layer in layers:
            given = layer.get("governance", {}).get("stages", {}).get(name)
            if isinstance(given, Mapping):
                sourced.sources.update(dict.fromkeys(map(str, given), source))
        governance.stages[name] = sourced


#: The config lists of names a name in which may match nothing, and be warned about.
_NAME_LISTS: tuple[tuple[str, str], ...] = (
    ("plugins", "block"),
    ("plugins", "allow"),
    ("plugins", "disabled_builtins"),
    ("tools", "disabled"),
    ("governance", "disabled"),
    ("prompt", "disabled"),
)
#: The config tables whose keys are names that may match nothing, and be warned about.
_NAME_TABLES: tuple[tuple[str, str], ...] = (
    ("plugins", "overrides"),
    ("governance", "stages"),
    ("prompt", "order"),
)


#: The config strings a check after loading may refuse (it needs the loaded plugins, or is
#: the provider's own): each knows the source that set it, for the error to name.
_CHECKED_STRINGS: tuple[tuple[str, str], ...] = (
    ("provider", "name"),
    ("provider", "base_url"),
    ("provider", "api_key"),
    ("sessions", "store"),
)


#: The values a layer sets whole, by kind: the keys, their type, and the same value made to
#: know the source that set it.
_SET_WHOLE: tuple[tuple[tuple[tuple[str, str], ...], type, Callable[[Any, str], object]], ...] = (
    (_CHECKED_STRINGS, str, _SourcedStr),
    (_NAME_LISTS, list, _SourcedList),
)


def _key_sources(layers: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, str]:
    """Each dotted key (tables and their entries too) the `layers` give, and the last layer
    giving it: the one whose value is used, as layers merge."""
    found: dict[str, str] = {}
    for source, layer in layers:
        # A stack, not recursion: a free-form table (``tools.options``) may be nested as
        # deep as a variable's name allows (``NANOBOT_TOOLS__OPTIONS__X__A__A__...``).
        tables: list[tuple[Mapping[str, Any], str]] = [(layer, "")]
        while tables:
            table, prefix = tables.pop()
            for key, value in table.items():
                found[f"{prefix}{key}"] = source
                if isinstance(value, Mapping):
                    tables.append((value, f"{prefix}{key}."))
    return found


def _note_name_sources(
    config: Config, layers: Sequence[tuple[str, Mapping[str, Any]]], sources: Mapping[str, str]
) -> None:
    """Make each of `_NAME_LISTS`, `_NAME_TABLES` and `_CHECKED_STRINGS` that a layer set
    know its source.

    A list or a string is set whole, by the last layer giving it. An entry of a table is
    set by every layer giving it, as tables merge: all of them are named, lowest first,
    since a stale name left in one of them still matches nothing. `sources` are the
    last layer giving each key (`_key_sources`).
    """
    for keys, kind, known in _SET_WHOLE:
        for section, key in keys:
            owner = getattr(config, section)
            value = getattr(owner, key)
            source = sources.get(f"{section}.{key}")
            if isinstance(value, kind) and source is not None:
                setattr(owner, key, known(value, source))
    for section, key in _NAME_TABLES:
        owner = getattr(config, section)
        table = getattr(owner, key)
        if not table:
            continue
        sourced = _SourcedTable[Any](table)
        sourced.sources = {}
        for name in table:
            setters = [s for s, layer in layers if _gives(layer, (section, key, name))]
            if setters:
                sourced.sources[name] = ", ".join(dict.fromkeys(setters))
        setattr(owner, key, sourced)


def load_config(
    *,
    config_file: Path | str | None = None,
    cwd: Path | str | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Load the configuration from every source, in precedence order."""
    here = Path(cwd) if cwd is not None else Path.cwd()
    env = os.environ if environ is None else environ
    layers = _fallback_layers(env)
    pyproject = here / "pyproject.toml"
    if _found(pyproject):
        layers.append(
            (f"{pyproject} [tool.nanobot]", _read_toml(pyproject, table=("tool", "nanobot")))
        )
    local = here / "nanobot.toml"
    if _found(local):
        layers.append((str(local), _read_toml(local)))
    if config_file is not None:
        layers.append((str(config_file), _read_toml(Path(config_file))))
    # One layer per variable, so that an error names the variable (as warnings do).
    layers.extend(_env_layers(env))
    if overrides:
        layers.append(("command line", dict(overrides)))
    merged: dict[str, Any] = {}
    for source, layer in layers:
        try:
            _check_types(layer, Config, "")
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        merged = deep_merge(merged, layer)
    if not merged:  # nothing to structure: skip importing cattrs, which costs start-up time
        return Config()
    # Where each key was set: the last layer giving it, whose value is used.
    sources = _key_sources(layers)
    try:
        config = structure_config(merged)
    except _RangeError as exc:
        if exc.path not in sources:
            raise
        raise ConfigError(f"{sources[exc.path]}: {exc}") from None
    if config.governance.stages:  # the source of a bad option is named when the governor is built
        _note_stage_sources(config.governance, layers)
    # A name that matches nothing is warned about once plugins are loaded, naming where it
    # was set: a file by its path, the environment by the variable (NANOBOT_BLOCK or
    # NANOBOT_PLUGINS__BLOCK may set plugins.block). A string refused by a check made after
    # loading (an unknown sessions.store or provider.name, a base_url that is not http(s))
    # names its source the same way.
    _note_name_sources(config, layers, sources)
    # One record, shared: a provider built from the provider table alone looks its keys
    # up in full (``provider.temperature``).
    config._key_sources = config.provider._key_sources = sources
    # The budget's keys are checked together: each value refused is named with its source.
    check_budget(
        config.governance, sources={key: sources[key] for key in _BUDGET_KEYS if key in sources}
    )
    return config
