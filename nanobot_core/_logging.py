"""Logging through structlog, on stderr, imported only when something is actually logged.

Every module logs through `get_logger(name)`. The returned logger drops
records below the threshold without importing structlog at all, which keeps
start-up cheap. When a record does pass, structlog is imported; if the
application has configured structlog itself, its configuration decides
everything, otherwise records go to stderr (never stdout, which would corrupt
JSON output), rendered for a terminal or as JSON lines.

Configured by the application means set to anything but what structlog starts
with: processors of its own (even new ones built like structlog's defaults),
another logger factory, wrapper class, context class or caching. structlog's
own defaults, the very objects it made on import, are not a configuration,
even with `structlog.is_configured()` true, as `structlog.testing.capture_logs()`
leaves them once it ends (and a `structlog.configure()` with no arguments).
"""

from __future__ import annotations

import sys
from contextvars import ContextVar
from typing import Any

__all__ = ["EMITTING", "configure_logging", "get_logger"]

#: True while a record of ours is being written: what the logging set-up writes to stdout
#: then (an application's structlog left at its default, stdout) is the log itself, which
#: the stand-in for stdout that catches plugins' prints lets through as it is.
EMITTING: ContextVar[bool] = ContextVar("nanobot_log_emitting", default=False)

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}

_settings: dict[str, Any] = {"format": "console", "level": "warning"}
_configured_by_us = False


def configure_logging(*, log_format: str = "console", level: str = "warning") -> None:
    """Choose how records are rendered on stderr and the lowest level logged."""
    global _configured_by_us
    _settings.update(format=log_format, level=level)
    if _configured_by_us or "structlog" in sys.modules:
        _apply()


def _apply() -> None:
    global _configured_by_us
    import structlog

    renderer: Any
    if _settings["format"] == "json":
        renderer = structlog.processors.JSONRenderer(sort_keys=True)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[_settings["level"]]),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )
    _configured_by_us = True


def _stderr_logger(*_args: Any) -> Any:
    """A logger writing to `sys.stderr` as it is now, not as it was when logging was set up.

    A stream bound once would outlive a redirection (``contextlib.redirect_stderr``, a
    test's capture) and later records would go to a closed file.
    """
    import structlog

    if sys.stderr is None:  # pythonw: nowhere to write (PrintLogger would pick stdout)
        return structlog.ReturnLogger()
    return structlog.PrintLogger(sys.stderr)


def _application_configured() -> bool:
    if _configured_by_us:
        return False
    structlog = sys.modules.get("structlog")
    return structlog is not None and structlog.is_configured() and not _at_defaults(structlog)


def _at_defaults(structlog: Any) -> bool:
    """Whether structlog's configuration is the one it starts with, object for object.

    `structlog.testing.capture_logs()` configures structlog and, as it ends, puts its
    defaults back without unsetting `is_configured()`; that is not the application's
    set-up. A structlog that no longer names its defaults counts as configured.
    """
    builtin: Any = sys.modules.get("structlog._config")
    try:
        factory = builtin._BUILTIN_DEFAULT_LOGGER_FACTORY
        wrapper = builtin._BUILTIN_DEFAULT_WRAPPER_CLASS
        context = builtin._BUILTIN_DEFAULT_CONTEXT_CLASS
        cache = builtin._BUILTIN_CACHE_LOGGER_ON_FIRST_USE
        processors = builtin._BUILTIN_DEFAULT_PROCESSORS
    except AttributeError:
        return False
    config = structlog.get_config()
    if (
        config["logger_factory"] is not factory
        or config["wrapper_class"] is not wrapper
        or config["context_class"] is not context
        or config["cache_logger_on_first_use"] != cache
    ):
        return False
    current = list(config["processors"])
    return len(current) == len(processors) and all(
        mine is theirs for mine, theirs in zip(current, processors, strict=True)
    )


class _Logger:
    """A structlog logger created on the first record that passes the threshold."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def _emit(self, level: str, event: str, fields: dict[str, Any]) -> None:
        if not _application_configured():
            if _LEVELS[level] < _LEVELS[_settings["level"]]:
                return
            if not _configured_by_us:
                _apply()
        import structlog

        token = EMITTING.set(True)
        try:
            getattr(structlog.get_logger(self._name), level)(event, **fields)
        finally:
            EMITTING.reset(token)

    def debug(self, event: str, **fields: Any) -> None:
        self._emit("debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit("warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._emit("error", event, fields)

    def critical(self, event: str, **fields: Any) -> None:
        self._emit("critical", event, fields)


def get_logger(name: str) -> _Logger:
    """A logger for `name` (see the module docstring for where its records go)."""
    return _Logger(name)
